package haproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

func TestRenderBalance(t *testing.T) {
	for _, tc := range []struct {
		name string
		g    config.Group
		want []string
	}{
		{"roundrobin", config.Group{Name: "web", Balance: "roundrobin"}, []string{"balance roundrobin"}},
		{"hash on uri", config.Group{Name: "web", Balance: "hash", HashOn: "uri"}, []string{"balance uri", "hash-type consistent"}},
		{"hash on source", config.Group{Name: "web", Balance: "hash", HashOn: "source"}, []string{"balance source", "hash-type consistent"}},
		{"hash on a header", config.Group{Name: "web", Balance: "hash", HashOn: "header:X-User"}, []string{"balance hdr(X-User)", "hash-type consistent"}},
		{"sticky", config.Group{Name: "web", Balance: "leastconn", Sticky: &config.Sticky{Cookie: "SRV"}},
			[]string{"balance leastconn", "cookie SRV insert indirect nocache dynamic", "dynamic-cookie-key " + cookieKey("web")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := balanceLines(tc.g)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("lines\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
	if cookieKey("web") == cookieKey("api") {
		t.Error("two groups have the same cookie key")
	}

	// HAProxy accepts every variant, and a server line with proto h2.
	dir := t.TempDir()
	cfg := testConfig(dir, "127.0.0.1:8080")
	cfg.Groups[0].Balance, cfg.Groups[0].HashOn = "hash", "header:X-User"
	cfg.Groups[1].Balance, cfg.Groups[1].HashOn, cfg.Groups[1].Sticky = "hash", "uri", &config.Sticky{Cookie: "SRV"}
	cfg.Groups[2].Sticky = &config.Sticky{Cookie: "shoal_s"}
	_, args, err := serverArgs(Server{Backend: "api", Name: "api-1", Addr: loopback(4000), Health: cfg.Groups[1].Health, Proto: "h2"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(args, " proto h2 ") {
		t.Errorf("server args %q: no proto h2", args)
	}
	text, err := render(cfg, PathsFor(dir), map[string][]string{"api": {"api-1 " + args}}, minHardStop)
	if err != nil {
		t.Fatal(err)
	}
	haproxyCheck(t, dir, text)
}

func TestRenderBalanceRejects(t *testing.T) {
	for name, g := range map[string]config.Group{
		"static algorithm":       {Name: "web", Balance: "static-rr"},
		"hash on a cookie":       {Name: "web", Balance: "hash", HashOn: "cookie"},
		"hash header injection":  {Name: "web", Balance: "hash", HashOn: "header:X)\n    server x 1.2.3.4:80"},
		"hash header with space": {Name: "web", Balance: "hash", HashOn: "header:X Y"},
		"cookie with space":      {Name: "web", Balance: "roundrobin", Sticky: &config.Sticky{Cookie: "a b"}},
		"cookie injection":       {Name: "web", Balance: "roundrobin", Sticky: &config.Sticky{Cookie: "SRV\n    server x 1.2.3.4:80"}},
		"empty cookie":           {Name: "web", Balance: "roundrobin", Sticky: &config.Sticky{}},
	} {
		t.Run(name, func(t *testing.T) {
			if lines, err := balanceLines(g); err == nil {
				t.Fatalf("balanceLines accepted it: %q", lines)
			}
		})
	}
	for _, proto := range []string{"h3", "h2 ssl", "h2\nserver x"} {
		if _, _, err := serverArgs(Server{Backend: "web", Name: "s", Addr: loopback(4000), Proto: proto}); err == nil {
			t.Errorf("serverArgs accepted proto %q", proto)
		}
	}
}

// startEdited starts a Manager on testConfig, edited first, listening on a
// free port it returns.
func startEdited(t *testing.T, edit func(cfg *config.Config)) (*Manager, *config.Config, int) {
	t.Helper()
	requireHAProxy(t)
	stateDir := t.TempDir()
	cleanupHAProxy(t, stateDir)
	port := freePort(t)
	cfg := testConfig(stateDir, "127.0.0.1:"+strconv.Itoa(port))
	edit(cfg)
	m := newTestManager(t, cfg)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m, cfg, port
}

// TestStickySessions: a client with the group's cookie stays on one instance
// (servers added at runtime, and after a reload); while its instance drains
// the client keeps it, and once the instance is removed the client moves to
// another without a failed request.
func TestStickySessions(t *testing.T) {
	t.Parallel() // its own HAProxy, state dir and ports; mostly waits out drains
	ctx := context.Background()
	m, cfg, port := startEdited(t, func(cfg *config.Config) { cfg.Groups[0].Sticky = &config.Sticky{Cookie: "SHOALSRV"} })
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	backends := map[string]*backend{}
	for _, name := range []string{"b1", "b2", "b3"} {
		b := startBackend(t, name)
		backends[name] = b
		if err := m.AddServer(ctx, Server{Backend: "web", Name: name, Addr: loopback(b.port), Health: cfg.Groups[0].Health}, false); err != nil {
			t.Fatal(err)
		}
	}
	waitStatus(t, m, map[string]string{"b1": "UP", "b2": "UP", "b3": "UP"}, true)
	for name := range backends {
		m.MarkReady("web", name) // as the group does once a server is UP
	}

	newClient := func() *http.Client {
		jar, err := cookiejar.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		return &http.Client{Jar: jar, Timeout: 5 * time.Second}
	}
	// sticky sends n requests and returns the instances that answered them.
	sticky := func(c *http.Client, n int) map[string]int {
		t.Helper()
		seen := map[string]int{}
		for range n {
			body, err := get(c, url)
			if err != nil {
				t.Fatal(err)
			}
			seen[body]++
		}
		return seen
	}
	one := func(seen map[string]int) string {
		t.Helper()
		if len(seen) != 1 {
			t.Fatalf("requests went to %v, want one instance", seen)
		}
		for name := range seen {
			return name
		}
		return ""
	}

	clients := []*http.Client{newClient(), newClient(), newClient()}
	home := make([]string, len(clients))
	for i, c := range clients {
		home[i] = one(sticky(c, 100))
	}
	t.Logf("clients stick to %v", home)
	// Without the cookie, round robin spreads the clients: each one's first
	// request goes to the next instance.
	if home[0] == home[1] && home[1] == home[2] {
		t.Errorf("three new clients all landed on %s", home[0])
	}

	// A reload writes the servers as static lines: the cookie values stay.
	reloaded := *cfg
	reloaded.HAProxy.Defaults = []string{"option http-keep-alive"}
	if ok, err := m.Reload(ctx, &reloaded); err != nil || !ok {
		t.Fatalf("Reload = %v, %v", ok, err)
	}
	for i, c := range clients {
		if got := one(sticky(c, 20)); got != home[i] {
			t.Errorf("after the reload client %d went to %s, not %s", i, got, home[i])
		}
	}

	// Drain client 0's instance: its sticky clients stay, new ones do not come.
	drained := home[0]
	if err := m.Drain(ctx, "web", drained, time.Second); err != nil {
		t.Fatal(err)
	}
	if got := one(sticky(clients[0], 50)); got != drained {
		t.Errorf("while %s drains, its client went to %s", drained, got)
	}
	for range 6 {
		if got := one(sticky(newClient(), 1)); got == drained {
			t.Errorf("a new client landed on the draining %s", drained)
		}
	}

	// Remove it while its client keeps sending: not one request fails, and
	// the client settles on another instance.
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		served  = map[string]int{}
		failed  []error
		stop    = make(chan struct{})
		removed = make(chan struct{})
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		deadline := time.Now().Add(20 * time.Second)
		for i := 0; i < 5000 && time.Now().Before(deadline); i++ {
			select {
			case <-stop:
				return
			default:
			}
			body, err := get(clients[0], url)
			mu.Lock()
			if err != nil {
				failed = append(failed, err)
			} else {
				served[body]++
			}
			mu.Unlock()
		}
	}()
	go func() {
		defer close(removed)
		// As the group does: a server whose pooled connections HAProxy
		// has not closed yet is left in maintenance and deleted later.
		start := time.Now()
		var err error
		for time.Since(start) < 40*time.Second {
			if err = m.RemoveServer(ctx, "web", drained); err == nil {
				break
			}
		}
		if err != nil {
			t.Error(err)
		}
		t.Logf("RemoveServer took %v", time.Since(start))
	}()
	<-removed
	close(stop)
	wg.Wait()
	after := sticky(clients[0], 50)
	mu.Lock()
	t.Logf("while %s was removed: %v, %d failed; after: %v", drained, served, len(failed), after)
	if len(failed) > 0 {
		t.Errorf("%d requests failed while %s was removed, first: %v", len(failed), drained, failed[0])
	}
	mu.Unlock()
	if moved := one(after); moved == drained {
		t.Errorf("client 0 still reaches the removed %s", drained)
	}
	if backends[drained].hits.Load() == 0 {
		t.Errorf("%s served nothing", drained)
	}
}

// TestConsistentHash: with balance hash on the URI, a URI always reaches the
// same instance, and a new instance takes only its share of the URIs: every
// URI that moves, moves to it. On a header, the header decides.
func TestConsistentHash(t *testing.T) {
	ctx := context.Background()
	m, cfg, port := startEdited(t, func(cfg *config.Config) {
		cfg.Groups[0].Balance, cfg.Groups[0].HashOn = "hash", "uri"
		cfg.Groups[1].Balance, cfg.Groups[1].HashOn = "hash", "header:X-User"
	})
	client := &http.Client{Timeout: 5 * time.Second}
	add := func(backend, name string) {
		t.Helper()
		b := startBackend(t, name)
		if err := m.AddServer(ctx, Server{Backend: backend, Name: name, Addr: loopback(b.port), Health: cfg.Groups[0].Health}, true); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"s1", "s2", "s3", "s4"} {
		add("web", name)
	}
	waitStatus(t, m, map[string]string{"s1": "UP", "s2": "UP", "s3": "UP", "s4": "UP"}, true)

	const keys = 400
	where := func() map[int]string {
		t.Helper()
		got := map[int]string{}
		for k := range keys {
			body, err := get(client, fmt.Sprintf("http://127.0.0.1:%d/item/%d", port, k))
			if err != nil {
				t.Fatal(err)
			}
			got[k] = body
		}
		return got
	}
	first := where()
	perServer := map[string]int{}
	for _, s := range first {
		perServer[s]++
	}
	t.Logf("%d URIs over 4 instances: %v", keys, perServer)
	if len(perServer) != 4 {
		t.Errorf("the URIs reached %d instances, want 4: %v", len(perServer), perServer)
	}
	again := where()
	for k, s := range first {
		if again[k] != s {
			t.Errorf("/item/%d went to %s, then to %s", k, s, again[k])
		}
	}

	add("web", "s5")
	waitStatus(t, m, map[string]string{"s5": "UP"}, false)
	moved := 0
	for k, s := range where() {
		if s == first[k] {
			continue
		}
		moved++
		if s != "s5" {
			t.Errorf("/item/%d moved from %s to %s, not to the new s5", k, first[k], s)
		}
	}
	// A fifth instance's fair share is 20%; a map-based hash would move ~80%.
	t.Logf("adding a fifth instance moved %d of %d URIs (%.1f%%)", moved, keys, 100*float64(moved)/keys)
	if moved == 0 || moved > keys*35/100 {
		t.Errorf("adding a fifth instance moved %d of %d URIs, want some and at most 35%%", moved, keys)
	}

	// On a header: the same user, whatever the path, reaches one instance.
	add("api", "a1")
	add("api", "a2")
	add("api", "a3")
	waitFor(t, 10*time.Second, "api servers UP", func() (bool, string) {
		got, err := statsByName(t, m, "api")
		if err != nil {
			return false, err.Error()
		}
		for _, s := range got {
			if !strings.HasPrefix(string(s.Status), "UP") {
				return false, fmt.Sprint(got)
			}
		}
		return len(got) == 3, fmt.Sprint(got)
	})
	users := map[string]bool{}
	for u := range 12 {
		seen := map[string]bool{}
		for p := range 10 {
			req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/v1/%d", port, p), nil)
			req.Host = "api.example.com"
			req.Header.Set("X-User", "user-"+strconv.Itoa(u))
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			seen[string(body)] = true
			users[string(body)] = true
		}
		if len(seen) != 1 {
			t.Errorf("user-%d reached %v, want one instance", u, seen)
		}
	}
	if len(users) < 2 {
		t.Errorf("12 users all reached %v", users)
	}
}

// TestProtoH2: a group with proto h2 reaches its instances over HTTP/2
// without TLS, also after a reload writes its servers as static lines.
func TestProtoH2(t *testing.T) {
	ctx := context.Background()
	m, cfg, port := startEdited(t, func(cfg *config.Config) { cfg.Groups[0].Proto = "h2" })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Proto) }),
		// HTTP/2 only: a request over HTTP/1.1 (the health check's) fails.
		Protocols: new(http.Protocols),
	}
	srv.Protocols.SetUnencryptedHTTP2(true)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	backendPort := ln.Addr().(*net.TCPAddr).Port

	if err := m.AddServer(ctx, Server{Backend: "web", Name: "h2", Addr: loopback(backendPort), Health: cfg.Groups[0].Health, Proto: "h2"}, true); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	check := func(when string) {
		t.Helper()
		var body string
		waitFor(t, 5*time.Second, "an answer "+when, func() (bool, string) {
			var err error
			body, err = get(client, url)
			return err == nil, fmt.Sprint(err)
		})
		if body != "HTTP/2.0" {
			t.Errorf("%s the instance saw %q, want HTTP/2.0", when, body)
		}
	}
	check("after add server")

	reloaded := *cfg
	reloaded.HAProxy.Defaults = []string{"option http-keep-alive"}
	if ok, err := m.Reload(ctx, &reloaded); err != nil || !ok {
		t.Fatalf("Reload = %v, %v", ok, err)
	}
	check("after a reload")

	// Turning proto back to h1 alone is a reload too (server lines change).
	h1 := reloaded
	h1.Groups = append([]config.Group(nil), reloaded.Groups...)
	h1.Groups[0].Proto = "h1"
	if sameServerChecks(&reloaded, &h1) {
		t.Error("a changed proto needs no reload")
	}
	if _, err := get(client, url); errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}
