package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// healthDoc is a valid config whose only group has the given health section
// on line 4, column 13.
func healthDoc(health string) string {
	return "listen: :8080\ngroups:\n  - {name: web, min_size: 1, max_size: 2, template: {command: [app]},\n    health: " + health + "}\n"
}

func TestParseHealth(t *testing.T) {
	tests := []struct {
		name, health string
		want         Health
	}{
		{
			name:   "http with every field",
			health: `{method: POST, path: "/live?deep=1", host: "www.example.com:8080", status: [200, "204", 300-399], body: 'I''m "live" #1', interval: 1s, timeout: 500ms, rise: 3, fall: 4, fastinter: 100ms, downinter: 5s, grace: 10s, passive: {error_limit: 5, on_error: sudden-death}}`,
			want: Health{Type: "http", Method: "POST", Path: "/live?deep=1", Host: "www.example.com:8080",
				Status: []StatusRange{{200, 200}, {204, 204}, {300, 399}}, Body: `I'm "live" #1`,
				Interval: time.Second, Timeout: 500 * time.Millisecond, Rise: 3, Fall: 4,
				FastInter: 100 * time.Millisecond, DownInter: 5 * time.Second, Grace: 10 * time.Second,
				Passive: &Passive{Enabled: true, Observe: "layer7", ErrorLimit: 5, OnError: "sudden-death"}},
		},
		{
			// What every other package takes as given: DefaultHealth is
			// what the loader fills in, and no one fills it in again.
			name:   "every field left out",
			health: `{}`,
			want:   DefaultHealth,
		},
		{
			name:   "status range as a scalar and a regex",
			health: `{status: 200-299, body_regex: '^\d+ ok$', passive: {enabled: true}}`,
			want: Health{Type: "http", Method: "GET", Path: "/healthz", Host: "localhost",
				Status: []StatusRange{{200, 299}}, BodyRegex: `^\d+ ok$`,
				Interval: 2 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3, Grace: 30 * time.Second,
				FastInter: DefaultFastInter, Passive: &Passive{Enabled: true, Observe: "layer7", ErrorLimit: 10, OnError: "mark-down"}},
		},
		{
			name:   "tcp with send and expect, passive switched off",
			health: `{type: tcp, send: "PING\r\n", expect: "+PONG", passive: {enabled: false, error_limit: 3}}`,
			want: Health{Type: "tcp", Send: "PING\r\n", Expect: "+PONG",
				Interval: 2 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3, Grace: 30 * time.Second, FastInter: DefaultFastInter},
		},
		{
			// fastinter never defaults to more than interval.
			name:   "short interval",
			health: `{interval: 300ms, grace: 2s}`,
			want: Health{Type: "http", Method: "GET", Path: "/healthz", Host: "localhost", Status: []StatusRange{{200, 399}},
				Interval: 300 * time.Millisecond, Timeout: time.Second, Rise: 2, Fall: 3, Grace: 2 * time.Second, FastInter: 300 * time.Millisecond},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse("shoal.yaml", []byte(healthDoc(tt.health)))
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Groups[0].Health; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("health:\n got: %+v\nwant: %+v", got, tt.want)
			}
		})
	}
}

func TestParseHealthErrors(t *testing.T) {
	const at = "shoal.yaml:4:"
	tests := []struct{ name, health, want string }{
		{"bad type", `{type: udp}`, at + `20: groups[0].health.type: must be http or tcp, got "udp"`},
		{"bad method", `{method: get}`, at + `22: groups[0].health.method: must be one of GET, HEAD, OPTIONS, POST, PUT, DELETE, PATCH, TRACE, got "get"`},
		{"method with space", `{method: "GET /x"}`, at + `22: groups[0].health.method: must be one of GET, HEAD, OPTIONS, POST, PUT, DELETE, PATCH, TRACE, got "GET /x"`},
		{"path with space", `{path: "/a b"}`, at + `20: groups[0].health.path: must be printable ASCII without spaces, quotes or '\' (percent-encode other characters, e.g. %20 for a space), got "/a b"`},
		{"path with quote", `{path: '/a"'}`, at + `20: groups[0].health.path: must be printable ASCII without spaces, quotes or '\' (percent-encode other characters, e.g. %20 for a space), got "/a\""`},
		{"host with space", `{host: "a b"}`, at + `20: groups[0].health.host: must be a host name or IP address with an optional :port, got "a b"`},
		{"bare IPv6 host", `{host: "::1"}`, at + `20: groups[0].health.host: an IPv6 address must be in brackets, such as [::1], got "::1"`},
		{"host with bad port", `{host: "a:99999"}`, at + `20: groups[0].health.host: port must be a number from 1 to 65535, got "99999"`},
		{"status too low", `{status: [200, 99]}`, at + `28: groups[0].health.status[1]: must be an HTTP status code from 100 to 599 or a range such as "200-399": 99 is out of 100-599`},
		{"status too high", `{status: 200-600}`, at + `22: groups[0].health.status: must be an HTTP status code from 100 to 599 or a range such as "200-399": 200-600 is out of 100-599`},
		{"status not a code", `{status: ok}`, at + `22: groups[0].health.status: must be an HTTP status code from 100 to 599 or a range such as "200-399", got "ok"`},
		{"status empty range", `{status: 399-200}`, at + `22: groups[0].health.status: range 399-200 is empty: its start is above its end`},
		{"status empty list", `{status: []}`, at + `22: groups[0].health.status: must list at least one status code or range; leave it out for 200-399`},
		{"regex does not compile", `{body_regex: "a(b"}`, at + "26: groups[0].health.body_regex: does not compile: error parsing regexp: missing closing ): `a(b`"},
		{"body and regex", `{body: ok, body_regex: ok}`, at + `36: groups[0].health.body_regex: conflicts with body; set only one`},
		{"body with HEAD", `{method: HEAD, body: ok}`, at + `34: groups[0].health.body: cannot be checked with method HEAD: the answer has no body`},
		{"body with newline", `{body: "a\nb"}`, at + `20: groups[0].health.body: must not contain control characters, got "a\nb"`},
		{"empty body", `{body: ""}`, at + `20: groups[0].health.body: must not be empty; leave it out instead`},
		{"send on http", `{send: PING}`, at + `20: groups[0].health.send: applies only to type: tcp checks`},
		{"path on tcp", `{type: tcp, path: /x}`, at + `31: groups[0].health.path: applies only to type: http checks`},
		{"interval too long", `{interval: 600h}`, at + `24: groups[0].health.interval: must be from 1ms to 2147483647ms (596h31m23.647s, HAProxy's timer range), got 600h0m0s`},
		{"fastinter zero", `{fastinter: 0}`, at + `25: groups[0].health.fastinter: must be from 1ms to 2147483647ms (596h31m23.647s, HAProxy's timer range), got 0s`},
		{"fall too large", `{fall: 100000}`, at + `20: groups[0].health.fall: must be from 1 to 1000, got 100000`},
		{"grace below rise x interval", `{interval: 10s, fastinter: 10s, rise: 3, grace: 20s}`, at + `61: groups[0].health.grace: 20s is shorter than rise × interval + timeout = 3 × 10s + 1s = 31s, so a healthy instance is stopped before it can pass; set grace to at least 31s`},
		{"grace below interval + default fastinter", `{interval: 10s, rise: 3, grace: 11s}`, at + `45: groups[0].health.grace: 11s is shorter than downinter + (rise - 1) × fastinter + timeout = 10s + 2 × 500ms + 1s = 12s, so a healthy instance is stopped before it can pass; set grace to at least 12s`},
		{"grace below downinter + fastinter", `{rise: 3, downinter: 10s, fastinter: 1s, grace: 11s}`, at + `61: groups[0].health.grace: 11s is shorter than downinter + (rise - 1) × fastinter + timeout = 10s + 2 × 1s + 1s = 13s, so a healthy instance is stopped before it can pass; set grace to at least 13s`},
		{"passive on_error", `{passive: {on_error: explode}}`, at + `34: groups[0].health.passive.on_error: must be one of mark-down, fail-check, sudden-death, fastinter, got "explode"`},
		{"passive error_limit", `{passive: {error_limit: 0}}`, at + `37: groups[0].health.passive.error_limit: must be from 1 to 1000, got 0`},
		{"passive enabled not bool", `{passive: {enabled: yes please}}`, at + `33: groups[0].health.passive.enabled: must be true or false, got "yes please"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("shoal.yaml", []byte(healthDoc(tt.health)))
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

func TestParseHealthLongBody(t *testing.T) {
	_, err := Parse("shoal.yaml", []byte(healthDoc(`{body: "`+strings.Repeat("x", maxCheckString+1)+`"}`)))
	if err == nil || !strings.Contains(err.Error(), "groups[0].health.body: must be at most 1024 bytes, got 1025") {
		t.Fatalf("Parse error = %v, want the body's length refused", err)
	}
}
