package exec_test

import (
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/provider/cloud"
	"github.com/shoal-lb/shoal/internal/testbin"
)

// warm waits until group's pool on e shows want members, all warm, and
// returns them by ID.
func (e *env) warm(t *testing.T, want int, within time.Duration) map[string]provider.WarmServer {
	t.Helper()
	var got []provider.WarmServer
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		got = e.prov.WarmPool("web")
		if len(got) == want && !slices.ContainsFunc(got, func(s provider.WarmServer) bool { return s.State != "warm" }) {
			out := map[string]provider.WarmServer{}
			for _, s := range got {
				out[s.ID] = s
			}
			return out
		}
	}
	t.Fatalf("warm pool %+v after %s, want %d warm", got, within, want)
	return nil
}

func tmplOf(t *testing.T, version string) config.Template {
	t.Helper()
	tmpl, err := config.NewTemplate([]string{"unused-by-cloud-servers", version}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// TestWarmPool: a pool of 2 stopped servers fills (created, booted, shut
// down: the cloud lists them stopped, tagged as the pool's); a Start takes
// one (booted, serving at once, no create) and the pool refills; a
// retirement returns a server to a pool with room (reuse_on_scale_in),
// shut down again; a new template replaces every member.
func TestWarmPool(t *testing.T) {
	c := newFakeCloud(t)
	c.setBoot(2)
	e := newProvider(t, c, "owner-w", nil)
	ctx := ctxFor(t, 2*time.Minute)
	v1 := tmplOf(t, "v1")
	wp := &config.WarmPool{Size: 2, State: config.WarmStopped, ReuseOnScaleIn: true}
	e.prov.SetWarmPool("web", wp, v1)

	pool := e.warm(t, 2, 30*time.Second)
	servers := c.servers()
	for id, m := range pool {
		s := servers[id]
		if !s.Stopped || s.PID != 0 {
			t.Errorf("warm server %s (%s) is not shut down: %+v", m.Name, id, s)
		}
		if s.Tags[cloud.TagPool] != "web" || s.Tags[cloud.TagTemplate] != v1.Hash("web") || s.Tags[cloud.TagInstance] != m.Name {
			t.Errorf("warm server %s tags %v", id, s.Tags)
		}
	}

	sp := spec("web-001", 1)
	sp.Template = v1
	begin := time.Now()
	in, err := e.prov.Start(ctx, sp)
	took := time.Since(begin)
	if err != nil {
		t.Fatal(err)
	}
	rec := in.Record()
	if _, ok := pool[rec.ID]; !ok {
		t.Fatalf("Start made server %s, want one of the pool's %v", rec.ID, slices.Collect(maps.Keys(pool)))
	}
	if got := testbin.Get(t, rec.Addr); got != pool[rec.ID].Name {
		t.Errorf("the taken server answers as %q, want %s (its process runs again)", got, pool[rec.ID].Name)
	}
	t.Logf("took warm server %s in %s (a create boots for 2 s here)", rec.ID, took.Round(time.Millisecond))
	if took >= 2*time.Second {
		t.Errorf("taking a warm server took %s, as long as a create's boot", took)
	}
	refilled := e.warm(t, 2, 30*time.Second)
	if _, ok := refilled[rec.ID]; ok {
		t.Errorf("the taken server %s is still in the pool", rec.ID)
	}
	if n := c.calls()["start"]; n != 3 {
		t.Errorf("%d creates, want 3 (2 to fill, 1 to refill)", n)
	}

	// A full pool: the scale-in deletes.
	if err := e.prov.Delete(provider.ForScaleIn(ctx), in); err != nil {
		t.Fatal(err)
	}
	if err := in.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.servers()[rec.ID]; ok {
		t.Errorf("server %s retired while the pool was full is still in the cloud", rec.ID)
	}

	// Room in the pool (creates refused now): the retirement returns it.
	c.misbehave("start", "fail")
	in, err = e.prov.Start(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	e.warm(t, 1, 10*time.Second)
	// A replacement's retirement (drift, max_lifetime) never returns it.
	replaced, err := e.prov.Start(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.prov.Delete(ctx, replaced); err != nil {
		t.Fatal(err)
	}
	if err := replaced.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if r := waitDone(t, replaced, time.Second); r != "stopped" {
		t.Errorf("a replacement's retirement: exit reason %q, want stopped (deleted)", r)
	}
	if _, ok := c.servers()[replaced.Record().ID]; ok {
		t.Errorf("server %s retired for a replacement is still in the cloud", replaced.Record().ID)
	}
	if err := e.prov.Delete(provider.ForScaleIn(ctx), in); err != nil {
		t.Fatal(err)
	}
	if err := in.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if r := waitDone(t, in, time.Second); r != "returned to the warm pool" {
		t.Errorf("exit reason %q", r)
	}
	c.misbehave("start", "") // the pool refills its second
	back := e.warm(t, 2, 30*time.Second)
	if _, ok := back[in.Record().ID]; !ok || !c.servers()[in.Record().ID].Stopped {
		t.Errorf("retired server %s not back in the pool, shut down: %v", in.Record().ID, back)
	}

	// Drift: a new template replaces both members.
	v2 := tmplOf(t, "v2")
	e.prov.SetWarmPool("web", wp, v2)
	var renewed map[string]provider.WarmServer
	for deadline := time.Now().Add(40 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		renewed = e.warm(t, 2, 40*time.Second)
		fresh := true
		for id, m := range renewed {
			_, old := back[id]
			fresh = fresh && !old && m.Template == v2.Hash("web")
		}
		if fresh && len(c.servers()) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool %v, cloud %v: want 2 new members of %s and nothing else", renewed, c.servers(), v2.Hash("web"))
		}
	}

	// Every server that left the pool is handed out once, with its time
	// there, for the group's cost: the two taken by Start, the two
	// drifted ones deleted.
	left := map[string]provider.WarmServer{}
	for _, s := range e.prov.WarmPoolLeft("web") {
		if s.Joined.IsZero() || !s.Left.After(s.Joined) {
			t.Errorf("left pool server %s: joined %s, left %s", s.Name, s.Joined, s.Left)
		}
		left[s.ID] = s
	}
	for id := range back {
		if _, ok := left[id]; !ok {
			t.Errorf("drifted member %s deleted, not reported as left: %v", id, left)
		}
	}
	if _, ok := left[rec.ID]; !ok {
		t.Errorf("member %s taken by Start not reported as left", rec.ID)
	}
	if len(left) < 4 {
		t.Errorf("%d servers left the pool, want at least 4 (2 taken, 2 drifted): %v", len(left), left)
	}
	if again := e.prov.WarmPoolLeft("web"); len(again) != 0 {
		t.Errorf("asked again: %v, want nothing (each is handed out once)", again)
	}
}

// TestWarmPoolKilledMidRefill: a shoal killed while its pool's servers are
// created and booting leaves them to the next run, which adopts them
// into the pool (no create more, no orphan); a pool-tagged server of a
// group that no longer has a pool is swept as a stray.
func TestWarmPoolKilledMidRefill(t *testing.T) {
	c := newFakeCloud(t)
	c.setBoot(3)
	ctx := ctxFor(t, 2*time.Minute)
	v1 := tmplOf(t, "v1")
	wp := &config.WarmPool{Size: 2, State: config.WarmStopped}
	first := newProvider(t, c, "owner-k", nil)
	first.prov.SetWarmPool("web", wp, v1)
	first.prov.SetWarmPool("gone", wp, v1)
	for deadline := time.Now().Add(20 * time.Second); len(c.servers()) < 4; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("servers %v: want 4 being created", c.servers())
		}
	}
	before := c.servers()
	first.stop() // killed: nothing deleted
	for id, s := range before {
		if s.Stopped {
			t.Fatalf("server %s is down already: the kill was not mid-refill", id)
		}
	}

	second := newProvider(t, c, "owner-k", nil)
	second.prov.SetWarmPool("web", wp, v1) // group gone has no pool now
	stopped, err := second.prov.StopStrays(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var swept []string
	for _, r := range stopped {
		swept = append(swept, r.Group)
	}
	if strings.Join(swept, ",") != "gone,gone" {
		t.Errorf("strays %+v, want the 2 of group gone's pool", stopped)
	}
	pool := second.warm(t, 2, 30*time.Second)
	for id := range pool {
		if _, ok := before[id]; !ok {
			t.Errorf("pool member %s is new: the killed run's servers were not adopted", id)
		}
	}
	after := c.servers()
	if len(after) != 2 {
		t.Errorf("cloud has %v after the restart, want the pool's 2 only", after)
	}
	if n := c.calls()["start"]; n != 4 {
		t.Errorf("%d creates, want the 4 of the killed run only", n)
	}
	if err := second.prov.EmptyWarmPool(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if left := c.servers(); len(left) != 0 {
		t.Errorf("servers %v left after emptying the pool", left)
	}
}

// TestWarmPoolRunning: a pool that waits running needs no power commands:
// its servers boot once and serve out of rotation; a Start takes one
// without a create or a power-on, at once.
func TestWarmPoolRunning(t *testing.T) {
	c := newFakeCloud(t)
	c.setBoot(2)
	e := newProvider(t, c, "owner-r", nil)
	ctx := ctxFor(t, time.Minute)
	v1 := tmplOf(t, "v1")
	e.prov.SetWarmPool("web", &config.WarmPool{Size: 1, State: config.WarmRunning}, v1)
	pool := e.warm(t, 1, 30*time.Second)
	for id, m := range pool {
		if s := c.servers()[id]; s.Stopped || s.PID == 0 {
			t.Errorf("warm server %s of a running pool is not running: %+v", id, s)
		}
		if got := testbin.Get(t, net.JoinHostPort(c.servers()[id].Address, strconv.Itoa(c.port))); got != m.Name {
			t.Errorf("warm server %s answers as %q", id, got)
		}
	}
	sp := spec("web-001", 1)
	sp.Template = v1
	begin := time.Now()
	in, err := e.prov.Start(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(begin)
	if _, ok := pool[in.Record().ID]; !ok {
		t.Fatalf("Start made %s, want the pool's %v", in.Record().ID, pool)
	}
	if calls := c.calls(); calls["power_on"] != 0 || calls["power_off"] != 0 {
		t.Errorf("power commands run for a running pool: %v", calls)
	}
	t.Logf("took the running pool's server in %s", took.Round(time.Millisecond))
	if took >= time.Second {
		t.Errorf("taking a running server took %s", took)
	}
	e.warm(t, 1, 30*time.Second)
}
