package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// Hashes of "secret" (bcrypt cost 5, SHA-512 crypt) and of cost 12.
const (
	bcryptSecret = "$2b$05$ycMfcntNMjU5XQJm.hfFSuUN3tQaAQ.IMIAnjC26yqBWcjQ.ByWRe"
	sha512Secret = "$6$abcdefgh$ltjgWl6579NluT/Vi1nwEvcil.G5Nbc4NiXZaNGStk8PSwGfQv72N2CKPPrVACtLtip/cZ/1GM/O6IND4WQhG."
	bcryptCost12 = "$2y$12$abcdefghijklmnopqrstuuOQiyCxlgf/oeuTqixKmWdcYUh4Hjl0a"
)

func accessDoc(users string) string {
	return `frontends:
  - name: edge
    bind: [127.0.0.1:8080]
    trusted_proxies: [10.0.0.0/8, 127.0.0.2]
    routes:
      - {path_prefix: /admin, allow: [127.0.0.0/8, "2001:db8::/32"], deny: 127.0.0.9, basic_auth: {users_file: ` + users + `}, group: web}
      - {group: web}
groups:
  - {name: web, min_size: 1, max_size: 2, template: {command: [app]}}
`
}

func TestParseAccess(t *testing.T) {
	dir := t.TempDir()
	users := filepath.Join(dir, "users")
	if err := os.WriteFile(users, []byte("# admins\nalice:"+bcryptSecret+"\n\nbob:"+sha512Secret+"\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(filepath.Join(dir, "shoal.yaml"), []byte(accessDoc("users")))
	if err != nil {
		t.Fatal(err)
	}
	fe := cfg.Frontends[0]
	if want := []string{"10.0.0.0/8", "127.0.0.2/32"}; !reflect.DeepEqual(fe.TrustedProxies, want) {
		t.Errorf("trusted_proxies = %v, want %v", fe.TrustedProxies, want)
	}
	r := fe.Routes[0]
	want := Route{PathPrefix: []string{"/admin"}, Group: "web",
		Allow: []string{"127.0.0.0/8", "2001:db8::/32"}, Deny: []string{"127.0.0.9/32"},
		BasicAuth: &BasicAuth{UsersFile: users, Users: []User{{"alice", bcryptSecret}, {"bob", sha512Secret}}}}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("route:\n got %+v\nwant %+v", r, want)
	}
	if !r.HasAccess() || fe.Routes[1].HasAccess() {
		t.Errorf("HasAccess: %v, %v", r.HasAccess(), fe.Routes[1].HasAccess())
	}
}

func TestAccessErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("users", "alice:"+bcryptSecret+"\n")
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"allow not a cidr", "allow: [127.0.0.0/8,", "allow: [127.0.0/8,", dir + "/shoal.yaml:6:39: frontends[0].routes[0].allow[0]: must be a network"},
		{"host bits", "deny: 127.0.0.9", "deny: 127.0.0.9/8", dir + "/shoal.yaml:6:76: frontends[0].routes[0].deny: \"127.0.0.9/8\" has bits set below its /8 mask; did you mean 127.0.0.0/8?"},
		{"empty allow", `allow: [127.0.0.0/8, "2001:db8::/32"]`, "allow: []", dir + "/shoal.yaml:6:38: frontends[0].routes[0].allow: must list at least one"},
		{"trusted bad", "trusted_proxies: [10.0.0.0/8,", "trusted_proxies: [proxy.example.com,", dir + "/shoal.yaml:4:23: frontends[0].trusted_proxies[0]: must be an IP address"},
		{"missing file", "users_file: users", "users_file: nothere", dir + "/shoal.yaml:6:112: frontends[0].routes[0].basic_auth.users_file: users file: stat " + dir + "/nothere: no such file or directory"},
		{"plain password", "users_file: users", "users_file: " + write("plain", "# ok\nalice:secret\n"), dir + "/plain:2:7: user alice: must be a bcrypt"},
		{"no colon", "users_file: users", "users_file: " + write("nocolon", "alice\n"), dir + "/nocolon:1:1: must be user:hash"},
		{"md5", "users_file: users", "users_file: " + write("md5", "bob:$1$abc$abcdefghijklmnopqrstuv\n"), dir + "/md5:1:5: user bob: must be a bcrypt"},
		{"cost", "users_file: users", "users_file: " + write("cost", "carol:"+bcryptCost12+"\n"), dir + "/cost:1:7: user carol: bcrypt cost 12: at most 10"},
		{"dup", "users_file: users", "users_file: " + write("dup", "alice:"+bcryptSecret+"\nalice:"+sha512Secret+"\n"), dir + "/dup:2:1: user alice is listed twice (first on line 1)"},
		{"directory", "users_file: users", "users_file: " + dir, "frontends[0].routes[0].basic_auth.users_file: users file " + dir + ": must be a regular file"},
		{"empty", "users_file: users", "users_file: " + write("empty", "# nobody\n"), dir + "/empty: lists no user"},
		{"bad name", "users_file: users", "users_file: " + write("badname", "al ice:"+bcryptSecret+"\n"), dir + "/badname:1:1: user name must be"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := strings.Replace(accessDoc(good), good, "users", 1)
			if !strings.Contains(doc, tc.from) {
				t.Fatalf("%q not in the document", tc.from)
			}
			doc = strings.Replace(doc, tc.from, tc.to, 1)
			_, err := Parse(filepath.Join(dir, "shoal.yaml"), []byte(doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v\nwant %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "ycMfc") || strings.Contains(err.Error(), ":secret") {
				t.Errorf("the error shows a hash or password: %v", err)
			}
		})
	}
}

func TestAccessOnTCP(t *testing.T) {
	doc := `frontends:
  - name: pg
    mode: tcp
    bind: [127.0.0.1:5433]
    trusted_proxies: [10.0.0.0/8]
    forwarded_headers: false
    routes: [{group: db, allow: [10.0.0.0/8]}]
groups:
  - {name: db, min_size: 1, max_size: 1, template: {command: [db]}}
`
	_, err := Parse("shoal.yaml", []byte(doc))
	for _, want := range []string{"shoal.yaml:5:22: frontends[0].trusted_proxies: applies to http frontends only",
		"shoal.yaml:6:24: frontends[0].forwarded_headers: applies to http frontends only",
		"frontends[0].routes[0].allow: applies to http frontends' routes only"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error = %v\nwant %q", err, want)
		}
	}
}

// TestParseForwardedHeaders: on unless a frontend says false; a value that
// is not a boolean is refused where it stands.
func TestParseForwardedHeaders(t *testing.T) {
	doc := func(v string) string {
		return `frontends:
  - {name: a, bind: [127.0.0.1:8080], routes: [{group: web}]}
  - {name: b, bind: [127.0.0.1:8081], routes: [{group: web}], forwarded_headers: ` + v + `}
groups:
  - {name: web, min_size: 1, max_size: 2, template: {command: [app]}}
`
	}
	cfg, err := Parse("shoal.yaml", []byte(doc("false")))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Frontends[0].ForwardedHeaders || cfg.Frontends[1].ForwardedHeaders {
		t.Errorf("forwarded_headers = %v, %v; want true (left out), false", cfg.Frontends[0].ForwardedHeaders, cfg.Frontends[1].ForwardedHeaders)
	}
	_, err = Parse("shoal.yaml", []byte(doc("sometimes")))
	if want := "shoal.yaml:3:82: frontends[1].forwarded_headers: must be true or false, got \"sometimes\""; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error = %v\nwant %q", err, want)
	}
}

// TestCheckPasswordHash: the hashes HAProxy 2.6 on Debian checks (each
// tried there with haproxy -c and requests) pass; others are refused.
func TestCheckPasswordHash(t *testing.T) {
	for _, h := range []string{
		bcryptSecret,
		"$2a$05$abcdefghijklmnopqrstuuOQiyCxlgf/oeuTqixKmWdcYUh4Hjl0a",
		"$2y$05$abcdefghijklmnopqrstuuOQiyCxlgf/oeuTqixKmWdcYUh4Hjl0a",
		sha512Secret,
		"$5$abcdefgh$gruCpC7VkOTspMQTTSAR8mtlO9Upms.fwqE5y16JVM.",
		"$6$rounds=5000$abcdefgh$ltjgWl6579NluT/Vi1nwEvcil.G5Nbc4NiXZaNGStk8PSwGfQv72N2CKPPrVACtLtip/cZ/1GM/O6IND4WQhG.",
	} {
		if err := CheckPasswordHash(h); err != nil {
			t.Errorf("%s: %v", h, err)
		}
	}
	for _, h := range []string{
		"", "secret", "$1$abc$abcdefghijklmnopqrstuv", "abJnggxhB/yWI", // plain, MD5 and DES crypt
		"$y$j9T$abcdefghijklmnop$3dL1LkYnZM.OVXuVdnnaKVDlLYT92dRwOzDZ5XiVCe.", // yescrypt: not accepted
		"$2b$05$short", bcryptCost12, "$6$abc$short", "$6$abcdefgh$" + sha512Secret[12:] + " x",
	} {
		if err := CheckPasswordHash(h); err == nil {
			t.Errorf("%q accepted", h)
		}
	}
}
