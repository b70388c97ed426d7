package haproxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

// heldGet is one request's outcome: its status (0 on a transport error),
// body and when it was answered.
type heldGet struct {
	status int
	body   string
	at     time.Duration
}

// fire sends n concurrent GETs of url, each on its own connection, and
// returns a channel that delivers each outcome as it comes.
func fire(url string, n int) <-chan heldGet {
	out := make(chan heldGet, n)
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Get(url)
			if err != nil {
				out <- heldGet{at: time.Since(start), body: err.Error()}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			out <- heldGet{status: resp.StatusCode, body: string(b), at: time.Since(start)}
		}()
	}
	go func() { wg.Wait(); client.CloseIdleConnections() }()
	return out
}

// TestHoldWhileNoServer: HAProxy 2.6 answers 503 at once for a backend with
// no usable server; for a group that scales to zero, the rendered hold keeps
// up to max_queue requests waiting instead (visible as the backend's scur),
// answers the ones beyond it 503 at once, and sends the held ones to the
// first server once it is UP, after its health gate. With no server they
// get 503 after timeouts.queue.
func TestHoldWhileNoServer(t *testing.T) {
	t.Parallel() // its own HAProxy, state dir and ports; its bounds are seconds wide
	requireHAProxy(t)
	ctx := context.Background()
	stateDir := t.TempDir()
	cleanupHAProxy(t, stateDir)
	port := freePort(t)
	cfg := testConfig(stateDir, "127.0.0.1:"+strconv.Itoa(port))
	cfg.HAProxy.Timeouts.Queue = 3 * time.Second
	for _, i := range []int{0, 2} { // web (the default backend) and static
		cfg.Groups[i].ScaleToZero = &config.ScaleToZero{IdleAfter: time.Minute, MaxQueue: 20}
	}
	m := newTestManager(t, cfg)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)

	// 30 requests: 10 over max_queue get 503 at once, 20 are held.
	results := fire(base+"/", 30)
	for i := 0; i < 10; i++ {
		select {
		case r := <-results:
			if r.status != http.StatusServiceUnavailable {
				t.Fatalf("request beyond max_queue: %d %q, want 503", r.status, r.body)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("only %d requests beyond max_queue were refused within 2 s, want 10", i)
		}
	}
	waitFor(t, 2*time.Second, "20 held requests in the backend's scur", func() (bool, string) {
		out, err := m.Client().Exec(ctx, "show stat web 2 -1")
		if err != nil {
			return false, err.Error()
		}
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Split(l, ","); len(f) > 4 && f[1] == "BACKEND" {
				return f[4] == "20", "scur " + f[4]
			}
		}
		return false, out
	})

	// A server added behind the health gate takes them once it is UP.
	b := startBackend(t, "b1")
	if err := m.AddServer(ctx, Server{Backend: "web", Name: "b1", Addr: loopback(b.port), Health: cfg.Groups[0].Health}, false); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		select {
		case r := <-results:
			if r.status != http.StatusOK || r.body != "b1" {
				t.Fatalf("held request %d: %d %q, want 200 from b1", i, r.status, r.body)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("only %d of 20 held requests were answered within 5 s of adding a server", i)
		}
	}
	if n := b.hits.Load(); n != 20 {
		t.Fatalf("the server saw %d requests, want the 20 held ones", n)
	}

	// No server ever: held for timeouts.queue, then HAProxy's 503.
	noServer := fire(base+"/static/x", 3)
	for range 3 {
		r := <-noServer
		if r.status != http.StatusServiceUnavailable || r.at < 2900*time.Millisecond || r.at > 10*time.Second {
			t.Fatalf("request with no server: %d after %v, want 503 after about 3 s", r.status, r.at)
		}
	}
}

// TestHoldAcrossReloads: requests held when a reload replaces the worker are
// handed to the new one (its backend's scur shows them, which is what wakes
// a group) and served by the server added there, two reloads later too. The
// hold's limit is the request's, not each worker's: with no server they get
// 503 after timeouts.queue counted from their arrival, and the hand-off
// counts them once against max_queue.
func TestHoldAcrossReloads(t *testing.T) {
	t.Parallel() // its own HAProxy, state dir and ports
	requireHAProxy(t)
	ctx := context.Background()
	stateDir := t.TempDir()
	cleanupHAProxy(t, stateDir)
	port := freePort(t)
	cfg := testConfig(stateDir, "127.0.0.1:"+strconv.Itoa(port))
	// 6 s: the two reloads and the server's add fit well inside it on a
	// loaded machine (with 4 s, make test's load once took the add past it).
	cfg.HAProxy.Timeouts.Queue = 6 * time.Second
	for _, i := range []int{0, 2} { // web (the default backend) and static
		cfg.Groups[i].ScaleToZero = &config.ScaleToZero{IdleAfter: time.Minute, MaxQueue: 3}
	}
	m := newTestManager(t, cfg)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	if fi, err := os.Stat(PathsFor(stateDir).Handoff); err != nil || fi.Mode().Perm() != 0o600 || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("hand-off socket: %v, %v; want a socket with mode 0600", fi, err)
	}
	scur := func(backend string) string {
		out, err := m.Client().Exec(ctx, "show stat "+backend+" 2 -1")
		if err != nil {
			return err.Error()
		}
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Split(l, ","); len(f) > 4 && f[1] == "BACKEND" {
				return f[4]
			}
		}
		return out
	}
	reload := func(n int) {
		t.Helper()
		next := *cfg
		next.HAProxy.Defaults = []string{fmt.Sprintf("timeout tarpit %ds", n)} // any change reloads
		if ok, err := m.Reload(ctx, &next); err != nil || !ok {
			t.Fatalf("reload %d = %v, %v", n, ok, err)
		}
	}

	b := startBackend(t, "b1") // added after the reloads; started before the clock runs

	// max_queue 3: all three are held, in web and in static.
	start := time.Now()
	held := fire(base+"/", 3)
	noServer := fire(base+"/static/x", 3)
	waitFor(t, 2*time.Second, "3 held requests in each backend", func() (bool, string) {
		return scur("web") == "3" && scur("static") == "3", "web " + scur("web") + ", static " + scur("static")
	})
	time.Sleep(time.Until(start.Add(1500 * time.Millisecond)))
	reload(1)
	waitFor(t, 2*time.Second, "the new worker holds the 6 requests", func() (bool, string) {
		return scur("web") == "3" && scur("static") == "3", "web " + scur("web") + ", static " + scur("static")
	})
	time.Sleep(time.Until(start.Add(3 * time.Second)))
	reload(2)
	waitFor(t, 2*time.Second, "the newest worker holds the 6 requests", func() (bool, string) {
		return scur("web") == "3" && scur("static") == "3", "web " + scur("web") + ", static " + scur("static")
	})
	// The handed-off requests fill max_queue in the new worker too.
	if r := <-fire(base+"/", 1); r.status != http.StatusServiceUnavailable || r.at > time.Second {
		t.Fatalf("a 4th request with 3 handed-off ones held (max_queue 3): %d after %v, want 503 at once", r.status, r.at)
	}

	if err := m.AddServer(ctx, Server{Backend: "web", Name: "b1", Addr: loopback(b.port), Health: cfg.Groups[0].Health}, false); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		select {
		case r := <-held:
			if r.status != http.StatusOK || r.body != "b1" {
				t.Fatalf("request held across two reloads: %d %q after %v, want 200 from b1", r.status, r.body, r.at)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("only %d of 3 requests held across two reloads were answered within 5 s of adding a server", i)
		}
	}
	// Each worker's own limit would have ended 6 s after the last reload, 9 s.
	for range 3 {
		r := <-noServer
		if r.status != http.StatusServiceUnavailable || r.at < 5900*time.Millisecond || r.at > 7500*time.Millisecond {
			t.Fatalf("request with no server across two reloads: %d after %v, want 503 after about 6 s (timeouts.queue)", r.status, r.at)
		}
		t.Logf("no server across two reloads: 503 after %v", r.at.Round(time.Millisecond))
	}
}

// TestHoldOutlivesHardStop: a request handed off by an old worker goes
// through it until answered, so that worker must outlive the hold. With
// hard-stop-after's floor at 2 s (production's is 30 s), timeouts.server 1s
// and timeouts.queue 10s, the old worker must live past what the other
// timeouts alone give it (connect + server + margin: 6.2 s), and requests
// held across a reload are still answered when the server comes at 8 s
// (hard-stop-after without the hold's queue + server: at 6.2 s the old
// worker, and their connections, were gone; with the floor alone, at 2 s).
func TestHoldOutlivesHardStop(t *testing.T) {
	t.Parallel() // its own HAProxy, state dir and ports; it mostly waits
	requireHAProxy(t)
	ctx := context.Background()
	stateDir := t.TempDir()
	cleanupHAProxy(t, stateDir)
	port := freePort(t)
	cfg := testConfig(stateDir, "127.0.0.1:"+strconv.Itoa(port))
	to := &cfg.HAProxy.Timeouts
	to.Connect, to.Server, to.HTTPKeepAlive, to.Queue = 200*time.Millisecond, time.Second, time.Second, 10*time.Second
	const serverAt = 8 * time.Second
	if without := max(to.Connect+to.Server, to.HTTPKeepAlive) + hardStopMargin; serverAt < without+time.Second || serverAt > to.Queue-time.Second {
		t.Fatalf("the server comes at %s: want over a second after the hard stop without the hold (%s), and before timeouts.queue", serverAt, without)
	}
	cfg.Groups[0].ScaleToZero = &config.ScaleToZero{IdleAfter: time.Minute, MaxQueue: 10}
	m := newTestManager(t, cfg)
	m.hardStopFloor = 2 * time.Second
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	held := fire(fmt.Sprintf("http://127.0.0.1:%d/", port), 2)
	time.Sleep(500 * time.Millisecond)
	next := *cfg
	next.HAProxy.Defaults = []string{"timeout tarpit 1s"}
	if ok, err := m.Reload(ctx, &next); err != nil || !ok {
		t.Fatalf("reload = %v, %v", ok, err)
	}
	time.Sleep(time.Until(start.Add(serverAt)))
	select {
	case r := <-held:
		t.Fatalf("a held request ended before its server came: %d %q after %v", r.status, r.body, r.at)
	default:
	}
	b := startBackend(t, "b1")
	if err := m.AddServer(ctx, Server{Backend: "web", Name: "b1", Addr: loopback(b.port), Health: cfg.Groups[0].Health}, false); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case r := <-held:
			if r.status != http.StatusOK || r.body != "b1" {
				t.Fatalf("request held %s across a reload: %d %q after %v, want 200 from b1", serverAt, r.status, r.body, r.at)
			}
			t.Logf("held across a reload: 200 after %v", r.at.Round(time.Millisecond))
		case <-time.After(5 * time.Second):
			t.Fatal("the held requests were not answered within 5 s of adding a server")
		}
	}
}
