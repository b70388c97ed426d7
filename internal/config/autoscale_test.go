package config

import (
	"errors"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// autoscaleDoc puts body (lines indented by six spaces) under a group's
// autoscale key; the body starts on line 9.
func autoscaleDoc(body string) string {
	return `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 5
    plans: {small: 1, medium: 3, large: 5}
    template: {command: [app]}
    autoscale:
` + body
}

func TestAutoscaleErrors(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{
			name: "unknown metric path",
			body: `      rules: [{metric: cpu.p50, above: 50, for: 1m, action: up}]
`,
			want: `shoal.yaml:9:24: groups[0].autoscale.rules[0].metric: unknown metric "cpu.p50"; known: cpu.avg, cpu.min, cpu.max, cpu.p75, cpu.p90, cpu.p95, cpu.p99, latency_ms.p50, latency_ms.p90, latency_ms.p99, requests_per_second, requests_per_second_per_instance, errors_per_second, connection_errors_per_second, retries_per_second, queue, sessions, ready, size, concurrency, queue_max, queue_time_ms`,
		},
		{
			name: "a band upside down",
			body: `      rules:
        - metric: cpu.avg
          above: 50
          below: 20
          for: 1m
          action: up
`,
			want: `shoal.yaml:12:18: groups[0].autoscale.rules[0].below: must be greater than above (50) for a band between them, got 20`,
		},
		{
			name: "neither above nor below",
			body: `      rules: [{metric: cpu.avg, for: 1m, action: up}]
`,
			want: `shoal.yaml:9:15: groups[0].autoscale.rules[0]: needs above or below: the threshold (both: a band the value must be inside)`,
		},
		{
			name: "neither for nor statistic",
			body: `      rules: [{metric: cpu.avg, above: 50, action: up}]
`,
			want: `shoal.yaml:9:15: groups[0].autoscale.rules[0]: needs for (every sample of the window beyond the threshold) or statistic and over (the window's aggregate)`,
		},
		{
			name: "for and over",
			body: `      rules: [{metric: cpu.avg, above: 50, for: 1m, statistic: average, over: 5m, action: up}]
`,
			want: `shoal.yaml:9:64: groups[0].autoscale.rules[0].statistic: conflicts with for: a rule compares every sample (for) or the window's statistic (statistic and over), not both`,
		},
		{
			name: "statistic without over",
			body: `      rules: [{metric: cpu.avg, above: 50, statistic: average, action: up}]
`,
			want: `shoal.yaml:9:55: groups[0].autoscale.rules[0].over: required with statistic: the window the statistic is taken over`,
		},
		{
			name: "over without statistic",
			body: `      rules: [{metric: cpu.avg, above: 50, over: 5m, action: up}]
`,
			want: `shoal.yaml:9:50: groups[0].autoscale.rules[0].statistic: required with over: average, min, max or a percentile such as p90`,
		},
		{
			name: "unknown statistic",
			body: `      rules: [{metric: cpu.avg, above: 50, statistic: mean, over: 5m, action: up}]
`,
			want: `shoal.yaml:9:55: groups[0].autoscale.rules[0].statistic: must be average, min, max or a percentile such as p90 (p followed by more than 0, less than 100), got "mean"`,
		},
		{
			name: "percentile out of range",
			body: `      rules: [{metric: cpu.avg, above: 50, statistic: p100, over: 5m, action: up}]
`,
			want: `shoal.yaml:9:55: groups[0].autoscale.rules[0].statistic: must be average, min, max or a percentile such as p90 (p followed by more than 0, less than 100), got "p100"`,
		},
		{
			name: "over shorter than the interval",
			body: `      interval: 5s
      rules: [{metric: cpu.avg, above: 50, statistic: max, over: 2s, action: up}]
`,
			want: `shoal.yaml:10:66: groups[0].autoscale.rules[0].over: must be at least the autoscale interval (5s), got 2s`,
		},
		{
			name: "threshold not a number",
			body: `      rules: [{metric: cpu.avg, above: high, for: 1m, action: up}]
`,
			want: `shoal.yaml:9:40: groups[0].autoscale.rules[0].above: must be a number, got "high"`,
		},
		{
			name: "for shorter than the interval",
			body: `      interval: 5s
      rules: [{metric: cpu.avg, above: 50, for: 2s, action: up}]
`,
			want: `shoal.yaml:10:49: groups[0].autoscale.rules[0].for: must be at least the autoscale interval (5s), got 2s`,
		},
		{
			name: "for shorter than the metrics interval",
			body: `      rules: [{metric: cpu.avg, above: 50, for: 1s, action: up}]
metrics: {interval: 2s}
`,
			want: `shoal.yaml:9:49: groups[0].autoscale.rules[0].for: must be at least metrics.interval (2s), got 1s`,
		},
		{
			// History older than metrics.retention is gone: such a window
			// is never covered, and the rule would never hold.
			name: "over longer than the history kept",
			body: `      rules: [{metric: cpu.avg, below: 20, statistic: average, over: 800h, action: down}]
`,
			want: `shoal.yaml:9:70: groups[0].autoscale.rules[0].over: must be at most the metrics history kept (720h0m0s, the longest of metrics.retention), got 800h0m0s`,
		},
		{
			name: "for longer than a shortened history",
			body: `      rules: [{metric: cpu.avg, above: 50, for: 2h, action: up}]
metrics: {retention: {10s: 0, 1m: 0, 1h: 0}}
`,
			want: `shoal.yaml:9:49: groups[0].autoscale.rules[0].for: must be at most the metrics history kept (1h0m0s, the longest of metrics.retention), got 2h0m0s`,
		},
		{
			// Such a window is never covered: the target would never scale in.
			name: "stabilization longer than the history kept",
			body: `      target: {metric: cpu.avg, value: 50, scale_in_stabilization: 800h}
`,
			want: `shoal.yaml:9:68: groups[0].autoscale.target.scale_in_stabilization: must be at most the metrics history kept (720h0m0s, the longest of metrics.retention), got 800h0m0s`,
		},
		{
			name: "start delay longer than a trend says anything about",
			body: `      target: {metric: cpu.avg, value: 50, start_delay: 2h}
`,
			want: `shoal.yaml:9:57: groups[0].autoscale.target.start_delay: must be from 0s to 1h0m0s, got 2h0m0s`,
		},
		{
			name: "start delay neither auto nor a duration",
			body: `      target: {metric: cpu.avg, value: 50, start_delay: soon}
`,
			want: `shoal.yaml:9:57: groups[0].autoscale.target.start_delay: must be a duration such as "30s" or "3m", or a whole number of seconds; got "soon"`,
		},
		{
			name: "interval too long",
			body: `      interval: 2h
      rules: [{metric: cpu.avg, above: 50, for: 3h, action: up}]
`,
			want: `shoal.yaml:9:17: groups[0].autoscale.interval: must be at least 100ms and at most 1h0m0s, got 2h0m0s`,
		},
		{
			name: "unknown plan in an action",
			body: `      rules: [{metric: cpu.avg, above: 50, for: 1m, action: {plan: huge}}]
`,
			want: `shoal.yaml:9:68: groups[0].autoscale.rules[0].action.plan: unknown plan "huge" (plans: small, medium, large)`,
		},
		{
			name: "unknown action",
			body: `      rules: [{metric: cpu.avg, above: 50, for: 1m, action: double}]
`,
			want: `shoal.yaml:9:61: groups[0].autoscale.rules[0].action: must be up, down, or one of {add: N}, {remove: N}, {plan: NAME}, {size: N}, {percent: P}, got "double"`,
		},
		{
			name: "add zero",
			body: `      rules: [{metric: cpu.avg, above: 50, for: 1m, action: {add: 0}}]
`,
			want: `shoal.yaml:9:67: groups[0].autoscale.rules[0].action.add: must be from 1 to 1000 (the largest max_size), got 0`,
		},
		{
			name: "size outside the group",
			body: `      rules: [{metric: cpu.avg, above: 50, for: 1m, action: {size: 9}}]
`,
			want: `shoal.yaml:9:68: groups[0].autoscale.rules[0].action.size: must be within min_size..max_size (1..5), got 9`,
		},
		{
			name: "percent zero",
			body: `      rules: [{metric: cpu.avg, above: 50, for: 1m, action: {percent: 0}}]
`,
			want: `shoal.yaml:9:71: groups[0].autoscale.rules[0].action.percent: must be a non-zero percentage from -100 to 100000, got 0`,
		},
		{
			name: "bad on_missing",
			body: `      rules: [{metric: cpu.avg, above: 50, for: 1m, action: up, on_missing: down}]
`,
			want: `shoal.yaml:9:77: groups[0].autoscale.rules[0].on_missing: must be keep or up, got "down"`,
		},
		{
			name: "duplicate rule names",
			body: `      rules:
        - {name: hot, metric: cpu.avg, above: 50, for: 1m, action: up}
        - {name: hot, metric: cpu.avg, below: 20, for: 1m, action: down}
`,
			want: `shoal.yaml:11:18: groups[0].autoscale.rules[1].name: duplicate rule name "hot" (first at line 10)`,
		},
		{
			// A decision, its job's source (policy:NAME) and a rule's
			// cooldown name what made it: a schedule or the target under a
			// rule's name would hold that rule in its cooldown.
			name: "a rule named as a schedule",
			body: `      rules:
        - {name: busy, metric: cpu.avg, above: 90, for: 1m, action: up, cooldown: 600s}
      schedule:
        - {name: busy, cron: "0 8 * * *", duration: 1h, min_size: 2}
`,
			want: `shoal.yaml:12:18: groups[0].autoscale.schedule[0].name: duplicate name "busy" (a rule's, at line 10): rules and schedules need names of their own`,
		},
		{
			name: "a rule named target",
			body: `      rules:
        - {name: target, metric: cpu.avg, above: 90, for: 1m, action: up}
`,
			want: `shoal.yaml:10:18: groups[0].autoscale.rules[0].name: "target" names the target in decisions; choose another name`,
		},
		{
			name: "a schedule named predictive",
			body: `      schedule:
        - {name: predictive, cron: "0 8 * * *", duration: 1h, min_size: 2}
`,
			want: `shoal.yaml:10:18: groups[0].autoscale.schedule[0].name: "predictive" names the predictive floor in decisions; choose another name`,
		},
		{
			name: "a rule named as a schedule's default name",
			body: `      rules:
        - {name: schedule-1, metric: cpu.avg, above: 90, for: 1m, action: up}
      schedule:
        - {cron: "0 8 * * *", duration: 1h, min_size: 2}
`,
			want: `shoal.yaml:12:11: groups[0].autoscale.schedule[0]: duplicate name "schedule-1" (a rule's, at line 10): rules and schedules need names of their own`,
		},
		{
			name: "target zero",
			body: `      target: {metric: cpu.avg, value: 0}
`,
			want: `shoal.yaml:9:40: groups[0].autoscale.target.value: must be > 0, got 0`,
		},
		{
			name: "target negative",
			body: `      target: {metric: cpu.avg, value: -5}
`,
			want: `shoal.yaml:9:40: groups[0].autoscale.target.value: must be > 0, got -5`,
		},
		{
			name: "target on the size",
			body: `      target: {metric: ready, value: 3}
`,
			want: `shoal.yaml:9:24: groups[0].autoscale.target.metric: ready counts instances; a target needs a load metric`,
		},
		{
			name: "tolerance of one",
			body: `      target: {metric: cpu.avg, value: 50, tolerance: 1}
`,
			want: `shoal.yaml:9:55: groups[0].autoscale.target.tolerance: must be from 0 to below 1 (a fraction of value), got 1`,
		},
		{
			name: "bad max_step",
			body: `      target: {metric: cpu.avg, value: 50, max_step: {up: lots}}
`,
			want: `shoal.yaml:9:59: groups[0].autoscale.target.max_step.up: must be a number of instances (1 to 1000) or a percentage such as "100%" (above 0 to 100000%), got "lots"`,
		},
		// Sizes that overflow n+N wrapped a scale-up into a scale-in to min_size.
		{
			name: "add overflowing the size",
			body: `      rules: [{metric: cpu.avg, above: 50, for: 1m, action: {add: 9223372036854775807}}]
`,
			want: `shoal.yaml:9:67: groups[0].autoscale.rules[0].action.add: must be from 1 to 1000 (the largest max_size), got 9223372036854775807`,
		},
		{
			name: "remove more than a group holds",
			body: `      rules: [{metric: cpu.avg, below: 5, for: 1m, action: {remove: 1001}}]
`,
			want: `shoal.yaml:9:69: groups[0].autoscale.rules[0].action.remove: must be from 1 to 1000 (the largest max_size), got 1001`,
		},
		{
			name: "percent overflowing the size",
			body: `      rules: [{metric: cpu.avg, above: 50, for: 1m, action: {percent: 1e300}}]
`,
			want: `shoal.yaml:9:71: groups[0].autoscale.rules[0].action.percent: must be a non-zero percentage from -100 to 100000, got 1e300`,
		},
		{
			name: "max_step overflowing the size",
			body: `      target: {metric: cpu.avg, value: 50, max_step: {up: "1e300%", down: 9223372036854775807}}
`,
			want: `shoal.yaml:9:59: groups[0].autoscale.target.max_step.up: must be a number of instances (1 to 1000) or a percentage such as "100%" (above 0 to 100000%), got "1e300%"
shoal.yaml:9:75: groups[0].autoscale.target.max_step.down: must be a number of instances (1 to 1000) or a percentage such as "100%" (above 0 to 100000%), got 9223372036854775807`,
		},
		{
			name: "cron with six fields",
			body: `      schedule: [{cron: "0 0 8 * * 1-5", duration: 10h, min_size: 3}]
`,
			want: `shoal.yaml:9:25: groups[0].autoscale.schedule[0].cron: has 6 fields; expected 5 (minute hour day-of-month month day-of-week): seconds are not supported`,
		},
		{
			name: "cron out of range",
			body: `      schedule: [{cron: "0 25 * * *", duration: 1h, min_size: 3}]
`,
			want: `shoal.yaml:9:25: groups[0].autoscale.schedule[0].cron: hour: 25 is out of range 0-23`,
		},
		{
			name: "unknown time zone",
			body: `      schedule: [{cron: "0 8 * * *", timezone: Europe/Atlantis, duration: 1h, min_size: 3}]
`,
			want: `shoal.yaml:9:48: groups[0].autoscale.schedule[0].timezone: unknown time zone "Europe/Atlantis"; use an IANA name such as Europe/Berlin or UTC`,
		},
		{
			name: "unknown plan in a schedule",
			body: `      schedule: [{cron: "0 8 * * *", duration: 1h, plan: huge}]
`,
			want: `shoal.yaml:9:58: groups[0].autoscale.schedule[0].plan: unknown plan "huge" (plans: small, medium, large)`,
		},
		{
			name: "schedule without bounds",
			body: `      schedule: [{cron: "0 8 * * *", duration: 1h}]
`,
			want: `shoal.yaml:9:18: groups[0].autoscale.schedule[0]: needs min_size, max_size or plan: what the schedule sets`,
		},
		{
			name: "schedule min above max",
			body: `      schedule: [{cron: "0 8 * * *", duration: 1h, min_size: 4, max_size: 2}]
`,
			want: `shoal.yaml:9:75: groups[0].autoscale.schedule[0].max_size: must be >= the schedule's minimum (4), got 2`,
		},
		{
			name: "schedule outside the group",
			body: `      schedule: [{cron: "0 8 * * *", duration: 1h, max_size: 7}]
`,
			want: `shoal.yaml:9:62: groups[0].autoscale.schedule[0].max_size: must be within the group's min_size..max_size (1..5), got 7`,
		},
		{
			name: "schedule max_size zero",
			body: `      schedule: [{cron: "0 8 * * *", duration: 1h, max_size: 0}]
`,
			want: `shoal.yaml:9:62: groups[0].autoscale.schedule[0].max_size: must be >= 1, got 0`,
		},
		{
			name: "schedule shorter than a minute",
			body: `      schedule: [{cron: "0 8 * * *", duration: 30s, max_size: 2}]
`,
			want: `shoal.yaml:9:48: groups[0].autoscale.schedule[0].duration: must be at least 1m (cron fires at most once a minute), got 30s`,
		},
		{
			name: "empty policy",
			body: `      interval: 1s
`,
			want: `shoal.yaml:9:7: groups[0].autoscale: needs rules, a target or a schedule`,
		},
		{
			name: "unknown field",
			body: `      rule: []
`,
			want: `shoal.yaml:9:7: groups[0].autoscale.rule: unknown field; allowed: interval, rules, target, schedule, predictive`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("shoal.yaml", []byte(autoscaleDoc(tt.body)))
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("Parse error = %v, want ErrorList", err)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("Parse error:\n got: %s\nwant: %s", got, tt.want)
			}
		})
	}
}

func TestAutoscaleParse(t *testing.T) {
	cfg, err := Parse("shoal.yaml", []byte(autoscaleDoc(`      interval: 2s
      rules:
        - {metric: cpu.avg, above: 75, for: 1m, action: up, cooldown: 300}
        - {name: cold, metric: cpu.avg, below: 35.5, for: 25m, action: {remove: 1}, on_missing: keep}
        - {metric: queue, above: 10, for: 5s, action: {percent: 50}, on_missing: up}
        - {name: cw, metric: cpu.avg, below: 35, statistic: average, over: 25m, action: {remove: 1}, cooldown: 1500s}
        - {name: band, metric: cpu.avg, above: 1.5, below: 19.5, statistic: p90, over: 5m, action: down}
      target: {metric: requests_per_second_per_instance, value: 200, max_step: {up: 2, down: "50%"}}
      schedule:
        - {name: morning, cron: "0 8 * * mon-fri", timezone: Europe/Berlin, duration: 10h, plan: medium}
`)))
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Groups[0].Autoscale
	if a == nil {
		t.Fatal("Autoscale is nil")
	}
	wantRules := []Rule{
		{Name: "rule-1", Metric: "cpu.avg", HasAbove: true, Above: 75, For: time.Minute, Action: Action{Kind: ActionUp}, Cooldown: 300 * time.Second, OnMissing: "keep"},
		{Name: "cold", Metric: "cpu.avg", HasBelow: true, Below: 35.5, For: 25 * time.Minute, Action: Action{Kind: ActionRemove, N: 1}, OnMissing: "keep"},
		{Name: "rule-3", Metric: "queue", HasAbove: true, Above: 10, For: 5 * time.Second, Action: Action{Kind: ActionPercent, Percent: 50}, OnMissing: "up"},
		{Name: "cw", Metric: "cpu.avg", HasBelow: true, Below: 35, Statistic: "average", Over: 25 * time.Minute, Action: Action{Kind: ActionRemove, N: 1}, Cooldown: 1500 * time.Second, OnMissing: "keep"},
		{Name: "band", Metric: "cpu.avg", HasAbove: true, Above: 1.5, HasBelow: true, Below: 19.5, Statistic: "p90", Over: 5 * time.Minute, Action: Action{Kind: ActionDown}, OnMissing: "keep"},
	}
	if !reflect.DeepEqual(a.Rules, wantRules) {
		t.Errorf("Rules =\n%+v\nwant\n%+v", a.Rules, wantRules)
	}
	if a.Interval != 2*time.Second {
		t.Errorf("Interval = %s, want 2s", a.Interval)
	}
	wantTarget := &Target{Metric: "requests_per_second_per_instance", Value: 200, Tolerance: 0.1,
		ScaleInStabilization: 300 * time.Second, MaxStep: MaxStep{Up: Step{N: 2}, Down: Step{N: 50, Percent: true}}, Period: 15 * time.Second}
	if !reflect.DeepEqual(a.Target, wantTarget) {
		t.Errorf("Target = %+v, want %+v", a.Target, wantTarget)
	}
	if len(a.Schedules) != 1 {
		t.Fatalf("Schedules = %+v", a.Schedules)
	}
	s := a.Schedules[0]
	if s.Name != "morning" || s.MinSize != 3 || s.MaxSize != 0 || s.Plan != "medium" || s.Duration != 10*time.Hour ||
		s.Cron.String() != "0 8 * * mon-fri" || s.Cron.Location().String() != "Europe/Berlin" {
		t.Errorf("Schedule = %+v", s)
	}
	if got := (Step{N: 100, Percent: true}).Of(3); got != 3 {
		t.Errorf("100%% of 3 = %d", got)
	}
	if got := (Step{N: 10, Percent: true}).Of(3); got != 1 {
		t.Errorf("10%% of 3 = %d, want at least 1", got)
	}

	// No autoscale: the group is scaled only by hand.
	cfg, err = Parse("shoal.yaml", []byte(`listen: :8080
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
`))
	if err != nil || cfg.Groups[0].Autoscale != nil {
		t.Errorf("without autoscale: %v, %+v", err, cfg)
	}
}

// TestSeedExamples checks that the seeds' policies, as the examples express
// them, are valid configuration.
func TestSeedExamples(t *testing.T) {
	for _, name := range []string{"seed-000.yaml", "seed-004.yaml"} {
		cfg, err := Load(filepath.Join("..", "..", "examples", name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		for _, g := range cfg.Groups {
			if g.Autoscale == nil || len(g.Autoscale.Rules) == 0 {
				t.Errorf("%s: group %s has no autoscale rules", name, g.Name)
			}
		}
	}
}
