package config

import (
	"strings"
	"testing"
	"time"
)

func TestParseAutoscale(t *testing.T) {
	g := Group{Name: "web", MinSize: 1, MaxSize: 4, Plans: []Plan{{Name: "small", Size: 1}, {Name: "big", Size: 4}}}
	for _, doc := range []string{
		"rules:\n  - {metric: cpu.avg, above: 50, for: 10s, action: {plan: big}}\n",
		"autoscale:\n  target: {metric: cpu.avg, value: 50}\n",
	} {
		a, err := ParseAutoscale("cand.yaml", []byte(doc), g, time.Second, DefaultMetrics.Kept())
		if err != nil || a == nil {
			t.Fatalf("%q: %v, %v", doc, a, err)
		}
	}
	if a, err := ParseAutoscale("cand.yaml", []byte("  \n"), g, time.Second, DefaultMetrics.Kept()); a != nil || err != nil {
		t.Fatalf("empty candidate: %v, %v; want none", a, err)
	}
	for _, tc := range []struct{ doc, want string }{
		{"rules:\n  - {metric: cpu.avg, above: 50, for: 500ms, action: up}\n", "cand.yaml:2:39: autoscale.rules[0].for: must be at least"},
		{"rules:\n  - {metric: cpu.avg, above: 50, for: 10s, action: {plan: huge}}\n", `cand.yaml:2:59: autoscale.rules[0].action.plan: unknown plan "huge"`},
		{"[1, 2]\n", "cand.yaml:1:1: a policy must be a mapping"},
		{"rules: [\n", "cand.yaml"},
		{"target: {metric: size, value: 1}\n", "autoscale.target.metric: size counts instances"},
		{"rules:\n  - {metric: cpu.avg, below: 20, statistic: average, over: 800h, action: down}\n", "cand.yaml:2:60: autoscale.rules[0].over: must be at most the metrics history kept (720h0m0s"},
	} {
		_, err := ParseAutoscale("cand.yaml", []byte(tc.doc), g, time.Second, DefaultMetrics.Kept())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want %q", tc.doc, err, tc.want)
		}
	}
}
