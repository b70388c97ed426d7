package group

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/job"
	"github.com/shoal-lb/shoal/internal/provider"
)

func names(ins []*instance) []string {
	var out []string
	for _, in := range ins {
		out = append(out, in.name)
	}
	slices.Sort(out)
	return out
}

// A scale-in never takes a protected instance: it takes the next one in
// its order, and stops at the protected ones when only they are left.
func TestScaleInSkipsProtected(t *testing.T) {
	g := scaleInGroup(t, config.ScaleInNewest, nil)
	// web-001 is the newest, so newest scale-in would take it first.
	g.insts["web-001"].marks.protected = true
	g.mu.Lock()
	g.desired = 2
	g.retireSurplusLocked(2, nil, nil, nil)
	g.mu.Unlock()
	if got := names(g.activeLocked()); !slices.Equal(got, []string{"web-001", "web-002"}) {
		t.Fatalf("active after scale-in to 2 = %v, want web-001 (protected) and web-002 (web-003 is the newest unprotected)", got)
	}
	if !g.insts["web-003"].retiring {
		t.Fatal("web-003 is not retiring")
	}

	g.insts["web-002"].marks.protected = true
	g.mu.Lock()
	g.desired = 1
	g.retireSurplusLocked(1, nil, nil, nil)
	active := names(g.activeLocked())
	g.mu.Unlock()
	if !slices.Equal(active, []string{"web-001", "web-002"}) {
		t.Fatalf("active after scale-in to 1 = %v, want both protected ones kept", active)
	}
	// The retiring web-003 has not gone yet: not settled.
	if settled, _ := g.settledLocked(); settled {
		t.Fatal("settled while web-003 still retires")
	}
	delete(g.insts, "web-003")
	settled, blocked := g.settledLocked()
	if !settled || !slices.Equal(blocked, []string{"web-001", "web-002"}) {
		t.Fatalf("settled = %v, blocked = %v; want settled, blocked at web-001 and web-002", settled, blocked)
	}
	if g.convergedLocked() {
		t.Fatal("converged above the desired size")
	}
	if err := g.protectedStopLocked(); !errors.Is(err, ErrProtected) || !strings.Contains(err.Error(), "web-001, web-002") || !strings.Contains(err.Error(), "desired size 1") {
		t.Fatalf("protectedStop = %v, want the protected instances and the desired size named", err)
	}
}

// unprotected is the pure choice: the first n unprotected in order, and the
// protected ones passed on the way.
func TestUnprotected(t *testing.T) {
	a := &instance{name: "a"}
	b := &instance{name: "b", marks: marks{protected: true}}
	c := &instance{name: "c"}
	order := []pick{{in: b}, {in: a}, {in: c}}
	take, passed := unprotected(order, 1)
	if len(take) != 1 || take[0].in != a || !slices.Equal(passed, []string{"b"}) {
		t.Fatalf("unprotected(1) = %v, %v; want a, passing b", take, passed)
	}
	take, _ = unprotected(order, 3)
	if len(take) != 2 {
		t.Fatalf("unprotected(3) took %d, want the 2 unprotected", len(take))
	}
}

// Held instances (drained, standby) do not count towards the desired size,
// except a drain --no-replace, which keeps its place; the group converges
// around them.
func TestHeldNotCounted(t *testing.T) {
	g := scaleInGroup(t, config.ScaleInNewest, nil)
	g.desired = 3
	g.insts["web-002"].state = Standby
	if got := names(g.activeLocked()); !slices.Equal(got, []string{"web-001", "web-003"}) {
		t.Fatalf("active with web-002 on standby = %v", got)
	}
	if g.convergedLocked() {
		t.Fatal("converged with 2 of 3 counted")
	}
	g.desired = 2
	if !g.convergedLocked() {
		t.Fatal("not converged: 2 in service for desired 2, one on standby")
	}
	g.insts["web-002"].state, g.insts["web-002"].marks.noReplace = Drained, true
	if got := names(g.activeLocked()); len(got) != 3 {
		t.Fatalf("active with web-002 drained in place = %v, want all 3", got)
	}
	// It serves nobody: the scale-in takes it first.
	if p := scaleInOrder(g.activeLocked(), config.ScaleInNewest, nil); p[0].in.name != "web-002" {
		t.Fatalf("scale-in order starts with %s, want the drained web-002", p[0].in.name)
	}
	g.desired = 3
	if !g.convergedLocked() {
		t.Fatal("not converged: 2 in service and one drained in its place, for desired 3")
	}
}

// Acts that cannot be done are refused with the reason, before anything
// changes.
func TestActRefusal(t *testing.T) {
	g := scaleInGroup(t, config.ScaleInNewest, nil)
	g.desired = 3
	c := g.conf()
	c.MinSize, c.MaxSize = 3, 3
	g.live.Store(&c)
	g.insts["web-002"].state = Drained
	for _, tc := range []struct {
		act   job.Kind
		names []string
		o     ActOptions
		want  string
	}{
		{job.Drain, []string{"web-009"}, ActOptions{}, "web-009 is not an instance of group web"},
		{job.Drain, []string{"web-002"}, ActOptions{}, "web-002 is already drained"},
		{job.Standby, []string{"web-002"}, ActOptions{}, "web-002 is already drained"},
		{job.Drain, []string{"web-001"}, ActOptions{NoReplace: true}, "would leave 1 in service, below min_size 3"},
		{job.Standby, []string{"web-001"}, ActOptions{Decrement: true}, "would lower the desired size to 2, below min_size 3"},
		{job.Undrain, []string{"web-001"}, ActOptions{}, "web-001 is in-service, not drained"},
		{job.Resume, []string{"web-001"}, ActOptions{}, "not on standby"},
		{job.Replace, []string{"web-002"}, ActOptions{}, "undrain or resume it first"},
		{job.Replace, []string{"web-001", "web-001"}, ActOptions{}, "named twice"},
		{job.Drain, []string{"web-001", "web-003"}, ActOptions{}, "drain takes one instance"},
		{job.Unprotect, []string{"web-001"}, ActOptions{}, "web-001 is not protected"},
		{job.Drain, []string{"web-001"}, ActOptions{}, ""},
		{job.Undrain, []string{"web-002"}, ActOptions{}, ""},
		{job.Replace, []string{"web-001", "web-003"}, ActOptions{}, ""},
		{job.Protect, []string{"web-001", "web-002"}, ActOptions{}, ""},
	} {
		got := g.ActRefusal(tc.act, tc.names, tc.o)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s %v %+v: refusal %q, want %q", tc.act, tc.names, tc.o, got, tc.want)
		}
	}
}

func TestMarksWords(t *testing.T) {
	for _, mk := range []marks{{}, {protected: true}, {noReplace: true, protected: true}, {decrement: true}} {
		if got := marksOf(mk.words()); got != mk {
			t.Errorf("marksOf(%v) = %+v, want %+v", mk.words(), got, mk)
		}
	}
}

// act runs a day-two act as its job would, in the background.
func (r *reconciler) act(kind job.Kind, o ActOptions, names ...string) <-chan error {
	done := make(chan error, 1)
	m := r.g.Mark()
	go func() {
		_, err := r.g.Act(context.Background(), m, kind, names, o, func(string) {})
		done <- err
	}()
	return done
}

// upWhileActing passes the named instance's checks while an act runs:
// the act's own ticker shares the clock with the gate's, so the clock is
// stepped until the instance is in service.
func (r *reconciler) upWhileActing(name string) {
	r.t.Helper()
	waitFor(r.t, name+" added to HAProxy", func() bool { return slices.Contains(r.ev.of(name), "add") })
	r.lb.set(name, "UP", "L7OK")
	r.stepUntil(name+" in service", func() bool { s, _ := r.state(name); return s == InService })
}

func awaitAct(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("the act did not end within 5 s")
		return nil
	}
}

// A replace launches first: the old instance serves until the new one is
// in service, and only then drains and stops.
func TestReplaceLaunchesBeforeRetiring(t *testing.T) {
	r := newReconciler(t, 2, nil)
	r.awaitStarts(2)
	r.bringUp("web-001", "web-002")
	done := r.act(job.Replace, ActOptions{}, "web-001")
	r.awaitStarts(3)
	r.awaitState("web-003", Starting)
	if s, _ := r.state("web-001"); s != InService || r.g.InstanceNames()[0] != "web-001" {
		t.Fatalf("web-001 is %s while its replacement starts, want in service", s)
	}
	gone := r.watchGone("web-001")
	r.upWhileActing("web-003")
	gone()
	if err := awaitAct(t, done); err != nil {
		t.Fatal(err)
	}
	wantEvents(t, r.ev, "web-001", "start", "add", "ready", "pre_stop", "drain", "remove", "stop")
}

// A replacement that fails its gate fails the act with the reason, and
// the old instance serves on; nothing more is launched.
func TestReplaceFailedGateKeepsOld(t *testing.T) {
	r := newReconciler(t, 1, nil)
	r.awaitStarts(1)
	r.bringUp("web-001")
	done := r.act(job.Replace, ActOptions{}, "web-001")
	r.awaitStarts(2)
	r.awaitState("web-002", Starting)
	r.prov.instance("web-002").exit("exit status 1")
	err := awaitAct(t, done)
	if err == nil || !strings.Contains(err.Error(), "the replacement failed: web-002 exited before passing its health check") || !strings.Contains(err.Error(), "web-001 serves on") {
		t.Fatalf("act = %v, want the replacement's failure and web-001 serving on", err)
	}
	if s, _ := r.state("web-001"); s != InService {
		t.Fatalf("web-001 is %s, want in service", s)
	}
	r.clk.Advance(maxBackoff)
	time.Sleep(50 * time.Millisecond)
	if n := len(r.prov.startTimes()); n != 2 {
		t.Fatalf("%d starts after the failed replace, want 2 (no other launch)", n)
	}
}

// A drain launches the replacement first, then takes the instance out of
// rotation and keeps it running; undrain makes it serve again and the
// scale-in retires the surplus.
func TestDrainAndUndrain(t *testing.T) {
	r := newReconciler(t, 1, nil)
	r.awaitStarts(1)
	r.bringUp("web-001")
	done := r.act(job.Drain, ActOptions{}, "web-001")
	r.awaitStarts(2)
	r.upWhileActing("web-002")
	if err := awaitAct(t, done); err != nil {
		t.Fatal(err)
	}
	if s, _ := r.state("web-001"); s != Drained {
		t.Fatalf("web-001 is %s after its drain, want drained", s)
	}
	if got := r.st.insts["web-001"]; got.State != string(Drained) {
		t.Fatalf("stored web-001 is %q, want drained", got.State)
	}
	// Its checks failing replace nothing while it is held.
	r.lb.set("web-001", "DOWN", "L4CON")
	r.poll(r.g.conf().ReplaceAfter + time.Second)
	r.poll(healthWatch)
	if s, _ := r.state("web-001"); s != Drained {
		t.Fatalf("held web-001 is %s after its checks failed, want drained", s)
	}
	r.lb.set("web-001", "UP", "L7OK")
	gone := r.watchGone("web-002")
	done = r.act(job.Undrain, ActOptions{}, "web-001")
	gone() // web-002 is the newest: scale_in newest retires it
	if err := awaitAct(t, done); err != nil {
		t.Fatal(err)
	}
	if s, _ := r.state("web-001"); s != InService {
		t.Fatalf("web-001 is %s after undrain, want in service", s)
	}
}

// replaceOrder: launch before terminate unless asked, or at max_size on a
// provider whose hosts are full.
func TestReplaceOrder(t *testing.T) {
	g := scaleInGroup(t, config.ScaleInNewest, nil)
	c := g.conf()
	c.MaxSize = 3
	g.live.Store(&c)
	g.desired = 3
	if first, note := g.replaceOrder(false); first || !strings.Contains(note, "launch before terminate") {
		t.Fatalf("one host, no capacity bound: %t %q, want launch before terminate", first, note)
	}
	g.provs = Providers{config.ProviderLocal: fullHosts{[]provider.HostStatus{{Name: "a", State: provider.HostUp, Instances: 2, CapacityInstances: 2}, {Name: "b", State: provider.HostDown}}}}
	if first, note := g.replaceOrder(false); !first || !strings.Contains(note, "at max_size 3 and its provider has no room") {
		t.Fatalf("full hosts at max_size: %t %q, want terminate first saying why", first, note)
	}
	g.desired = 2
	if first, _ := g.replaceOrder(false); first {
		t.Fatal("below max_size: terminate first, want launch before terminate")
	}
	if first, note := g.replaceOrder(true); !first || !strings.Contains(note, "--terminate-first") {
		t.Fatalf("asked: %t %q", first, note)
	}
}

// fullHosts is a provider with several hosts, as listed.
type fullHosts struct{ hosts []provider.HostStatus }

func (f fullHosts) Start(context.Context, provider.Spec) (provider.Instance, error) { return nil, nil }
func (f fullHosts) Adopt(context.Context, provider.Record, config.Template) (provider.Instance, error) {
	return nil, nil
}
func (f fullHosts) StopStrays(context.Context, []provider.Record) ([]provider.Record, error) {
	return nil, nil
}
func (f fullHosts) Hosts() []provider.HostStatus { return f.hosts }

// A drained instance that was replaced and then exits is let go: no
// failure, no second replacement.
func TestHeldExitIsNoFailure(t *testing.T) {
	r := newReconciler(t, 1, nil)
	r.awaitStarts(1)
	r.bringUp("web-001")
	done := r.act(job.Standby, ActOptions{}, "web-001")
	r.awaitStarts(2)
	r.upWhileActing("web-002")
	if err := awaitAct(t, done); err != nil {
		t.Fatal(err)
	}
	gone := r.watchGone("web-001")
	r.prov.instance("web-001").exit("signal: killed")
	gone()
	r.clk.Advance(maxBackoff)
	time.Sleep(50 * time.Millisecond)
	r.g.mu.Lock()
	failures := len(r.g.failures)
	r.g.mu.Unlock()
	if n := len(r.prov.startTimes()); n != 2 || failures != 0 {
		t.Fatalf("%d starts and %d failures after the standby instance exited, want 2 and 0", n, failures)
	}
}

// A group a reload removes retires every instance: protected and held
// ones too.
func TestRetireAllTakesProtectedAndHeld(t *testing.T) {
	r := newReconciler(t, 2, nil)
	r.awaitStarts(2)
	r.bringUp("web-001", "web-002")
	r.g.mu.Lock()
	r.g.insts["web-001"].marks.protected = true
	r.g.insts["web-002"].state = Standby
	r.g.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.g.RetireAll(ctx) }()
	r.stepUntil("every instance gone", func() bool { return len(r.g.InstanceNames()) == 0 })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
