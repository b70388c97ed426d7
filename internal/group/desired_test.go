package group

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/provider"
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

// TestLoweringJobDoneShort: a job that lowers the size is done once
// nothing starts or retires, though the group is short of it (its
// providers refuse); one that raises it waits. The scale-in from 6 to 5
// with 4 in service and every provider skipped waited for the skip's end.
func TestLoweringJobDoneShort(t *testing.T) {
	g, _ := newTestGroup(t)
	ctx := context.Background()
	if err := g.SetDesired(ctx, 5); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	for _, n := range []string{"web-001", "web-002", "web-003"} {
		g.insts[n] = &instance{name: n, state: InService, retire: make(chan struct{})}
	}
	g.mu.Unlock()

	m := g.Mark()
	if err := g.SetDesired(ctx, 4); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := g.WaitConverged(wctx, m); err != nil {
		t.Fatalf("the lowering job, 3 in service for 4 and none starting: %v; want it done", err)
	}

	m = g.Mark()
	if err := g.SetDesired(ctx, 5); err != nil {
		t.Fatal(err)
	}
	wctx, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := g.WaitConverged(wctx, m); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the raising job, 3 in service for 5: %v; want it still waiting", err)
	}

	// Lowered while one still starts: it waits for the start.
	g.mu.Lock()
	starting := &instance{name: "web-004", state: Starting, retire: make(chan struct{})}
	g.insts[starting.name] = starting
	g.mu.Unlock()
	m = g.Mark()
	if err := g.SetDesired(ctx, 4); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := g.WaitConverged(ctx, m); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("the lowering job ended (%v) while an instance started", err)
	case <-time.After(200 * time.Millisecond):
	}
	g.mu.Lock()
	starting.state = InService
	g.notifyLocked()
	g.mu.Unlock()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the lowering job did not end once its group was at 4")
	}
}

// statsOnly is a Balancer that only answers Stats, for status tests.
type statsOnly struct{ stats []haproxy.ServerStat }

func (statsOnly) AddServer(context.Context, haproxy.Server, bool) error      { return nil }
func (statsOnly) MarkReady(string, string)                                   {}
func (statsOnly) Drain(context.Context, string, string, time.Duration) error { return nil }
func (statsOnly) Undrain(context.Context, string, string) error              { return nil }
func (statsOnly) SetWeight(context.Context, string, string, int) error       { return nil }
func (statsOnly) SetWeights(context.Context, string, []haproxy.ServerWeight) error {
	return nil
}
func (statsOnly) RemoveServer(context.Context, string, string) error            { return nil }
func (statsOnly) ShutdownSessions(context.Context, string, string) error        { return nil }
func (b statsOnly) Stats(context.Context, string) ([]haproxy.ServerStat, error) { return b.stats, nil }

// TestStatusNeverInServiceWhenDown: between HAProxy marking a server DOWN and
// the health watch noticing, status already reports it unhealthy.
func TestStatusNeverInServiceWhenDown(t *testing.T) {
	g, _ := newTestGroup(t)
	g.lb = statsOnly{stats: []haproxy.ServerStat{
		{Name: "web-001", Status: "DOWN", CheckStatus: "L7TOUT"},
		{Name: "web-002", Status: "UP 1/2"},
	}}
	g.mu.Lock()
	for _, n := range []string{"web-001", "web-002"} {
		g.insts[n] = &instance{name: n, state: InService, retire: make(chan struct{})}
	}
	g.mu.Unlock()
	s := g.Status(context.Background())
	if s.Instances[0].State != Unhealthy || s.Instances[0].Health != "DOWN" {
		t.Errorf("web-001 = %+v; want unhealthy with health DOWN", s.Instances[0])
	}
	if s.Instances[1].State != InService || s.InService != 1 {
		t.Errorf("web-002 = %+v, in service %d; want in-service, 1", s.Instances[1], s.InService)
	}
}

// drainRecorder records the timeouts of Drain calls.
type drainRecorder struct {
	statsOnly
	timeouts []time.Duration
}

func (d *drainRecorder) Drain(_ context.Context, _, _ string, timeout time.Duration) error {
	d.timeouts = append(d.timeouts, timeout)
	return nil
}

// stoppedInstance is a provider.Instance that stops at once.
type stoppedInstance struct{ done chan struct{} }

func (stoppedInstance) Record() provider.Record        { return provider.Record{} }
func (stoppedInstance) PID() int                       { return 0 }
func (i stoppedInstance) Done() <-chan struct{}        { return i.done }
func (stoppedInstance) ExitReason() string             { return "" }
func (stoppedInstance) PreStop(context.Context) error  { return nil }
func (stoppedInstance) Stop(ctx context.Context) error { return nil }

// TestRetireResumesDrainWithWhatIsLeft: an instance adopted while draining
// (its state_since 15s ago) drains for the rest of drain_timeout only; one
// adopted while stopping is not drained again.
func TestRetireResumesDrainWithWhatIsLeft(t *testing.T) {
	g, _ := newTestGroup(t)
	c := g.conf()
	c.DrainTimeout = 20 * time.Second
	g.live.Store(&c)
	rec := &drainRecorder{}
	g.lb = rec
	for _, tc := range []struct {
		state State
		ago   time.Duration
	}{{InService, 0}, {Draining, 15 * time.Second}, {Draining, time.Minute}, {Stopping, 0}} {
		in := &instance{name: "web-001", state: tc.state, since: time.Now().Add(-tc.ago), inst: stoppedInstance{done: make(chan struct{})}, retire: make(chan struct{})}
		g.insts[in.name] = in
		g.retire(context.Background(), in)
	}
	if len(rec.timeouts) != 3 {
		t.Fatalf("drain timeouts %v; want 3 drains (none for the stopping instance)", rec.timeouts)
	}
	if rec.timeouts[0] != 20*time.Second {
		t.Errorf("fresh drain timeout %v, want drain_timeout 20s", rec.timeouts[0])
	}
	if d := rec.timeouts[1]; d > 5*time.Second || d < 4*time.Second {
		t.Errorf("resumed drain timeout %v, want the 5s left", d)
	}
	if rec.timeouts[2] != 0 {
		t.Errorf("drain resumed after its timeout passed got %v, want 0", rec.timeouts[2])
	}
}

// TestSteadyInstanceFailureDoesNotBackOff: instances killed one after another
// after serving steadily are accidents, replaced at once; instances that die
// before serving steadily are a crash loop and back off, doubling.
func TestSteadyInstanceFailureDoesNotBackOff(t *testing.T) {
	g, _ := newTestGroup(t)
	now := time.Now()
	for i := range 7 {
		in := &instance{name: fmt.Sprintf("web-%03d", i+1), state: InService, servingSince: now.Add(-time.Hour), retire: make(chan struct{})}
		g.fail(in, "exited: signal: killed")
	}
	g.mu.Lock()
	wait := time.Until(g.nextLaunch)
	g.mu.Unlock()
	if wait > 0 {
		t.Fatalf("after 7 kills of steady instances the next start waits %s; want none", wait)
	}

	for i := range 3 {
		in := &instance{name: fmt.Sprintf("web-1%02d", i), state: Starting, retire: make(chan struct{})}
		g.fail(in, "exited before passing its health check: exit status 1")
	}
	g.mu.Lock()
	wait = time.Until(g.nextLaunch)
	g.mu.Unlock()
	if wait < 3*time.Second || wait > 4*time.Second {
		t.Fatalf("after 3 instances died before serving the next start waits %s; want 4s (1s doubling, the steady ones not counted)", wait)
	}
}
