package haproxy

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

func TestRenderLimits(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir, "127.0.0.1:8080")
	cfg.Groups[0].Limits = &config.Limits{MaxConn: 4, QueueTimeout: 5 * time.Second}
	cfg.Groups[0].SlowStart = 30 * time.Second
	s := Server{Backend: "web", Name: "web-1", Addr: loopback(4000)}.WithGroup(cfg.Groups[0])
	_, args, err := serverArgs(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{" maxconn 4 ", " slowstart 30000ms "} {
		if !strings.Contains(args, w) {
			t.Errorf("server args %q lack %q", args, w)
		}
	}
	// A group without limits: no maxconn, no slowstart, no queue timeout of its own.
	_, plain, err := serverArgs(Server{Backend: "api", Name: "api-1", Addr: loopback(4001)}.WithGroup(cfg.Groups[1]))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain, "maxconn") || strings.Contains(plain, "slowstart") {
		t.Errorf("server args without limits %q have maxconn or slowstart", plain)
	}
	text, err := render(cfg, PathsFor(dir), map[string][]string{"web": {"web-1 " + args}}, minHardStop)
	if err != nil {
		t.Fatal(err)
	}
	web, _, _ := strings.Cut(text[strings.Index(text, "\nbackend web\n"):], "\nbackend api\n")
	if !strings.Contains(web, "    timeout queue 5000ms\n") {
		t.Errorf("backend web lacks its queue timeout:\n%s", web)
	}
	if n := strings.Count(text, "timeout queue 5000ms"); n != 1 {
		t.Errorf("timeout queue 5000ms appears %d times, want once (in backend web)", n)
	}
	haproxyCheck(t, dir, text)

	// hard-stop-after outlasts a wait in the queue as well.
	long := *cfg
	long.Groups = append([]config.Group(nil), cfg.Groups...)
	long.Groups[0].Limits = &config.Limits{MaxConn: 4, QueueTimeout: 10 * time.Minute}
	to := config.DefaultTimeouts
	if got, want := hardStopAfter(&long, to, minHardStop), 10*time.Minute+to.Connect+to.Server+hardStopMargin; got != want {
		t.Errorf("hardStopAfter with a 10m queue = %s, want %s", got, want)
	}
}

// TestServerLimitsRuntime: a server added over the Runtime API gets its
// group's maxconn and slowstart (default-server would not apply to it), and
// a reload, which rewrites it as a static line, keeps them, with the
// group's new values.
func TestServerLimitsRuntime(t *testing.T) {
	t.Parallel() // its own HAProxy, state dir and ports
	ctx := context.Background()
	m, cfg, _ := startEdited(t, func(cfg *config.Config) {
		cfg.Groups[0].Limits = &config.Limits{MaxConn: 4, QueueTimeout: 5 * time.Second}
		cfg.Groups[0].SlowStart = 20 * time.Second
	})
	b := startBackend(t, "b1")
	if err := m.AddServer(ctx, Server{Backend: "web", Name: "b1", Addr: loopback(b.port)}.WithGroup(cfg.Groups[0]), false); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, m, map[string]string{"b1": "UP"}, true)
	m.MarkReady("web", "b1")
	st := statOf(t, m, "b1")
	if st.SessionLimit != 4 {
		t.Errorf("runtime-added server: slim = %d, want 4", st.SessionLimit)
	}
	// Slow start: just after it came UP, its effective weight is a fraction of 100.
	if st.Weight <= 0 || st.Weight >= 50 {
		t.Errorf("runtime-added server 1 s into a 20 s slow start: weight %d, want 1 to 49", st.Weight)
	}

	reloaded := *cfg
	reloaded.Groups = append([]config.Group(nil), cfg.Groups...)
	reloaded.Groups[0].Limits = &config.Limits{MaxConn: 6, QueueTimeout: 5 * time.Second}
	if ok, err := m.Reload(ctx, &reloaded); err != nil || !ok {
		t.Fatalf("Reload = %v, %v", ok, err)
	}
	if st := statOf(t, m, "b1"); st.SessionLimit != 6 {
		t.Errorf("after a reload with max_conn 6: slim = %d, want 6", st.SessionLimit)
	}
}

func statOf(t *testing.T, m *Manager, name string) ServerStat {
	t.Helper()
	stats, err := statsByName(t, m, "web")
	if err != nil {
		t.Fatal(err)
	}
	st, ok := stats[name]
	if !ok {
		t.Fatalf("no server %s in %v", name, stats)
	}
	return st
}

// TestQueueTimeout: with maxconn 1, a request that finds the instance busy
// waits in the backend's queue and is answered 503 after queue_timeout, not
// before; the backend's own stat line counts the queue.
func TestQueueTimeout(t *testing.T) {
	t.Parallel() // its own HAProxy, state dir and ports
	ctx := context.Background()
	m, cfg, port := startEdited(t, func(cfg *config.Config) {
		cfg.Groups[0].Limits = &config.Limits{MaxConn: 1, QueueTimeout: time.Second}
	})
	b := startBackend(t, "b1")
	if err := m.AddServer(ctx, Server{Backend: "web", Name: "b1", Addr: loopback(b.port)}.WithGroup(cfg.Groups[0]), false); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, m, map[string]string{"b1": "UP"}, true)
	base := "http://" + loopback(port)
	client := &http.Client{Timeout: 10 * time.Second}
	busy := make(chan int, 1)
	go func() {
		resp, err := client.Get(base + "/slow?d=3s")
		if err != nil {
			busy <- 0
			return
		}
		resp.Body.Close()
		busy <- resp.StatusCode
	}()
	time.Sleep(300 * time.Millisecond) // the slow request holds the only slot
	start := time.Now()
	resp, err := client.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	waited := time.Since(start)
	if resp.StatusCode != http.StatusServiceUnavailable || waited < 900*time.Millisecond || waited > 2500*time.Millisecond {
		t.Errorf("queued request: %d after %s, want 503 after about the 1s queue timeout", resp.StatusCode, waited)
	}
	bs, err := m.BackendStat(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	// qtime averages only requests that left the queue for a server.
	if bs.MaxQueue != 1 {
		t.Errorf("backend stat after one queued request: qmax %d, want 1", bs.MaxQueue)
	}
	if code := <-busy; code != http.StatusOK {
		t.Errorf("the request holding the slot got %d, want 200", code)
	}
}
