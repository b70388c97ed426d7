package ha

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/job"
	"github.com/shoal-lb/shoal/internal/jobrun"
	"github.com/shoal-lb/shoal/internal/store"
	"github.com/shoal-lb/shoal/internal/testetcd"
)

// recordingCore is a Core without groups: it records what the node has it
// do, and whether Lead ran under the reload lock.
type recordingCore struct {
	sync.Mutex // the reload lock
	leadErr    error

	mu      sync.Mutex
	calls   []string
	standby bool
}

func newRecordingCore(leadErr error) *recordingCore {
	return &recordingCore{leadErr: leadErr, standby: true}
}

func (c *recordingCore) record(call string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, call)
}

func (c *recordingCore) Calls() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls)
}

func (c *recordingCore) Config() *config.Config { return &config.Config{} }

func (c *recordingCore) Lead(context.Context) error {
	if c.TryLock() {
		c.Unlock()
		c.record("lead without the lock")
	}
	c.record("lead")
	if c.leadErr != nil {
		return c.leadErr
	}
	c.mu.Lock()
	c.standby = false
	c.mu.Unlock()
	return nil
}

func (c *recordingCore) RunPolicies()  { c.record("policies") }
func (c *recordingCore) StopPolicies() { c.record("stop policies") }

func (c *recordingCore) Follow() {
	c.record("follow")
	c.mu.Lock()
	c.standby = true
	c.mu.Unlock()
}

func (c *recordingCore) Standby() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.standby
}

func (c *recordingCore) Servers() int { return 0 }

// noGroups is the job manager's empty set of groups.
type noGroups struct{}

func (noGroups) Group(string) (*group.Group, bool) { return nil, false }
func (noGroups) Names() []string                   { return nil }

// testNode joins a node to the pair "roles" and starts its roles over c
// (no HAProxy: c has no group for the mirror to serve).
func testNode(t *testing.T, endpoint, name string, priority int, c Core) (*Node, func()) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := &config.Config{StateDir: t.TempDir(), HA: &config.HA{Node: name, Cluster: "roles", Priority: priority, Lease: 2 * time.Second,
		Etcd: config.HAEtcd{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second}}}
	local, err := store.Open(filepath.Join(cfg.StateDir, "shoal.db"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := Join(t.Context(), cfg, local, log)
	if err != nil {
		t.Fatal(err)
	}
	jm := jobrun.NewStandbyManager(noGroups{}, n.Store(), log)
	stop := sync.OnceFunc(n.Start(c, nil, jm))
	t.Cleanup(func() {
		stop()
		n.Close()
		local.Close()
	})
	return n, stop
}

// await waits up to 15 s for cond.
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 15s: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func leads(n *Node, name string, leading bool) func() bool {
	return func() bool {
		got, is := n.Leader()
		return got == name && is == leading
	}
}

// TestNodeRoles: the elected node takes over (groups restored under the
// reload lock, then policies) and records the change; the standby runs
// nothing; when the leader stops, it stops policies before the groups, and
// the standby takes over, failing the job its predecessor left with the
// change as the reason. Real etcd.
func TestNodeRoles(t *testing.T) {
	etcd := testetcd.Start(t)
	ctx := t.Context()
	ca, cb := newRecordingCore(nil), newRecordingCore(nil)
	a, stopA := testNode(t, etcd.Endpoint, "a", 200, ca)
	await(t, "a leads", leads(a, "a", true))
	// Elected is not yet taken over: the fake core is never a standby,
	// so wait for the takeover's calls, then check their order.
	await(t, "a's takeover", func() bool { return len(ca.Calls()) >= 2 })
	if got := ca.Calls(); !slices.Equal(got, []string{"lead", "policies"}) {
		t.Fatalf("a's takeover: %q, want lead (under the lock), then policies", got)
	}

	// A job a leaves running.
	j := job.Job{Group: "web", Kind: job.Size, Source: "api", Target: 2, State: job.Running, CreatedAt: time.Now()}
	if err := a.Store().InsertJob(ctx, &j); err != nil {
		t.Fatal(err)
	}

	b, _ := testNode(t, etcd.Endpoint, "b", 100, cb)
	await(t, "b sees a lead", leads(b, "a", false))
	stopA()
	if got := ca.Calls(); !slices.Equal(got, []string{"lead", "policies", "stop policies", "follow"}) {
		t.Fatalf("a stopping: %q, want its policies stopped, then its groups", got)
	}
	await(t, "b leads", leads(b, "b", true))
	// Elected is not yet taken over: the fake core is never a standby,
	// so wait for the takeover's calls, then check their order.
	await(t, "b's takeover", func() bool { return len(cb.Calls()) >= 2 })
	if got := cb.Calls(); !slices.Equal(got, []string{"lead", "policies"}) {
		t.Fatalf("b's takeover: %q, want lead (under the lock), then policies", got)
	}
	left, err := b.Store().Job(ctx, j.ID)
	if err != nil || left.State != job.Failed || left.Reason != "leader changed: a → b" {
		t.Fatalf("a's running job after b took over: %+v, %v; want failed: leader changed: a → b", left, err)
	}
	// The change is recorded last in the takeover, after the policies
	// start: wait for it rather than race it.
	var changes []string
	recorded := func() bool {
		ds, err := b.Store().Decisions(ctx, store.DecisionQuery{})
		if err != nil {
			t.Fatal(err)
		}
		changes = changes[:0]
		for _, d := range ds {
			changes = append(changes, d.Reason)
		}
		return slices.Contains(changes, "leader changed: none → a") && slices.Contains(changes, "leader changed: a → b")
	}
	deadline := time.Now().Add(15 * time.Second)
	for !recorded() {
		if time.Now().After(deadline) {
			t.Fatalf("recorded: %q, want both leader changes", changes)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestNodeFailedTakeover: a node whose groups cannot be restored runs no
// policy, stops what it started and resigns, so that the other node takes
// over. Real etcd.
func TestNodeFailedTakeover(t *testing.T) {
	etcd := testetcd.Start(t)
	ca, cb := newRecordingCore(errors.New("no provider")), newRecordingCore(nil)
	a, _ := testNode(t, etcd.Endpoint, "a", 200, ca)
	await(t, "a gives up", func() bool { return slices.Contains(ca.Calls(), "follow") })
	b, _ := testNode(t, etcd.Endpoint, "b", 100, cb)
	await(t, "b leads", leads(b, "b", true))
	await(t, "a sees b lead", leads(a, "b", false))
	got := ca.Calls()
	if len(got) < 3 || !slices.Equal(got[:3], []string{"lead", "stop policies", "follow"}) || slices.Contains(got, "policies") {
		t.Fatalf("a's failed takeover: %q, want lead, stop policies, follow, and no policy run", got)
	}
	if strings.Join(cb.Calls(), ",") != "lead,policies" {
		t.Fatalf("b's takeover: %q", cb.Calls())
	}
}
