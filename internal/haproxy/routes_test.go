package haproxy

import (
	"strings"
	"testing"

	"github.com/shoal-lb/shoal/internal/config"
)

// routingConfig has every kind of route, an HTTP frontend on IPv4 and IPv6
// and a TCP frontend.
func routingConfig(dir string) *config.Config {
	cfg := testConfig(dir, "127.0.0.1:8080")
	cfg.Listen = ""
	cfg.Groups = append(cfg.Groups, config.Group{Name: "db", Balance: "leastconn", Health: config.Health{Type: "tcp"}})
	cfg.Frontends = []config.Frontend{{
		Name: "edge", Bind: []string{"127.0.0.1:8080", "[::1]:8080"}, Mode: config.ModeHTTP,
		Timeouts:       config.Timeouts{Client: 5e9, HTTPRequest: 2e9},
		MaxConnections: 5000,
		Compression:    &config.Compression{Types: []string{"text/html"}},
		Routes: []config.Route{
			{Host: []string{"*.example.com"}, Method: []string{"POST", "PUT"}, Group: "api"},
			{PathRegex: `^/v[0-9]+/items/\d+$`, Group: "static"},
			{Header: map[string]string{"X-Canary": "yes please"}, Group: "api"},
			{Host: []string{"old.example.org"}, Redirect: &config.Redirect{Code: 301, Location: "https://new.example.org/100%"}},
			{PathPrefix: []string{"/http"}, Redirect: &config.Redirect{Code: 302, HTTPS: true}},
			{PathPrefix: []string{"/maintenance"}, Respond: &config.Respond{Status: 503, ContentType: "text/html; charset=utf-8", Body: "<h1>\"Back\" soon</h1>\n$HOME # not a comment\\"}},
			{Weights: []config.Weight{{Group: "web", Weight: 95}, {Group: "static", Weight: 0}, {Group: "api", Weight: 5}}},
		},
	}, {
		Name: "pg", Bind: []string{"127.0.0.1:5433"}, Mode: config.ModeTCP,
		Routes: []config.Route{{Group: "db"}},
	}}
	return cfg
}

// TestRenderRoutes: a routing table becomes ACLs and rules that keep the
// routes' order, values are escaped into single words, and HAProxy accepts
// the result.
func TestRenderRoutes(t *testing.T) {
	dir := t.TempDir()
	got, err := Render(routingConfig(dir), PathsFor(dir))
	if err != nil {
		t.Fatal(err)
	}
	fe := got[strings.Index(got, "\nfrontend edge\n"):strings.Index(got, "\nfrontend pg\n")]
	want := []string{
		"    bind 127.0.0.1:8080\n    bind [::1]:8080\n    maxconn 5000\n    timeout client 5000ms\n    timeout http-request 2000ms\n",
		"    compression type text/html\n",
		"    acl r1_host hdr(host),field(1,:) -m end -i .example.com\n",
		"    acl r1_method method POST PUT\n",
		`    acl r2_regex path_reg \x5e/v\x5b0-9\x5d+/items/\x5cd+\x24` + "\n",
		`    acl r3_hdr1 req.fhdr(X-Canary) -m str yes\x20please` + "\n",
		"    acl shoal_routed var(txn.shoal_route) -m found\n",
		"    http-request set-var(txn.shoal_route) int(1) if !shoal_routed r1_host r1_method\n",
		"    http-request set-var(txn.shoal_route) int(5) if !shoal_routed r5_path !{ ssl_fc }\n",
		"    http-request set-var(txn.shoal_route) int(7) if !shoal_routed\n",
		"    http-request redirect location https://new.example.org/100%% code 301 if { var(txn.shoal_route) -m int eq 4 }\n",
		"    http-request redirect scheme https code 302 if { var(txn.shoal_route) -m int eq 5 }\n",
		`    http-request return status 503 content-type text/html\x3b\x20charset=utf-8 string \x3ch1\x3e\x22Back\x22\x20soon\x3c/h1\x3e\x0a\x24HOME\x20\x23\x20not\x20a\x20comment\x5c if { var(txn.shoal_route) -m int eq 6 }` + "\n",
		"    http-request set-var(txn.shoal_w7) rand(100) if { var(txn.shoal_route) -m int eq 7 }\n",
		"    use_backend api if { var(txn.shoal_route) -m int eq 1 }\n",
		"    use_backend web if { var(txn.shoal_route) -m int eq 7 } { var(txn.shoal_w7) -m int lt 95 }\n",
		"    use_backend api if { var(txn.shoal_route) -m int eq 7 }\n",
	}
	for _, w := range want {
		if !strings.Contains(fe, w) {
			t.Errorf("frontend lacks %q:\n%s", w, fe)
		}
	}
	if strings.Contains(fe, "use_backend static if { var(txn.shoal_route) -m int eq 7 }") {
		t.Errorf("a group of weight 0 gets requests:\n%s", fe)
	}
	// HAProxy runs every http-request rule before use_backend; writing
	// them in that order keeps it from warning.
	if strings.LastIndex(fe, "http-request") > strings.Index(fe, "use_backend") {
		t.Errorf("http-request after use_backend:\n%s", fe)
	}
	for _, w := range []string{
		"\nfrontend pg\n    bind 127.0.0.1:5433\n    mode tcp\n    default_backend db\n",
		"\nbackend db\n    mode tcp\n    balance leastconn\n",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("config lacks %q:\n%s", w, got)
		}
	}
	if db := got[strings.Index(got, "\nbackend db\n"):]; strings.Contains(db, "http") {
		t.Errorf("tcp backend has http lines:\n%s", db)
	}
	haproxyCheck(t, dir, got)
}
