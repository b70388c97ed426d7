package main

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/loadgen"
)

// TestBenchConfigsParse checks that every config the autoscaling benchmarks
// render is one shoal accepts, with the policy meant: a typo in a rendered
// policy would otherwise only show after minutes of a benchmark run.
func TestBenchConfigsParse(t *testing.T) {
	dir := t.TempDir()
	backend := "/usr/local/bin/demo-backend"
	configs := map[string]string{
		"reaction":   reactionConfig(18080, filepath.Join(dir, "r"), backend, 40, 2*time.Second),
		"collection": collectionConfig(18081, filepath.Join(dir, "c"), backend, 2, time.Second),
	}
	for _, p := range overloadPolicies {
		configs["overload-"+p.Name] = p.config(18082, filepath.Join(dir, p.Name), backend, 4)
	}
	for name, text := range configs {
		cfg, err := config.Parse(filepath.Join(dir, name+".yaml"), []byte(text))
		if err != nil {
			t.Errorf("%s: %v\n%s", name, err, text)
			continue
		}
		g := cfg.Groups[0]
		if g.Template.Env["GOMAXPROCS"] != "1" {
			t.Errorf("%s: instances not held to one core: env %v", name, g.Template.Env)
		}
		switch {
		case name == "collection":
			if len(cfg.Groups) != 2 || g.MinSize != 0 || g.MaxSize != groupCap || g.Autoscale != nil {
				t.Errorf("collection: %d groups, first %d..%d, autoscale %v", len(cfg.Groups), g.MinSize, g.MaxSize, g.Autoscale)
			}
		case g.Autoscale == nil:
			t.Errorf("%s: no autoscale policy", name)
		}
	}
	cfg, _ := config.Parse(filepath.Join(dir, "x.yaml"), []byte(configs["overload-seed-004"]))
	if cfg != nil {
		rules := cfg.Groups[0].Autoscale.Rules
		if len(rules) != 2 || rules[0].Above != 75 || rules[0].Statistic != "average" || rules[0].Over != time.Minute ||
			rules[1].Below != 35 || rules[1].Over != 25*time.Minute || rules[1].Cooldown != 1500*time.Second ||
			cfg.Groups[0].Cooldown.Up != 300*time.Second || cfg.Metrics.Interval != time.Minute {
			t.Errorf("seed-004 policy is not the seed's: %+v, metrics every %v", rules, cfg.Metrics.Interval)
		}
	}
}

// TestDemoConfig checks the demo's own config: an autoscale policy on a
// group whose instances each get one core.
func TestDemoConfig(t *testing.T) {
	cfg, err := config.Load("../../examples/demo/shoal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.Groups[0]
	if g.Autoscale == nil || g.Autoscale.Target == nil || g.Template.Env["GOMAXPROCS"] != "1" {
		t.Errorf("demo group %s: autoscale %+v, env %v", g.Name, g.Autoscale, g.Template.Env)
	}
	steps, err := loadgen.ParseSteps(demoSteps)
	if err != nil {
		t.Fatal(err)
	}
	var total time.Duration
	for _, s := range steps {
		total += s.Duration
	}
	if total > 160*time.Second {
		t.Errorf("demo load lasts %v; with start and scale-in it must fit in ~3 minutes", total)
	}
}

func TestStepSchedule(t *testing.T) {
	segs := stepSchedule(35, 10*time.Minute)
	want := []loadgen.Segment{{Rate: 35, Duration: 2 * time.Minute}, {Rate: 105, Duration: 5 * time.Minute}, {Rate: 35, Duration: 3 * time.Minute}}
	if len(segs) != 3 || segs[0] != want[0] || segs[1] != want[1] || segs[2] != want[2] {
		t.Errorf("stepSchedule(35, 10m) = %+v, want %+v", segs, want)
	}
	if got := describeSchedule(segs); !strings.Contains(got, "105 req/s for 5m0s") {
		t.Errorf("describeSchedule = %q", got)
	}
}

func TestOverloaded(t *testing.T) {
	slo := 100 * time.Millisecond
	ok := loadgen.Second{Scheduled: 10, Sent: 10, Completed: 10, P99: 99 * time.Millisecond}
	for name, tc := range map[string]struct {
		s    loadgen.Second
		want bool
	}{
		"within":    {ok, false},
		"slow":      {loadgen.Second{Scheduled: 10, Sent: 10, Completed: 10, P99: 101 * time.Millisecond}, true},
		"error":     {loadgen.Second{Scheduled: 10, Sent: 10, Completed: 9, Errors: 1, P99: time.Millisecond}, true},
		"late":      {loadgen.Second{Scheduled: 10, Sent: 9, Completed: 9, Late: 1, P99: time.Millisecond}, true},
		"cut short": {loadgen.Second{Scheduled: 10, Sent: 10, Completed: 8, P99: time.Millisecond}, true},
	} {
		if got := overloaded(tc.s, slo); got != tc.want {
			t.Errorf("%s: overloaded = %v, want %v", name, got, tc.want)
		}
	}
}

func TestDescribeEvent(t *testing.T) {
	e := Event{Time: time.Date(2026, 11, 23, 10, 0, 5, 0, time.Local), Rule: "target", Current: 2, Recommendation: 3,
		Values: map[string]float64{"cpu.avg": 44.44, "ready": 2, "size": 2}, Outcome: "accepted", JobID: "j7"}
	if got := describe(e); got != "10:00:05 target 2→3 cpu.avg=44.4: job j7" {
		t.Errorf("describe = %q", got)
	}
	e.JobID, e.Outcome, e.Code = "", "nothing", "cooldown"
	if got := describe(e); !strings.HasSuffix(got, ": nothing (cooldown)") {
		t.Errorf("describe = %q", got)
	}
}

func TestAutoscaleUsage(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	for _, args := range [][]string{
		{"reaction", "-runs", "0"},
		{"reaction", "-rate", "10", "-work-ms", "1", "-threshold", "50"}, // step below the threshold
		{"collection", "-sizes", "200,20"},
		{"collection", "-sizes", "x"},
		{"overload", "-policies", "hpa"},
		{"overload", "-minutes", "0"},
		{"demo", "-steps", "fast"},
	} {
		if err := run(context.Background(), args, io.Discard, io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("run %q = %v, want a usage error", args, err)
		}
	}
}
