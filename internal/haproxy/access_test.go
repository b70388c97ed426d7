package haproxy

import (
	"reflect"
	"strings"
	"testing"

	"github.com/shoal-lb/shoal/internal/config"
)

const testBcrypt = "$2b$05$ycMfcntNMjU5XQJm.hfFSuUN3tQaAQ.IMIAnjC26yqBWcjQ.ByWRe" // "secret"

// TestRenderAccess: allow, deny and basic_auth become counted refusals
// conditioned on the route's number, the client is read from
// X-Forwarded-For only behind a trusted proxy, and HAProxy accepts it.
func TestRenderAccess(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir, "127.0.0.1:8080")
	cfg.Listen = ""
	cfg.Frontends = []config.Frontend{{
		Name: "edge", Bind: []string{"127.0.0.1:8080"}, Mode: config.ModeHTTP, ForwardedHeaders: true,
		TrustedProxies: []string{"127.0.0.2/32", "10.0.0.0/8"},
		Routes: []config.Route{
			{PathPrefix: []string{"/admin"}, Allow: []string{"127.0.0.0/8", "2001:db8::/32"}, Deny: []string{"127.0.0.9/32"},
				BasicAuth: &config.BasicAuth{UsersFile: "/x", Users: []config.User{{Name: "alice", Hash: testBcrypt}}}, Group: "web"},
			{Group: "web"},
		},
	}}
	got, err := Render(cfg, PathsFor(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"    http-request set-var(txn.shoal_client) src\n" +
			"    http-request set-var(txn.shoal_client) req.hdr_ip(X-Forwarded-For,-1) if { var(txn.shoal_client) -m ip 127.0.0.2/32 10.0.0.0/8 } { req.hdr_ip(X-Forwarded-For,-1) -m found }\n",
		"    http-request set-var(txn.shoal_client) req.hdr_ip(X-Forwarded-For,-8) if",
		"    http-request del-header X-Forwarded-For unless { src 127.0.0.2/32 10.0.0.0/8 }\n",
		"    http-request set-var(txn.shoal_route) int(1) if !shoal_routed r1_path\n",
		"    http-request track-sc2 str(edge/1) table shoal.access if { var(txn.shoal_route) -m int eq 1 }\n" +
			"    http-request sc-inc-gpc0(2) if { var(txn.shoal_route) -m int eq 1 } !{ var(txn.shoal_client) -m ip 127.0.0.0/8 2001:db8::/32 }\n" +
			"    http-request deny deny_status 403 if { var(txn.shoal_route) -m int eq 1 } !{ var(txn.shoal_client) -m ip 127.0.0.0/8 2001:db8::/32 }\n" +
			"    http-request sc-inc-gpc0(2) if { var(txn.shoal_route) -m int eq 1 } { var(txn.shoal_client) -m ip 127.0.0.9/32 }\n" +
			"    http-request deny deny_status 403 if { var(txn.shoal_route) -m int eq 1 } { var(txn.shoal_client) -m ip 127.0.0.9/32 }\n" +
			"    http-request set-var(txn.shoal_authed) bool(true) if { var(txn.shoal_route) -m int eq 1 } { http_auth(shoal.auth.edge.1) }\n" +
			"    http-request sc-inc-gpc1(2) if { var(txn.shoal_route) -m int eq 1 } !{ var(txn.shoal_authed) -m bool }\n" +
			"    http-request auth realm shoal if { var(txn.shoal_route) -m int eq 1 } !{ var(txn.shoal_authed) -m bool }\n",
		"\nuserlist shoal.auth.edge.1\n    user alice password " + testBcrypt + "\n",
		"\nbackend shoal.access\n    stick-table type string len 48 size 100000 store gpc0,gpc1\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing:\n%s\nin:\n%s", want, got)
		}
	}
	// The client is known before X-Forwarded-For goes.
	if strings.Index(got, "set-var(txn.shoal_client) src") > strings.Index(got, "del-header X-Forwarded-For") {
		t.Error("the client is read after X-Forwarded-For is removed")
	}
	haproxyCheck(t, dir, got)

	// Without trusted proxies, the client is the connection's source.
	cfg.Frontends[0].TrustedProxies = nil
	got, err = Render(cfg, PathsFor(dir))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(got, "X-Forwarded-For,-1") || !strings.Contains(got, "    http-request del-header X-Forwarded-For\n") {
		t.Errorf("X-Forwarded-For is read without a trusted proxy:\n%s", got)
	}
	haproxyCheck(t, dir, got)
}

// TestRenderAccessRefusesBadValues: what config.Load refuses, Render
// refuses too, without showing a hash.
func TestRenderAccessRefusesBadValues(t *testing.T) {
	dir := t.TempDir()
	for name, r := range map[string]config.Route{
		"allow":  {Allow: []string{"10.0.0.1/8 || 1"}, Group: "web"},
		"deny":   {Deny: []string{"any"}, Group: "web"},
		"user":   {BasicAuth: &config.BasicAuth{Users: []config.User{{Name: "a b", Hash: testBcrypt}}}, Group: "web"},
		"hash":   {BasicAuth: &config.BasicAuth{Users: []config.User{{Name: "a", Hash: "plain text\n"}}}, Group: "web"},
		"nobody": {BasicAuth: &config.BasicAuth{}, Group: "web"},
	} {
		cfg := testConfig(dir, "127.0.0.1:8080")
		cfg.Listen = ""
		cfg.Frontends = []config.Frontend{{Name: "edge", Bind: []string{"127.0.0.1:8080"}, Mode: config.ModeHTTP, Routes: []config.Route{r}}}
		_, err := Render(cfg, PathsFor(dir))
		if err == nil || strings.Contains(err.Error(), "plain") {
			t.Errorf("%s: error = %v", name, err)
		}
	}
}

func TestParseDenials(t *testing.T) {
	out := "# table: shoal.access, type: string, size:100000, used:2\n" +
		"0x55d1c6b0e4a0: key=edge/2 use=0 exp=0 gpc0=0 gpc1=7\n" +
		"0x55d1c6b0e4b0: key=edge/1 use=1 exp=0 gpc0=5 gpc1=0\n"
	got, err := parseDenials(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []Denials{{"edge", 1, 5, 0}, {"edge", 2, 0, 7}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if _, err := parseDenials("Unknown table name\n"); err == nil {
		t.Error("an error answer parsed")
	}
}
