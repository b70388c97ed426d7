package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/testcert"
)

// wakingGroup sleeps at 0 with waking_page, quick checks and a short
// idle_after, so that a test can wake it, let it sleep and wake it again.
func wakingGroup() groupSpec {
	return groupSpec{
		Name: "web", Min: 0, Max: 1, CooldownDn: "1s",
		Health: "{path: /healthz, interval: 200ms, rise: 1, fall: 2, timeout: 1s, grace: 3s}",
		Extra:  "    scale_to_zero: {idle_after: 4s, max_queue: 50, waking_page: true}\n",
	}
}

const browserAccept = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"

// TestWakingPage: while the group wakes, a browser gets the self-reloading
// page at once (503, Retry-After: 1, meta refresh) and an API client's
// request is held and then served by the instance; asleep again, a browser
// alone, reloading as the page says, wakes the group and reaches it.
func TestWakingPage(t *testing.T) {
	parallel(t) // waits for wakes and a sleep, no load
	// The instance takes 3 s to listen: the API client is still held when
	// the browser asks.
	g := wakingGroup()
	slow := slowZeroGroup(3*time.Second, 50)
	g.Command = slow.Command
	g.Health = "{path: /healthz, interval: 200ms, rise: 1, fall: 2, timeout: 1s, grace: 4s}"
	e := newEnv(t, "", g)
	e.start()
	e.waitAsleep(10 * time.Second)

	client := &http.Client{Timeout: 40 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	get := func(accept string) (*http.Response, string, error) {
		req, err := http.NewRequest("GET", "http://"+e.listen+"/", nil)
		if err != nil {
			return nil, "", err
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, string(b), err
	}

	type result struct {
		resp *http.Response
		err  error
	}
	api := make(chan result, 1)
	go func() {
		resp, _, err := get("application/json")
		api <- result{resp, err}
	}()
	// The API client is held (it shows as the backend's session) ...
	e.eventually("the API client's request held in the backend", 5*time.Second, func() error {
		select {
		case r := <-api:
			api <- r
			return fmt.Errorf("answered before the wake: %v %v", r.resp, r.err)
		default:
		}
		if n := e.backendSessions("web"); n != "1" {
			return fmt.Errorf("scur %s", n)
		}
		return nil
	})
	// ... while a browser gets the page at once.
	start := time.Now()
	resp, body, err := get(browserAccept)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" ||
		!strings.Contains(body, `http-equiv="refresh" content="1"`) || resp.Header.Get("X-Instance") != "" || took > 2*time.Second {
		t.Fatalf("browser while waking: %d after %v (X-Instance %q, Retry-After %q)\n%s", resp.StatusCode, took,
			resp.Header.Get("X-Instance"), resp.Header.Get("Retry-After"), body)
	}
	select {
	case r := <-api:
		if r.err != nil || r.resp.StatusCode != http.StatusOK || r.resp.Header.Get("X-Instance") == "" {
			t.Fatalf("the held API request: %v %v", r.resp, r.err)
		}
	case <-time.After(35 * time.Second):
		t.Fatal("the held API request was not served within 35 s")
	}
	if resp, _, err := get(browserAccept); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("browser once awake: %v %v", resp, err)
	}

	// Asleep again: a browser alone, reloading each second, wakes it.
	e.waitAsleep(40 * time.Second)
	pages := 0
	deadline := time.Now().Add(40 * time.Second)
	for {
		resp, _, err := get(browserAccept)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusOK && resp.Header.Get("X-Instance") != "" {
			break
		}
		if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("browser reloading the page: %d after %d pages", resp.StatusCode, pages)
		}
		pages++
		time.Sleep(time.Second) // the page's refresh
	}
	t.Logf("a browser alone woke the group after %d waking pages", pages)
	if pages == 0 {
		t.Fatal("the sleeping group answered a browser without a waking page")
	}
}

// backendSessions reads a backend's current sessions (scur) from HAProxy.
func (e *shoalEnv) backendSessions(backend string) string {
	e.t.Helper()
	c := haproxy.Client{Socket: filepath.Join(e.stateDir(), "haproxy", "admin.sock")}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := c.Exec(ctx, "show stat "+backend+" 2 -1")
	if err != nil {
		e.t.Fatalf("read HAProxy stats: %v", err)
	}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Split(l, ","); len(f) > 4 && f[1] == "BACKEND" {
			return f[4]
		}
	}
	return "?"
}

// TestWakeByWebSocketAndH2: a WebSocket upgrade and an HTTP/2 request over
// TLS (ALPN h2) each wake a sleeping group and reach the instance: the
// upgrade is held like any request, then the socket echoes through
// HAProxy; the h2 stream is answered by the instance.
func TestWakeByWebSocketAndH2(t *testing.T) {
	parallel(t) // waits for two wakes and a sleep, no load
	ca := testcert.NewCA(t)
	g := wakingGroup()
	g.Extra = strings.Replace(g.Extra, ", waking_page: true", "", 1)
	e := newEnv(t, "", g)
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
      - {group: web}
`, e.listen, secure, secure))
	e.start()
	e.waitAsleep(10 * time.Second)

	// WebSocket: the upgrade wakes the group.
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	wsCfg, err := websocket.NewConfig("ws://"+e.listen+"/ws", "http://"+e.listen)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ws, err := wsCfg.DialContext(ctx)
	if err != nil {
		t.Fatalf("WebSocket to a sleeping group: %v", err)
	}
	t.Logf("WebSocket upgrade answered after %v", time.Since(start).Round(time.Millisecond))
	_ = ws.SetDeadline(time.Now().Add(10 * time.Second))
	for _, msg := range []string{"hello", "again"} {
		if err := websocket.Message.Send(ws, msg); err != nil {
			t.Fatal(err)
		}
		var got string
		if err := websocket.Message.Receive(ws, &got); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(got, "web-") || !strings.HasSuffix(got, ": "+msg) {
			t.Fatalf("WebSocket echo of %q: %q, want it from a web instance", msg, got)
		}
	}
	ws.Close()
	e.waitEvent("a wake decision", 5*time.Second, 0, accepted("wake", "wake"))

	// HTTP/2 over TLS: asleep again, an h2 request wakes it.
	e.waitAsleep(40 * time.Second)
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{ServerName: "a.test", RootCAs: ca.Pool},
		ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, secure)
		},
	}
	defer tr.CloseIdleConnections()
	h2 := &http.Client{Timeout: 40 * time.Second, Transport: tr}
	resp, err := h2.Get("https://a.test/")
	if err != nil {
		t.Fatalf("h2 request to a sleeping group: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 || !strings.HasPrefix(resp.Header.Get("X-Instance"), "web-") {
		t.Fatalf("h2 request: %s over %s, X-Instance %q; want 200 over HTTP/2 from a web instance", resp.Status, resp.Proto, resp.Header.Get("X-Instance"))
	}
}
