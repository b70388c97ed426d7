package haproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/loadgen"
	"github.com/shoal-lb/shoal/internal/proc"
	"github.com/shoal-lb/shoal/internal/testdep"
	"github.com/shoal-lb/shoal/internal/testport"
)

func requireHAProxy(t *testing.T) {
	t.Helper()
	testdep.Command(t, "haproxy", "haproxy")
}

// backend is a tiny HTTP server on 127.0.0.1 that answers / with its name.
type backend struct {
	name string
	port int
	hits atomic.Int64
	// stop closes the server and its connections, as an instance that exits.
	stop func()
}

func startBackend(t *testing.T, name string) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{name: name, port: ln.Addr().(*net.TCPAddr).Port}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		io.WriteString(w, name)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		d, _ := time.ParseDuration(r.URL.Query().Get("d"))
		time.Sleep(d)
		io.WriteString(w, name)
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	b.stop = func() { srv.Close() }
	t.Cleanup(b.stop)
	return b
}

func freePort(t *testing.T) int {
	t.Helper()
	return testport.Free(t)
}

// testLogger collects the Manager's log and prints it if the test fails.
func testLogger(t *testing.T) *slog.Logger {
	var mu sync.Mutex
	var buf bytes.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			defer mu.Unlock()
			t.Logf("manager log:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// cleanupHAProxy kills whatever master the state directory records, even if
// the test failed half-way.
func cleanupHAProxy(t *testing.T, stateDir string) {
	t.Cleanup(func() {
		b, err := os.ReadFile(PathsFor(stateDir).Dir + "/master.json")
		if err != nil {
			return
		}
		var rec masterRecord
		if json.Unmarshal(b, &rec) == nil && rec.PID > 0 {
			if start, err := proc.StartTicks(rec.PID); err == nil && start == rec.PIDStart {
				syscall.Kill(-rec.PID, syscall.SIGKILL)
			}
		}
	})
}

func newTestManager(t *testing.T, cfg *config.Config) *Manager {
	t.Helper()
	m := NewManager(cfg, testLogger(t))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := m.Stop(ctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return m
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
	}
	t.Fatalf("timed out after %s waiting for %s; last: %s", timeout, what, last)
}

func statsByName(t *testing.T, m *Manager, be string) (map[string]ServerStat, error) {
	t.Helper()
	stats, err := m.Stats(context.Background(), be)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]ServerStat)
	for _, s := range stats {
		byName[s.Name] = s
	}
	return byName, nil
}

// waitStatus waits until each named server of "web" has a status starting
// with want, and that no other servers exist if exact.
func waitStatus(t *testing.T, m *Manager, want map[string]string, exact bool) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("servers %v", want), func() (bool, string) {
		got, err := statsByName(t, m, "web")
		if err != nil {
			return false, err.Error()
		}
		desc := fmt.Sprint(got)
		if exact && len(got) != len(want) {
			return false, desc
		}
		for name, status := range want {
			if s, ok := got[name]; !ok || !strings.HasPrefix(string(s.Status), status) {
				return false, desc
			}
		}
		return true, desc
	})
}

func get(client *http.Client, url string) (string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	return string(body), nil
}

// startLoad sends keep-alive requests to url until the returned stop is called.
func startLoad(t *testing.T, url string, workers int) func() loadgen.Result {
	t.Helper()
	stop, err := loadgen.Start(context.Background(), loadgen.Options{URL: url, Concurrency: workers, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop() })
	return stop
}

func TestManager(t *testing.T) {
	t.Parallel() // its own HAProxy, state dir and ports; mostly waits on HAProxy
	requireHAProxy(t)
	ctx := context.Background()
	stateDir := t.TempDir()
	cleanupHAProxy(t, stateDir)
	port := freePort(t)
	cfg := testConfig(stateDir, "127.0.0.1:"+strconv.Itoa(port))
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	defer client.CloseIdleConnections()

	m := newTestManager(t, cfg)
	restarted := make(chan string, 1)
	m.OnRestart(func(reason string) { restarted <- reason })
	if _, err := m.Stats(ctx, "web"); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Stats before Start: %v, want ErrNotRunning", err)
	}
	start := time.Now()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("Start took %v (pid %d)", time.Since(start), m.PID())
	pid := m.PID()

	// Runtime API errors are Go errors.
	if err := m.Client().expect(ctx, "del server web/nope", msgServerDeleted); !isAPIError(err, msgNoSuchServer) {
		t.Errorf("del of a missing server: %v", err)
	}
	if err := m.Client().expect(ctx, "bogus", ""); !isAPIError(err, "Unknown command") {
		t.Errorf("unknown command: %v", err)
	}
	if _, err := m.Client().Stats(ctx, "nope"); err == nil || !strings.Contains(err.Error(), "No such proxy") {
		t.Errorf("stats of a missing backend: %v", err)
	}

	// Gated servers: three live, one on a closed port.
	backends := []*backend{startBackend(t, "b1"), startBackend(t, "b2"), startBackend(t, "b3")}
	health := cfg.Groups[0].Health
	start = time.Now()
	for _, b := range backends {
		if err := m.AddServer(ctx, Server{Backend: "web", Name: b.name, Addr: loopback(b.port), Health: health}, false); err != nil {
			t.Fatal(err)
		}
		st, err := statsByName(t, m, "web")
		if err != nil {
			t.Fatal(err)
		}
		if s := st[b.name]; !strings.HasPrefix(string(s.Status), "DOWN") {
			t.Fatalf("gated server %s is %q right after AddServer, want DOWN", b.name, s.Status)
		}
	}
	dead := Server{Backend: "web", Name: "dead", Addr: loopback(freePort(t)), Health: health}
	if err := m.AddServer(ctx, dead, false); err != nil {
		t.Fatal(err)
	}
	// Adding the same server again is a no-op; another address is not.
	if err := m.AddServer(ctx, Server{Backend: "web", Name: "b1", Addr: loopback(backends[0].port), Health: health}, false); err != nil {
		t.Fatalf("re-adding b1: %v", err)
	}
	if err := m.AddServer(ctx, Server{Backend: "nope", Name: "x", Addr: loopback(1)}, false); err == nil {
		t.Error("AddServer accepted an unknown backend")
	}
	if err := m.AddServer(ctx, Server{Backend: "web", Name: "x; shutdown frontend shoal", Addr: loopback(1)}, false); err == nil {
		t.Error("AddServer accepted a command in a name")
	}
	waitStatus(t, m, map[string]string{"b1": "UP", "b2": "UP", "b3": "UP", "dead": "DOWN"}, true)
	t.Logf("3 gated servers UP after %v", time.Since(start))

	seen := make(map[string]int)
	for range 30 {
		body, err := get(client, url)
		if err != nil {
			t.Fatal(err)
		}
		seen[body]++
	}
	if len(seen) != 3 {
		t.Errorf("responses came from %v, want b1, b2 and b3", seen)
	}
	st, _ := statsByName(t, m, "web")
	if d := st["dead"]; d.Total != 0 || !strings.HasPrefix(string(d.Status), "DOWN") {
		t.Errorf("dead server: %+v, want DOWN with no sessions ever", d)
	}

	// Drain and remove b2 under keep-alive load.
	stopLoad := startLoad(t, url, 4)
	time.Sleep(300 * time.Millisecond)
	start = time.Now()
	if err := m.Drain(ctx, "web", "b2", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	drained := time.Since(start)
	if err := m.RemoveServer(ctx, "web", "b2"); err != nil {
		t.Fatal(err)
	}
	t.Logf("drain took %v, drain+remove %v", drained, time.Since(start))
	b2hits := backends[1].hits.Load()
	time.Sleep(300 * time.Millisecond)
	res := stopLoad()
	t.Logf("load during drain+remove: %d requests, %d failed", res.Requests, res.Failures)
	if res.Failures != 0 || res.Requests == 0 {
		t.Errorf("load during drain+remove: %d requests, %d failed %v", res.Requests, res.Failures, res.FailureSamples)
	}
	if backends[1].hits.Load() != b2hits {
		t.Error("b2 served requests after it was removed")
	}
	waitStatus(t, m, map[string]string{"b1": "UP", "b3": "UP", "dead": "DOWN"}, true)
	if err := m.RemoveServer(ctx, "web", "b2"); err != nil {
		t.Errorf("removing b2 again: %v", err)
	}

	// kill -9 of the whole HAProxy: the manager restarts it with the registry.
	m.MarkReady("web", "b1")
	client.CloseIdleConnections()
	start = time.Now()
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a new master", func() (bool, string) {
		return m.PID() != 0 && m.PID() != pid, fmt.Sprint("pid ", m.PID())
	})
	waitStatus(t, m, map[string]string{"b1": "UP", "b3": "UP", "dead": "DOWN"}, true)
	t.Logf("restarted after kill -9 in %v (pid %d -> %d)", time.Since(start), pid, m.PID())
	select {
	case why := <-restarted:
		if want := fmt.Sprintf("haproxy (pid %d) exited unexpectedly: ", pid); !strings.HasPrefix(why, want) || !strings.HasSuffix(why, fmt.Sprintf("restarted as pid %d", m.PID())) {
			t.Errorf("OnRestart told %q; want %q…restarted as pid %d", why, want, m.PID())
		}
	case <-time.After(5 * time.Second):
		t.Error("OnRestart was not told of the restart")
	}
	pid = m.PID()
	for range 10 {
		if _, err := get(client, url); err != nil {
			t.Fatalf("after restart: %v", err)
		}
	}

	// A new Manager on the same state directory adopts the running master and
	// reconciles it with its own registry: b3 is not registered, b2 is new.
	m.Detach()
	m2 := newTestManager(t, cfg)
	for _, s := range []struct {
		srv   Server
		ready bool
	}{
		{Server{Backend: "web", Name: "b1", Addr: loopback(backends[0].port), Health: health}, true},
		{Server{Backend: "web", Name: "b2", Addr: loopback(backends[1].port), Health: health}, false},
		{dead, false},
	} {
		if err := m2.AddServer(ctx, s.srv, s.ready); err != nil {
			t.Fatal(err)
		}
	}
	stopLoad = startLoad(t, url, 2)
	start = time.Now()
	if err := m2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if m2.PID() != pid {
		t.Fatalf("second manager runs pid %d, want the adopted %d", m2.PID(), pid)
	}
	waitStatus(t, m2, map[string]string{"b1": "UP", "b2": "UP", "dead": "DOWN"}, true)
	t.Logf("adopted and reconciled in %v", time.Since(start))
	res = stopLoad()
	if res.Failures != 0 || res.Requests == 0 {
		t.Errorf("load during adoption: %d requests, %d failed %v", res.Requests, res.Failures, res.FailureSamples)
	}

	client.CloseIdleConnections()
	start = time.Now()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := m2.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("Stop took %v", time.Since(start))
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("master %d still exists after Stop: kill(0) = %v", pid, err)
	}
	if m2.PID() != 0 {
		t.Errorf("PID after Stop = %d", m2.PID())
	}
	if err := m2.Stop(sctx); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if _, err := m2.Stats(ctx, "web"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Stats after Stop: %v, want ErrNotRunning", err)
	}
}

func TestStartErrors(t *testing.T) {
	requireHAProxy(t)
	ctx := context.Background()

	t.Run("binary missing", func(t *testing.T) {
		cfg := testConfig(t.TempDir(), "127.0.0.1:1")
		cfg.HAProxy.Binary = "haproxy-not-installed"
		cfg.Path = "/etc/shoal/shoal.yaml"
		err := NewManager(cfg, nil).Start(ctx)
		want := `haproxy not found (looked for "haproxy-not-installed" on PATH): install it with "apt-get install haproxy" (Debian/Ubuntu) or set haproxy.binary in /etc/shoal/shoal.yaml`
		if err == nil || err.Error() != want {
			t.Errorf("got %v\nwant %s", err, want)
		}
	})

	t.Run("config rejected", func(t *testing.T) {
		cfg := testConfig(t.TempDir(), "127.0.0.1:1")
		cfg.HAProxy.Global = []string{"no-such-keyword 1"}
		err := NewManager(cfg, nil).Start(ctx)
		if err == nil || !strings.Contains(err.Error(), "no-such-keyword") {
			t.Errorf("got %v, want HAProxy's complaint about no-such-keyword", err)
		}
	})

	t.Run("port in use", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		stateDir := t.TempDir()
		cleanupHAProxy(t, stateDir)
		m := newTestManager(t, testConfig(stateDir, ln.Addr().String()))
		err = m.Start(ctx)
		want := fmt.Sprintf("start haproxy: bind address %s is already in use by pid %d (%s", ln.Addr(), os.Getpid(), os.Args[0])
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v\nwant %s...", err, want)
		}
		if m.PID() != 0 {
			t.Errorf("PID after failed Start = %d", m.PID())
		}
	})
}

// TestRemoveWaitsForStreams checks that a server is deleted only once the
// request it serves has finished, and that Drain gives up at its timeout.
func TestRemoveWaitsForStreams(t *testing.T) {
	requireHAProxy(t)
	ctx := context.Background()
	stateDir := t.TempDir()
	cleanupHAProxy(t, stateDir)
	port := freePort(t)
	cfg := testConfig(stateDir, "127.0.0.1:"+strconv.Itoa(port))
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()

	m := newTestManager(t, cfg)
	b := startBackend(t, "slow")
	// Registered before Start: Start adds it.
	if err := m.AddServer(ctx, Server{Backend: "web", Name: "slow", Addr: loopback(b.port), Health: cfg.Groups[0].Health}, true); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// Ready servers skip the gate: UP at once.
	waitStatus(t, m, map[string]string{"slow": "UP"}, true)

	const slow = 1200 * time.Millisecond
	result := make(chan error, 1)
	go func() {
		_, err := get(client, fmt.Sprintf("http://127.0.0.1:%d/slow?d=%s", port, slow))
		result <- err
	}()
	start := time.Now()
	waitFor(t, 5*time.Second, "the slow request to reach the server", func() (bool, string) {
		st, err := statsByName(t, m, "web")
		return err == nil && st["slow"].Sessions == 1, fmt.Sprint(st, err)
	})

	dstart := time.Now()
	if err := m.Drain(ctx, "web", "slow", 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(dstart); d < 200*time.Millisecond || d > slow {
		t.Errorf("Drain with a 200ms timeout took %v", d)
	}
	if err := m.RemoveServer(ctx, "web", "slow"); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("RemoveServer returned %v after the slow request started", took)
	if took < slow-100*time.Millisecond {
		t.Errorf("RemoveServer returned after %v, before the %v request could finish", took, slow)
	}
	if err := <-result; err != nil {
		t.Errorf("the slow request failed: %v", err)
	}
	waitStatus(t, m, map[string]string{}, true)
}

func TestExecHonoursContext(t *testing.T) {
	sock := t.TempDir() + "/silent.sock"
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		// Accept and never answer, like a hung HAProxy.
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	c := &Client{Socket: sock}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := c.Exec(ctx, "show info"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Exec past its deadline: %v, want DeadlineExceeded", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	if _, err := c.Exec(ctx, "show info"); !errors.Is(err, context.Canceled) {
		t.Errorf("Exec after cancel: %v, want Canceled", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Exec took %v to give up", d)
	}
	if _, err := c.Exec(context.Background(), "show info\nshutdown frontend shoal"); err == nil {
		t.Error("Exec sent two lines")
	}
}

// loopback is the address of port on 127.0.0.1.
func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
