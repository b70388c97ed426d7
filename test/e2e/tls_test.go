package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/testcert"
	"github.com/shoal-lb/shoal/internal/testpebble"
)

// TestTLSCertificates: shoal serves a TLS frontend from certificates in the
// config; `shoal certs` and /metrics show their expiry (one within 14 days
// is flagged); a certificate rewritten on disk is served after `shoal
// reload` without an HAProxy reload, and so is a site added or removed; an
// expired one is refused with the field named, and the served one stays.
func TestTLSCertificates(t *testing.T) {
	parallel(t) // waits for reloads and certificates, no load
	ca := testcert.NewCA(t)
	e := newEnv(t, "", groupSpec{Name: "web", Min: 1, Max: 1})
	certs := filepath.Join(e.dir, "certs")
	if err := os.Mkdir(certs, 0o700); err != nil {
		t.Fatal(err)
	}
	ca.Valid(t, "a.test").Write(t, certs, "a")
	ca.Leaf(t, time.Now().Add(-time.Hour), time.Now().Add(7*24*time.Hour), "b.test").Write(t, certs, "b")
	secure := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	metrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	b, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	top := fmt.Sprintf(`frontends:
  - name: edge
    bind: [%s, %s]
    tls:
      certificates: [{cert: certs/a.crt, key: certs/a.key}, {cert: certs/b.crt, key: certs/b.key}]
      bind: [%s]
      redirect_http: true
    routes: [{group: web}]
metrics: {listen: %s}
`, e.listen, secure, secure, metrics)
	text := strings.Replace(string(b), "listen: "+e.listen+"\n", top, 1)
	if err := os.WriteFile(e.cfgPath, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	e.start()

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{ServerName: "a.test", RootCAs: ca.Pool}, DisableKeepAlives: true}}
	e.eventually("the instance answers over https", 30*time.Second, func() error {
		resp, err := client.Get("https://" + secure + "/")
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %s", resp.Status)
		}
		return nil
	})
	serial := func(name string) *big.Int {
		t.Helper()
		conn, err := tls.Dial("tcp", secure, &tls.Config{ServerName: name, RootCAs: ca.Pool})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber
	}

	out, stderr, code := e.cli("certs")
	if code != 0 {
		t.Fatalf("shoal certs: exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "a.test") || strings.Contains(lines[1], "EXPIRING") ||
		!strings.Contains(lines[2], "b.test") || !strings.Contains(lines[2], "EXPIRING") {
		t.Errorf("shoal certs:\n%s", out)
	}
	out, _, _ = e.cli("certs", "-o", "json")
	var resp api.CertsResponse
	if err := json.Unmarshal([]byte(out), &resp); err != nil || len(resp.Certificates) != 2 || resp.Certificates[1].Names[0] != "b.test" ||
		!resp.Certificates[1].Expiring || resp.Certificates[1].ExpiresIn < 6*24*3600 {
		t.Errorf("shoal certs -o json (%v):\n%s", err, out)
	}
	mresp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if !strings.Contains(string(mb), `shoal_tls_certificate_expiry_seconds{frontend="edge",name="b.test",site="b"} 6`) {
		t.Errorf("/metrics lacks b.test's expiry gauge (about 6.04e+05):\n%s", grepLines(string(mb), "shoal_tls"))
	}

	// The same file, a new certificate: served after a reload, HAProxy
	// untouched.
	leaf := ca.Valid(t, "a.test")
	leaf.Write(t, certs, "a")
	out, stderr, code = e.cli("reload")
	if code != 0 || !strings.Contains(out, "HAProxy unchanged") {
		t.Fatalf("shoal reload: exit %d: %s%s", code, out, stderr)
	}
	if got := serial("a.test"); got.Cmp(leaf.Serial) != 0 {
		t.Errorf("after reload a.test serves %x, want %x", got, leaf.Serial)
	}

	// A site added, then removed, by a reload: served and gone, HAProxy
	// untouched.
	c := ca.Valid(t, "c.test")
	c.Write(t, certs, "c")
	two := "{cert: certs/b.crt, key: certs/b.key}]"
	text = strings.Replace(text, two, "{cert: certs/b.crt, key: certs/b.key}, {cert: certs/c.crt, key: certs/c.key}]", 1)
	if err := os.WriteFile(e.cfgPath, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, stderr, code = e.cli("reload"); code != 0 || !strings.Contains(out, "HAProxy unchanged") {
		t.Fatalf("shoal reload adding c.test: exit %d: %s%s", code, out, stderr)
	}
	if got := serial("c.test"); got.Cmp(c.Serial) != 0 {
		t.Errorf("added c.test serves %x, want %x", got, c.Serial)
	}
	text = strings.Replace(text, ", {cert: certs/c.crt, key: certs/c.key}]", "]", 1)
	if err := os.WriteFile(e.cfgPath, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, stderr, code = e.cli("reload"); code != 0 || !strings.Contains(out, "HAProxy unchanged") {
		t.Fatalf("shoal reload removing c.test: exit %d: %s%s", code, out, stderr)
	}
	conn, err := tls.Dial("tcp", secure, &tls.Config{ServerName: "c.test", InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := conn.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(leaf.Serial) != 0 {
		t.Errorf("removed c.test serves %x, want the default (a.test's %x)", got, leaf.Serial)
	}
	conn.Close()

	// An expired certificate is a config error naming the field; the
	// running one stays.
	ca.Leaf(t, time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour), "a.test").Write(t, certs, "a")
	out, stderr, code = e.cli("reload")
	if code == 0 || !strings.Contains(stderr, "frontends[0].tls.certificates[0].cert: "+filepath.Join(certs, "a.crt")+" expired on") {
		t.Errorf("reload with an expired certificate: exit %d:\n%s%s", code, out, stderr)
	}
	if got := serial("a.test"); got.Cmp(leaf.Serial) != 0 {
		t.Errorf("after the refused reload a.test serves %x, want still %x", got, leaf.Serial)
	}
}

// TestTLSACME: shoal serve obtains a certificate from pebble over HTTP-01,
// the CA's challenge passing through shoal's own HAProxy (past redirect_http
// and a catch-all respond route), and serves it by SNI on the TLS bind, where
// it verifies against pebble's root; `shoal certs` lists it as served.
func TestTLSACME(t *testing.T) {
	parallel(t) // waits on pebble; its own CA and ports, no load
	const domain = "www.shoal.test"
	e := newEnv(t, "", groupSpec{Name: "web", Min: 1, Max: 1})
	_, port, err := net.SplitHostPort(e.listen)
	if err != nil {
		t.Fatal(err)
	}
	httpPort, _ := strconv.Atoi(port)
	ca := testpebble.Start(t, httpPort, time.Hour)
	secure := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	b, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	top := fmt.Sprintf(`frontends:
  - name: edge
    bind: [%s, %s]
    tls:
      acme: {email: ops@shoal.test, directory: %q, ca: %q, domains: [%s]}
      bind: [%s]
      redirect_http: true
    routes:
      - {host: [%s], group: web}
      - {respond: {status: 503, body: "not here"}}
`, e.listen, secure, ca.Directory, ca.CAFile, domain, secure, domain)
	if err := os.WriteFile(e.cfgPath, []byte(strings.Replace(string(b), "listen: "+e.listen+"\n", top, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	e.start()

	roots := ca.Roots(t)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{ServerName: domain, RootCAs: roots}, DisableKeepAlives: true}}
	e.eventually("the certificate from pebble is served and the instance answers", 30*time.Second, func() error {
		req, err := http.NewRequest(http.MethodGet, "https://"+secure+"/", nil)
		if err != nil {
			return err
		}
		req.Host = domain // the route's
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %s", resp.Status)
		}
		return nil
	})
	conn, err := tls.Dial("tcp", secure, &tls.Config{ServerName: domain, RootCAs: roots})
	if err != nil {
		t.Fatal(err)
	}
	leaf := conn.ConnectionState().PeerCertificates[0]
	conn.Close()
	out, _, code := e.cli("certs", "-o", "json")
	var resp api.CertsResponse
	if err := json.Unmarshal([]byte(out), &resp); code != 0 || err != nil {
		t.Fatalf("shoal certs -o json: exit %d, %v:\n%s", code, err, out)
	}
	var listed bool
	for _, c := range resp.Certificates {
		listed = listed || c.Site == domain && c.Serial == leaf.SerialNumber.Text(16) && !c.NotServed && c.Pending == ""
	}
	if !listed {
		t.Errorf("shoal certs does not list %s served with serial %x:\n%s", domain, leaf.SerialNumber, out)
	}
}

func grepLines(s, substr string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// TestHTTPSRedirectOnTLSBind: the README's routes, a redirect to https for
// /admin and a group for the rest, on a frontend with a plain and a TLS
// bind: /admin over TLS reaches the group (a redirect there would point at
// the same URL, forever), and over plain http it is redirected once, to an
// https URL that then serves it.
func TestHTTPSRedirectOnTLSBind(t *testing.T) {
	parallel(t) // waits for one instance, no load
	ca := testcert.NewCA(t)
	e := newEnv(t, "", groupSpec{Name: "web", Min: 1, Max: 1})
	certs := filepath.Join(e.dir, "certs")
	if err := os.Mkdir(certs, 0o700); err != nil {
		t.Fatal(err)
	}
	ca.Valid(t, "a.test").Write(t, certs, "a")
	secure := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	e.useFrontends(fmt.Sprintf(`frontends:
  - name: edge
    bind: [%s, %s]
    tls:
      certificates: [{cert: certs/a.crt, key: certs/a.key}]
      bind: [%s]
    routes:
      - {path_prefix: /admin, redirect: {https: true}}
      - {group: web}
`, e.listen, secure, secure))
	if out, stderr, code := e.cli("validate", "-c", e.cfgPath); code != 0 {
		t.Fatalf("validate: %d\n%s%s", code, out, stderr)
	}
	e.start()
	e.waitInService("web", 1)

	// https://a.test/... is the TLS bind; no redirect is followed.
	redirects := 0
	client := &http.Client{
		Timeout: 5 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			redirects++
			return http.ErrUseLastResponse
		},
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{ServerName: "a.test", RootCAs: ca.Pool},
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				if addr == "a.test:443" {
					addr = secure
				}
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			},
		},
	}
	// The instance answers 404 page not found for /admin/...: the request
	// reached the group (HAProxy would answer 503 or redirect).
	const fromInstance = "404 page not found\n"
	get := func(url string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "a.test"
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	if resp, body := get("https://a.test/admin/users"); body != fromInstance || resp.Header.Get("Location") != "" {
		t.Errorf("/admin over TLS: %s to %q %q, want the web group's instance's answer %q", resp.Status, resp.Header.Get("Location"), body, fromInstance)
	}
	resp, _ := get("http://" + e.listen + "/admin/users?q=1")
	loc := resp.Header.Get("Location")
	if resp.StatusCode != 302 || loc != "https://a.test/admin/users?q=1" {
		t.Fatalf("/admin over http: %s to %q, want 302 to https://a.test/admin/users?q=1", resp.Status, loc)
	}
	if resp, body := get(loc); body != fromInstance {
		t.Errorf("%s, the redirect's target: %s %q, want the instance's answer (redirected once)", loc, resp.Status, body)
	}
	if redirects != 1 {
		t.Errorf("%d redirects, want 1 (the plain request's)", redirects)
	}
	for _, u := range []string{"http://" + e.listen + "/", "https://a.test/"} {
		if resp, _ := get(u); resp.StatusCode != 200 {
			t.Errorf("%s: %s, want 200 from the web group", u, resp.Status)
		}
	}
}

// TestTLSACMEPlainFrontend: the CA's HTTP-01 fetch arrives on port 80,
// bound by a plain frontend of its own that routes to a group (and
// redirects a path), not by the frontend with tls.acme, which binds only
// TLS: pebble still validates and the certificate is served. Meanwhile
// one client floods the challenge path on port 80 with tokens it guesses:
// HAProxy answers them all itself, 404 up to the per-client limit and 429
// beyond, and none reaches shoal.
func TestTLSACMEPlainFrontend(t *testing.T) {
	parallel(t) // waits on pebble; its own CA and ports, no load
	const domain = "www.shoal.test"
	e := newEnv(t, "", groupSpec{Name: "web", Min: 1, Max: 1})
	_, port, err := net.SplitHostPort(e.listen)
	if err != nil {
		t.Fatal(err)
	}
	httpPort, _ := strconv.Atoi(port)
	ca := testpebble.Start(t, httpPort, time.Hour)
	secure := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	e.useFrontends(fmt.Sprintf(`frontends:
  - name: port80
    bind: [%s]
    routes:
      - {path_prefix: /old, redirect: {location: /new}}
      - {group: web}
  - name: edge
    bind: [%s]
    tls:
      acme: {email: ops@shoal.test, directory: %q, ca: %q, domains: [%s]}
    routes: [{group: web}]
`, e.listen, secure, ca.Directory, ca.CAFile, domain))
	e.start()

	// The flood: one client (127.0.0.2), one request after another.
	const flood, perClient = 200, 24 // 20 + 4 per domain in 10 s
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}}
	defer client.CloseIdleConnections()
	codes := map[int]int{}
	start := time.Now()
	for i := range flood {
		req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://%s/.well-known/acme-challenge/flood-%d", e.listen, i), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = domain
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes[resp.StatusCode]++
	}
	if elapsed := time.Since(start); elapsed < 10*time.Second && (codes[404] != perClient || codes[429] != flood-perClient) {
		t.Errorf("%d challenge requests from one client in %s: answers %v, want %d answered 404 and 429 for the rest", flood, elapsed, codes, perClient)
	}

	roots := ca.Roots(t)
	tlsClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{ServerName: domain, RootCAs: roots}, DisableKeepAlives: true}}
	e.eventually("the certificate from pebble is served", 60*time.Second, func() error {
		resp, err := tlsClient.Get("https://" + secure + "/")
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %s", resp.Status)
		}
		return nil
	})
	// What reached shoal's challenge handler: pebble's fetches (a few, for
	// tokens shoal had), none of the flood's.
	c := haproxy.Client{Socket: filepath.Join(e.stateDir(), "haproxy", "admin.sock")}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := c.Exec(ctx, "show stat shoal_acme 4 -1")
	if err != nil {
		t.Fatal(err)
	}
	var stot int
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Split(l, ","); len(f) > 7 && f[1] == "shoal" {
			stot, _ = strconv.Atoi(f[7])
		}
	}
	if stot < 1 || stot > 10 {
		t.Errorf("%d requests reached shoal's challenge handler, want pebble's few and none of the flood's:\n%s", stot, out)
	}
	t.Logf("flood answers %v; %d requests reached shoal's challenge handler", codes, stot)
}
