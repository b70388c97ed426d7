package haproxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/certstore"
	"github.com/shoal-lb/shoal/internal/config"
)

// TestRenderACME: a frontend with tls.acme sends the CA's challenges to the
// shoal_acme backend before any group's rule, the backend's server is
// shoal's challenge socket, and HAProxy accepts the result; without ACME
// neither is rendered; a group cannot take the backend's name.
func TestRenderACME(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir, "127.0.0.1:8080")
	plain, err := Render(cfg, PathsFor(dir))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain, acmeBackend) {
		t.Errorf("config without ACME mentions %s:\n%s", acmeBackend, plain)
	}

	// HTTP-01 asks on the plain bind; the TLS bind serves what ACME got.
	cfg.Frontends = []config.Frontend{{Name: "shoal", Bind: []string{cfg.Listen, "127.0.0.1:8443"}, Mode: config.ModeHTTP,
		Routes: cfg.Frontends[0].Routes,
		TLS: &config.TLS{ACME: &config.ACME{Email: "ops@example.com", Domains: []string{"example.com"}},
			Bind: []string{"127.0.0.1:8443"}, ALPN: []string{"h2", "http/1.1"}, MinVersion: "1.2", TicketKeys: config.TicketKeysOff}}}
	got, err := Render(cfg, PathsFor(dir))
	if err != nil {
		t.Fatal(err)
	}
	rule := "    use_backend shoal_acme if { path_beg /.well-known/acme-challenge/ }\n"
	i, j := strings.Index(got, rule), strings.Index(got, "    use_backend api ")
	if i < 0 || j < 0 || i > j {
		t.Errorf("the challenge rule is not before the groups' (at %d, api's at %d):\n%s", i, j, got)
	}
	// The allow comes before every http-request rule that could answer.
	allow := "    http-request allow if { path_beg /.well-known/acme-challenge/ }\n"
	i, j = strings.Index(got, allow), strings.Index(got, "    http-request set-header X-Forwarded-Proto")
	if i < 0 || j < 0 || i > j {
		t.Errorf("the challenge's allow is not before the other http-request rules (at %d, X-Forwarded-Proto's at %d):\n%s", i, j, got)
	}
	if w := "\nbackend shoal_acme\n    mode http\n    no log\n    server shoal " + ACMESocket(PathsFor(dir)) + "\n"; !strings.Contains(got, w) {
		t.Errorf("config lacks %q:\n%s", w, got)
	}
	cfg.Groups[0].Name = acmeBackend
	if _, err := Render(cfg, PathsFor(dir)); err == nil || !strings.Contains(err.Error(), `group name "shoal_acme"`) {
		t.Errorf("a group named shoal_acme: %v, want an error naming it", err)
	}
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy not installed")
	}
	if err := certstore.New(dir, nil, nil).Write(cfg.Frontends); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "haproxy.cfg")
	writeFile(t, path, got)
	if out, err := exec.Command(bin, "-c", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
}

// TestACMEChallengeBeforeRules: on a real HAProxy, a frontend with ACME, a
// rate limit of 2 requests, a redirect route and a catch-all maintenance
// page (both http-request rules, which HAProxy runs before any use_backend)
// still passes every challenge request, plain and over TLS, to shoal's
// challenge socket, however many; other requests get the page, the
// redirect, then 429.
func TestACMEChallengeBeforeRules(t *testing.T) {
	requireHAProxy(t)
	ctx := context.Background()
	stateDir := t.TempDir()
	cleanupHAProxy(t, stateDir)
	plain, secure := "127.0.0.1:"+strconv.Itoa(freePort(t)), "127.0.0.1:"+strconv.Itoa(freePort(t))
	cfg := testConfig(stateDir, plain)
	cfg.Frontends = []config.Frontend{{Name: "edge", Bind: []string{plain, secure}, Mode: config.ModeHTTP,
		RateLimit: &config.RateLimit{Requests: 2, Per: time.Minute, By: "ip"},
		Routes: []config.Route{
			{PathPrefix: []string{"/old/"}, Redirect: &config.Redirect{Code: 302, Location: "https://example.com/new"}},
			{Respond: &config.Respond{Status: 503, ContentType: "text/plain", Body: "maintenance"}},
		},
		TLS: &config.TLS{ACME: &config.ACME{Email: "ops@example.com", Domains: []string{"a.test"}}, Bind: []string{secure},
			ALPN: []string{"h2", "http/1.1"}, MinVersion: "1.2", RedirectHTTP: true, TicketKeys: config.TicketKeysOff}}}
	if err := certstore.New(stateDir, nil, nil).Write(cfg.Frontends); err != nil {
		t.Fatal(err)
	}
	m := newTestManager(t, cfg)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", ACMESocket(PathsFor(stateDir)))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "key-authorization "+r.URL.Path)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	client := &http.Client{
		Timeout:       5 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		// The placeholder certificate is self-signed: what is checked
		// here is where the request goes.
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true},
	}
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := client.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for i := range 6 {
		for _, base := range []string{"http://" + plain, "https://" + secure} {
			path := fmt.Sprintf("/.well-known/acme-challenge/token%d", i)
			if code, body := get(base + path); code != 200 || body != "key-authorization "+path {
				t.Errorf("challenge %d at %s: %d %q, want 200 from shoal's socket", i, base, code, body)
			}
		}
	}
	if code, body := get("https://" + secure + "/"); code != 503 || body != "maintenance" {
		t.Errorf("/: %d %q, want the maintenance page", code, body)
	}
	if code, _ := get("https://" + secure + "/old/x"); code != 302 {
		t.Errorf("/old/x: %d, want the route's redirect", code)
	}
	if code, _ := get("https://" + secure + "/"); code != 429 {
		t.Errorf("a third request: %d, want 429 (the challenges are not counted)", code)
	}
	if code, body := get("http://" + plain + "/.well-known/acme-challenge/after"); code != 200 || body != "key-authorization /.well-known/acme-challenge/after" {
		t.Errorf("a challenge from a limited client: %d %q, want 200 from shoal's socket", code, body)
	}
}
