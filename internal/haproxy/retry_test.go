package haproxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

// hitCounter is a backend that counts the requests reaching it by method and
// path: /code/N answers status N, /sleep answers after HAProxy's server timeout.
type hitCounter struct {
	mu   sync.Mutex
	hits map[string]int
	port int
}

func startHitCounter(t *testing.T) *hitCounter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hitCounter{hits: make(map[string]int), port: ln.Addr().(*net.TCPAddr).Port}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		io.Copy(io.Discard, r.Body)
		h.mu.Lock()
		h.hits[r.Method+" "+r.URL.Path]++
		h.mu.Unlock()
		switch {
		case strings.HasPrefix(r.URL.Path, "/code/"):
			code, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/code/"))
			w.WriteHeader(code)
		case r.URL.Path == "/sleep":
			select {
			case <-time.After(2 * time.Second):
			case <-r.Context().Done():
			}
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return h
}

func (h *hitCounter) count(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hits[key]
}

// TestRetriesNeverReplayWrites checks which requests HAProxy sends to an
// instance again: with retries: idempotent, a request that may have reached
// the application only if its method is idempotent, never after the
// application's own 500; with retries: connect (a local group's default),
// none that may have reached it; with either, a failed connection (nothing
// was sent) for every method.
func TestRetriesNeverReplayWrites(t *testing.T) {
	for _, mode := range []string{config.RetriesIdempotent, config.RetriesConnect} {
		t.Run(mode, func(t *testing.T) { testRetries(t, mode) })
	}
}

func testRetries(t *testing.T, mode string) {
	requireHAProxy(t)
	ctx := context.Background()
	stateDir := t.TempDir()
	cleanupHAProxy(t, stateDir)
	port := freePort(t)
	cfg := testConfig(stateDir, "127.0.0.1:"+strconv.Itoa(port))
	// A short server timeout makes the timeout case quick; the connect
	// timeout also bounds the pause before a connection retry.
	cfg.HAProxy.Timeouts.Server, cfg.HAProxy.Timeouts.Connect = 300*time.Millisecond, 200*time.Millisecond
	// No check runs during the test: a server on a closed port stays UP.
	cfg.Groups[0].Health.Interval = time.Minute
	cfg.Groups[0].Retries = mode
	m := newTestManager(t, cfg)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	app := startHitCounter(t)
	health := cfg.Groups[0].Health
	if err := m.AddServer(ctx, Server{Backend: "web", Name: "app", Addr: loopback(app.port), Health: health}, true); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, m, map[string]string{"app": "UP"}, true)

	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	send := func(method, path string) int {
		t.Helper()
		req, err := http.NewRequest(method, fmt.Sprintf("http://127.0.0.1:%d%s", port, path), strings.NewReader("body"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}

	const once = 1
	retried := 4 // the first attempt and retries 3
	if mode == config.RetriesConnect {
		retried = once
	}
	for _, tc := range []struct {
		method, path string
		status, hits int
	}{
		{"POST", "/code/503", 503, once},
		{"POST", "/sleep", 504, once},
		{"PATCH", "/code/502", 502, once},
		{"POST", "/code/500", 500, once},
		{"GET", "/code/500", 500, once},
		{"GET", "/code/503", 503, retried},
		{"PUT", "/code/504", 504, retried},
		{"DELETE", "/code/502", 502, retried},
		{"GET", "/sleep", 504, retried},
	} {
		status := send(tc.method, tc.path)
		hits := app.count(tc.method + " " + tc.path)
		t.Logf("%s %s: status %d, reached the application %d times", tc.method, tc.path, status, hits)
		if status != tc.status || hits != tc.hits {
			t.Errorf("%s %s: status %d after %d hits, want %d after %d", tc.method, tc.path, status, hits, tc.status, tc.hits)
		}
	}

	// A connection that fails sends nothing: POSTs are retried and
	// redispatched to the live server.
	dead := Server{Backend: "web", Name: "dead", Addr: loopback(freePort(t)), Health: health}
	if err := m.AddServer(ctx, dead, true); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, m, map[string]string{"app": "UP", "dead": "UP"}, true)
	const posts = 6
	for range posts {
		if status := send("POST", "/code/201"); status != 201 {
			t.Errorf("POST with a dead server in rotation: status %d, want 201", status)
		}
	}
	st, err := statsByName(t, m, "web")
	if err != nil {
		t.Fatal(err)
	}
	if got := app.count("POST /code/201"); got != posts || st["dead"].Total == 0 {
		t.Errorf("%d POSTs reached the application %d times; the dead server had %d sessions (want %d and some)", posts, got, st["dead"].Total, posts)
	}
}
