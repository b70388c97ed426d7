package metrics

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy"
)

// BenchmarkCollect measures the collector's own CPU per sample with N real
// idle instances (sleep processes, each in its process group) registered as
// servers of a real HAProxy: the /proc scan, one "show stat" and its parsing,
// the aggregates, the ring and, every 10th sample, the SQLite flush. At a 1 s
// interval the CPU per sample is the share of one core it costs, reported
// as %core@1s. The goals are < 2 % at 20 instances and < 10 % at 200.
//
//	go test -run '^$' -bench Collect -benchtime 100x ./internal/metrics/
func BenchmarkCollect(b *testing.B) {
	for _, n := range []int{20, 200} {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) { benchmarkCollect(b, n) })
	}
}

func benchmarkCollect(b *testing.B, n int) {
	m, _ := startHAProxy(b)
	ctx := context.Background()
	port := startHTTP(b)
	// Checks far apart: HAProxy's checking is not the collector's cost.
	health := config.Health{Path: "/healthz", Interval: time.Minute, Timeout: time.Second, Rise: 1, Fall: 1}
	ready := time.Now().Add(-time.Hour)
	var targets []Target
	for i := range n {
		name := fmt.Sprintf("web-%03d", i+1)
		if err := m.AddServer(ctx, haproxy.Server{Backend: "web", Name: name, Addr: loopback(port), Health: health}, true); err != nil {
			b.Fatal(err)
		}
		targets = append(targets, Target{Group: "web", Name: name, PGID: startGroup(b, "sleep", "600"), Cores: 1,
			State: "in-service", InService: true, ReadySince: ready, Backend: "web", Server: name})
	}
	c, err := Open(Options{Metrics: config.DefaultMetrics, Source: &source{[]string{"web"}, func() []Target { return targets }},
		HAProxy: m.Client(), DB: filepath.Join(b.TempDir(), "metrics.db")})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	now := time.Now()
	c.Sample(ctx, now) // baselines

	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	b.ResetTimer()
	for range b.N {
		now = now.Add(time.Second)
		c.Sample(ctx, now)
	}
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) / time.Duration(b.N)
	b.ReportMetric(float64(cpu)/float64(time.Second)*100, "%core@1s")
	b.ReportMetric(float64(cpu.Microseconds()), "cpu-µs/sample")
	if v, ok := c.ring.latest("web/size"); !ok || int(v) != n {
		b.Fatalf("size = %v, want %d", v, n)
	}
	if v, ok := c.ring.latest(InstancePath("web", targets[n-1].Name, "rss_bytes")); !ok || v <= 0 {
		b.Fatalf("no RSS for %s", targets[n-1].Name)
	}
}
