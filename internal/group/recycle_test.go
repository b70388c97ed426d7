package group

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/disruption"
)

func TestLifetimeJitterSpread(t *testing.T) {
	const lifetime = 24 * time.Hour
	// 100 instances started at once: their turns are fixed per name, within
	// a tenth of the lifetime, and spread over most of it.
	var js []time.Duration
	for i := 1; i <= 100; i++ {
		name := fmt.Sprintf("web-%03d", i)
		j := lifetimeJitter(name, lifetime)
		if j != lifetimeJitter(name, lifetime) {
			t.Fatalf("%s: jitter not deterministic", name)
		}
		if j < 0 || j >= lifetime/10 {
			t.Fatalf("%s: jitter %s outside [0, %s)", name, j, lifetime/10)
		}
		js = append(js, j)
	}
	slices.Sort(js)
	if span := js[len(js)-1] - js[0]; span < lifetime/10*8/10 {
		t.Errorf("jitter of 100 instances spans %s, want most of %s", span, lifetime/10)
	}
	// A group of four started at once: four different turns.
	seen := map[time.Duration]bool{}
	for i := 1; i <= 4; i++ {
		seen[lifetimeJitter(fmt.Sprintf("api-%03d", i), lifetime).Truncate(time.Minute)] = true
	}
	if len(seen) != 4 {
		t.Errorf("four instances started at once share turns: %v", seen)
	}
}

func TestDueInstances(t *testing.T) {
	const lifetime = 24 * time.Hour
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	cands := []recycleCandidate{
		{name: "web-001", started: t0},
		{name: "web-002", started: t0.Add(3 * time.Hour)}, // later than any jitter (2.4h) can make up
		{name: "web-003", started: t0.Add(23 * time.Hour), drifted: true},
		{name: "web-004", started: t0.Add(20 * time.Hour)},
	}
	names := func(d []dueInstance) []string {
		var out []string
		for _, x := range d {
			out = append(out, x.name)
		}
		return out
	}
	// Before anyone's earliest turn (lifetime less 10%): none.
	if d := dueInstances(t0.Add(lifetime*9/10-time.Second), cands, lifetime, true); len(names(d)) != 1 || d[0].name != "web-003" {
		t.Errorf("early: %v, want only the drifted web-003", names(d))
	}
	// Past the max_lifetime of the first two: both, earliest turn first;
	// web-003 is drifted but opportunistic: not due.
	now := t0.Add(28 * time.Hour)
	d := dueInstances(now, cands, lifetime, false)
	if got := names(d); !slices.Equal(got, []string{"web-001", "web-002"}) {
		t.Errorf("due %v, want web-001, web-002", got)
	}
	if !strings.HasPrefix(d[0].why, "lifetime: started 28h0m0s ago, max_lifetime 24h0m0s") {
		t.Errorf("why %q", d[0].why)
	}
	// Proactive: the drifted one too, after those of lifetime.
	if got := names(dueInstances(now, cands, lifetime, true)); !slices.Equal(got, []string{"web-001", "web-002", "web-003"}) {
		t.Errorf("proactive: due %v", got)
	}
	// No lifetime: drift alone.
	if got := names(dueInstances(now, cands, 0, true)); !slices.Equal(got, []string{"web-003"}) {
		t.Errorf("no lifetime: due %v", got)
	}
	// An instance is due once its own jittered turn came, never after max_lifetime.
	for _, c := range cands {
		at := c.started.Add(lifetime - lifetimeJitter(c.name, lifetime))
		if got := dueInstances(at.Add(-time.Nanosecond), []recycleCandidate{c}, lifetime, false); len(got) != 0 {
			t.Errorf("%s due before its turn %s", c.name, at)
		}
		if got := dueInstances(at, []recycleCandidate{c}, lifetime, false); len(got) != 1 {
			t.Errorf("%s not due at its turn %s", c.name, at)
		}
	}
}

// fakeReplacer records replacements.
type fakeReplacer struct{ asked chan string }

func (f *fakeReplacer) Replace(_ context.Context, group, name string) error {
	f.asked <- group + "/" + name
	return nil
}

// TestRecycleOnce: an instance past its lifetime waits for the budget's
// window (recorded once), then is replaced through the Replacer.
func TestRecycleOnce(t *testing.T) {
	r := newReconciler(t, 2, nil)
	r.bringUp("web-001", "web-002")

	// A window that opens 48h after now (the fake clock's start), an hour long.
	start := r.clk.Now().Add(48 * time.Hour).UTC()
	w, err := disruption.ParseWindow(fmt.Sprintf("%s %02d:%02d-%02d:%02d UTC", start.Weekday().String()[:3], start.Hour(), start.Minute(), (start.Hour()+1)%24, start.Minute()))
	if err != nil {
		t.Fatal(err)
	}
	c := r.g.Config()
	c.MaxLifetime = 24 * time.Hour
	c.Disruption.Budget = disruption.Budget{MaxUnavailable: 1, Windows: []disruption.Window{w}}
	r.g.live.Store(&c)

	rep := &fakeReplacer{asked: make(chan string, 4)}
	rc := &recycler{r: rep}
	r.g.recycleOnce(t.Context(), rc) // nothing due yet
	if len(rep.asked) != 0 {
		t.Fatalf("replaced %s before any lifetime ended", <-rep.asked)
	}
	r.clk.Advance(25 * time.Hour)
	r.g.recycleOnce(t.Context(), rc)
	r.g.recycleOnce(t.Context(), rc)
	if len(rep.asked) != 0 {
		t.Fatalf("replaced %s outside the window", <-rep.asked)
	}
	waits := 0
	r.st.mu.Lock()
	recorded := slices.Clone(r.st.decisions)
	r.st.mu.Unlock()
	for _, e := range recorded {
		if e.Rule == "recycle" && e.Code == "waiting" {
			waits++
			if !strings.Contains(e.Reason, "the replacement waits: outside window "+w.Text) {
				t.Errorf("wait reason %q", e.Reason)
			}
		}
	}
	if waits != 1 {
		t.Errorf("%d recycle.waiting events for one wait, want 1", waits)
	}

	r.clk.Advance(23*time.Hour + time.Minute) // inside the window
	r.g.recycleOnce(t.Context(), rc)
	select {
	case got := <-rep.asked:
		if !strings.HasPrefix(got, "web/web-00") {
			t.Errorf("replaced %s", got)
		}
	default:
		t.Fatal("nothing replaced inside the window")
	}

	// Opportunistic and no lifetime: nothing is ever due.
	c.MaxLifetime, c.Update.Mode = 0, config.UpdateOpportunistic
	r.g.live.Store(&c)
	r.g.recycleOnce(t.Context(), rc)
	if len(rep.asked) != 0 {
		t.Errorf("replaced %s with recycling off", <-rep.asked)
	}
}

// TestVoluntaryBudget: an instance starting (a scale-out's, a health
// replacement's) counts as out of service, so the budget refuses a
// voluntary replacement until it serves; InstancesOn lists a host's.
func TestVoluntaryBudget(t *testing.T) {
	r := newReconciler(t, 1, nil)
	r.bringUp("web-001")
	c := r.g.Config()
	c.Disruption.Budget = disruption.Budget{MaxUnavailable: 1}
	r.g.live.Store(&c)
	if ok, why := r.g.VoluntaryAllowed(); !ok {
		t.Fatalf("all in service: refused (%s)", why)
	}
	if err := r.g.SetDesired(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	r.awaitState("web-002", Starting)
	if un, total := r.g.Unavailable(); un != 1 || total != 2 {
		t.Errorf("one starting of 2: unavailable %d of %d", un, total)
	}
	if ok, why := r.g.VoluntaryAllowed(); ok || why != "1 of max 1 unavailable" {
		t.Errorf("one starting: %v %q", ok, why)
	}
	r.bringUp("web-002")
	if ok, why := r.g.VoluntaryAllowed(); !ok {
		t.Errorf("both in service: refused (%s)", why)
	}
	// The fake provider places every instance on 127.0.0.1.
	if got := r.g.InstancesOn(config.ProviderLocal, "127.0.0.1"); !slices.Equal(got, []string{"web-001", "web-002"}) {
		t.Errorf("InstancesOn = %v", got)
	}
	if got := r.g.InstancesOn(config.ProviderLocal, "10.0.0.1"); len(got) != 0 {
		t.Errorf("InstancesOn another host = %v", got)
	}
}

// TestRecycleSkipsProtected: protected instances are never recycled.
func TestRecycleSkipsProtected(t *testing.T) {
	r := newReconciler(t, 2, nil)
	r.bringUp("web-001", "web-002")
	c := r.g.Config()
	c.MaxLifetime = time.Hour
	r.g.live.Store(&c)
	r.g.mu.Lock()
	r.g.insts["web-001"].marks.protected = true
	r.g.mu.Unlock()
	rep := &fakeReplacer{asked: make(chan string, 4)}
	r.clk.Advance(2 * time.Hour)
	r.g.recycleOnce(t.Context(), &recycler{r: rep})
	r.g.recycleOnce(t.Context(), &recycler{r: rep})
	close(rep.asked)
	var got []string
	for a := range rep.asked {
		got = append(got, a)
	}
	if !slices.Equal(got, []string{"web/web-002", "web/web-002"}) {
		t.Errorf("replaced %v, want only the unprotected web-002", got)
	}
}
