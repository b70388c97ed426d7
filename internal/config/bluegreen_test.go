package config

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestBlueGreenConfig(t *testing.T) {
	for _, tc := range []struct {
		deploy string
		want   BlueGreen
	}{
		{`{strategy: blue_green}`, BlueGreen{KeepOld: 10 * time.Minute}},
		{`{strategy: blue_green, blue_green: {keep_old: 0s}}`, BlueGreen{}},
		{`{strategy: blue_green, blue_green: {keep_old: 30s, weight: 5%, analysis: {max_error_rate: {above: 1%}, min_requests: 100}}}`,
			BlueGreen{KeepOld: 30 * time.Second, Weight: 5, Analysis: &CanaryAnalysis{MaxErrorRate: &CanaryErrorRate{Above: 1}, MinRequests: 100, Interval: 30 * time.Second}}},
	} {
		doc := "listen: 127.0.0.1:8080\ngroups:\n  - {name: web, min_size: 1, max_size: 2, template: {command: [app]}, deploy: " + tc.deploy + "}\n"
		cfg, err := Parse("shoal.yaml", []byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", tc.deploy, err)
		}
		dep := cfg.Groups[0].Deploy
		b := dep.BlueGreen
		if dep.Strategy != StrategyBlueGreen || b == nil || b.KeepOld != tc.want.KeepOld || b.Weight != tc.want.Weight || (b.Analysis == nil) != (tc.want.Analysis == nil) {
			t.Fatalf("%s: deploy %+v, blue_green %+v", tc.deploy, dep, b)
		}
		if a := b.Analysis; a != nil && (a.MinRequests != tc.want.Analysis.MinRequests || a.Interval != tc.want.Analysis.Interval || *a.MaxErrorRate != *tc.want.Analysis.MaxErrorRate) {
			t.Fatalf("%s: analysis %+v", tc.deploy, a)
		}
	}
	// Another strategy has no blue_green.
	cfg, err := Parse("shoal.yaml", []byte("listen: 127.0.0.1:8080\ngroups:\n  - {name: web, min_size: 1, max_size: 2, template: {command: [app]}}\n"))
	if err != nil || cfg.Groups[0].Deploy.BlueGreen != nil {
		t.Fatalf("rolling: %v %+v", err, cfg.Groups[0].Deploy.BlueGreen)
	}
}

func TestBlueGreenConfigErrors(t *testing.T) {
	const analysis = `analysis: {max_error_rate: {above: 1%}, min_requests: 10}`
	for _, tc := range []struct{ name, deploy, at, want string }{
		{"keep_old negative", `{strategy: blue_green, blue_green: {keep_old: -5m}}`, `-5m`,
			`groups[0].deploy.blue_green.keep_old: must not be negative, got -5m0s`},
		{"keep_old too long", `{strategy: blue_green, blue_green: {keep_old: 48h}}`, `48h`,
			`groups[0].deploy.blue_green.keep_old: must be from 0s to 24h0m0s, got 48h0m0s`},
		{"with rolling", `{blue_green: {keep_old: 1m}}`, `{keep_old`,
			`groups[0].deploy.blue_green: applies only to strategy: blue_green, and strategy is "rolling"`},
		{"with canary", `{strategy: canary, canary: {steps: [{weight: 5%}]}, blue_green: {keep_old: 1m}}`, `{keep_old`,
			`groups[0].deploy.blue_green: applies only to strategy: blue_green, and strategy is "canary"`},
		{"weight 0", `{strategy: blue_green, blue_green: {weight: 0%, ` + analysis + `}}`, `0%`,
			`groups[0].deploy.blue_green.weight: must be above 0% and below 100%, got 0%: it is the green set's share while the analysis judges it, before the switch sends it every request`},
		{"weight 100", `{strategy: blue_green, blue_green: {weight: 100%, ` + analysis + `}}`, `100%`,
			`groups[0].deploy.blue_green.weight: must be above 0% and below 100%, got 100%: it is the green set's share while the analysis judges it, before the switch sends it every request`},
		{"weight negative", `{strategy: blue_green, blue_green: {weight: -3, ` + analysis + `}}`, `-3`,
			`groups[0].deploy.blue_green.weight: must be above 0% and below 100%, got -3: it is the green set's share while the analysis judges it, before the switch sends it every request`},
		{"weight without analysis", `{strategy: blue_green, blue_green: {weight: 5%}}`, `5%`,
			`groups[0].deploy.blue_green.weight: needs analysis: the weight is the green set's share while an analysis judges it`},
		{"analysis without weight", `{strategy: blue_green, blue_green: {` + analysis + `}}`, `{max_error_rate`,
			`groups[0].deploy.blue_green.analysis: needs weight: the share of requests the green set gets for the analysis to judge before the switch`},
		{"analysis without min_requests", `{strategy: blue_green, blue_green: {weight: 5%, analysis: {max_error_rate: {above: 1%}}}}`, `{max_error_rate`,
			`groups[0].deploy.blue_green.analysis.min_requests: required`},
		{"unknown key", `{strategy: blue_green, blue_green: {keep: 1m}}`, `keep:`,
			`groups[0].deploy.blue_green.keep: unknown field; allowed: keep_old, weight, analysis`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := "listen: 127.0.0.1:8080\ngroups:\n  - {name: web, min_size: 1, max_size: 2, template: {command: [app]}, deploy: " + tc.deploy + "}\n"
			line := strings.Split(doc, "\n")[2]
			want := fmt.Sprintf("shoal.yaml:3:%d: %s", strings.Index(line, tc.at)+1, tc.want)
			_, err := Parse("shoal.yaml", []byte(doc))
			if err == nil || err.Error() != want {
				t.Fatalf("Parse error:\n got: %v\nwant: %s", err, want)
			}
		})
	}
	doc := "listen: 127.0.0.1:8080\naccess_log: {enabled: false}\ngroups:\n  - {name: web, min_size: 1, max_size: 2, template: {command: [app]}, deploy: {strategy: blue_green, blue_green: {weight: 5%, analysis: {max_p99: {vs_stable: 2x}, min_requests: 10}}}}\n"
	if _, err := Parse("shoal.yaml", []byte(doc)); err == nil || !strings.Contains(err.Error(), "blue_green.analysis.max_p99: needs the access log") {
		t.Fatalf("p99 without the access log: %v", err)
	}
}
