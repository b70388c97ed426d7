package keepalived

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/testhost"
)

// node is one side of the test pair: its Options, its flag files and the
// Supervisor running now.
type node struct {
	name   string
	o      Options
	health string // exists: the health check passes
	leader string // exists: the leader check passes
	s      *Supervisor
}

func (n *node) set(t *testing.T, flag string, on bool) {
	t.Helper()
	if on {
		if err := os.WriteFile(flag, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := os.Remove(flag); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
}

// holds reports whether the node's interface has the VIP, asking ip in its
// namespace as an observer would.
func holds(ctx context.Context, n *node) (bool, error) {
	out, err := exec.CommandContext(ctx, "ip", "-n", n.o.Netns, "-o", "-4", "addr", "show", "dev", n.o.VIP.Interface).CombinedOutput()
	if err != nil {
		return false, fmt.Errorf("ip addr in %s: %w: %s", n.o.Netns, err, out)
	}
	vip := netip.MustParsePrefix(n.o.VIP.Address)
	return strings.Contains(string(out), " "+vip.String()+" "), nil
}

// waitHolder waits until exactly holder holds the VIP (and reports MASTER)
// and other does not, and returns how long that took.
func waitHolder(ctx context.Context, t *testing.T, holder, other *node, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		h, err1 := holds(ctx, holder)
		o, err2 := holds(ctx, other)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		if h && !o && holder.s.State() == "MASTER" {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("after %s: %s holds the VIP: %v (state %q), %s: %v (state %q); want %s alone",
				limit, holder.name, h, holder.s.State(), other.name, o, other.s.State(), holder.name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitState(t *testing.T, n *node, want string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for n.s.State() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: state %q after %s, want %s", n.name, n.s.State(), limit, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pair is two namespaces on a segment of their own: a LAN of two
// hosts, VRRP between them as between two machines on a switch.
type pair struct {
	NS     [2]string // the namespaces
	Addr   [2]string // their addresses, on Subnet.0/24
	Subnet string
	Iface  string // the interface in each
}

// newPair makes the test's two namespaces, a and b, and the others named in
// more, skipping where that cannot be done unless in CI.
func newPair(ctx context.Context, t *testing.T, more ...string) (*pair, *testhost.Lab) {
	t.Helper()
	lab, err := testhost.NewSegment(ctx, t.TempDir(), testhost.SegmentOptions{Spaces: append([]string{"a", "b"}, more...)})
	if errors.Is(err, testhost.ErrUnsupported) {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lab.Close() })
	p := &pair{}
	for i, name := range []string{"a", "b"} {
		h := lab.Space(name)
		p.NS[i], p.Addr[i], p.Iface = h.Name, h.Addr, h.Iface
	}
	p.Subnet = p.Addr[0][:strings.LastIndex(p.Addr[0], ".")]
	return p, lab
}

// newNodes sets up nodes a (priority 110) and b (100) in the pair's
// namespaces, healthy, neither the leader, VRRP by multicast or, with
// unicast, to the other's address. start starts a node's Supervisor; all
// are stopped when the test ends, and their keepalived logs shown if it
// failed.
func newNodes(ctx context.Context, t *testing.T, pair *pair, unicast bool) (a, b *node, start func(*node)) {
	vip := pair.Subnet + ".100/24"
	// A space in the flag's path proves the script's argv reaches
	// /usr/bin/test word for word.
	flags := t.TempDir()
	nodes := make([]*node, 2)
	for i, name := range []string{"a", "b"} {
		dir := filepath.Join(t.TempDir(), "keepalived")
		n := &node{name: name, health: filepath.Join(flags, name+" healthy"), leader: filepath.Join(flags, name+" leader")}
		n.o = Options{
			VIP:         config.HAVIP{Address: vip, Interface: pair.Iface, RouterID: 51, Advert: time.Second, Keepalived: "keepalived"},
			Priority:    110 - 10*i,
			Node:        name,
			Dir:         dir,
			Check:       []string{"test", "-e", n.health},
			LeaderCheck: []string{"test", "-e", n.leader},
			Netns:       pair.NS[i],
			Log:         slog.New(slog.NewTextHandler(testWriter{t}, nil)).With("node", name),
		}
		if unicast {
			n.o.VIP.UnicastPeers = []string{pair.Addr[1-i]}
		}
		n.set(t, n.health, true)
		nodes[i] = n
	}
	start = func(n *node) {
		t.Helper()
		s, err := Start(ctx, n.o)
		if err != nil {
			t.Fatal(err)
		}
		n.s = s
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			if n.s != nil {
				sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				if err := n.s.Stop(sctx); err != nil {
					t.Errorf("stop %s: %v", n.name, err)
				}
				cancel()
			}
			if t.Failed() {
				if b, err := os.ReadFile(filepath.Join(n.o.Dir, logFile)); err == nil {
					t.Logf("%s keepalived.log:\n%s", n.name, b)
				}
			}
		}
	})
	return nodes[0], nodes[1], start
}

// TestVIPFailover runs two real keepalived daemons, supervised as shoal
// supervises them, in two network namespaces joined by a veth pair, with
// /usr/bin/test on flag files as their health and leader checks, and
// measures how long the VIP takes to move in each case: the higher
// priority takes it; a failing health check gives it up (FAULT); the
// leader check's weight moves it to the leader; Stop hands it over; kill
// -9 moves it and the restart clears the stale address; Start clears an
// address left on the interface.
func TestVIPFailover(t *testing.T) {
	t.Parallel() // its own segment (namespaces, bridge), keepalived dirs and flag files
	keepalivedBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pair, _ := newPair(ctx, t)
	a, b, start := newNodes(ctx, t, pair, false)
	vip := a.o.VIP.Address
	start(a)
	start(b)
	// The first master waits out the master-down timer (3 adverts and the
	// skew) and its health check's rise 2.
	d := waitHolder(ctx, t, a, b, 15*time.Second)
	waitState(t, b, "BACKUP", 5*time.Second)
	t.Logf("first master (a, priority 110): %s after start", d.Round(time.Millisecond))
	if fi, err := os.Stat(filepath.Join(a.o.Dir, confFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("keepalived.conf: %v, %v; want mode 0600", fi, err)
	}

	// Health check fails on a: FAULT after fall 2, and b takes over on the
	// priority-0 advert.
	a.set(t, a.health, false)
	d = waitHolder(ctx, t, b, a, 8*time.Second)
	waitState(t, a, "FAULT", 2*time.Second)
	t.Logf("health check failing on the master: VIP on the backup after %s (bound 8 s, goal ~3 s)", d.Round(time.Millisecond))
	a.set(t, a.health, true)
	d = waitHolder(ctx, t, a, b, 10*time.Second)
	t.Logf("health check passing again: VIP back on a (preempt) after %s", d.Round(time.Millisecond))

	// The leader check on b adds 50: 150 beats a's 110.
	b.set(t, b.leader, true)
	d = waitHolder(ctx, t, b, a, 8*time.Second)
	t.Logf("leader check passing on the lower priority: VIP moved to it after %s", d.Round(time.Millisecond))
	b.set(t, b.leader, false)
	a.set(t, a.leader, true)
	d = waitHolder(ctx, t, a, b, 10*time.Second)
	t.Logf("leadership moved back (b's leader check failing, a's passing): VIP back on a after %s", d.Round(time.Millisecond))

	// Stop: SIGTERM, keepalived sends priority 0 and drops the VIP; the
	// backup takes over after its skew time, while keepalived winds down.
	t0 := time.Now()
	stopped := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		stopped <- a.s.Stop(sctx)
	}()
	d = waitHolder(ctx, t, b, a, 5*time.Second)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	t.Logf("Stop on the master: VIP on the backup after %s (bound 5 s, goal ~2 s), Stop returned after %s",
		d.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	if h, err := holds(ctx, a); err != nil || h {
		t.Fatalf("a holds the VIP after Stop: %v %v", h, err)
	}
	if st := a.s.State(); st != "" {
		t.Fatalf("state after Stop: %q, want \"\"", st)
	}
	start(a)
	d = waitHolder(ctx, t, a, b, 15*time.Second)
	t.Logf("a started again: VIP back on a after %s", d.Round(time.Millisecond))

	// kill -9 of a's keepalived (its whole process group: the parent and
	// its VRRP child). b takes over when the master-down timer expires; a's
	// Supervisor clears the stale VIP and restarts keepalived.
	a.s.mu.Lock()
	killed := a.s.proc
	a.s.mu.Unlock()
	t0 = time.Now()
	if err := syscall.Kill(-killed.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d = waitHolder(ctx, t, b, a, 10*time.Second)
	t.Logf("kill -9 of the master's keepalived: VIP on the backup after %s (bound 10 s, goal ~4 s)", d.Round(time.Millisecond))
	waitHolder(ctx, t, a, b, 20*time.Second)
	a.s.mu.Lock()
	restarted := a.s.proc
	a.s.mu.Unlock()
	if restarted == killed {
		t.Fatal("a holds the VIP again without a new keepalived")
	}
	t.Logf("a's keepalived restarted (pid %d → %d): VIP back on a %s after the kill", killed.PID(), restarted.PID(), time.Since(t0).Round(time.Millisecond))

	// A VIP left on b's interface (as by a kill -9 with no Supervisor to
	// clean up) is gone when Start returns; b, the backup, does not add it.
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	if err := b.s.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	scancel()
	if out, err := exec.CommandContext(ctx, "ip", "-n", b.o.Netns, "addr", "add", vip, "dev", b.o.VIP.Interface).CombinedOutput(); err != nil {
		t.Fatalf("add a stale VIP: %v: %s", err, out)
	}
	start(b)
	if h, err := holds(ctx, b); err != nil || h {
		t.Fatalf("b holds the stale VIP after Start: %v %v", h, err)
	}
	waitState(t, b, "BACKUP", 10*time.Second)
	waitHolder(ctx, t, a, b, time.Second)
}

// TestVIPUnicast: with unicast_peer (VRRP to the other node's address, no
// multicast) and a sub-second advert (VRRPv3), the higher priority takes
// the VIP, and kill -9 and Stop hand it over.
func TestVIPUnicast(t *testing.T) {
	t.Parallel() // its own segment (namespaces, bridge), keepalived dirs and flag files
	keepalivedBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pair, _ := newPair(ctx, t)
	a, b, start := newNodes(ctx, t, pair, true)
	a.o.VIP.Advert, b.o.VIP.Advert = 500*time.Millisecond, 500*time.Millisecond
	start(a)
	start(b)
	d := waitHolder(ctx, t, a, b, 15*time.Second)
	t.Logf("unicast, advert 0.5 s: first master (a) after %s", d.Round(time.Millisecond))
	a.s.mu.Lock()
	killed := a.s.proc
	a.s.mu.Unlock()
	if err := syscall.Kill(-killed.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d = waitHolder(ctx, t, b, a, 8*time.Second)
	t.Logf("unicast, advert 0.5 s: kill -9 of the master's keepalived: VIP on the backup after %s", d.Round(time.Millisecond))
	d = waitHolder(ctx, t, a, b, 15*time.Second)
	t.Logf("unicast, advert 0.5 s: a restarted, VIP back on a after %s", d.Round(time.Millisecond))
	t0 := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- a.s.Stop(ctx) }()
	d = waitHolder(ctx, t, b, a, 5*time.Second)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	t.Logf("unicast, advert 0.5 s: Stop on the master: VIP on the backup after %s, Stop returned after %s",
		d.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
}

// TestStartRefuses: a missing interface, or a track script keepalived
// would disable as unsafe, fails Start with an error that says so, and
// nothing is left running.
func TestStartRefuses(t *testing.T) {
	t.Parallel() // its own segment (namespaces, bridge), keepalived dirs and flag files
	keepalivedBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pair, _ := newPair(ctx, t)
	open := t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(open, "check")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	good := Options{VIP: config.HAVIP{Address: pair.Subnet + ".100/24", Interface: pair.Iface, RouterID: 51, Advert: time.Second},
		Priority: 100, Node: "a", Netns: pair.NS[0], Check: []string{"true"}}
	for _, c := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"interface", func(o *Options) { o.VIP.Interface = "eth9" }, "vip interface eth9"},
		{"unsafe script", func(o *Options) { o.Check = []string{script} }, "no other user can replace it"},
		{"binary", func(o *Options) { o.VIP.Keepalived = "/nonexistent/keepalived" }, "apt-get install keepalived"},
		{"vip", func(o *Options) { o.VIP.Address = "10.0.0.300/24" }, "expected a CIDR"},
		{"dir", func(o *Options) { o.Dir = "" }, "no state directory"},
	} {
		o := good
		o.Dir = t.TempDir()
		c.edit(&o)
		s, err := Start(ctx, o)
		if err == nil {
			s.Stop(ctx)
			t.Errorf("%s: Start succeeded", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.name, err, c.want)
		}
	}
	if out, _ := exec.CommandContext(ctx, "ip", "netns", "pids", pair.NS[0]).Output(); len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("processes left in %s: %s", pair.NS[0], out)
	}
}

// TestSweep: a keepalived left running by an earlier Supervisor (as by a
// shoal killed with SIGKILL) is stopped by the next Start with the same
// Dir, which then runs its own.
func TestSweep(t *testing.T) {
	t.Parallel() // its own segment (namespaces, bridge), keepalived dirs and flag files
	keepalivedBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pair, _ := newPair(ctx, t)
	o := Options{VIP: config.HAVIP{Address: pair.Subnet + ".100/24", Interface: pair.Iface, RouterID: 51, Advert: time.Second},
		Priority: 100, Node: "a", Netns: pair.NS[0], Dir: t.TempDir(), Check: []string{"true"},
		Log: slog.New(slog.NewTextHandler(testWriter{t}, nil))}
	old, err := Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	// Abandon old as a dead shoal would: its goroutines stop, its
	// keepalived runs on.
	old.cancel()
	<-old.done
	old.fifo.Close()
	<-old.reader
	stray := old.proc
	s, err := Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(context.Background()) })
	select {
	case <-stray.Done():
	case <-time.After(2 * time.Second):
		t.Fatalf("the earlier keepalived (pid %d) still runs after Start", stray.PID())
	}
	if s.proc.PID() == stray.PID() {
		t.Fatal("no new keepalived")
	}
	waitState(t, &node{name: "a", s: s}, "MASTER", 15*time.Second)
}

// testWriter sends the Supervisor's log to the test's.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
