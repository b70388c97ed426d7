package ssh

import (
	"context"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider"
)

// waitPool waits until group's pool is n members, all warm, and returns
// them.
func waitPool(t *testing.T, p *Provider, group string, n int, within time.Duration) []provider.WarmServer {
	t.Helper()
	var ws []provider.WarmServer
	for deadline := time.Now().Add(within); ; time.Sleep(100 * time.Millisecond) {
		ws = p.WarmPool(group)
		ok := len(ws) == n
		for _, s := range ws {
			ok = ok && s.State == memberWarm
		}
		if ok {
			return ws
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool of %s: %+v, want %d warm", group, ws, n)
		}
	}
}

// TestWarmPoolOnHost: a running pool on a host of capacity 2 starts its
// member (health-checked by the provider) only after the first sweep; a
// Start takes it, in service at once (Prechecked), and the refill waits
// for room: with the pool's second member taken too the host is full. A
// scale-in's Stop then returns its process to the pool (reuse_on_scale_in,
// room in the pool), the same process, booting until its check passes;
// a template change replaces it (drift); every member that left the pool
// is handed out once for its cost.
func TestWarmPoolOnHost(t *testing.T) {
	l := newLab(t, 1)
	cfg := labConfig(t, l)
	cfg.Hosts[0].Capacity = Capacity{Instances: 2}
	p := runProvider(t, cfg, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	v1 := demoTemplate(t)
	v1.CPUs = 0
	hc := config.DefaultHealth
	hc.Rise = 1
	p.SetWarmCheck("web", hc, config.Placement{Strategy: config.PlaceSpread})
	p.SetWarmPool("web", &config.WarmPool{Size: 1, State: config.WarmRunning, ReuseOnScaleIn: true}, v1)
	time.Sleep(3 * testInterval)
	if ws := p.WarmPool("web"); len(ws) != 0 {
		t.Fatalf("pool %+v before the first sweep: a killed run's members would be started twice", ws)
	}
	if _, err := p.StopStrays(ctx, nil); err != nil {
		t.Fatal(err)
	}
	a := waitPool(t, p, "web", 1, 30*time.Second)[0]

	in1 := start(t, p, spec("web", 1, v1))
	if pc, ok := in1.(provider.Prechecked); !ok || !pc.Prechecked() {
		t.Error("an instance taken from the warm pool is not Prechecked")
	}
	if in1.Record().ID != a.ID {
		t.Errorf("Start made %s, want the pool's %s", in1.Record().ID, a.ID)
	}
	// It serves at once, as the process the pool started (its name).
	if got, err := get(in1.Record().Addr); err != nil || got != a.Name {
		t.Errorf("%s answers %q, %v; want the pool's process %s", in1.Record().Addr, got, err, a.Name)
	}
	b := waitPool(t, p, "web", 1, 30*time.Second)[0]
	in2 := start(t, p, spec("web", 2, v1))
	if in2.Record().ID != b.ID {
		t.Errorf("Start made %s, want the pool's %s", in2.Record().ID, b.ID)
	}
	// The host is full (2 instances): the refill waits.
	time.Sleep(5 * testInterval)
	if ws := p.WarmPool("web"); len(ws) != 0 {
		t.Fatalf("pool %+v on a full host", ws)
	}
	if hs := hostStatus(p, l.Hosts[0].Addr); hs.Instances != 2 {
		t.Errorf("host %+v, want 2 instances", hs)
	}

	// Scale-in: back to the pool, the same process.
	if err := in2.Stop(provider.ForScaleIn(ctx)); err != nil {
		t.Fatal(err)
	}
	if r := in2.ExitReason(); r != "returned to the warm pool" {
		t.Errorf("exit reason %q", r)
	}
	back := waitPool(t, p, "web", 1, 30*time.Second)[0]
	if back.ID != b.ID || !running(in2.Record()) {
		t.Errorf("pool %+v, want %s's process (%s) back, running", back, in2.Record().Name, b.ID)
	}

	// Drift: a new template replaces it.
	v2 := v1
	v2.Env = map[string]string{"VERSION": "2"}
	p.SetWarmPool("web", &config.WarmPool{Size: 1, State: config.WarmRunning, ReuseOnScaleIn: true}, v2)
	var renewed provider.WarmServer
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if ws := p.WarmPool("web"); len(ws) == 1 && ws[0].State == memberWarm && ws[0].Template == v2.Hash("web") {
			renewed = ws[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool %+v, want one warm member of %s", p.WarmPool("web"), v2.Hash("web"))
		}
	}
	if renewed.ID == b.ID || running(in2.Record()) {
		t.Errorf("the drifted member %s still runs (pool %+v)", b.ID, renewed)
	}

	left := map[string]bool{}
	for _, s := range p.WarmPoolLeft("web") {
		left[s.ID] = !s.Left.Before(s.Joined)
	}
	for _, id := range []string{a.ID, b.ID} {
		if !left[id] {
			t.Errorf("member %s not handed out as left the pool: %v", id, left)
		}
	}
	if err := p.EmptyWarmPool(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if ws := p.WarmPool("web"); len(ws) != 0 {
		t.Errorf("pool %+v after EmptyWarmPool", ws)
	}
	if err := in1.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}
