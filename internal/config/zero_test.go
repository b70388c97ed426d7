package config

import (
	"errors"
	"testing"
	"time"
)

// zeroDoc is a group with min_size 0; group holds more lines of it
// (indented four spaces, from line 7 on) and top more top-level lines.
func zeroDoc(group, top string) string {
	return `listen: :8080
groups:
  - name: web
    min_size: 0
    max_size: 3
    template: {command: [app]}
` + group + top
}

// TestScaleToZeroErrors: the review's reproduction (min_size 0 with a CPU
// policy, which slept for good) and every scale_to_zero misfit is refused at
// its position, naming the field and what is expected.
func TestScaleToZeroErrors(t *testing.T) {
	tests := []struct {
		name, group, top, want string
		doc                    string // the whole document, instead of zeroDoc(group, top)
	}{
		{
			name: "min_size 0 with a policy that cannot wake the group",
			group: `    autoscale:
      target: {metric: cpu.avg, value: 50}
`,
			want: `shoal.yaml:4:15: groups[0].min_size: 0 with an autoscale policy needs scale_to_zero (e.g. scale_to_zero: {idle_after: 10m}): at 0 instances the policy's metrics have no value, so nothing would ever start an instance and every request would get 503; set min_size to at least 1, or add scale_to_zero so that requests wake the group`,
		},
		{
			name: "min_size 0 with rules on cpu",
			group: `    autoscale:
      rules: [{metric: cpu.p90, above: 70, for: 1m, action: up}]
`,
			want: `shoal.yaml:4:15: groups[0].min_size: 0 with an autoscale policy needs scale_to_zero (e.g. scale_to_zero: {idle_after: 10m}): at 0 instances the policy's metrics have no value, so nothing would ever start an instance and every request would get 503; set min_size to at least 1, or add scale_to_zero so that requests wake the group`,
		},
		{
			name: "scale_to_zero with min_size above 0",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 3
    template: {command: [app]}
    scale_to_zero: {}
`,
			want: `shoal.yaml:7:20: groups[0].scale_to_zero: needs min_size: 0 (the group sleeps at no instance), got min_size 1`,
		},
		{
			name:  "queue timeout shorter than a cold start",
			group: "    scale_to_zero: {idle_after: 5m}\n    health: {grace: 45s}\n",
			top:   "haproxy: {timeouts: {queue: 20s}}\n",
			want:  `shoal.yaml:7:20: groups[0].scale_to_zero: haproxy.timeouts.queue (20s) is shorter than health.grace (45s): the requests held while an instance starts would get 503 before it may be in service; raise timeouts.queue to at least 45s or lower grace`,
		},
		{
			name:  "queue timeout not longer than the metrics interval",
			group: "    scale_to_zero: {idle_after: 5m}\n    health: {grace: 4s}\n",
			top:   "haproxy: {timeouts: {queue: 5s}}\nmetrics: {interval: 10s}\n",
			want:  `shoal.yaml:7:20: groups[0].scale_to_zero: haproxy.timeouts.queue (5s) is not longer than metrics.interval (10s): a request held just after a sample would get 503 before the next sample wakes the group; raise timeouts.queue above 10s (it must also cover an instance's start) or shorten the interval`,
		},
		{
			name:  "idle_after shorter than grace",
			group: "    scale_to_zero: {idle_after: 10s}\n",
			want:  `shoal.yaml:7:33: groups[0].scale_to_zero.idle_after: must be at least health.grace (30s), got 10s: a group that sleeps sooner than an instance may take to start spends its time starting`,
		},
		{
			name:  "max_queue out of range",
			group: "    scale_to_zero: {max_queue: 0}\n",
			want:  `shoal.yaml:7:32: groups[0].scale_to_zero.max_queue: must be from 1 to 1000000, got 0`,
		},
		{
			name:  "unknown key",
			group: "    scale_to_zero: {idle: 5m}\n",
			want:  `shoal.yaml:7:21: groups[0].scale_to_zero.idle: unknown field; allowed: idle_after, max_queue, waking_page`,
		},
		{
			name:  "not a mapping",
			group: "    scale_to_zero: yes\n",
			want:  `shoal.yaml:7:20: groups[0].scale_to_zero: must be a mapping, got "yes"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := tt.doc
			if doc == "" {
				doc = zeroDoc(tt.group, tt.top)
			}
			_, err := Parse("shoal.yaml", []byte(doc))
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

// TestScaleToZeroParse: defaults, explicit values, the wake size, and that
// min_size 0 without a policy (scaled only by hand) stays valid.
func TestScaleToZeroParse(t *testing.T) {
	cfg, err := Parse("shoal.yaml", []byte(zeroDoc("    scale_to_zero: {}\n    autoscale: {target: {metric: cpu.avg, value: 50}}\n", "")))
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.Groups[0]
	if g.ScaleToZero == nil || g.ScaleToZero.IdleAfter != DefaultIdleAfter || g.ScaleToZero.MaxQueue != DefaultMaxQueue {
		t.Fatalf("defaults: %+v", g.ScaleToZero)
	}
	if g.WakeSize() != 1 {
		t.Fatalf("WakeSize = %d, want 1", g.WakeSize())
	}

	cfg, err = Parse("shoal.yaml", []byte(zeroDoc("    plans: {off: 0, small: 2, big: 3}\n    scale_to_zero: {idle_after: 90s, max_queue: 50}\n", "")))
	if err != nil {
		t.Fatal(err)
	}
	g = cfg.Groups[0]
	if g.ScaleToZero.IdleAfter != 90*time.Second || g.ScaleToZero.MaxQueue != 50 {
		t.Fatalf("values: %+v", g.ScaleToZero)
	}
	if g.WakeSize() != 2 {
		t.Fatalf("WakeSize with plans off: 0, small: 2 = %d, want 2 (the first plan with an instance)", g.WakeSize())
	}

	cfg, err = Parse("shoal.yaml", []byte(zeroDoc("", "")))
	if err != nil {
		t.Fatalf("min_size 0 without a policy: %v", err)
	}
	if cfg.Groups[0].ScaleToZero != nil {
		t.Fatal("scale_to_zero set without the key")
	}
}
