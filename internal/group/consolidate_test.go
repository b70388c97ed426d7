package group

import (
	"testing"

	"github.com/shoal-lb/shoal/internal/provider"
)

// TestConsolidationView: what a host consolidation reads of a group: its
// instances with a host, those that may not move pinned and why, the
// scale-in's time, and why the group is not at rest.
func TestConsolidationView(t *testing.T) {
	g, _ := newTestGroup(t)
	c := g.conf()
	c.Template.CPUs = 0.5
	g.live.Store(&c)
	add := func(name, host string, st State) *instance {
		in := &instance{name: name, state: st, retire: make(chan struct{}), rec: provider.Record{Host: host}}
		g.insts[name] = in
		return in
	}
	add("web-001", "a", InService)
	add("web-002", "b", InService).marks.protected = true
	add("web-003", "b", Standby)
	g.mu.Lock()
	g.desired = 2
	g.mu.Unlock()
	v := g.Consolidation()
	if v.Unsettled != "" || !v.ScaledIn.IsZero() {
		t.Fatalf("at rest without a scale-in: %+v", v)
	}
	want := []HostedInstance{{"web-001", "a", 0.5, ""}, {"web-002", "b", 0.5, "protected"}, {"web-003", "b", 0.5, "standby"}}
	if len(v.Instances) != len(want) {
		t.Fatalf("instances %+v", v.Instances)
	}
	for i := range want {
		if v.Instances[i] != want[i] {
			t.Errorf("instance %d = %+v, want %+v", i, v.Instances[i], want[i])
		}
	}

	// A scale-in is timed; while its instance leaves, the group is not at rest.
	add("web-004", "a", InService)
	g.mu.Lock()
	g.desired = 3
	g.mu.Unlock()
	if err := g.SetDesired(t.Context(), 2); err != nil {
		t.Fatal(err)
	}
	v = g.Consolidation()
	if v.ScaledIn.IsZero() || v.Resized != v.ScaledIn {
		t.Errorf("scale-in not timed: %+v", v)
	}
	if v.Unsettled == "" {
		t.Errorf("at rest while %+v leaves", v.Instances)
	}
	// A scale-out is a resize, not a scale-in; a starting instance unsettles.
	before := v.ScaledIn
	for _, in := range g.insts {
		if in.retiring {
			delete(g.insts, in.name)
		}
	}
	add("web-005", "a", Starting)
	if err := g.SetDesired(t.Context(), 3); err != nil {
		t.Fatal(err)
	}
	v = g.Consolidation()
	if v.ScaledIn != before || v.Resized.Before(before) {
		t.Errorf("scale-out: scaled in %v (was %v), resized %v", v.ScaledIn, before, v.Resized)
	}
	if v.Unsettled != "web-005 is starting" {
		t.Errorf("unsettled %q, want web-005 starting", v.Unsettled)
	}
}
