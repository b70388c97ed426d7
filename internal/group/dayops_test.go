package group

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/job"
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
