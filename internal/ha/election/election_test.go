package election

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/testetcd"
)

const lease = 2 * time.Second

func haConfig(endpoint, name string, priority int) config.HA {
	return config.HA{
		Node: name, Cluster: "test", Priority: priority, Lease: lease,
		Etcd: config.HAEtcd{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second},
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// start opens a node and runs it until the test ends.
func start(t *testing.T, cfg config.HA) (*Node, context.CancelFunc) {
	t.Helper()
	n, err := Open(t.Context(), cfg, quiet())
	if err != nil {
		t.Fatalf("Open %s: %v", cfg.Node, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.Run(ctx)
	}()
	stop := func() {
		cancel()
		<-done
	}
	t.Cleanup(func() {
		stop()
		n.Close()
	})
	return n, stop
}

// waitRole waits for a role from n that ok accepts.
func waitRole(t *testing.T, n *Node, within time.Duration, ok func(Role) bool) Role {
	t.Helper()
	deadline := time.After(within)
	for {
		if r := n.Role(); ok(r) {
			return r
		}
		select {
		case <-n.Roles():
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%s: role %+v after %s", n.Name(), n.Role(), within)
		}
	}
}

func leads(r Role) bool { return r.Leader }

func TestElectionAndStepDown(t *testing.T) {
	etcd := testetcd.Start(t)
	a, _ := start(t, haConfig(etcd.Endpoint, "a", 100))
	ra := waitRole(t, a, 5*time.Second, leads)
	if !ra.Fence.Valid() || ra.LeaderName != "a" {
		t.Fatalf("a's role = %+v", ra)
	}
	b, _ := start(t, haConfig(etcd.Endpoint, "b", 90))
	rb := waitRole(t, b, 5*time.Second, func(r Role) bool { return r.LeaderName == "a" })
	if rb.Leader {
		t.Fatalf("b leads beside a: %+v", rb)
	}
	if err := b.StepDown(t.Context()); !errors.Is(err, ErrNotLeader) {
		t.Errorf("b.StepDown = %v, want ErrNotLeader", err)
	}

	// Both publish; Status lists both and names the leader.
	if err := b.Publish(t.Context(), NodeInfo{HAProxySynced: true, Servers: 3}); err != nil {
		t.Fatal(err)
	}
	st, err := b.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Leader != "a" || st.IsLeader || len(st.Nodes) != 2 || st.Nodes[1].Name != "b" || !st.Nodes[1].HAProxySynced || st.Nodes[1].Servers != 3 || st.Nodes[1].Priority != 90 || st.LeaseTTL <= 0 {
		t.Errorf("status = %+v", st)
	}

	// StepDown hands over: a stops leading first, b takes over, and a
	// does not win it back within its hold.
	began := time.Now()
	if err := a.StepDown(t.Context()); err != nil {
		t.Fatalf("a.StepDown: %v", err)
	}
	if a.Role().Leader {
		t.Fatal("a still leads after StepDown returned")
	}
	rb = waitRole(t, b, 2*time.Second, leads)
	t.Logf("b leads %s after the step-down", time.Since(began).Round(time.Millisecond))
	if rb.Fence == ra.Fence || !rb.Fence.Valid() {
		t.Errorf("b's fence %+v, a's was %+v", rb.Fence, ra.Fence)
	}
	waitRole(t, a, 2*time.Second, func(r Role) bool { return r.LeaderName == "b" })
	st, err = a.Status(t.Context())
	if err != nil || st.Leader != "b" {
		t.Errorf("a's status after the step-down: %+v, %v", st, err)
	}
}

func TestRefusesDuplicates(t *testing.T) {
	etcd := testetcd.Start(t)
	start(t, haConfig(etcd.Endpoint, "a", 100))
	for _, tt := range []struct {
		cfg  config.HA
		want string
	}{
		{haConfig(etcd.Endpoint, "b", 100), "live node a has priority 100 too: ha.priority must differ between nodes"},
		{haConfig(etcd.Endpoint, "a", 90), `a live node named "a" is registered in etcd cluster "test"`},
	} {
		began := time.Now()
		n, err := Open(t.Context(), tt.cfg, quiet())
		if err == nil {
			n.Close()
			t.Fatalf("Open %s/%d: no error", tt.cfg.Node, tt.cfg.Priority)
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Open %s/%d: %v\nwant %s", tt.cfg.Node, tt.cfg.Priority, err, tt.want)
		}
		// It waits out a lease for a namesake that just died, no more.
		if d := time.Since(began); d > lease+3*time.Second {
			t.Errorf("refused after %s", d)
		}
	}
}

// TestSamePriorityAtOnce: of nodes that start together with one priority,
// exactly one registers, whatever the order of their reads.
func TestSamePriorityAtOnce(t *testing.T) {
	etcd := testetcd.Start(t)
	const n = 4
	errs := make(chan error, n)
	for i := range n {
		go func() {
			node, err := Open(t.Context(), haConfig(etcd.Endpoint, fmt.Sprintf("n%d", i), 100), quiet())
			if err == nil {
				t.Cleanup(func() { node.Close() })
			}
			errs <- err
		}()
	}
	var ok int
	for range n {
		switch err := <-errs; {
		case err == nil:
			ok++
		case !strings.Contains(err.Error(), "has priority 100 too: ha.priority must differ between nodes"):
			t.Errorf("Open: %v, want the priority named", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d of %d nodes with priority 100 registered, want 1", ok, n)
	}
}

func TestUnreachableEtcd(t *testing.T) {
	cfg := haConfig("http://127.0.0.1:1", "a", 100)
	cfg.Etcd.DialTimeout = 500 * time.Millisecond
	began := time.Now()
	n, err := Open(t.Context(), cfg, quiet())
	if err == nil {
		n.Close()
		t.Fatal("Open: no error")
	}
	if !strings.HasPrefix(err.Error(), "etcd unreachable at http://127.0.0.1:1: ") {
		t.Errorf("error = %v", err)
	}
	if d := time.Since(began); d > 2*time.Second {
		t.Errorf("failed after %s, dial_timeout is %s", d, cfg.Etcd.DialTimeout)
	}
}

// TestEtcdLost: a leader that cannot reach etcd stops leading by itself,
// before its lease can have expired in etcd (and another node won).
func TestEtcdLost(t *testing.T) {
	etcd := testetcd.Start(t)
	a, _ := start(t, haConfig(etcd.Endpoint, "a", 100))
	waitRole(t, a, 5*time.Second, leads)
	etcd.Kill()
	began := time.Now()
	waitRole(t, a, lease+2*time.Second, func(r Role) bool { return !r.Leader })
	took := time.Since(began)
	t.Logf("a stopped leading %s after etcd died", took.Round(time.Millisecond))
	if took >= lease {
		t.Errorf("a led on for %s without etcd; its lease is %s", took, lease)
	}
}

// TestFencing: once a leader's lease is gone and another node leads, the
// deposed leader's writes, made with its old fence, fail.
func TestFencing(t *testing.T) {
	etcd := testetcd.Start(t)
	a, _ := start(t, haConfig(etcd.Endpoint, "a", 100))
	ra := waitRole(t, a, 5*time.Second, leads)
	b, _ := start(t, haConfig(etcd.Endpoint, "b", 90))
	waitRole(t, b, 5*time.Second, func(r Role) bool { return r.LeaderName == "a" })

	write := func(f Fence, v string) bool {
		resp, err := a.Client().Txn(t.Context()).If(f.Cmp()).Then(clientv3.OpPut("/shoal/test/state/x", v)).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return resp.Succeeded
	}
	if !write(ra.Fence, "a") {
		t.Fatal("the leader's fenced write failed")
	}
	// a's lease is revoked behind its back, as when it expires in a
	// partition: its key goes, b wins.
	a.mu.Lock()
	id := a.sess.Lease()
	a.mu.Unlock()
	if _, err := b.Client().Revoke(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	rb := waitRole(t, b, 3*time.Second, leads)
	if write(ra.Fence, "a again") {
		t.Fatal("the deposed leader's write with its old fence succeeded")
	}
	resp, err := b.Client().Txn(t.Context()).If(rb.Fence.Cmp()).Then(clientv3.OpPut("/shoal/test/state/x", "b")).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("the new leader's write: %v, %v", resp, err)
	}
	// a notices too, and follows b.
	waitRole(t, a, lease+2*time.Second, func(r Role) bool { return !r.Leader && r.LeaderName == "b" })
}

// TestTakeoverAfterKill: a leader killed (SIGKILL, another process) loses
// its key when its lease expires; the standby leads within lease + 1 s.
func TestTakeoverAfterKill(t *testing.T) {
	etcd := testetcd.Start(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperNode$")
	cmd.Env = append(os.Environ(), "SHOAL_HA_HELPER="+etcd.Endpoint)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "leader" {
		t.Fatalf("helper said %q, %v", lines.Text(), lines.Err())
	}
	b, _ := start(t, haConfig(etcd.Endpoint, "b", 90))
	waitRole(t, b, 5*time.Second, func(r Role) bool { return r.LeaderName == "a" })
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	waitRole(t, b, lease+time.Second+500*time.Millisecond, leads)
	took := time.Since(killed)
	t.Logf("b leads %s after a was killed (lease %s)", took.Round(time.Millisecond), lease)
	if took > lease+time.Second {
		t.Errorf("takeover took %s, lease is %s", took, lease)
	}
}

// TestHelperNode is node a in its own process for TestTakeoverAfterKill.
func TestHelperNode(t *testing.T) {
	endpoint := os.Getenv("SHOAL_HA_HELPER")
	if endpoint == "" {
		t.Skip("a helper process of TestTakeoverAfterKill")
	}
	n, err := Open(context.Background(), haConfig(endpoint, "a", 100), quiet())
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	go n.Run(context.Background())
	for r := range n.Roles() {
		if r.Leader {
			fmt.Println("leader")
		}
	}
}

// TestLeadsAgainAfterItsHold: a node that stepped down campaigns again once
// its hold is over, and wins when the leader's lease ends (as a partition
// from etcd ends it).
func TestLeadsAgainAfterItsHold(t *testing.T) {
	etcd := testetcd.Start(t)
	a, _ := start(t, haConfig(etcd.Endpoint, "a", 100))
	waitRole(t, a, 5*time.Second, leads)
	b, _ := start(t, haConfig(etcd.Endpoint, "b", 90))
	waitRole(t, b, 5*time.Second, func(r Role) bool { return r.LeaderName == "a" })
	if err := a.StepDown(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitRole(t, b, 2*time.Second, leads)
	// b's hold begins well after a's (both 2 × lease): a campaign of a
	// that a loaded machine delays a few hundred ms (a session renewed
	// late) still comes before b's.
	time.Sleep(lease / 2)
	if err := b.StepDown(t.Context()); err != nil {
		t.Fatal(err)
	}
	// a's hold (2 × lease) began first; it leads once that is over.
	waitRole(t, a, 2*lease+2*time.Second, leads)
	time.Sleep(2*lease + 500*time.Millisecond) // b's hold is over too
	a.mu.Lock()
	sess := a.sess
	a.mu.Unlock()
	if _, err := a.cli.Revoke(t.Context(), sess.Lease()); err != nil {
		t.Fatal(err)
	}
	ended := time.Now()
	waitRole(t, b, lease+2*time.Second, leads)
	t.Logf("b leads %s after a's lease ended", time.Since(ended).Round(time.Millisecond))
}

// TestStandbyStopsWithoutEtcd: a standby stopped just after etcd went away
// (shoal stopped during an etcd outage) stops at once; it used to wait, in
// its campaign's clean-up, until etcd answered again.
func TestStandbyStopsWithoutEtcd(t *testing.T) {
	etcd := testetcd.Start(t)
	a, _ := start(t, haConfig(etcd.Endpoint, "a", 100))
	waitRole(t, a, 5*time.Second, leads)
	b, stopB := start(t, haConfig(etcd.Endpoint, "b", 90))
	waitRole(t, b, 5*time.Second, func(r Role) bool { return r.LeaderName == "a" })
	etcd.Kill()
	began := time.Now()
	done := make(chan struct{})
	go func() { stopB(); b.Close(); close(done) }()
	select {
	case <-done:
		t.Logf("b stopped %s after etcd died", time.Since(began).Round(time.Millisecond))
	case <-time.After(3 * lease):
		t.Fatalf("b did not stop within %s of etcd's death", 3*lease)
	}
}
