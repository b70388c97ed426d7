package config

import (
	"testing"
	"time"
)

// rateLimitDoc is a valid file whose frontend's rate_limit the tests edit.
const rateLimitDoc = `frontends:
  - name: edge
    bind: [127.0.0.1:8080]
    rate_limit: {requests: 100, per: 10s}
    routes: [{group: web}]
  - name: pg
    mode: tcp
    bind: [127.0.0.1:5433]
    routes: [{group: db}]
groups:
  - {name: web, min_size: 1, max_size: 2, template: {command: [app]}}
  - {name: db, min_size: 1, max_size: 1, health: {type: tcp}, template: {command: [db]}}
`

func TestParseRateLimit(t *testing.T) {
	for _, tc := range []struct {
		name, edit string
		want       RateLimit
	}{
		{"by ip (default)", "rate_limit: {requests: 100, per: 10s}", RateLimit{Requests: 100, Per: 10 * time.Second, By: "ip"}},
		{"by a header", "rate_limit: {requests: 5, per: 1m, by: header:X-Api-Key}", RateLimit{Requests: 5, Per: time.Minute, By: "header:X-Api-Key"}},
		{"seconds as an integer", "rate_limit: {requests: 1, per: 2, by: ip}", RateLimit{Requests: 1, Per: 2 * time.Second, By: "ip"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse("shoal.yaml", []byte(replaceOnce(t, rateLimitDoc, "rate_limit: {requests: 100, per: 10s}", tc.edit)))
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Frontends[0].RateLimit; got == nil || *got != tc.want {
				t.Errorf("rate_limit = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseRateLimitErrors(t *testing.T) {
	const line = "rate_limit: {requests: 100, per: 10s}"
	for _, tc := range []struct{ name, edit, want string }{
		{"no requests", "rate_limit: {per: 10s}",
			`testdata/shoal.yaml:4:17: frontends[0].rate_limit.requests: required`},
		{"no per", "rate_limit: {requests: 100}",
			`testdata/shoal.yaml:4:17: frontends[0].rate_limit.per: required`},
		{"zero requests", "rate_limit: {requests: 0, per: 10s}",
			`testdata/shoal.yaml:4:28: frontends[0].rate_limit.requests: must be at least 1, got 0`},
		{"negative requests", "rate_limit: {requests: -5, per: 10s}",
			`testdata/shoal.yaml:4:28: frontends[0].rate_limit.requests: must be at least 1, got -5`},
		{"requests not a number", "rate_limit: {requests: many, per: 10s}",
			`testdata/shoal.yaml:4:28: frontends[0].rate_limit.requests: must be an integer, got "many"`},
		{"zero per", "rate_limit: {requests: 100, per: 0s}",
			`testdata/shoal.yaml:4:38: frontends[0].rate_limit.per: must be from 1ms to 24h0m0s, got 0s`},
		{"per too long", "rate_limit: {requests: 100, per: 48h}",
			`testdata/shoal.yaml:4:38: frontends[0].rate_limit.per: must be from 1ms to 24h0m0s, got 48h0m0s`},
		{"per not a duration", "rate_limit: {requests: 100, per: often}",
			`testdata/shoal.yaml:4:38: frontends[0].rate_limit.per: must be a duration such as "30s" or "3m", or a whole number of seconds; got "often"`},
		{"by a cookie", "rate_limit: {requests: 100, per: 10s, by: cookie}",
			`testdata/shoal.yaml:4:47: frontends[0].rate_limit.by: must be ip or header:NAME (a request header, such as header:X-Api-Key), got "cookie"`},
		{"by an empty header", "rate_limit: {requests: 100, per: 10s, by: 'header:'}",
			`testdata/shoal.yaml:4:47: frontends[0].rate_limit.by: header in "header:": must be letters, digits, '-' and '_', got ""`},
		{"by a header smuggling a rule", `rate_limit: {requests: 100, per: 10s, by: "header:X\n    http-request allow"}`,
			`testdata/shoal.yaml:4:47: frontends[0].rate_limit.by: header in "header:X\n    http-request allow": must be letters, digits, '-' and '_', got "X\n    http-request allow"`},
		{"by a header with a space", "rate_limit: {requests: 100, per: 10s, by: header:X Key}",
			`testdata/shoal.yaml:4:47: frontends[0].rate_limit.by: header in "header:X Key": must be letters, digits, '-' and '_', got "X Key"`},
		{"unknown key", "rate_limit: {requests: 100, per: 10s, burst: 5}",
			`testdata/shoal.yaml:4:43: frontends[0].rate_limit.burst: unknown field; allowed: requests, per, by`},
		{"not a mapping", "rate_limit: 100/10s",
			`testdata/shoal.yaml:4:17: frontends[0].rate_limit: must be a mapping, got "100/10s"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := parseEdited(t, rateLimitDoc, line, tc.edit)
			if got := err.Error(); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
	t.Run("tcp frontend", func(t *testing.T) {
		err := parseEdited(t, rateLimitDoc, "    routes: [{group: db}]", "    routes: [{group: db}]\n    rate_limit: {requests: 1, per: 1s}")
		want := `testdata/shoal.yaml:10:17: frontends[1].rate_limit: applies to http frontends only (it answers 429)`
		if got := err.Error(); got != want {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	})
}
