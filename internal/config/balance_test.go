package config

import (
	"strings"
	"testing"
)

// balanceDoc is a valid file whose group web the tests below edit.
const balanceDoc = `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    balance: hash
    template: {command: [app]}
`

func TestParseBalance(t *testing.T) {
	for _, tc := range []struct {
		name, edit             string
		balance, hashOn, proto string
		cookie                 string
	}{
		{"defaults", "balance: hash", "hash", "uri", "h1", ""},
		{"hash on source", "balance: hash\n    hash_on: source", "hash", "source", "h1", ""},
		{"hash on a header", "balance: hash\n    hash_on: header:X-User", "hash", "header:X-User", "h1", ""},
		{"sticky h2", "balance: leastconn\n    sticky: {cookie: SRV}\n    proto: h2", "leastconn", "uri", "h2", "SRV"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse("testdata/shoal.yaml", []byte(replaceOnce(t, balanceDoc, "balance: hash", tc.edit)))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			g := cfg.Groups[0]
			if g.Balance != tc.balance || g.HashOn != tc.hashOn || g.Proto != tc.proto {
				t.Errorf("balance, hash_on, proto = %q, %q, %q; want %q, %q, %q", g.Balance, g.HashOn, g.Proto, tc.balance, tc.hashOn, tc.proto)
			}
			if got := ""; g.Sticky != nil {
				got = g.Sticky.Cookie
				if got != tc.cookie {
					t.Errorf("sticky cookie = %q, want %q", got, tc.cookie)
				}
			} else if tc.cookie != "" {
				t.Errorf("sticky = nil, want cookie %q", tc.cookie)
			}
		})
	}
}

func TestParseBalanceErrors(t *testing.T) {
	for _, tc := range []struct{ name, edit, want string }{
		{"unknown balance", "balance: random",
			`testdata/shoal.yaml:6:14: groups[0].balance: must be one of roundrobin, leastconn, first, hash (HAProxy can add servers at runtime only with a dynamic algorithm), got "random"`},
		{"hash_on without hash", "balance: roundrobin\n    hash_on: uri",
			`testdata/shoal.yaml:7:14: groups[0].hash_on: applies only to balance: hash, and balance is "roundrobin"`},
		{"bad hash_on", "balance: hash\n    hash_on: cookie",
			`testdata/shoal.yaml:7:14: groups[0].hash_on: must be uri, source or header:NAME (a request header), got "cookie"`},
		{"hash_on empty header", "balance: hash\n    hash_on: 'header:'",
			`testdata/shoal.yaml:7:14: groups[0].hash_on: header in "header:": must be letters, digits, '-' and '_', got ""`},
		{"hash_on header with a space", "balance: hash\n    hash_on: header:X User",
			`testdata/shoal.yaml:7:14: groups[0].hash_on: header in "header:X User": must be letters, digits, '-' and '_', got "X User"`},
		{"hash_on header smuggling a line", "balance: hash\n    hash_on: \"header:X\\n    http-request deny\"",
			`testdata/shoal.yaml:7:14: groups[0].hash_on: header in "header:X\n    http-request deny": must be letters, digits, '-' and '_', got "X\n    http-request deny"`},
		{"hash_on not a string", "balance: hash\n    hash_on: [uri]",
			`testdata/shoal.yaml:7:14: groups[0].hash_on: must be a string, got a list`},
		{"sticky without cookie", "balance: hash\n    sticky: {}",
			`testdata/shoal.yaml:7:13: groups[0].sticky.cookie: required`},
		{"sticky cookie with a semicolon", "balance: hash\n    sticky: {cookie: 'a;b'}",
			`testdata/shoal.yaml:7:22: groups[0].sticky.cookie: cookie name must be letters, digits, '-' and '_', got "a;b"`},
		{"sticky cookie with a quote", "balance: hash\n    sticky: {cookie: 'a\"b'}",
			`testdata/shoal.yaml:7:22: groups[0].sticky.cookie: cookie name must be letters, digits, '-' and '_', got "a\"b"`},
		{"sticky unknown field", "balance: hash\n    sticky: {cookie: SRV, path: /}",
			`testdata/shoal.yaml:7:27: groups[0].sticky.path: unknown field; allowed: cookie`},
		{"sticky not a mapping", "balance: hash\n    sticky: SRV",
			`testdata/shoal.yaml:7:13: groups[0].sticky: must be a mapping, got "SRV"`},
		{"bad proto", "balance: hash\n    proto: h3",
			`testdata/shoal.yaml:7:12: groups[0].proto: must be h1 (HTTP/1.1 to the instances) or h2 (HTTP/2 without TLS, h2c), got "h3"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := parseEdited(t, balanceDoc, "balance: hash", tc.edit)
			if got := err.Error(); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// replaceOnce replaces old, which doc must hold, with new.
func replaceOnce(t *testing.T, doc, old, new string) string {
	t.Helper()
	if !strings.Contains(doc, old) {
		t.Fatalf("the document has no %q", old)
	}
	return strings.Replace(doc, old, new, 1)
}
