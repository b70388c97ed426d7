package haproxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/loadgen"
)

func TestParseShowProc(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      procList
	}{
		{"one worker", `#<PID>          <type>          <reloads>       <uptime>        <version>
15870           master          0 [failed: 0]   0d00h00m01s     2.6.12-1+deb12u4
# workers
15873           worker          0               0d00h00m01s     2.6.12-1+deb12u4
# programs
`, procList{current: 15873}},
		{"old worker finishing", `#<PID>          <type>          <reloads>       <uptime>        <version>
15870           master          1 [failed: 0]   0d00h00m05s     2.6.12-1+deb12u4
# workers
16127           worker          0               0d00h00m00s     2.6.12-1+deb12u4
15873           worker          1               0d00h00m05s     2.6.12-1+deb12u4
# programs
`, procList{current: 16127, old: []int{15873}}},
		// What HAProxy 2.6.12 answers while the replaced worker finishes a request.
		{"old workers section", `#<PID>          <type>          <reloads>       <uptime>        <version>
21525           master          1 [failed: 0]   0d00h00m02s     2.6.12-1+deb12u4
# workers
21734           worker          0               0d00h00m01s     2.6.12-1+deb12u4
# old workers
21528           worker          1               0d00h00m02s     2.6.12-1+deb12u4
# programs
`, procList{current: 21734, old: []int{21528}}},
		// After a failed reload the surviving worker counts it: it is still current.
		{"after a failed reload", `#<PID>          <type>          <reloads>       <uptime>        <version>
15870           master          2 [failed: 1]   0d00h00m06s     2.6.12-1+deb12u4
# workers
16127           worker          1               0d00h00m01s     2.6.12-1+deb12u4
# programs
`, procList{current: 16127, failed: 1}},
	} {
		got, err := parseShowProc(tc.out)
		if err != nil || got.current != tc.want.current || got.failed != tc.want.failed || !slices.Equal(got.old, tc.want.old) {
			t.Errorf("%s: got %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	if _, err := parseShowProc("Unknown command.\n"); err == nil {
		t.Error("an answer without a master line was accepted")
	}
}

// TestRenderStaticServers: the servers a reload writes go into their own
// backend, after its check lines, with the dynamic servers' keywords.
func TestRenderStaticServers(t *testing.T) {
	webHealth := config.DefaultHealth
	webHealth.Interval, webHealth.Rise, webHealth.Fall, webHealth.FastInter = 300*time.Millisecond, 2, 3, 0
	cfg := routed(&config.Config{Listen: "127.0.0.1:8080", HAProxy: config.HAProxy{Timeouts: config.DefaultTimeouts}, AccessLog: config.AccessLog{}, Groups: []config.Group{
		{Name: "web", Balance: "roundrobin", Health: webHealth},
		{Name: "api", Balance: "roundrobin", PathPrefixes: []string{"/api"}, Health: config.DefaultHealth},
	}})
	s := Server{Backend: "web", Name: "web-001", Addr: loopback(4000), Health: cfg.Groups[0].Health}
	_, args, err := serverArgs(s)
	if err != nil {
		t.Fatal(err)
	}
	want := "127.0.0.1:4000 id " + strconv.Itoa(serverID("web-001")) + " check inter 300ms rise 2 fall 3 weight 100 pool-max-conn -1 pool-purge-delay 5000ms"
	if args != want {
		t.Fatalf("server args %q, want %q", args, want)
	}
	text, err := render(cfg, PathsFor("/tmp/shoal-test"), map[string][]string{"web": {"web-001 " + args + " disabled"}}, minHardStop)
	if err != nil {
		t.Fatal(err)
	}
	web := text[strings.Index(text, "\nbackend web"):strings.Index(text, "\nbackend api")]
	if !strings.HasSuffix(strings.TrimSpace(web), "server web-001 "+want+" disabled") {
		t.Fatalf("backend web does not end with the server line:\n%s", web)
	}
	if strings.Count(text, "\n    server ") != 1 {
		t.Fatalf("servers outside backend web:\n%s", text)
	}

	// Server check keywords are not in Render's text: a change of them
	// alone still needs a reload.
	changed := *cfg
	changed.Groups = slices.Clone(cfg.Groups)
	changed.Groups[0].Health.Rise = 5
	if sameServerChecks(cfg, &changed) {
		t.Fatal("a changed rise was not seen")
	}
	if !sameServerChecks(cfg, cfg) {
		t.Fatal("identical configs differ")
	}
}

// TestOldWorkerLateRequests: clients with idle keep-alive connections at a
// reload stay on the old worker (option idle-close-on-response), which
// answers each one's next request with Connection: close. HAProxy refuses
// server commands in a stopping worker ("Proxy is disabled."), so a server
// drained and stopped after the reload is still in the old worker's list:
// its requests to it fail to connect and go to another server (retries with
// redispatch), and none fails.
func TestOldWorkerLateRequests(t *testing.T) {
	ctx := context.Background()
	m, cfg, port := startEdited(t, func(*config.Config) {})
	b1, b2 := startBackend(t, "b1"), startBackend(t, "b2")
	for _, b := range []*backend{b1, b2} {
		if err := m.AddServer(ctx, Server{Backend: "web", Name: b.name, Addr: loopback(b.port), Health: cfg.Groups[0].Health}, true); err != nil {
			t.Fatal(err)
		}
	}
	waitStatus(t, m, map[string]string{"b1": "UP", "b2": "UP"}, true)

	// Ten clients, each with one connection left idle after a request.
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	var clients []*http.Client
	for range 10 {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1}}
		t.Cleanup(c.CloseIdleConnections)
		if _, err := get(c, url); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	changed := *cfg
	changed.HAProxy.Timeouts.Server = 31 * time.Second
	if reloaded, err := m.Reload(ctx, &changed); err != nil || !reloaded {
		t.Fatalf("reload: %v, %v", reloaded, err)
	}
	if err := m.Drain(ctx, "web", "b1", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := m.RemoveServer(ctx, "web", "b1"); err != nil {
		t.Fatal(err)
	}
	b1.stop()
	before := b2.hits.Load()
	for i, c := range clients {
		resp, err := c.Get(url)
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "b2" {
			t.Fatalf("client %d: %s %q, want 200 from b2", i, resp.Status, body)
		}
		// The old worker answered: its answer closes the connection.
		if !resp.Close {
			t.Fatalf("client %d was answered by the new worker, not the old one", i)
		}
	}
	if n := b2.hits.Load() - before; n != 10 {
		t.Fatalf("b2 took %d of the old worker's 10 requests", n)
	}
}

// TestStopEndsIdleConnections: a stop lets a request in flight finish, then
// ends the idle keep-alive connections the workers keep for one more
// request (idle-close-on-response) rather than waiting out timeout
// http-keep-alive (10 s).
func TestStopEndsIdleConnections(t *testing.T) {
	ctx := context.Background()
	m, cfg, port := startEdited(t, func(*config.Config) {})
	b := startBackend(t, "b1")
	if err := m.AddServer(ctx, Server{Backend: "web", Name: "b1", Addr: loopback(b.port), Health: cfg.Groups[0].Health}, true); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, m, map[string]string{"b1": "UP"}, true)
	idle := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(idle.CloseIdleConnections)
	if _, err := get(idle, fmt.Sprintf("http://127.0.0.1:%d/", port)); err != nil {
		t.Fatal(err)
	}
	slow := make(chan error, 1)
	go func() {
		_, err := get(&http.Client{Timeout: 5 * time.Second}, fmt.Sprintf("http://127.0.0.1:%d/slow?d=1s", port))
		slow <- err
	}()
	waitFor(t, 5*time.Second, "the slow request to reach the server", func() (bool, string) {
		st, err := statsByName(t, m, "web")
		return err == nil && st["b1"].Sessions == 1, fmt.Sprint(st, err)
	})
	start := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := m.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if err := <-slow; err != nil {
		t.Fatalf("the request in flight failed: %v", err)
	}
	t.Logf("Stop took %v", took)
	if took > 5*time.Second {
		t.Fatalf("Stop took %v: it waited for the idle connection's timeout", took)
	}
}

// TestStartReloadsStaleMaster: a Manager that finds the master of an earlier
// one running another configuration (an edited file, or another version of
// shoal) adopts it and reloads it: same master, a new worker with the new
// configuration, the registry's servers in it, and no failed request from
// clients that never send a request twice.
func TestStartReloadsStaleMaster(t *testing.T) {
	ctx := context.Background()
	m, cfg, port := startEdited(t, func(*config.Config) {})
	b := startBackend(t, "b1")
	srv := Server{Backend: "web", Name: "b1", Addr: loopback(b.port), Health: cfg.Groups[0].Health}
	if err := m.AddServer(ctx, srv, true); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, m, map[string]string{"b1": "UP"}, true)
	master := m.PID()
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	stop, err := loadgen.Start(ctx, loadgen.Options{URL: url, Concurrency: 4, Timeout: 5 * time.Second, NoRetries: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop() })
	time.Sleep(200 * time.Millisecond)
	m.Detach()

	changed := *cfg
	changed.Compression = &config.Compression{Types: []string{"text/plain"}}
	m2 := newTestManager(t, routed(&changed))
	if err := m2.AddServer(ctx, srv, true); err != nil {
		t.Fatal(err)
	}
	if err := m2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if m2.PID() != master {
		t.Fatalf("the new manager runs master %d, want the adopted %d", m2.PID(), master)
	}
	waitStatus(t, m2, map[string]string{"b1": "UP"}, true)
	time.Sleep(200 * time.Millisecond)
	res := stop()
	if res.Failures != 0 || res.Requests == 0 {
		t.Fatalf("load while the master was adopted and reloaded: %d of %d requests failed: %v", res.Failures, res.Requests, res.FailureKinds)
	}
	// Start writes the configuration without servers; a reload writes them in.
	text, err := os.ReadFile(m2.paths.Config)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), "compression type text/plain") || !strings.Contains(string(text), "server b1 ") {
		t.Fatalf("the running configuration is not the new one with the registry:\n%s", text)
	}
}
