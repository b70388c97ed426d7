package metrics

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy"
)

// startGroup starts argv in a process group of its own, as the local
// provider starts instances, and kills the whole group when the test ends.
func startGroup(t testing.TB, argv ...string) int {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		syscall.Kill(-pid, syscall.SIGKILL)
		cmd.Wait()
	})
	return pid
}

// TestCPUOfRealProcesses measures real process groups: a shell whose child
// burns a core, a shell that keeps forking short-lived CPU-bound children
// (their time reaches the group through the parent's cutime/cstime once they
// are reaped), and an idle sleep.
func TestCPUOfRealProcesses(t *testing.T) {
	busy := startGroup(t, "sh", "-c", "while :; do :; done & wait")
	forking := startGroup(t, "sh", "-c", `while :; do sh -c 'i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done'; done`)
	idle := startGroup(t, "sleep", "300")
	ready := time.Now().Add(-time.Hour)
	targets := []Target{
		{Group: "web", Name: "web-001", PGID: busy, Cores: 1, State: "in-service", InService: true, ReadySince: ready},
		{Group: "web", Name: "web-002", PGID: idle, Cores: 1, State: "in-service", InService: true, ReadySince: ready},
		{Group: "web", Name: "web-003", PGID: forking, Cores: 1, State: "in-service", InService: true, ReadySince: ready},
		// The same busy group allotted two cores uses half of them.
		{Group: "api", Name: "api-001", PGID: busy, Cores: 2, State: "in-service", InService: true, ReadySince: ready},
		{Group: "api", Name: "api-002", PGID: 0, Cores: 1, State: "starting"},
	}
	c := newTestCollector(t, filepath.Join(t.TempDir(), "metrics.db"), []string{"web", "api"}, func() []Target { return targets })
	defer c.Close()
	ctx := context.Background()

	time.Sleep(200 * time.Millisecond) // let the children start
	// The reference: the busy child's time on a CPU from the scheduler's own
	// nanosecond counter, read at the same moments as the samples. On an
	// idle machine both read about 100 %; a shared one gives the loop less.
	loop := childOf(t, busy)
	run0, at0 := runtimeNS(t, loop), time.Now()
	c.Sample(ctx, at0)
	time.Sleep(2 * time.Second)
	run1, at1 := runtimeNS(t, loop), time.Now()
	c.Sample(ctx, at1)
	want := float64(run1-run0) / float64(at1.Sub(at0)) * 100

	latest := func(path string) float64 {
		t.Helper()
		c.mu.RLock()
		defer c.mu.RUnlock()
		v, ok := c.ring.latest(path)
		if !ok {
			t.Fatalf("no value for %s", path)
		}
		return v
	}
	cpuBusy, cpuIdle, cpuFork, cpuHalf := latest("web/web-001/cpu"), latest("web/web-002/cpu"), latest("web/web-003/cpu"), latest("api/api-001/cpu")
	t.Logf("busy %.1f%% (scheduler: %.1f%%), forking %.1f%%, idle %.1f%%, busy on 2 cores %.1f%%", cpuBusy, want, cpuFork, cpuIdle, cpuHalf)
	// /proc counts in 10 ms ticks: 2 ticks over 2 s is 1 %.
	if cpuBusy < want-5 || cpuBusy > want+5 || cpuBusy < 5 || cpuBusy > 105 {
		t.Errorf("busy group: %.1f%% of a core, want %.1f%% (≈100%% on an idle machine)", cpuBusy, want)
	}
	// Without the reaped children's time this would read near 0; with it,
	// about what the machine gives the busy loop, less each fork and exec's
	// wait, which grows with the machine's load (beside make test's other
	// tests: 10.5 % against the loop's 33.9 %).
	if cpuFork < cpuBusy/5 || cpuFork < 3 || cpuFork > 105 {
		t.Errorf("forking group: %.1f%% of a core, want as much as the machine gives a busy loop", cpuFork)
	}
	if cpuIdle > 3 {
		t.Errorf("idle group: %.1f%%, want about 0", cpuIdle)
	}
	if d := cpuHalf - cpuBusy/2; d < -5 || d > 5 {
		t.Errorf("busy group on 2 cores: %.1f%%, want half of %.1f%%", cpuHalf, cpuBusy)
	}
	if rss := latest("web/web-001/rss_bytes"); rss < 100<<10 {
		t.Errorf("busy group RSS %v bytes, want a shell's and its child's", rss)
	}
	if v := latest("web/ready"); v != 3 {
		t.Errorf("web ready = %v", v)
	}
	if v := latest("api/size"); v != 2 {
		t.Errorf("api size = %v", v)
	}
	// The starting instance is reported but not aggregated: api's CPU is the
	// busy one's alone.
	if v := latest("api/cpu.max"); v != cpuHalf {
		t.Errorf("api cpu.max = %v, want %v", v, cpuHalf)
	}
	if v := latest("web/cpu.min"); v != cpuIdle {
		t.Errorf("web cpu.min = %v, want the idle %v", v, cpuIdle)
	}

	doc, err := c.Document(ctx, "web", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	if doc.Ready != 3 || doc.CPU.Max == nil || *doc.CPU.Max < cpuBusy-1e-9 && *doc.CPU.Max < cpuFork-1e-9 {
		t.Errorf("document: ready %d cpu.max %v", doc.Ready, deref(doc.CPU.Max))
	}

	// An instance whose processes are gone has no CPU or memory any more.
	syscall.Kill(-idle, syscall.SIGKILL)
	time.Sleep(100 * time.Millisecond) // a zombie until the cleanup reaps it
	c.Sample(ctx, time.Now())
	c.mu.RLock()
	_, ok := c.ring.latest("web/web-002/rss_bytes")
	c.mu.RUnlock()
	if ok {
		t.Error("a killed group still has an RSS")
	}
}

// childOf returns the only child of pid.
func childOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) != 1 {
		t.Fatalf("children of %d: %q", pid, b)
	}
	child, err := strconv.Atoi(f[0])
	if err != nil {
		t.Fatal(err)
	}
	return child
}

// runtimeNS is the nanoseconds pid has run on a CPU (/proc/PID/schedstat).
func runtimeNS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		t.Fatal(err)
	}
	ns, err := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// TestRun runs the sampling loop at a short interval against a real process
// and an HAProxy socket that does not answer: samples keep coming without
// HAProxy's rates, and stopping writes the unfinished buckets.
func TestRun(t *testing.T) {
	pid := startGroup(t, "sleep", "300")
	m := config.DefaultMetrics
	m.Interval = 100 * time.Millisecond
	path := filepath.Join(t.TempDir(), "metrics.db")
	targets := []Target{{Group: "web", Name: "web-001", PGID: pid, Cores: 1, State: "in-service", InService: true,
		ReadySince: time.Now(), Backend: "web", Server: "web-001"}}
	c, err := Open(Options{Metrics: m, Source: &source{[]string{"web"}, func() []Target { return targets }},
		HAProxy: &haproxy.Client{Socket: filepath.Join(t.TempDir(), "none.sock")}, DB: path})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	// Readers and the access log run concurrently with sampling.
	for time.Since(start) < 550*time.Millisecond {
		c.ObserveLatency("web", 5*time.Millisecond, 4*time.Millisecond, 1)
		if _, err := c.Document(ctx, "web", time.Minute, ""); err != nil {
			t.Error(err)
		}
		c.Points("web/latency_ms.p99", start, time.Now())
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if pts := c.Points("web/web-001/cpu", start, time.Now()); len(pts) < 2 {
		t.Errorf("cpu samples after 0.55 s at 100 ms: %d", len(pts))
	}
	if pts := c.Points("web/latency_ms.p99", start, time.Now()); len(pts) < 2 || pts[len(pts)-1].V != 5 {
		t.Errorf("latency p99 samples: %v", pts)
	}
	if pts := c.Points("web/requests_per_second", start, time.Now()); len(pts) != 0 {
		t.Errorf("requests/s without HAProxy: %v", pts)
	}
	// Warming up: reported, not aggregated.
	if pts := c.Points("web/cpu.avg", start, time.Now()); len(pts) != 0 {
		t.Errorf("cpu.avg while the only instance warms up: %v", pts)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c, err = Open(Options{Metrics: m, Source: &source{[]string{"web"}, func() []Target { return nil }}, DB: path})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if pts := c.Points("web/size", start.Add(-time.Minute), time.Now()); len(pts) == 0 || pts[0].V != 1 {
		t.Errorf("size after a restart: %v", pts)
	}
}
