package config

import (
	"strings"
	"testing"
)

const sourcesDoc = `listen: 127.0.0.1:8080
metrics:
  sources:
    - {name: queue_depth, prometheus: {url: "http://127.0.0.1:9090", query: "sum(jobs_queued)"}, on_missing: up}
    - {name: backlog, command: [/bin/echo, "3"], interval: 2s, timeout: 1s}
groups:
  - name: web
    min_size: 1
    max_size: 4
    template: {command: [app]}
    autoscale:
      target: {metric: "queue_depth / max(size, 1)", value: 10}
      rules:
        - {metric: backlog, above: 5, for: 10s, action: up}
`

func TestSourcesAndFormulas(t *testing.T) {
	cfg, err := Parse("shoal.yaml", []byte(sourcesDoc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if n := len(cfg.Metrics.Sources); n != 2 {
		t.Fatalf("sources = %d, want 2", n)
	}
	q := cfg.Metrics.Sources[0]
	if q.Kind() != "prometheus" || q.OnMissing != SourceUp || q.MaxAgeOf() != 30e9 {
		t.Errorf("queue_depth = %+v (max age %s)", q, q.MaxAgeOf())
	}
	f, err := CompileFormula("queue_depth / max(size, 1) + cpu.avg", []string{"queue_depth"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(f.Inputs, ",") != "queue_depth,size,cpu.avg" {
		t.Errorf("inputs = %v", f.Inputs)
	}
	v, err := f.Eval([]string{"queue_depth"}, map[string]float64{"queue_depth": 30, "size": 3, "cpu.avg": 1})
	if err != nil || v != 11 {
		t.Errorf("Eval = %v, %v; want 11", v, err)
	}
}

func TestSourceErrors(t *testing.T) {
	for _, tc := range []struct{ from, to, want string }{
		{`"queue_depth / max(size, 1)"`, `"queue_dept / max(size, 1)"`, `shoal.yaml:12:25: groups[0].autoscale.target.metric: metric "queue_dept / max(size, 1)": unknown name queue_dept; known: the sources (queue_depth, backlog)`},
		{`"queue_depth / max(size, 1)"`, `"queue_depth > 3"`, `shoal.yaml:12:25: groups[0].autoscale.target.metric: metric "queue_depth > 3": expected float64, but got bool`},
		{`"queue_depth / max(size, 1)"`, `"queue_depth / cpu.avgg"`, `shoal.yaml:12:43: groups[0].autoscale.target.metric: metric "queue_depth / cpu.avgg": unknown metric field avgg`},
		{`metric: backlog,`, `metric: backlogg,`, `shoal.yaml:14:20: groups[0].autoscale.rules[0].metric: unknown metric "backlogg"; known: queue_depth, backlog, cpu.avg`},
		{`on_missing: up}`, `on_missing: maybe}`, `metrics.sources[0].on_missing: must be hold, up or down, got "maybe"`},
		{`command: [/bin/echo, "3"]`, `command: [/bin/echo], http: {url: "http://x/", json_path: .a}`, `needs exactly one of prometheus, command and http, got 2`},
		{`{name: backlog,`, `{name: size,`, `"size" is one of shoal's own metrics`},
		{`"http://127.0.0.1:9090"`, `"http://u:pw@127.0.0.1:9090"`, `must not hold credentials`},
		{`timeout: 1s`, `timeout: 3s`, `metrics.sources[1].timeout: must be at most interval (2s), got 3s`},
		{`query: "sum(jobs_queued)"}`, `query: "sum(jobs_queued)", auth: {bearer_env: TOKEN, basic: {username: u, password_env: PW}}}`, `metrics.sources[0].prometheus.auth: needs exactly one of bearer_file, bearer_env and basic`},
		{`query: "sum(jobs_queued)"}`, `query: "sum(jobs_queued)", auth: {basic: {username: u}}}`, `metrics.sources[0].prometheus.auth.basic: needs exactly one of password_file and password_env`},
		{`query: "sum(jobs_queued)"}`, `query: "sum(jobs_queued)", auth: {bearer_env: "$TOKEN"}}`, `bearer_env: must be an environment variable's name such as PROM_TOKEN, got "$TOKEN"`},
	} {
		doc := strings.Replace(sourcesDoc, tc.from, tc.to, 1)
		_, err := Parse("shoal.yaml", []byte(doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s → %s: err = %v, want %q", tc.from, tc.to, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "pw@") && !strings.Contains(tc.want, "pw") && strings.Contains(err.Error(), ":pw") {
			t.Errorf("the error shows the password: %v", err)
		}
	}
}

// scheduleDoc guards a schedule and forecasts a source.
const scheduleDoc = `listen: 127.0.0.1:8080
metrics:
  sources:
    - {name: queue_depth, command: [/bin/echo, "3"], interval: 2s, timeout: 1s}
groups:
  - name: web
    min_size: 1
    max_size: 8
    template: {command: [app]}
    autoscale:
      target: {metric: cpu.avg, value: 50}
      schedule:
        - {name: rush, cron: "0 8 * * *", duration: 2h, min_size: 4, when: {metric: "queue_depth / max(size, 1)", above: 10}}
      predictive: {metric: queue_depth, per_instance: 20, lookback: 1d}
`

// TestSourcesInSchedulesAndPredictive: a schedule's guard and the
// predictive floor take a source or a formula wherever they take a
// metric, with FILE:LINE:COL errors for unknown names.
func TestSourcesInSchedulesAndPredictive(t *testing.T) {
	cfg, err := Parse("shoal.yaml", []byte(scheduleDoc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	a := cfg.Groups[0].Autoscale
	w := a.Schedules[0].When
	if w == nil || w.Metric != "queue_depth / max(size, 1)" || !w.HasAbove || w.Above != 10 || w.HasBelow {
		t.Errorf("when = %+v", w)
	}
	if p := a.Predictive; p.MetricOf() != "queue_depth" || p.PerInstance != 20 {
		t.Errorf("predictive = %+v", p)
	}
	if got := strings.Join(a.MetricsRead(), ","); got != "cpu.avg,queue_depth / max(size, 1),queue_depth" {
		t.Errorf("MetricsRead = %s", got)
	}
	for _, tc := range []struct{ from, to, want string }{
		{`"queue_depth / max(size, 1)"`, `"queue_dept / max(size, 1)"`, `shoal.yaml:13:86: groups[0].autoscale.schedule[0].when.metric: metric "queue_dept / max(size, 1)": unknown name queue_dept`},
		{`when: {metric: "queue_depth / max(size, 1)", above: 10}`, `when: {metric: backlog, above: 10}`, `shoal.yaml:13:85: groups[0].autoscale.schedule[0].when.metric: unknown metric "backlog"; known: queue_depth, cpu.avg`},
		{`above: 10}`, `above: 10, below: 5}`, `groups[0].autoscale.schedule[0].when.below: must be greater than above (10) for a band between them, got 5`},
		{`above: 10}`, `}`, `groups[0].autoscale.schedule[0].when: needs above or below`},
		{`{metric: queue_depth, per_instance`, `{metric: queue_dept, per_instance`, `shoal.yaml:14:28: groups[0].autoscale.predictive.metric: unknown metric "queue_dept"`},
		{`per_instance: 20, `, ``, `shoal.yaml:14:28: groups[0].autoscale.predictive.metric: "queue_depth" needs per_instance`},
		{`per_instance: 20, `, `per_instance: 20, capacity: 50, `, `groups[0].autoscale.predictive.capacity: is for requests_per_second`},
		{`metric: queue_depth, per_instance: 20, `, `per_instance: 20, `, `groups[0].autoscale.predictive.per_instance: is for a metric other than requests_per_second`},
	} {
		doc := strings.Replace(scheduleDoc, tc.from, tc.to, 1)
		_, err := Parse("shoal.yaml", []byte(doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s → %s: err = %v, want %q", tc.from, tc.to, err, tc.want)
		}
	}
}
