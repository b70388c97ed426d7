package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Hashes of "secret": bcrypt (cost 5) and SHA-512 crypt.
const (
	e2eBcrypt = "$2b$05$ycMfcntNMjU5XQJm.hfFSuUN3tQaAQ.IMIAnjC26yqBWcjQ.ByWRe"
	e2eSHA512 = "$6$abcdefgh$ltjgWl6579NluT/Vi1nwEvcil.G5Nbc4NiXZaNGStk8PSwGfQv72N2CKPPrVACtLtip/cZ/1GM/O6IND4WQhG."
)

// fromClient is an HTTP client whose connections come from source (an
// address of 127.0.0.0/8), so that HAProxy's src is that address.
func fromClient(source string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
		DisableKeepAlives: true,
	}}
}

// TestAccessControl: a route's allow and deny lists see the connection's
// source, or behind a trusted proxy the last untrusted X-Forwarded-For
// hop, so a forged header from anyone else changes nothing; basic_auth
// answers 401 with a challenge until a user of the users file (bcrypt or
// SHA-512 crypt) gives the right password. A refused request never reaches
// an instance (no X-Instance), and /metrics counts each refusal exactly.
func TestAccessControl(t *testing.T) {
	parallel(t)
	e := newEnv(t, "", groupSpec{Name: "web", Min: 1, Max: 1})
	users := filepath.Join(e.dir, "users")
	if err := os.WriteFile(users, []byte("# who may see private.test\nalice:"+e2eBcrypt+"\nbob:"+e2eSHA512+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.useFrontends(fmt.Sprintf(`frontends:
  - name: edge
    bind: [%s]
    trusted_proxies: [127.0.0.2, 10.8.0.0/16]
    routes:
      - {host: admin.test, allow: [127.0.0.1, 10.9.0.0/16], deny: [10.9.9.0/24], group: web}
      - {host: private.test, basic_auth: {users_file: %s}, group: web}
      - {group: web}
`, e.listen, users))
	if out, stderr, code := e.cli("validate", "-c", e.cfgPath); code != 0 {
		t.Fatalf("validate: %d\n%s%s", code, out, stderr)
	}
	e.start()
	e.waitInService("web", 1)

	get := func(from, host, xff, user, pass string) *http.Response {
		t.Helper()
		req, err := http.NewRequest("GET", "http://"+e.listen+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		if xff != "" {
			req.Header.Set("X-Forwarded-For", xff)
		}
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		c := fromClient(from)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s from %s: %v", host, from, err)
		}
		resp.Body.Close()
		return resp
	}
	forbidden, unauthorized := 0, 0
	for _, tc := range []struct {
		name, from, xff string
		want            int
	}{
		{"allowed source", "127.0.0.1", "", 200},
		{"other source", "127.0.0.3", "", 403},
		{"forged header from an untrusted source", "127.0.0.3", "127.0.0.1", 403},
		{"forged header, allowed source", "127.0.0.1", "10.9.9.9", 200},
		{"trusted proxy: allowed client", "127.0.0.2", "10.9.1.1", 200},
		{"trusted proxy: forged left hops are not read", "127.0.0.2", "127.0.0.1, 10.9.9.5", 403},
		{"trusted proxy: denied client", "127.0.0.2", "10.9.9.5", 403},
		{"trusted proxy: client behind a second trusted proxy", "127.0.0.2", "10.9.1.1, 10.8.0.1", 200},
		{"trusted proxy: denied client behind a second trusted proxy", "127.0.0.2", "10.9.9.5, 10.8.0.1", 403},
		{"trusted proxy: client not allowed", "127.0.0.2", "203.0.113.7", 403},
		{"trusted proxy itself is not allowed", "127.0.0.2", "", 403},
	} {
		resp := get(tc.from, "admin.test", tc.xff, "", "")
		reached := resp.Header.Get("X-Instance") != ""
		if resp.StatusCode != tc.want || reached != (tc.want == 200) {
			t.Errorf("%s: from %s X-Forwarded-For %q: %d (reached an instance: %v), want %d", tc.name, tc.from, tc.xff, resp.StatusCode, reached, tc.want)
		}
		if tc.want == 403 {
			forbidden++
		}
	}

	for _, tc := range []struct {
		name, user, pass string
		want             int
	}{
		{"no credentials", "", "", 401},
		{"wrong password", "alice", "Secret", 401},
		{"unknown user", "carol", "secret", 401},
		{"bcrypt user", "alice", "secret", 200},
		{"SHA-512 crypt user", "bob", "secret", 200},
	} {
		resp := get("127.0.0.3", "private.test", "", tc.user, tc.pass)
		reached := resp.Header.Get("X-Instance") != ""
		if resp.StatusCode != tc.want || reached != (tc.want == 200) {
			t.Errorf("%s: %d (reached an instance: %v), want %d", tc.name, resp.StatusCode, reached, tc.want)
		}
		if tc.want == 401 {
			unauthorized++
			if ch := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(ch, "Basic realm=") {
				t.Errorf("%s: WWW-Authenticate %q", tc.name, ch)
			}
		}
	}
	// The catch-all route is open to anyone.
	if resp := get("127.0.0.3", "other.test", "", "", ""); resp.StatusCode != 200 {
		t.Errorf("open route: %d", resp.StatusCode)
	}

	_, body := httpGetUnix(t, e, "/metrics")
	for _, want := range []string{
		fmt.Sprintf(`shoal_route_denied_requests_total{frontend="edge",route="1",status="403"} %d`, forbidden),
		`shoal_route_denied_requests_total{frontend="edge",route="1",status="401"} 0`,
		fmt.Sprintf(`shoal_route_denied_requests_total{frontend="edge",route="2",status="401"} %d`, unauthorized),
		`shoal_route_denied_requests_total{frontend="edge",route="2",status="403"} 0`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(body, "shoal_route_denied"))
		}
	}
	if strings.Contains(body, `route="3"`) {
		t.Errorf("/metrics counts the open route:\n%s", grepLines(body, "shoal_route_denied"))
	}
	// Neither a hash nor a password is in shoal's log.
	if log := e.log.String(); strings.Contains(log, "ycMfc") || strings.Contains(log, "ltjgWl") || strings.Contains(log, "secret") {
		t.Error("shoal's log shows a password or hash")
	}
}
