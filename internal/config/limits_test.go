package config

import (
	"testing"
	"time"
)

// limitsDoc is a valid file whose group's limits the tests edit (line 5).
const limitsDoc = `listen: 127.0.0.1:8080
groups:
  - name: web
    min_size: 1
    limits: {max_conn: 20}
    max_size: 2
    health: {interval: 2s}
    template: {command: [app]}
`

func TestParseLimits(t *testing.T) {
	const line = "limits: {max_conn: 20}"
	for _, tc := range []struct {
		name, edit string
		want       *Limits
		slow       time.Duration
	}{
		{"max_conn only: queue_timeout defaults to 5s", line, &Limits{MaxConn: 20, QueueTimeout: 5 * time.Second}, 0},
		{"both, and slow_start", "limits: {max_conn: 4, queue_timeout: 30s}\n    slow_start: 30s", &Limits{MaxConn: 4, QueueTimeout: 30 * time.Second}, 30 * time.Second},
		{"queue_timeout equal to the check interval", "limits: {max_conn: 1, queue_timeout: 2s}", &Limits{MaxConn: 1, QueueTimeout: 2 * time.Second}, 0},
		{"no limits", "slow_start: 10", nil, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse("shoal.yaml", []byte(replaceOnce(t, limitsDoc, line, tc.edit)))
			if err != nil {
				t.Fatal(err)
			}
			g := cfg.Groups[0]
			if (g.Limits == nil) != (tc.want == nil) || g.Limits != nil && *g.Limits != *tc.want {
				t.Errorf("limits = %+v, want %+v", g.Limits, tc.want)
			}
			if g.SlowStart != tc.slow {
				t.Errorf("slow_start = %s, want %s", g.SlowStart, tc.slow)
			}
		})
	}
	// Left out, queue_timeout is never below a longer check interval.
	cfg, err := Parse("shoal.yaml", []byte(replaceOnce(t, limitsDoc, "interval: 2s", "interval: 8s")))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Groups[0].Limits.QueueTimeout; got != 8*time.Second {
		t.Errorf("queue_timeout left out with an 8s interval = %s, want 8s", got)
	}
}

func TestParseLimitsErrors(t *testing.T) {
	const line = "limits: {max_conn: 20}"
	for _, tc := range []struct{ name, edit, want string }{
		{"max_conn 0", "limits: {max_conn: 0}",
			`testdata/shoal.yaml:5:24: groups[0].limits.max_conn: must be from 1 to 1048576 (requests each instance serves at once), got 0`},
		{"max_conn negative", "limits: {max_conn: -3}",
			`testdata/shoal.yaml:5:24: groups[0].limits.max_conn: must be from 1 to 1048576 (requests each instance serves at once), got -3`},
		{"no max_conn", "limits: {queue_timeout: 5s}",
			`testdata/shoal.yaml:5:13: groups[0].limits.max_conn: required`},
		{"queue_timeout below the check interval", "limits: {max_conn: 4, queue_timeout: 500ms}",
			`testdata/shoal.yaml:5:42: groups[0].limits.queue_timeout: must be at least the health check interval (2s), got 500ms: a queued request would time out before a new instance could pass a check`},
		{"queue_timeout too long", "limits: {max_conn: 4, queue_timeout: 48h}",
			`testdata/shoal.yaml:5:42: groups[0].limits.queue_timeout: must be at most 24h0m0s, got 48h0m0s`},
		{"unknown key", "limits: {max_conn: 4, soft: 2}",
			`testdata/shoal.yaml:5:27: groups[0].limits.soft: unknown field; allowed: max_conn, queue_timeout`},
		{"slow_start negative", "slow_start: -1s",
			`testdata/shoal.yaml:5:17: groups[0].slow_start: must not be negative, got -1s`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := parseEdited(t, limitsDoc, line, tc.edit)
			if got := err.Error(); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}
