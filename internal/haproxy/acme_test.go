package haproxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/certstore"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/testdep"
)

// TestRenderACME: a frontend with tls.acme sends the CA's challenges for
// its domains to the shoal_acme backend before any group's rule, and so
// does every other http frontend (the CA asks on whichever binds port 80);
// the challenges are limited per client and in all before they are
// allowed past the other rules; the backend's server is shoal's challenge
// socket, and HAProxy accepts the result; without ACME neither is
// rendered; a group cannot take the backend's name.
func TestRenderACME(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir, "127.0.0.1:8080")
	plain, err := Render(cfg, PathsFor(dir))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain, acmeBackend) {
		t.Errorf("config without ACME mentions %s:\n%s", acmeBackend, plain)
	}

	// HTTP-01 asks on the plain bind; the TLS bind serves what ACME got.
	cfg.Frontends = []config.Frontend{{Name: "shoal", Bind: []string{cfg.Listen, "127.0.0.1:8443"}, Mode: config.ModeHTTP, ForwardedHeaders: true,
		Routes: cfg.Frontends[0].Routes,
		TLS: &config.TLS{ACME: &config.ACME{Email: "ops@example.com", Domains: []string{"example.com"}},
			Bind: []string{"127.0.0.1:8443"}, ALPN: []string{"h2", "http/1.1"}, MinVersion: "1.2", TicketKeys: config.TicketKeysOff}},
		{Name: "port80", Bind: []string{"127.0.0.1:8081"}, Mode: config.ModeHTTP, ForwardedHeaders: true, Routes: cfg.Frontends[0].Routes,
			RateLimit: &config.RateLimit{Requests: 5, Per: time.Minute, By: "ip"}}}
	got, err := Render(cfg, PathsFor(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"shoal", "port80"} {
		fe := got[strings.Index(got, "\nfrontend "+name+"\n"):]
		fe = fe[:strings.Index(fe[1:], "\n\n")+1]
		want := []string{
			"    acl shoal_acme_path path_beg /.well-known/acme-challenge/\n",
			"    acl shoal_acme_host hdr(host),field(1,:) -i example.com\n",
			"    acl shoal_acme_token path -f " + PathsFor(dir).ACMETokens + "\n",
			"    http-request track-sc1 src table shoal_acme if shoal_acme_path shoal_acme_host\n",
			"    http-request deny deny_status 429 if shoal_acme_path shoal_acme_host { sc_http_req_rate(1) gt 24 }\n",
			"    http-request return status 404 content-type text/plain string \"no such challenge\\n\" if shoal_acme_path shoal_acme_host !shoal_acme_token\n",
			"    http-request deny deny_status 429 if shoal_acme_path shoal_acme_host { be_sess_rate(shoal_acme) gt 48 }\n",
			"    http-request allow if shoal_acme_path shoal_acme_host\n",
			"    use_backend shoal_acme if shoal_acme_path shoal_acme_host\n",
		}
		last := -1
		for _, w := range want {
			i := strings.Index(fe, w)
			if i < last {
				t.Errorf("frontend %s: %q missing or out of order:\n%s", name, w, fe)
			}
			last = i
		}
		// The allow comes before every other http-request rule, the
		// challenge's use_backend before every group's.
		if i, j := strings.Index(fe, want[7]), strings.Index(fe, "    http-request set-header"); i > j && j >= 0 {
			t.Errorf("frontend %s: the challenge's allow is not before the other http-request rules:\n%s", name, fe)
		}
		if i, j := strings.Index(fe, want[8]), strings.Index(fe, "    use_backend api "); i > j {
			t.Errorf("frontend %s: the challenge's use_backend is not before the groups':\n%s", name, fe)
		}
		// The frontend's own limit answers before any rule that answers.
		if i, j := strings.Index(fe, "http-request deny deny_status 429 if shoal_rate_limited"), strings.Index(fe, "http-request set-header"); name == "port80" && (i < 0 || i > j) {
			t.Errorf("frontend %s: the rate limit is not before the other rules:\n%s", name, fe)
		}
	}
	if w := "\nbackend shoal_acme\n    mode http\n    no log\n    stick-table type ipv6 size 100k expire 10s store http_req_rate(10s)\n    server shoal " + ACMESocket(PathsFor(dir)) + " maxconn 8\n"; !strings.Contains(got, w) {
		t.Errorf("config lacks %q:\n%s", w, got)
	}
	bad := *cfg
	bad.Groups = slices.Clone(cfg.Groups)
	bad.Groups[0].Name = acmeBackend
	if _, err := Render(&bad, PathsFor(dir)); err == nil || !strings.Contains(err.Error(), `group name "shoal_acme"`) {
		t.Errorf("a group named shoal_acme: %v, want an error naming it", err)
	}
	bin := testdep.Command(t, "haproxy", "haproxy")
	if err := certstore.New(dir, nil, nil).Write(cfg.Frontends); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(PathsFor(dir).Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, PathsFor(dir).ACMETokens, "")
	path := filepath.Join(dir, "haproxy.cfg")
	writeFile(t, path, got)
	if out, err := exec.Command(bin, "-c", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
}

// TestACMEChallengeBeforeRules: on a real HAProxy, a frontend with ACME, a
// rate limit of 2 requests, a redirect route and a catch-all maintenance
// page (both http-request rules, which HAProxy runs before any use_backend)
// still passes every challenge request for its domain, plain and over TLS,
// to shoal's challenge socket (within the challenges' own limit, see
// TestACMEChallengeLimits: on a real HAProxy, challenge requests for the
// ACME domain reach shoal's socket only for a token shoal has (SetChallenge;
// a reload keeps it, removing it ends it): HAProxy answers the others 404
// itself. From one client at most acmePerSource+acmePerSourceEach per
// domain (24 here) in acmeWindow reach shoal, whether they come to the
// frontend with tls.acme or to a separate plain one; the rest are answered
// 429 by HAProxy. Another client still gets through, and many clients
// together, each under its own limit, are capped in all.
func TestACMEChallengeLimits(t *testing.T) {
	requireHAProxy(t)
	ctx := context.Background()
	stateDir := t.TempDir()
	cleanupHAProxy(t, stateDir)
	secure, plain := "127.0.0.1:"+strconv.Itoa(freePort(t)), "127.0.0.1:"+strconv.Itoa(freePort(t))
	cfg := testConfig(stateDir, plain)
	cfg.Frontends = []config.Frontend{{Name: "edge", Bind: []string{secure}, Mode: config.ModeHTTP,
		Routes: []config.Route{{Group: "web"}},
		TLS: &config.TLS{ACME: &config.ACME{Email: "ops@example.com", Domains: []string{"a.test"}},
			ALPN: []string{"h2", "http/1.1"}, MinVersion: "1.2", TicketKeys: config.TicketKeysOff}},
		{Name: "port80", Bind: []string{plain}, Mode: config.ModeHTTP, Routes: []config.Route{{Group: "web"}}}}
	if err := certstore.New(stateDir, nil, nil).Write(cfg.Frontends); err != nil {
		t.Fatal(err)
	}
	m := newTestManager(t, cfg)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", ACMESocket(PathsFor(stateDir)))
	if err != nil {
		t.Fatal(err)
	}
	var reached atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		io.WriteString(w, "key-authorization")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	// from sends n requests for token from source address src, one after
	// another on one connection, and counts the answers by status.
	from := func(src, addr, token string, n int) map[int]int {
		t.Helper()
		client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
			DialContext:     (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}).DialContext,
		}}
		defer client.CloseIdleConnections()
		got := map[int]int{}
		scheme := "http://"
		if addr == secure {
			scheme = "https://"
		}
		for range n {
			req, err := http.NewRequest(http.MethodGet, scheme+addr+acmeChallenge+token, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = "a.test"
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			got[resp.StatusCode]++
		}
		return got
	}
	limit := acmePerSource + acmePerSourceEach
	// be_sess_rate, the cap, is the rate over the last second.
	settle := func() { time.Sleep(2 * time.Second) }

	// The counts are exact if the 100 requests fit in one window (10 s),
	// as they do by far even on a busy machine.
	inWindow := func(start time.Time) bool {
		if d := time.Since(start); d >= 10*time.Second {
			t.Logf("100 requests took %s, longer than the window: counts not checked", d)
			return false
		}
		return true
	}
	// Guessed tokens: never shoal's.
	start := time.Now()
	if got := from("127.0.0.5", plain, "guess", 100); reached.Load() != 0 || inWindow(start) && (got[404] != limit || got[429] != 100-limit) {
		t.Errorf("100 requests for a token shoal does not have: %d reached shoal, answers %v; want none, %d answered 404 by HAProxy, 429 for the rest", reached.Load(), got, limit)
	}
	if err := m.SetChallenge(ctx, "tok", true); err != nil {
		t.Fatal(err)
	}
	// A reload keeps the token (the file lists it).
	next := *cfg
	next.HAProxy.Timeouts.Client = 31 * time.Second
	if _, err := m.Reload(ctx, &next); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{plain, secure} {
		settle()
		src := map[string]string{plain: "127.0.0.2", secure: "127.0.0.3"}[addr]
		before, start := reached.Load(), time.Now()
		got := from(src, addr, "tok", 100)
		if n := reached.Load() - before; inWindow(start) && (n != int64(limit) || got[200] != limit || got[429] != 100-limit) {
			t.Errorf("100 challenges from %s to %s: %d reached shoal, answers %v; want %d, and 429 for the rest", src, addr, n, got, limit)
		}
	}
	if got := from("127.0.0.4", plain, "tok", 1); got[200] != 1 {
		t.Errorf("another client's challenge: %v, want it to reach shoal", got)
	}

	// Many clients at once, each under its own limit: capped in all.
	settle()
	before, start := reached.Load(), time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := map[int]int{}
	for k := range 10 {
		wg.Go(func() {
			got := from(fmt.Sprintf("127.0.1.%d", k+1), plain, "tok", limit-1)
			mu.Lock()
			defer mu.Unlock()
			for code, n := range got {
				total[code] += n
			}
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	n := reached.Load() - before
	// The rate is read before the request counts: the cap lets one more
	// through, and each client's request in flight may read the same rate.
	capped := float64(acmeTotalTimes*limit)*(secs+1) + 1 + 10
	if total[429] == 0 || float64(n) > capped {
		t.Errorf("%d challenges from 10 clients in %.1fs: %d reached shoal, answers %v; want at most %.0f (%d/s) and the rest 429",
			10*(limit-1), secs, n, total, capped, acmeTotalTimes*limit)
	}
	t.Logf("%d challenges from 10 clients in %.2fs: %d reached shoal, answers %v", 10*(limit-1), secs, n, total)

	if err := m.SetChallenge(ctx, "tok", false); err != nil {
		t.Fatal(err)
	}
	if before, got := reached.Load(), from("127.0.0.6", plain, "tok", 1); got[404] != 1 || reached.Load() != before {
		t.Errorf("the token removed: %v, want 404 from HAProxy", got)
	}
	if err := m.SetChallenge(ctx, "a b", true); err == nil {
		t.Error(`SetChallenge("a b"): no error`)
	}
}

// TestRenderACMETCPFrontend: a tcp frontend's tls.acme certificate is
// validated over http like any other: an http frontend answers its
// challenges; the tcp frontend itself has no challenge rule.
func TestRenderACMETCPFrontend(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir, "127.0.0.1:8080")
	cfg.Groups = append(cfg.Groups, config.Group{Name: "db", Balance: "leastconn", Health: config.Health{Type: "tcp"}})
	cfg.Frontends = append(cfg.Frontends, config.Frontend{Name: "pg", Bind: []string{"127.0.0.1:5433"}, Mode: config.ModeTCP,
		Routes: []config.Route{{Group: "db"}},
		TLS: &config.TLS{ACME: &config.ACME{Email: "ops@example.com", Domains: []string{"DB.example.com"}},
			ALPN: []string{"h2", "http/1.1"}, MinVersion: "1.2", TicketKeys: config.TicketKeysOff}})
	got, err := Render(cfg, PathsFor(dir))
	if err != nil {
		t.Fatal(err)
	}
	i, j := strings.Index(got, "\nfrontend shoal\n"), strings.Index(got, "\nfrontend pg\n")
	if web := got[i:j]; !strings.Contains(web, "    acl shoal_acme_host hdr(host),field(1,:) -i db.example.com\n") ||
		!strings.Contains(web, "    use_backend shoal_acme if shoal_acme_path shoal_acme_host\n") {
		t.Errorf("the http frontend does not answer the tcp frontend's challenges:\n%s", web)
	}
	if pg := got[j:]; strings.Contains(pg[:strings.Index(pg[1:], "\n\n")+1], "acme") {
		t.Errorf("the tcp frontend has challenge rules:\n%s", pg)
	}
	if !strings.Contains(got, "\nbackend shoal_acme\n") {
		t.Errorf("no shoal_acme backend:\n%s", got)
	}
}
