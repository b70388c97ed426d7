package haproxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

// TestWakingPage: with waking_page, while a group has no server a browser's
// request gets the self-reloading page at once (503, Retry-After: 1, a meta
// refresh), not counted towards max_queue, while an API client's request is
// held as without it and served once a server is UP; then the browser gets
// the application.
func TestWakingPage(t *testing.T) {
	t.Parallel() // its own HAProxy, state dir and ports
	requireHAProxy(t)
	ctx := context.Background()
	stateDir := t.TempDir()
	cleanupHAProxy(t, stateDir)
	port := freePort(t)
	cfg := testConfig(stateDir, "127.0.0.1:"+strconv.Itoa(port))
	cfg.HAProxy.Timeouts.Queue = 10 * time.Second
	cfg.Groups[0].ScaleToZero = &config.ScaleToZero{IdleAfter: time.Minute, MaxQueue: 1, WakingPage: true}
	m := newTestManager(t, cfg)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d/", port)

	held := fire(base, 1) // max_queue 1: the API client takes the only place
	waitFor(t, 2*time.Second, "1 held request in the backend's scur", func() (bool, string) {
		out, err := m.Client().Exec(ctx, "show stat web 2 -1")
		if err != nil {
			return false, err.Error()
		}
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Split(l, ","); len(f) > 4 && f[1] == "BACKEND" {
				return f[4] == "1", "scur " + f[4]
			}
		}
		return false, out
	})

	browser := func() (*http.Response, string, time.Duration) {
		t.Helper()
		req, _ := http.NewRequest("GET", base, nil)
		req.Header.Set("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
		start := time.Now()
		resp, err := (&http.Client{Timeout: 15 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b), time.Since(start)
	}
	for range 3 { // beyond max_queue, and never held
		resp, body, took := browser()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" ||
			!strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || resp.Header.Get("Cache-Control") != "no-store" ||
			!strings.Contains(body, `<meta http-equiv="refresh" content="1">`) || took > time.Second {
			t.Fatalf("browser while waking: %d after %v, headers %v\n%s", resp.StatusCode, took, resp.Header, body)
		}
	}
	select {
	case r := <-held:
		t.Fatalf("the held request was answered before any server: %d %q", r.status, r.body)
	default:
	}

	b := startBackend(t, "b1")
	if err := m.AddServer(ctx, Server{Backend: "web", Name: "b1", Addr: loopback(b.port), Health: cfg.Groups[0].Health}, false); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-held:
		if r.status != http.StatusOK || r.body != "b1" {
			t.Fatalf("held request: %d %q, want 200 from b1", r.status, r.body)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the held request was not served within 8 s of adding a server")
	}
	if resp, body, _ := browser(); resp.StatusCode != http.StatusOK || body != "b1" {
		t.Fatalf("browser once awake: %d %q", resp.StatusCode, body)
	}
}
