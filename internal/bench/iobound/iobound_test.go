package iobound

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/loadgen"
)

// Every config the benchmark renders is one shoal accepts, with the policy
// and limits meant: a typo would otherwise show only minutes into a run.
func TestConfigs(t *testing.T) {
	dir := t.TempDir()
	s := settings{workers: 8, maxSize: 6}
	for _, name := range []string{"concurrency", "cpu"} {
		p, ok := policyNamed(name, s.workers)
		if !ok {
			t.Fatalf("no policy %q", name)
		}
		cfg, err := config.Parse(filepath.Join(dir, name+".yaml"), []byte(p.config(18082, filepath.Join(dir, name), "/usr/local/bin/demo-backend", s)))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		g := cfg.Groups[0]
		want := map[string]string{"concurrency": "concurrency", "cpu": "cpu.avg"}[name]
		if g.Autoscale == nil || g.Autoscale.Target == nil || g.Autoscale.Target.Metric != want || g.MaxSize != 6 {
			t.Errorf("%s: autoscale %+v, max_size %d", name, g.Autoscale, g.MaxSize)
		}
		if name == "concurrency" && g.Autoscale.Target.Value != 5.6 {
			t.Errorf("concurrency target %v, want 0.7 × 8", g.Autoscale.Target.Value)
		}
		if cmd := g.Template.Command; len(cmd) < 2 || cmd[len(cmd)-2] != "--workers" || cmd[len(cmd)-1] != "8" {
			t.Errorf("%s: command %q lacks --workers 8", name, cmd)
		}
	}
	for _, maxConn := range []int{4, 0} {
		cfg, err := config.Parse(filepath.Join(dir, "burst.yaml"), []byte(burstConfig(18083, filepath.Join(dir, "b"), "/usr/local/bin/demo-backend", maxConn)))
		if err != nil {
			t.Fatalf("burst max_conn %d: %v", maxConn, err)
		}
		g := cfg.Groups[0]
		if (maxConn == 0) != (g.Limits == nil) || (g.Limits != nil && g.Limits.MaxConn != maxConn) {
			t.Errorf("burst max_conn %d: limits %+v", maxConn, g.Limits)
		}
		if !cfg.AccessLog.Enabled || cfg.AccessLog.Sample != 1 || cfg.AccessLog.Adaptive {
			t.Errorf("burst: access log %+v, want every request", cfg.AccessLog)
		}
	}
}

func TestStepSchedule(t *testing.T) {
	got := stepSchedule(20, 3*time.Minute)
	want := []loadgen.Segment{{Rate: 20, Duration: 36 * time.Second}, {Rate: 80, Duration: 90 * time.Second}, {Rate: 20, Duration: 54 * time.Second}}
	if len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("stepSchedule = %+v, want %+v", got, want)
	}
}

// readLog reads the timers of access.log's lines (docs/routing.md's
// format) from an offset, and skips HAProxy's own messages.
func TestReadLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	old := "1795425510.900 127.0.0.1:53350 web web-001 200 0 0 3 4 192 0 ---- 25 GET /old\n"
	text := old + "1795425510.977 127.0.0.1:53352 web web-002 200 12 0 3 16 192 0 ---- 1 GET /work?ms=5&wait=20\n" +
		"Proxy web stopped (cumulated conns: FE: 0, BE: 0).\n" +
		"1795425511.001 127.0.0.1:53353 web <NOSRV> 503 -1 -1 -1 60001 217 0 sQ-- 1 GET /work?ms=5\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := readLog(path, int64(len(old)))
	if err != nil {
		t.Fatal(err)
	}
	want := []logEntry{{backend: "web", uri: "/work?ms=5&wait=20", tw: 12, tr: 3, ta: 16}, {backend: "web", uri: "/work?ms=5", tw: -1, tr: -1, ta: 60001}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("readLog = %+v, want %+v", got, want)
	}
	if got, err := readLog(filepath.Join(t.TempDir(), "none"), 0); err != nil || got != nil {
		t.Errorf("a log not written yet: %v, %v", got, err)
	}
}
