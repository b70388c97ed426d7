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
