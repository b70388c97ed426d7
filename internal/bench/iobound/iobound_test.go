package iobound

import (
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
