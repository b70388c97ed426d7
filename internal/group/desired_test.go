package group

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/store"
)

func newTestGroup(t *testing.T) (*Group, *store.Store) {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "shoal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := config.Group{Name: "web", MinSize: 1, MaxSize: 5, Cooldown: config.Cooldown{Up: time.Minute, Down: time.Hour}}
	// Bookkeeping only: no reconciler runs, so no provider or balancer is used.
	g, err := New(context.Background(), cfg, nil, nil, st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return g, st
}

func TestSetDesiredWritesBeforeItTakesEffect(t *testing.T) {
	g, st := newTestGroup(t)
	ctx := context.Background()
	if err := g.SetDesired(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if gs, _, err := st.GroupState(ctx, "web"); err != nil || gs.Desired != 3 {
		t.Fatalf("stored state %+v, %v; want desired 3", gs, err)
	}
	st.Close()
	if err := g.SetDesired(ctx, 4); err == nil {
		t.Fatal("SetDesired with a broken store succeeded")
	}
	if g.Desired() != 3 {
		t.Fatalf("desired size %d after a failed write; want it unchanged at 3", g.Desired())
	}
}

func TestStartCooldownOneDirection(t *testing.T) {
	g, _ := newTestGroup(t)
	now := time.Now()
	if err := g.StartCooldown(context.Background(), now, true); err != nil {
		t.Fatal(err)
	}
	if up, down := g.Cooldowns(); !up.Equal(now.Add(time.Minute)) || !down.IsZero() {
		t.Fatalf("after an up cooldown: up %v, down %v", up, down)
	}
	if err := g.StartCooldown(context.Background(), now, false); err != nil {
		t.Fatal(err)
	}
	if up, down := g.Cooldowns(); !up.Equal(now.Add(time.Minute)) || !down.Equal(now.Add(time.Hour)) {
		t.Fatalf("after both: up %v, down %v", up, down)
	}
}

// TestJobFailsOnlyOnItsOwnInstances: an unrelated instance failing while a
// job waits must not fail the job; one the job started must.
func TestJobFailsOnlyOnItsOwnInstances(t *testing.T) {
	g, _ := newTestGroup(t)
	g.mu.Lock()
	for _, n := range []string{"web-001", "web-002"} {
		g.insts[n] = &instance{name: n, state: InService, retire: make(chan struct{})}
	}
	g.mu.Unlock()
	ctx := context.Background()
	m := g.Mark()
	if err := g.SetDesired(ctx, 3); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	if g.owedLaunch != 1 || g.owedRetire != 0 {
		t.Fatalf("owed launches %d, retirements %d; want 1, 0", g.owedLaunch, g.owedRetire)
	}
	unrelated := g.insts["web-001"]
	g.mu.Unlock()
	g.fail(unrelated, "exited: signal: killed")

	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := g.WaitConverged(wctx, m); err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitConverged after an unrelated failure = %v; want it still waiting", err)
	}

	own := &instance{name: "web-003", state: Starting, retire: make(chan struct{})}
	g.mu.Lock()
	own.job, g.owedLaunch = g.jobSeq, 0 // as launchLocked tags it
	g.insts[own.name] = own
	g.mu.Unlock()
	g.fail(own, "health check did not pass")
	_, err := g.WaitConverged(ctx, m)
	if !errors.Is(err, ErrNotConverged) || !strings.Contains(err.Error(), "web-003") || strings.Contains(err.Error(), "web-001") {
		t.Fatalf("WaitConverged after the job's instance failed = %v; want ErrNotConverged naming web-003 only", err)
	}
}
