package metrics

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/proc"
	"github.com/shoal-lb/shoal/internal/testdep"
	"github.com/shoal-lb/shoal/internal/testport"
)

// startHTTP serves 200 on /, 500 on /fail and the health check.
func startHTTP(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	mux.HandleFunc("/fail", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", http.StatusInternalServerError) })
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// startHAProxy runs a real HAProxy with one group "web", stopped (and, if
// the test dies half-way, killed) at the end.
func startHAProxy(t testing.TB) (*haproxy.Manager, string) {
	t.Helper()
	testdep.Command(t, "haproxy", "haproxy")
	stateDir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	health := config.DefaultHealth
	health.Interval, health.Timeout, health.Rise, health.Fall, health.FastInter = 200*time.Millisecond, 500*time.Millisecond, 1, 2, 0
	cfg := &config.Config{
		Listen:   listen,
		StateDir: stateDir,
		HAProxy:  config.HAProxy{Binary: "haproxy", Global: []string{"nbthread 1"}, Timeouts: config.DefaultTimeouts},
		Groups:   []config.Group{{Name: "web", Balance: "roundrobin", Health: health}},
	}
	cfg.Frontends = []config.Frontend{config.Shorthand(listen, nil, cfg.Groups)}
	m := haproxy.NewManager(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := m.Stop(ctx); err != nil {
			t.Errorf("stop haproxy: %v", err)
		}
		// Whatever Stop missed.
		b, err := os.ReadFile(filepath.Join(haproxy.PathsFor(stateDir).Dir, "master.json"))
		var rec struct {
			PID      int    `json:"pid"`
			PIDStart uint64 `json:"pid_start"`
		}
		if err == nil && json.Unmarshal(b, &rec) == nil && rec.PID > 0 {
			if start, err := proc.StartTicks(rec.PID); err == nil && start == rec.PIDStart {
				syscall.Kill(-rec.PID, syscall.SIGKILL)
			}
		}
	})
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m, "http://" + listen
}

// TestHAProxyCounters sends real requests through a real HAProxy and checks
// the per-second rates the collector derives from one "show stat" a tick.
// HAProxy retries a 500 on another server, so a server's stot counts more
// than the requests it answered; req_tot is what is counted.
func TestHAProxyCounters(t *testing.T) {
	m, url := startHAProxy(t)
	ctx := context.Background()
	health := config.Health{Path: "/healthz", Interval: 200 * time.Millisecond, Timeout: 500 * time.Millisecond, Rise: 1, Fall: 2}
	for _, name := range []string{"web-001", "web-002"} {
		if err := m.AddServer(ctx, haproxy.Server{Backend: "web", Name: name, Addr: loopback(startHTTP(t)), Health: health}, true); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		stats, err := m.Stats(ctx, "web")
		up := 0
		for _, s := range stats {
			if strings.HasPrefix(string(s.Status), "UP") {
				up++
			}
		}
		if err == nil && up == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("servers not UP: %v %v", stats, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	ready := time.Now().Add(-time.Hour)
	targets := []Target{
		{Group: "web", Name: "web-001", State: "in-service", InService: true, ReadySince: ready, Backend: "web", Server: "web-001", Cores: 1},
		{Group: "web", Name: "web-002", State: "in-service", InService: true, ReadySince: ready, Backend: "web", Server: "web-002", Cores: 1},
	}
	mc := config.DefaultMetrics
	c, err := Open(Options{Metrics: mc, Source: &source{[]string{"web"}, func() []Target { return targets }},
		HAProxy: m.Client(), DB: filepath.Join(t.TempDir(), "metrics.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	c.Sample(ctx, time.Now())
	at0 := c.prevStatAt
	if at0.IsZero() {
		t.Fatal("no stats from HAProxy")
	}
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	const ok, fail = 60, 20
	for i := range ok + fail {
		path := "/"
		if i%4 == 3 {
			path = "/fail"
		}
		resp, err := client.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	c.Sample(ctx, time.Now())
	dt := c.prevStatAt.Sub(at0).Seconds()

	count := func(path string) float64 {
		t.Helper()
		c.mu.RLock()
		defer c.mu.RUnlock()
		v, found := c.ring.latest(path)
		if !found {
			t.Fatalf("no value for %s", path)
		}
		return math.Round(v * dt)
	}
	if n := count("web/requests_per_second"); n != ok+fail {
		t.Errorf("requests over %.2fs: %v, want %d", dt, n, ok+fail)
	}
	if n := count("web/errors_per_second"); n != fail {
		t.Errorf("5xx over %.2fs: %v, want %d", dt, n, fail)
	}
	if n := count("web/web-001/requests_per_second") + count("web/web-002/requests_per_second"); n != ok+fail {
		t.Errorf("requests of the two servers: %v, want %d", n, ok+fail)
	}
	if n := count("web/web-001/errors_per_second") + count("web/web-002/errors_per_second"); n != fail {
		t.Errorf("5xx of the two servers: %v, want %d", n, fail)
	}
	if n := count("web/requests_per_second_per_instance"); n != (ok+fail)/2 {
		t.Errorf("requests per instance: %v, want %d", n, (ok+fail)/2)
	}
	if n := count("web/connection_errors_per_second"); n != 0 {
		t.Errorf("connection errors: %v", n)
	}
	for _, p := range []string{"web/queue", "web/sessions", "web/web-001/sessions"} {
		if v := count(p); v != 0 {
			t.Errorf("%s = %v, want 0 with no request in flight", p, v)
		}
	}
	doc, err := c.Document(ctx, "web", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	if doc.RequestsPerSecond == nil || doc.ErrorsPerSecond == nil || doc.Instances[0].RequestsPerSecond == nil {
		b, _ := json.Marshal(doc)
		t.Errorf("document lacks rates: %s", b)
	}
	t.Logf("%d requests (%d 5xx) in %.2fs: %.1f 5xx/s", ok+fail, fail, dt, *doc.ErrorsPerSecond)
}

// TestHAProxyRetries registers a server on a closed port that HAProxy
// believes UP until its checks fail: requests sent to it fail to connect and
// are redispatched (wredis), so clients see no error and econ stays 0, but
// the collector counts the retries.
func TestHAProxyRetries(t *testing.T) {
	m, url := startHAProxy(t)
	ctx := context.Background()
	health := config.Health{Path: "/healthz", Interval: 2 * time.Second, Timeout: time.Second, Rise: 1, Fall: 3}
	if err := m.AddServer(ctx, haproxy.Server{Backend: "web", Name: "web-001", Addr: loopback(startHTTP(t)), Health: health}, true); err != nil {
		t.Fatal(err)
	}
	closed := testport.Free(t) // nothing listens there
	c, err := Open(Options{Metrics: config.DefaultMetrics, Source: &source{[]string{"web"}, func() []Target { return nil }},
		HAProxy: m.Client(), DB: filepath.Join(t.TempDir(), "metrics.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Sample(ctx, time.Now())
	at0 := c.prevStatAt
	if err := m.AddServer(ctx, haproxy.Server{Backend: "web", Name: "web-002", Addr: loopback(closed), Health: health}, true); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	const n = 20
	for range n {
		resp, err := client.Get(url + "/")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	c.Sample(ctx, time.Now())
	dt := c.prevStatAt.Sub(at0).Seconds()
	c.mu.RLock()
	econ, _ := c.ring.latest("web/connection_errors_per_second")
	retries, ok := c.ring.latest("web/retries_per_second")
	rps, _ := c.ring.latest("web/requests_per_second")
	c.mu.RUnlock()
	t.Logf("%d requests: %.0f retried, %.0f connection errors, %.0f requests counted", n, retries*dt, econ*dt, rps*dt)
	if !ok || retries*dt < 1 {
		t.Errorf("retries over %.2fs: %v, want some", dt, retries*dt)
	}
	if econ != 0 {
		t.Errorf("connection errors: %v, want 0 (every request was redispatched)", econ*dt)
	}
	if math.Round(rps*dt) != n {
		t.Errorf("requests: %v, want %d (a redispatched request counts once)", rps*dt, n)
	}
}

// loopback is the address of port on 127.0.0.1.
func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
