package ha

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/ha/election"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/provider/local"
	"github.com/shoal-lb/shoal/internal/store"
	"github.com/shoal-lb/shoal/internal/store/etcdstore"
	"github.com/shoal-lb/shoal/internal/testetcd"
)

// upBalancer stands in for HAProxy, which this test is not about: every
// server it has is UP, and a drain waits until release is closed, as one
// holding sessions does.
type upBalancer struct {
	mu       sync.Mutex
	servers  map[string]bool
	release  chan struct{}
	draining chan string // each drained server's name, as its drain begins
}

func newUpBalancer() *upBalancer {
	return &upBalancer{servers: map[string]bool{}, release: make(chan struct{}), draining: make(chan string, 8)}
}

func (b *upBalancer) AddServer(_ context.Context, s haproxy.Server, _ bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.servers[s.Name] = true
	return nil
}

func (b *upBalancer) MarkReady(string, string) {}

func (b *upBalancer) Drain(ctx context.Context, _, name string, _ time.Duration) error {
	b.draining <- name
	select {
	case <-b.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *upBalancer) Undrain(context.Context, string, string) error        { return nil }
func (b *upBalancer) SetWeight(context.Context, string, string, int) error { return nil }
func (b *upBalancer) SetWeights(context.Context, string, []haproxy.ServerWeight) error {
	return nil
}

func (b *upBalancer) RemoveServer(_ context.Context, _, name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.servers, name)
	return nil
}

func (b *upBalancer) ShutdownSessions(context.Context, string, string) error { return nil }

func (b *upBalancer) Stats(_ context.Context, backend string) ([]haproxy.ServerStat, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []haproxy.ServerStat
	for name := range b.servers {
		out = append(out, haproxy.ServerStat{Backend: backend, Name: name, Status: "UP", CheckStatus: "L7OK"})
	}
	return out, nil
}

// procs are the live processes whose command line holds marker, by pid.
func procs(t *testing.T, marker string) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	parent := map[int]int{} // of each process whose command line has marker
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		// A zombie's command line is empty: it does not count.
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(b, []byte(marker)) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) > 1 {
			parent[pid], _ = strconv.Atoi(f[1])
		}
	}
	// The script forks for each sleep, and until the child execs it has
	// the script's command line (a window a loaded machine widens): a
	// process whose parent matched too is that fork, not an instance.
	var out []int
	for pid, ppid := range parent {
		if _, fork := parent[ppid]; !fork {
			out = append(out, pid)
		}
	}
	return out
}

// fencedGroup is a group of real processes (a shell script, found by its
// path) through the local provider.
func fencedGroup(t *testing.T, dir, name string, minSize int) (config.Group, string) {
	t.Helper()
	script := filepath.Join(dir, name+"-instance.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nwhile :; do sleep 1; done\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	tmpl, err := config.NewTemplate([]string{"/bin/sh", script}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.Dir, tmpl.StopTimeout = dir, 2*time.Second
	health := config.DefaultHealth
	health.Grace = 10 * time.Second
	t.Cleanup(func() {
		// What the fence left running (the test's point) ends with the test.
		for _, pid := range procs(t, script) {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	})
	return config.Group{Name: name, Provider: config.ProviderLocal, MinSize: minSize, MaxSize: 3, DrainTimeout: time.Minute,
		ReplaceAfter: time.Minute, Health: health, Template: tmpl}, script
}

// awaitProcs waits until exactly n processes of script run.
func awaitProcs(t *testing.T, script string, n int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for got := len(procs(t, script)); got != n; got = len(procs(t, script)) {
		if time.Now().After(deadline) {
			t.Fatalf("%d processes of %s, want %d", got, filepath.Base(script), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// holdsProcs checks that n processes of script run throughout d.
func holdsProcs(t *testing.T, script string, n int, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if got := len(procs(t, script)); got != n {
			t.Fatalf("%d processes of %s, want %d", got, filepath.Base(script), n)
		}
	}
}

func haTestNode(t *testing.T, endpoint, name string, priority int) (*election.Node, context.CancelFunc) {
	t.Helper()
	cfg := config.HA{Node: name, Cluster: "fence", Priority: priority, Lease: 2 * time.Second,
		Etcd: config.HAEtcd{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second}}
	n, err := election.Open(t.Context(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; n.Close() })
	return n, cancel
}

func awaitLeader(t *testing.T, n *election.Node) election.Fence {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !n.Role().Leader {
		if time.Now().After(deadline) {
			t.Fatalf("%s does not lead within 10s", n.Name())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return n.Role().Fence
}

// TestFenceStopsProviderActions: a leader deposed without noticing (its
// store keeps the old fence, as in a partition before its self-demotion)
// starts and stops no process: a retirement under way when the other node
// took over ends with the instance left running and its job failed "not
// the leader", an instance that exits is not replaced, and a group asked
// for its minimum starts nothing. The same groups on a single node's
// SQLite scale up and down. Real etcd, real processes (the local provider).
func TestFenceStopsProviderActions(t *testing.T) {
	etcd := testetcd.Start(t)
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	a, stopA := haTestNode(t, etcd.Endpoint, "a", 200)
	fence := awaitLeader(t, a)
	b, _ := haTestNode(t, etcd.Endpoint, "b", 100)
	sqlite, err := store.Open(filepath.Join(dir, "a.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqlite.Close() })
	shared := etcdstore.New(a.Client(), a.Prefix())
	shared.SetFence(fence)
	st := &Store{Store: sqlite, shared: shared, log: log}
	prov := local.New(filepath.Join(dir, "state"), log)
	lb := newUpBalancer()

	webCfg, web := fencedGroup(t, dir, "web", 0)
	wg, err := group.New(ctx, webCfg, group.Providers{config.ProviderLocal: prov}, lb, st, log)
	if err != nil {
		t.Fatal(err)
	}
	// api is built while a leads (its state recorded), run once it no longer does.
	apiCfg, api := fencedGroup(t, dir, "api", 1)
	ag, err := group.New(ctx, apiCfg, group.Providers{config.ProviderLocal: prov}, lb, st, log)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	var running sync.WaitGroup
	t.Cleanup(func() {
		wg.KeepInstances()
		ag.KeepInstances()
		stopRun()
		running.Wait()
	})
	running.Go(func() { wg.Run(runCtx) })

	// Leading: the fence passes, web scales up.
	m := wg.Mark()
	if err := wg.SetDesired(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := wg.WaitConverged(ctx, m); err != nil {
		t.Fatalf("scale-up while leading: %v", err)
	}
	awaitProcs(t, web, 2)

	// A scale-in begins; its drain holds while the leadership moves.
	m = wg.Mark()
	if err := wg.SetDesired(ctx, 1); err != nil {
		t.Fatal(err)
	}
	retiring := <-lb.draining
	stopA() // a resigns: b takes over, a's store still has the old fence
	awaitLeader(t, b)
	close(lb.release)
	_, err = wg.WaitConverged(ctx, m)
	if !errors.Is(err, group.ErrNotConverged) || !strings.Contains(err.Error(), "not the leader") || !strings.Contains(err.Error(), "stop of "+retiring) {
		t.Fatalf("scale-in after the takeover: %v, want its stop refused: not the leader", err)
	}
	holdsProcs(t, web, 2, time.Second)

	// The instance left in service exits: the deposed node replaces it
	// not, and the retiring one still runs.
	var other int
	for _, in := range wg.Status(ctx).Instances {
		if in.Name != retiring {
			other = in.PID
		}
	}
	if other == 0 {
		t.Fatalf("no instance of web other than the retiring %s: %+v", retiring, wg.Status(ctx).Instances)
	}
	if err := syscall.Kill(-other, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	awaitProcs(t, web, 1)
	holdsProcs(t, web, 1, 3*time.Second) // more than a resync (2 s)
	if err := wg.SetDesired(ctx, 3); !errors.Is(err, etcdstore.ErrFenced) {
		t.Errorf("scale-up after the takeover: %v, want ErrFenced", err)
	}

	// api, run now, starts nothing: its minimum's launch is refused.
	running.Go(func() { ag.Run(runCtx) })
	deadline := time.Now().Add(10 * time.Second)
	for {
		fails := ag.Status(ctx).LastFailures
		if len(fails) > 0 {
			if !strings.Contains(fails[0].Reason, "start of api-001 not done: not the leader") {
				t.Fatalf("api's failure: %+v, want its start refused: not the leader", fails)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("api recorded no failure within 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	holdsProcs(t, api, 0, 3*time.Second)
	if fails := ag.Status(ctx).LastFailures; len(fails) != 1 {
		t.Errorf("api's launch was retried by the deposed node: %+v", fails)
	}

	// A single node: SQLite's Guard always passes.
	soloCfg, solo := fencedGroup(t, dir, "solo", 0)
	single, err := store.Open(filepath.Join(dir, "single.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { single.Close() })
	soloLB := newUpBalancer()
	close(soloLB.release) // its drains end at once
	sg, err := group.New(ctx, soloCfg, group.Providers{config.ProviderLocal: local.New(filepath.Join(dir, "single"), log)}, soloLB, single, log)
	if err != nil {
		t.Fatal(err)
	}
	soloCtx, stopSolo := context.WithCancel(ctx)
	soloDone := make(chan struct{})
	go func() { defer close(soloDone); sg.Run(soloCtx) }()
	defer func() { stopSolo(); <-soloDone }()
	for _, n := range []int{2, 0} {
		m := sg.Mark()
		if err := sg.SetDesired(ctx, n); err != nil {
			t.Fatal(err)
		}
		if _, err := sg.WaitConverged(ctx, m); err != nil {
			t.Fatalf("single node, size %d: %v", n, err)
		}
		awaitProcs(t, solo, n)
	}
}
