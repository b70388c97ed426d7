package config

import (
	"reflect"
	"strings"
	"testing"
)

// frontendsDoc routes with every kind of condition and action; the error
// table below edits one line of it at a time.
const frontendsDoc = `frontends:
  - name: edge
    bind: [127.0.0.1:8080, "[::1]:8080"]
    compression: {}
    timeouts: {client: 5s, http_keep_alive: 2s}
    max_connections: 5000
    routes:
      - {host: "*.api.example.com", method: [POST, PUT], group: api}
      - {path_regex: '^/v[0-9]+/items/\d+$', group: api}
      - {header: {X-Canary: "yes"}, group: canary}
      - {host: old.example.com, redirect: {code: 301, location: "https://new.example.com/"}}
      - {path_prefix: /secure, redirect: {https: true}}
      - {path_prefix: [/maintenance], respond: {status: 503, body: "back soon\n"}}
      - {weights: {web: 95, canary: 5}}
  - name: pg
    mode: tcp
    bind: [127.0.0.1:5433]
    routes: [{group: db}]
groups:
  - {name: web, min_size: 1, max_size: 2, template: {command: [app]}}
  - {name: canary, min_size: 1, max_size: 1, template: {command: [app]}}
  - {name: api, min_size: 1, max_size: 2, template: {command: [app]}}
  - {name: db, min_size: 1, max_size: 1, template: {command: [db]}}
`

func TestParseFrontends(t *testing.T) {
	cfg, err := Parse("shoal.yaml", []byte(frontendsDoc))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Frontends) != 2 {
		t.Fatalf("frontends = %+v", cfg.Frontends)
	}
	edge, pg := cfg.Frontends[0], cfg.Frontends[1]
	if edge.Mode != ModeHTTP || edge.MaxConnections != 5000 || edge.Timeouts.Client.Seconds() != 5 || edge.Timeouts.HTTPKeepAlive.Seconds() != 2 ||
		!reflect.DeepEqual(edge.Compression.Types, defaultCompression.Types) || len(edge.Compression.Types) != 12 {
		t.Errorf("edge = %+v", edge)
	}
	wantRoutes := []Route{
		{Host: []string{"*.api.example.com"}, Method: []string{"POST", "PUT"}, Group: "api"},
		{PathRegex: `^/v[0-9]+/items/\d+$`, Group: "api"},
		{Header: map[string]string{"X-Canary": "yes"}, Group: "canary"},
		{Host: []string{"old.example.com"}, Redirect: &Redirect{Code: 301, Location: "https://new.example.com/"}},
		{PathPrefix: []string{"/secure"}, Redirect: &Redirect{Code: 302, HTTPS: true}},
		{PathPrefix: []string{"/maintenance"}, Respond: &Respond{Status: 503, Body: "back soon\n", ContentType: "text/plain"}},
		{Weights: []Weight{{"web", 95}, {"canary", 5}}}, // in the file's order
	}
	if !reflect.DeepEqual(edge.Routes, wantRoutes) {
		t.Errorf("routes:\n got %+v\nwant %+v", edge.Routes, wantRoutes)
	}
	if pg.Mode != ModeTCP || !reflect.DeepEqual(pg.Routes, []Route{{Group: "db"}}) {
		t.Errorf("pg = %+v", pg)
	}
	// The tcp frontend's group is checked at layer 4; the others keep http.
	if cfg.Groups[3].Health.Type != "tcp" || cfg.Groups[0].Health.Type != "http" {
		t.Errorf("health types %q, %q", cfg.Groups[3].Health.Type, cfg.Groups[0].Health.Type)
	}
	if !reflect.DeepEqual(cfg.TCPGroups(), map[string]bool{"db": true}) {
		t.Errorf("TCPGroups = %v", cfg.TCPGroups())
	}
	// Bytes, not requests: only a failed connection can be retried.
	if cfg.Groups[3].Retries != RetriesConnect {
		t.Errorf("the tcp group's retries %q", cfg.Groups[3].Retries)
	}
	bad := strings.Replace(frontendsDoc, "template: {command: [db]}}", "template: {command: [db]}, retries: idempotent}", 1)
	if _, err := Parse("shoal.yaml", []byte(bad)); err == nil || !strings.Contains(err.Error(), "groups[3].retries: a tcp frontend routes to group db") {
		t.Errorf("retries: idempotent on a tcp frontend's group: %v", err)
	}
	if e := cfg.FieldError("frontends[0].routes[1].path_regex", "x"); e.Line != 9 {
		t.Errorf("FieldError does not locate a route: %v", e)
	}
}

// TestShorthand: listen, compression and the groups' routing are one
// frontend, the group without routing last.
func TestShorthand(t *testing.T) {
	cfg, err := Parse("shoal.yaml", []byte(`listen: 127.0.0.1:8080
compression: {types: [text/html]}
groups:
  - {name: web, min_size: 1, max_size: 2, template: {command: [app]}}
  - {name: api, min_size: 1, max_size: 2, hosts: [api.example.com], path_prefixes: [/v1], template: {command: [app]}}
  - {name: static, min_size: 1, max_size: 2, path_prefixes: [/static], template: {command: [app]}}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Frontend{{Name: "shoal", Bind: []string{"127.0.0.1:8080"}, Mode: ModeHTTP, ForwardedHeaders: true, Compression: &Compression{Types: []string{"text/html"}}, Routes: []Route{
		{Host: []string{"api.example.com"}, PathPrefix: []string{"/v1"}, Group: "api"},
		{PathPrefix: []string{"/static"}, Group: "static"},
		{Group: "web"},
	}}}
	if !reflect.DeepEqual(cfg.Frontends, want) {
		t.Errorf("frontends:\n got %+v\nwant %+v", cfg.Frontends, want)
	}
}

func TestParseFrontendErrors(t *testing.T) {
	const (
		catchAll = `      - {weights: {web: 95, canary: 5}}`
		header   = `      - {header: {X-Canary: "yes"}, group: canary}`
		redirect = `      - {host: old.example.com, redirect: {code: 301, location: "https://new.example.com/"}}`
		respond  = `      - {path_prefix: [/maintenance], respond: {status: 503, body: "back soon\n"}}`
		regex    = `      - {path_regex: '^/v[0-9]+/items/\d+$', group: api}`
		pgRoutes = `    routes: [{group: db}]`
		pgBind   = `    bind: [127.0.0.1:5433]`
		groupWeb = `  - {name: web, min_size: 1, max_size: 2, template: {command: [app]}}`
		groupDB  = `  - {name: db, min_size: 1, max_size: 1, template: {command: [db]}}`
	)
	tests := []struct {
		name, old, new, want string
	}{
		{"catch-all before the end", header, "      - {group: web}\n" + header,
			`shoal.yaml:11:9: frontends[0].routes[3]: can never match: the earlier route at line 10 matches every request this one does`},
		{"same host without other conditions", redirect, redirect + "\n      - {host: old.example.com, path_prefix: /x, group: web}",
			`shoal.yaml:12:9: frontends[0].routes[4]: can never match: the earlier route at line 11`},
		{"wildcard covers a subdomain", header, "      - {host: \"*.example.com\", group: web}\n      - {host: a.example.com, group: api}\n" + header,
			`shoal.yaml:11:9: frontends[0].routes[3]: can never match: the earlier route at line 10`},
		{"shorter prefix covers a longer one", respond, "      - {path_prefix: /m, group: web}\n" + respond,
			`shoal.yaml:14:9: frontends[0].routes[6]: can never match: the earlier route at line 13`},
		// Only the regex's error: a route with an error is not compared
		// with the others (it would shadow them all).
		{"regex Go cannot parse", regex, `      - {path_regex: '^/(a', group: api}`,
			`shoal.yaml:9:22: frontends[0].routes[1].path_regex: not a regular expression HAProxy can compile: error parsing regexp: missing closing ): ` + "`^/(a`"},
		{"weights add up to 0", catchAll, `      - {weights: {web: 0, canary: 0}}`,
			`shoal.yaml:14:19: frontends[0].routes[6].weights: the weights add up to 0: no group would get a request`},
		{"negative weight", catchAll, `      - {weights: {web: -1, canary: 5}}`,
			`shoal.yaml:14:25: frontends[0].routes[6].weights.web: must be from 0 to 256, got -1`},
		{"unknown group", header, `      - {header: {X-Canary: "yes"}, group: nope}`,
			`shoal.yaml:10:44: frontends[0].routes[2].group: unknown group "nope"`},
		{"unknown weighted group", catchAll, `      - {weights: {web: 95, nope: 5}}`,
			`shoal.yaml:14:29: frontends[0].routes[6].weights.nope: unknown group "nope"`},
		{"the hand-off's name", "  - name: edge", "  - name: shoal_handoff",
			`shoal.yaml:2:11: frontends[0].name: shoal_handoff is the name of the frontend that takes held requests from a replaced HAProxy worker; choose another`},
		{"two actions", header, `      - {header: {X-Canary: "yes"}, group: canary, respond: {status: 200}}`,
			`shoal.yaml:10:61: frontends[0].routes[2].respond: a route has one action, and this one has group and respond`},
		{"no action", header, `      - {header: {X-Canary: "yes"}}`,
			`shoal.yaml:10:9: frontends[0].routes[2]: needs one action: group, weights, redirect or respond`},
		{"bind used twice", pgBind, `    bind: [127.0.0.1:8080]`,
			`shoal.yaml:17:12: frontends[1].bind[0]: 127.0.0.1:8080 is already bound by frontends[0].bind[0] (line 3)`},
		{"scalar bind used twice", "    bind: [127.0.0.1:8080, \"[::1]:8080\"]\n", "    bind: 127.0.0.1:5433\n",
			`shoal.yaml:17:12: frontends[1].bind[0]: 127.0.0.1:5433 is already bound by frontends[0].bind (line 3)`},
		{"wildcard bind covers another", pgBind, `    bind: [":8080"]`,
			`shoal.yaml:17:12: frontends[1].bind[0]: :8080 is already bound by frontends[0].bind[0] (line 3)`},
		{"bad redirect code", redirect, `      - {host: old.example.com, redirect: {code: 200, location: /x}}`,
			`shoal.yaml:11:50: frontends[0].routes[3].redirect.code: must be one of 301, 302, 303, 307, 308, got 200`},
		{"redirect without a target", redirect, `      - {host: old.example.com, redirect: {code: 301}}`,
			`shoal.yaml:11:43: frontends[0].routes[3].redirect.location: required unless https: true`},
		{"redirect with a space", redirect, `      - {host: old.example.com, redirect: {location: "/a b"}}`,
			`frontends[0].routes[3].redirect.location: must be printable ASCII without spaces`},
		{"respond status", respond, `      - {path_prefix: [/maintenance], respond: {status: 99}}`,
			`frontends[0].routes[5].respond.status: must be an HTTP status from 200 to 599, got 99`},
		{"respond body with a control character", respond, `      - {path_prefix: [/maintenance], respond: {status: 503, body: "a\u0000b"}}`,
			`frontends[0].routes[5].respond.body: must not contain control characters`},
		{"header name", header, `      - {header: {"X Canary": "yes"}, group: canary}`,
			`frontends[0].routes[2].header.X Canary: must be a header name: must be letters, digits, '-' and '_', got "X Canary"`},
		{"method", header, `      - {method: "GET /", group: canary}`,
			`frontends[0].routes[2].method: must be an HTTP method such as GET`},
		{"tcp route with a condition", pgRoutes, `    routes: [{group: db, path_prefix: /x}]`,
			`frontends[1].routes[0]: a tcp frontend's route names one group and nothing else`},
		{"tcp with two routes", pgRoutes, `    routes: [{group: db}, {group: web}]`,
			`frontends[1].routes[1]: a tcp frontend has one route, naming its group`},
		{"group on http and tcp", pgRoutes, `    routes: [{group: web}]`,
			`frontends[1].routes[0]: group web is used by both an http and a tcp frontend; its backend has one mode`},
		{"tcp group with http checks", groupDB, `  - {name: db, min_size: 1, max_size: 1, health: {type: http}, template: {command: [db]}}`,
			`groups[3].health.type: a tcp frontend routes to group db: its health check must be tcp`},
		{"backend timeout on a frontend", `timeouts: {client: 5s, http_keep_alive: 2s}`, `timeouts: {client: 5s, server: 2s}`,
			`shoal.yaml:5:36: frontends[0].timeouts.server: is a backend's timeout; set it in haproxy.timeouts`},
		{"listen and frontends", "frontends:\n", "listen: 127.0.0.1:9000\nfrontends:\n",
			`shoal.yaml:1:9: listen: is the one-frontend shorthand; with frontends, give each frontend its bind and compression`},
		{"hosts with frontends", groupWeb, `  - {name: web, min_size: 1, max_size: 2, hosts: [a.example.com], template: {command: [app]}}`,
			`groups[0].hosts: routes the listen shorthand's frontend; with frontends, route with frontends[].routes (host, path_prefix)`},
		{"duplicate frontend name", "  - name: pg\n", "  - name: edge\n",
			`frontends[1].name: duplicate frontend name "edge" (first at line 2)`},
		{"frontend named as a group", "  - name: pg\n", "  - name: db\n",
			`shoal.yaml:15:11: frontends[1].name: "db" names a group too; give the frontend another name`},
		{"no routes", pgRoutes, "",
			`frontends[1].routes: required: a frontend needs at least one route`},
		// On TLS a redirect to https would answer with the same URL.
		{"https redirect on a frontend without a plain bind", "    compression: {}\n", "    compression: {}\n    tls: {acme: {email: ops@example.com, domains: [example.com]}}\n",
			`shoal.yaml:13:50: frontends[0].routes[4].redirect.https: every bind of this frontend speaks TLS, so no request would be redirected to https`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := parseEdited(t, frontendsDoc, tt.old, tt.new)
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got:\n%v\nwant a line containing:\n%s", err, tt.want)
			}
		})
	}
}

// TestHTTPSRedirectShadowsNothing: a redirect to https matches plain
// requests only, so a catch-all one does not hide the routes after it
// (they take the requests that came over TLS).
func TestHTTPSRedirectShadowsNothing(t *testing.T) {
	doc := strings.Replace(frontendsDoc, "      - {path_prefix: /secure, redirect: {https: true}}\n", "", 1)
	doc = strings.Replace(doc, "    routes:\n", "    routes:\n      - {redirect: {https: true}}\n", 1)
	cfg, err := Parse("testdata/shoal.yaml", []byte(doc))
	if err != nil {
		t.Fatalf("a catch-all redirect to https before other routes: %v", err)
	}
	if r := cfg.Frontends[0].Routes; len(r) != 7 || !r[0].Redirect.HTTPS {
		t.Errorf("routes = %+v", r)
	}
}
