package config

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestCanaryConfig(t *testing.T) {
	doc := `listen: 127.0.0.1:8080
access_log: {enabled: true}
groups:
  - name: web
    min_size: 2
    max_size: 4
    template: {command: [app]}
    deploy:
      strategy: canary
      canary:
        steps: [{weight: 5%, for: 5m}, {instances: 25%, for: 10m, pause: true}, {weight: 100%}]
        analysis: {max_error_rate: {above: 1%, vs_stable: 2x}, max_p99: {vs_stable: 1.5x}, min_requests: 200, interval: 30s}
`
	cfg, err := Parse("shoal.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	dep := cfg.Groups[0].Deploy
	c := dep.Canary
	if dep.Strategy != StrategyCanary || c == nil || len(c.Steps) != 3 {
		t.Fatalf("deploy = %+v", dep)
	}
	if c.Steps[0] != (CanaryStep{Weight: 5, For: 5 * time.Minute}) || c.Steps[1] != (CanaryStep{Instances: 25, For: 10 * time.Minute, Pause: true}) || c.Steps[2] != (CanaryStep{Weight: 100}) {
		t.Fatalf("steps = %+v", c.Steps)
	}
	a := c.Analysis
	if a.MinRequests != 200 || a.Interval != 30*time.Second || *a.MaxErrorRate != (CanaryErrorRate{Above: 1, VsStable: 2}) || *a.MaxP99 != (CanaryP99{VsStable: 1.5}) {
		t.Fatalf("analysis = %+v %+v %+v", a, a.MaxErrorRate, a.MaxP99)
	}
}

func TestCanaryConfigErrors(t *testing.T) {
	const analysis = `analysis: {max_error_rate: {above: 1%}, min_requests: 10}`
	for _, tc := range []struct{ name, deploy, at, want string }{
		{"weights not increasing", `{strategy: canary, canary: {steps: [{weight: 25%, for: 1m}, {weight: 5%}]}}`, `5%}`,
			`groups[0].deploy.canary.steps[1].weight: must be above the step before's 25%, got 5%: steps must increase`},
		{"equal weights", `{strategy: canary, canary: {steps: [{weight: 25%, for: 1m}, {weight: 25%}]}}`, `25%}`,
			`groups[0].deploy.canary.steps[1].weight: must be above the step before's 25%, got 25%: steps must increase`},
		{"step of 0", `{strategy: canary, canary: {steps: [{weight: 0%, for: 1m}, {weight: 5%}]}}`, `0%`,
			`groups[0].deploy.canary.steps[0].weight: must be above 0%, got 0%: a step of 0% sends the canary nothing to judge`},
		{"weight over 100", `{strategy: canary, canary: {steps: [{weight: 5%, for: 1m}, {weight: 120%}]}}`, `120%`,
			`groups[0].deploy.canary.steps[1].weight: must be at most 100%, got 120%`},
		{"no min_requests", `{strategy: canary, canary: {steps: [{weight: 5%}], analysis: {max_error_rate: {above: 1%}}}}`, `{max_error_rate`,
			`groups[0].deploy.canary.analysis.min_requests: required`},
		{"error rate over 100", `{strategy: canary, canary: {steps: [{weight: 5%}], analysis: {max_error_rate: {above: 150%}, min_requests: 10}}}`, `150%`,
			`groups[0].deploy.canary.analysis.max_error_rate.above: must be a percentage from 0% to below 100%, got 150%`},
		{"vs_stable below 1", `{strategy: canary, canary: {steps: [{weight: 5%}], analysis: {max_error_rate: {vs_stable: 0.5x}, min_requests: 10}}}`, `0.5x`,
			`groups[0].deploy.canary.analysis.max_error_rate.vs_stable: must be from 1x to 1000x, got 0.5x: below 1 a canary as good as the stable version fails`},
		{"p99 vs_stable below 1", `{strategy: canary, canary: {steps: [{weight: 5%}], analysis: {max_p99: {vs_stable: 0.9}, min_requests: 10}}}`, `0.9}`,
			`groups[0].deploy.canary.analysis.max_p99.vs_stable: must be from 1x to 1000x, got 0.9: below 1 a canary as good as the stable version fails`},
		{"step without for", `{strategy: canary, canary: {steps: [{weight: 5%}, {weight: 50%}], ` + analysis + `}}`, `{weight: 5%}`,
			`groups[0].deploy.canary.steps[0].for: required on every step but the last (or pause: true): a step of no time judges nothing`},
		{"weight and instances", `{strategy: canary, canary: {steps: [{weight: 5%, instances: 10%}]}}`, `10%`,
			`groups[0].deploy.canary.steps[0].instances: conflicts with weight: a step is by weight (a share of the requests) or by instances (a share of the group's instances), not both`},
		{"neither weight nor instances", `{strategy: canary, canary: {steps: [{for: 1m}, {weight: 50%}]}}`, `{for`,
			`groups[0].deploy.canary.steps[0].weight: required (or instances): the canary's share of the requests, such as 5%`},
		{"instances over 100", `{strategy: canary, canary: {steps: [{instances: 25%, for: 1m}, {instances: 150%}]}}`, `150%`,
			`groups[0].deploy.canary.steps[1].instances: must be at most 100%, got 150%`},
		{"instances not increasing", `{strategy: canary, canary: {steps: [{weight: 25%, for: 1m}, {instances: 25%}]}}`, `25%}]`,
			`groups[0].deploy.canary.steps[1].instances: must be above the step before's 25%, got 25%: steps must increase`},
		{"canary without strategy", `{canary: {steps: [{weight: 5%}]}}`, `{steps`,
			`groups[0].deploy.canary: applies only to strategy: canary, and strategy is "rolling"`},
		{"strategy without canary", `{strategy: canary}`, `{strategy`,
			`groups[0].deploy.canary: required with strategy: canary (its steps and analysis)`},
		{"unknown strategy", `{strategy: bluegreen}`, `bluegreen`,
			`groups[0].deploy.strategy: must be one of rolling, canary, blue_green, got "bluegreen"`},
		{"analysis judging nothing", `{strategy: canary, canary: {steps: [{weight: 5%}], analysis: {min_requests: 10}}}`, `{min_requests`,
			`groups[0].deploy.canary.analysis: judges nothing: give max_error_rate, max_p99 or both`},
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
	// p99 needs the access log.
	doc := "listen: 127.0.0.1:8080\naccess_log: {enabled: false}\ngroups:\n  - {name: web, min_size: 1, max_size: 2, template: {command: [app]}, deploy: {strategy: canary, canary: {steps: [{weight: 5%}], analysis: {max_p99: {vs_stable: 2x}, min_requests: 10}}}}\n"
	if _, err := Parse("shoal.yaml", []byte(doc)); err == nil || !strings.Contains(err.Error(), "max_p99: needs the access log") {
		t.Fatalf("p99 without the access log: %v", err)
	}
}
