package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

const metricsGroups = `groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
`

func TestParseMetrics(t *testing.T) {
	doc := `listen: :8080
metrics:
  interval: 500ms
  warmup: 10s
  retention: {ring: 30m, 10s: 0, 1m: 168h}
groups:
  - {name: web, min_size: 1, max_size: 2, template: {command: [app], cpus: 4}}
  - {name: api, min_size: 1, max_size: 2, hosts: [api], template: {command: [app], cpus: 0.25}}
  - {name: bg, min_size: 1, max_size: 2, hosts: [bg], template: {command: [app]}}
`
	cfg, err := Parse("shoal.yaml", []byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := Metrics{Interval: 500 * time.Millisecond, Warmup: 10 * time.Second, Retention: Retention{Ring: 30 * time.Minute, Ten: 0, Minute: 168 * time.Hour, Hour: 720 * time.Hour, Instances: 12 * time.Hour}}
	if !reflect.DeepEqual(cfg.Metrics, want) {
		t.Errorf("Metrics = %+v, want %+v", cfg.Metrics, want)
	}
	for i, cpus := range []float64{4, 0.25, 1} {
		if got := cfg.Groups[i].Template.CPUs; got != cpus {
			t.Errorf("groups[%d].template.cpus = %v, want %v", i, got, cpus)
		}
	}

	cfg, err = Parse("shoal.yaml", []byte("listen: :8080\n"+metricsGroups))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if !reflect.DeepEqual(cfg.Metrics, DefaultMetrics) {
		t.Errorf("default Metrics = %+v, want %+v", cfg.Metrics, DefaultMetrics)
	}
}

func TestParseMetricsErrors(t *testing.T) {
	tests := []struct {
		doc  string
		want string
	}{
		{"metrics: {interval: 10ms}\n", `shoal.yaml:2:21: metrics.interval: must be from 100ms to 1m0s, got 10ms`},
		{"metrics: {interval: 2m}\n", `shoal.yaml:2:21: metrics.interval: must be from 100ms to 1m0s, got 2m0s`},
		{"metrics: {interval: fast}\n", `shoal.yaml:2:21: metrics.interval: must be a duration such as "30s" or "3m", or a whole number of seconds; got "fast"`},
		{"metrics: {warmup: -1s}\n", `shoal.yaml:2:19: metrics.warmup: must not be negative, got -1s`},
		{"metrics: {intervall: 1s}\n", `shoal.yaml:2:11: metrics.intervall: unknown field; allowed: interval, warmup, retention, listen, sources`},
		{"metrics: [1s]\n", `shoal.yaml:2:10: metrics: must be a mapping, got a list`},
		{"metrics: {interval: 2s, retention: {ring: 1s}}\n", `shoal.yaml:2:43: metrics.retention.ring: must be at least metrics.interval (2s), got 1s`},
		{"metrics: {interval: 100ms, retention: {ring: 24h}}\n", `shoal.yaml:2:46: metrics.retention.ring: must hold at most 100000 intervals of 100ms, got 24h0m0s`},
		{"metrics: {retention: {10s: 5s}}\n", `shoal.yaml:2:28: metrics.retention.10s: must be 0 (keep none) or at least 10s, got 5s`},
		{"metrics: {retention: {1h: 30m}}\n", `shoal.yaml:2:27: metrics.retention.1h: must be 0 (keep none) or at least 1h0m0s, got 30m0s`},
		{"metrics: {retention: {1m: 24h, instances: 48h}}\n", `shoal.yaml:2:43: metrics.retention.instances: must be at most metrics.retention.1m (24h0m0s): instances' history is kept at 1 m resolution, got 48h0m0s`},
		{"metrics: {retention: {instances: 30s}}\n", `shoal.yaml:2:34: metrics.retention.instances: must be 0 (keep none) or at least 1m0s, got 30s`},
		{"metrics: {retention: {5m: 1h}}\n", `shoal.yaml:2:23: metrics.retention.5m: unknown field; allowed: ring, 10s, 1m, 1h, instances`},
	}
	for _, tt := range tests {
		_, err := Parse("shoal.yaml", []byte("listen: :8080\n"+tt.doc+metricsGroups))
		if err == nil || err.Error() != tt.want {
			t.Errorf("%q:\n got: %v\nwant: %s", tt.doc, err, tt.want)
		}
	}

	cpus := []struct{ val, want string }{
		{"0", "must be greater than 0 and at most 1024, got 0"},
		{"-2", "must be greater than 0 and at most 1024, got -2"},
		{".nan", "must be greater than 0 and at most 1024, got .nan"},
		{".inf", "must be greater than 0 and at most 1024, got .inf"},
		{"2048", "must be greater than 0 and at most 1024, got 2048"},
		{"two", `must be a number of cores such as 1 or 0.5, got "two"`},
		{"[1]", "must be a number of cores such as 1 or 0.5, got a list"},
	}
	for _, tt := range cpus {
		doc := "listen: :8080\ngroups: [{name: web, min_size: 1, max_size: 2, template: {command: [app], cpus: " + tt.val + "}}]\n"
		want := "shoal.yaml:2:81: groups[0].template.cpus: " + tt.want
		if _, err := Parse("shoal.yaml", []byte(doc)); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("cpus: %s:\n got: %v\nwant: %s", tt.val, err, want)
		}
	}
}
