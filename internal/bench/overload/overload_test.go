package overload

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/loadgen"
)

// TestOverloadConfigs checks that every config the benchmark renders is one
// shoal accepts, with the policy meant: a typo in a rendered policy would
// otherwise only show after minutes of a benchmark run.
func TestOverloadConfigs(t *testing.T) {
	dir := t.TempDir()
	configs := map[string]string{}
	for _, p := range overloadPolicies {
		configs[p.Name] = p.config(18082, filepath.Join(dir, p.Name), "/usr/local/bin/demo-backend", 4)
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
		if g.Autoscale == nil {
			t.Errorf("%s: no autoscale policy", name)
		}
	}
	cfg, _ := config.Parse(filepath.Join(dir, "x.yaml"), []byte(configs["seed-004"]))
	if cfg != nil {
		rules := cfg.Groups[0].Autoscale.Rules
		if len(rules) != 2 || rules[0].Above != 75 || rules[0].Statistic != "average" || rules[0].Over != time.Minute ||
			rules[1].Below != 35 || rules[1].Over != 25*time.Minute || rules[1].Cooldown != 1500*time.Second ||
			cfg.Groups[0].Cooldown.Up != 300*time.Second || cfg.Metrics.Interval != time.Minute {
			t.Errorf("seed-004 policy is not the seed's: %+v, metrics every %v", rules, cfg.Metrics.Interval)
		}
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
