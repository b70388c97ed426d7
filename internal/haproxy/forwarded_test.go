package haproxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/shoal-lb/shoal/internal/config"
)

// TestForwardedHeadersOff runs real HAProxy with a frontend's
// forwarded_headers off: the instance gets the request's headers as the
// client sent them (a forged X-Forwarded-For included, none added) and the
// configuration has no rule for them; a reload that turns them on replaces
// the client's with HAProxy's.
func TestForwardedHeadersOff(t *testing.T) {
	requireHAProxy(t)
	ctx := context.Background()
	stateDir := t.TempDir()
	cleanupHAProxy(t, stateDir)
	cfg := testConfig(stateDir, loopback(freePort(t)))
	cfg.Frontends[0].ForwardedHeaders = false

	rendered, err := Render(cfg, PathsFor(stateDir))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(rendered, "forwardfor") || strings.Contains(rendered, "X-Forwarded") {
		t.Errorf("forwarded_headers: false still renders a forwarded header:\n%s", rendered)
	}

	m := startForwardEcho(ctx, t, cfg)

	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	defer client.CloseIdleConnections()
	seen := func(forged bool) string {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+cfg.Listen+"/", nil)
		if forged {
			req.Header.Set("X-Forwarded-For", "6.6.6.6")
			req.Header.Set("X-Forwarded-Proto", "https")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d, %v", resp.StatusCode, err)
		}
		return string(body)
	}
	for _, c := range []struct {
		forged bool
		want   string
	}{{false, "|"}, {true, "6.6.6.6|https"}} {
		if got := seen(c.forged); got != c.want {
			t.Errorf("off, forged headers %v: the instance saw %q, want %q", c.forged, got, c.want)
		}
	}

	on := *cfg
	on.Frontends = []config.Frontend{cfg.Frontends[0]}
	on.Frontends[0].ForwardedHeaders = true
	if ok, err := m.Reload(ctx, &on); err != nil || !ok {
		t.Fatalf("Reload = %v, %v", ok, err)
	}
	// The old worker answers a kept-alive connection's next request.
	client.CloseIdleConnections()
	for _, forged := range []bool{false, true} {
		if got := seen(forged); got != "127.0.0.1|http" {
			t.Errorf("on, forged headers %v: the instance saw %q, want 127.0.0.1|http", forged, got)
		}
	}
}

// startForwardEcho starts HAProxy for cfg with one server, app, in group
// web: an instance that answers with the forwarded headers it received,
// "X-Forwarded-For|X-Forwarded-Proto" (each header's values joined by ",").
func startForwardEcho(ctx context.Context, t *testing.T, cfg *config.Config) *Manager {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s|%s", strings.Join(r.Header.Values("X-Forwarded-For"), ","), strings.Join(r.Header.Values("X-Forwarded-Proto"), ","))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	m := newTestManager(t, cfg)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.AddServer(ctx, Server{Backend: "web", Name: "app", Addr: loopback(ln.Addr().(*net.TCPAddr).Port), Health: cfg.Groups[0].Health}, true); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, m, map[string]string{"app": "UP"}, true)
	return m
}
