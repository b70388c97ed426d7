package group

import (
	"context"
	"testing"
)

// TestTargetsCoresFollowReload: the cores the collector divides an
// instance's CPU by are the reloaded template's cpus, for the instances
// already running too, not those the group was created with.
func TestTargetsCoresFollowReload(t *testing.T) {
	g, _ := newTestGroup(t)
	g.mu.Lock()
	g.insts["web-001"] = &instance{name: "web-001", state: InService, retire: make(chan struct{})}
	g.mu.Unlock()
	cfg := g.Config()
	cfg.Template.CPUs = 1
	g.Update(context.Background(), cfg)
	if got := g.Targets()[0].Cores; got != 1 {
		t.Fatalf("cores %v with cpus 1, want 1", got)
	}
	cfg.Template.CPUs = 4
	g.Update(context.Background(), cfg)
	if got := g.Targets()[0].Cores; got != 4 {
		t.Fatalf("cores %v after a reload to cpus 4, want 4", got)
	}
}
