package haproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

// trickyBody has every character that means something to haproxy.cfg's
// parser: quotes, '#', '$' (environment variables), '\' and spaces.
const trickyBody = `I'm "live" #1 $HOME ${PATH} \x41 ünï`

// backendSection returns the "backend name" section of a rendered config.
func backendSection(t *testing.T, cfg, name string) string {
	t.Helper()
	i := strings.Index(cfg, "\nbackend "+name+"\n")
	if i < 0 {
		t.Fatalf("no backend %s in:\n%s", name, cfg)
	}
	s := cfg[i+1:]
	if j := strings.Index(s, "\n\n"); j >= 0 {
		s = s[:j+1]
	}
	return s
}

// haproxyCheck runs haproxy -c on a rendered config, which must pass
// without warnings.
func haproxyCheck(t *testing.T, dir, cfg string) {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Log("haproxy not installed: config not checked by haproxy -c")
		return
	}
	path := filepath.Join(dir, "check.cfg")
	writeFile(t, path, cfg)
	if out, err := exec.Command(bin, "-c", "-f", path).CombinedOutput(); err != nil || strings.Contains(string(out), "[WARNING]") {
		t.Fatalf("haproxy -c: %v\n%s\n%s", err, out, cfg)
	}
}

func TestRenderHealthChecks(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir, "127.0.0.1:8080")
	cfg.Groups[0].Health = config.Health{Type: "http", Method: "POST", Path: "/live?x=1", Host: "www.example.com:8080",
		Status: []config.StatusRange{{Min: 200, Max: 200}, {Min: 204, Max: 204}, {Min: 300, Max: 399}}, Body: trickyBody, Timeout: time.Second}
	cfg.Groups[1].Health = config.DefaultHealth
	cfg.Groups[1].Health.BodyRegex = `^\d+ "ok"$`
	cfg.Groups[2].Health = config.Health{Type: "tcp", Send: "PING\r\n", Expect: "+PONG", Timeout: 250 * time.Millisecond}
	got, err := Render(cfg, PathsFor(dir))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"web": "backend web\n    balance roundrobin\n    option httpchk\n" +
			"    http-check send meth POST uri /live?x=1 ver HTTP/1.1 hdr Host www.example.com:8080\n" +
			"    http-check expect status 200,204,300-399\n" +
			`    http-check expect string I\x27m\x20\x22live\x22\x20\x231\x20\x24HOME\x20\x24\x7bPATH\x7d\x20\x5cx41\x20\xc3\xbcn\xc3\xaf` + "\n" +
			"    timeout check 1000ms\n",
		"api": "backend api\n    balance leastconn\n    option httpchk\n" +
			"    http-check send meth GET uri /healthz ver HTTP/1.1 hdr Host localhost\n" +
			"    http-check expect status 200-399\n" +
			`    http-check expect rstring \x5e\x5cd+\x20\x22ok\x22\x24` + "\n" +
			"    timeout check 1000ms\n",
		"static": "backend static\n    balance first\n    option tcp-check\n    tcp-check connect\n" +
			"    tcp-check send-binary 50494e470d0a\n    tcp-check expect binary 2b504f4e47\n    timeout check 250ms\n",
	}
	for name, w := range want {
		if s := backendSection(t, got, name); s != w {
			t.Errorf("backend %s:\n got:\n%s\nwant:\n%s", name, s, w)
		}
	}
	haproxyCheck(t, dir, got)

	// A TCP check without send or expect is a plain connect check.
	cfg.Groups[2].Health = config.Health{Type: "tcp"}
	if got, err = Render(cfg, PathsFor(dir)); err != nil {
		t.Fatal(err)
	}
	if s := backendSection(t, got, "static"); s != "backend static\n    balance first\n" {
		t.Errorf("connect-only TCP check rendered as:\n%s", s)
	}
}

// TestRenderHealthRejects: what could change haproxy.cfg's structure is
// refused, naming the field. What config.Load refuses besides (status codes
// out of 100-599, body with body_regex, a regex Go does not compile) is
// tested in internal/config; a check it did not fill in is refused rather
// than defaulted a second time here.
func TestRenderHealthRejects(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]struct {
		set  func(h *config.Health)
		want string
	}{
		"not loaded":        {func(h *config.Health) { *h = config.Health{Path: "/"} }, `health type ""`},
		"unknown type":      {func(h *config.Health) { h.Type = "udp" }, `health type "udp"`},
		"method injection":  {func(h *config.Health) { h.Method = "GET uri /x" }, "health method"},
		"lower-case method": {func(h *config.Health) { h.Method = "get" }, "health method"},
		"path with space":   {func(h *config.Health) { h.Path = "/a b" }, "health path"},
		"path with quote":   {func(h *config.Health) { h.Path = `/a"b` }, "health path"},
		"host injection":    {func(h *config.Health) { h.Host = "a\nbackend x" }, "health host"},
		"no status codes":   {func(h *config.Health) { h.Status = nil }, "health status"},
		"NUL in body":       {func(h *config.Health) { h.Body = "a\x00b" }, "health body"},
		"NUL in body_regex": {func(h *config.Health) { h.BodyRegex = "a\x00b" }, "health body_regex"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig(dir, "127.0.0.1:8080")
			h := config.DefaultHealth
			tc.set(&h)
			cfg.Groups[0].Health = h
			got, err := Render(cfg, PathsFor(dir))
			if err == nil {
				t.Fatalf("Render accepted %+v:\n%s", h, got)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Render refused %+v with %q, want it to name %s", h, err, tc.want)
			}
		})
	}
}

func TestServerCheckArgs(t *testing.T) {
	h := config.Health{Interval: 2 * time.Second, FastInter: 100 * time.Millisecond, DownInter: 5 * time.Second, Rise: 3, Fall: 4,
		Passive: &config.Passive{Observe: "layer7", ErrorLimit: 10, OnError: "mark-down"}}
	got, err := serverCheckArgs(h)
	if err != nil {
		t.Fatal(err)
	}
	want := " check inter 2000ms fastinter 100ms downinter 5000ms rise 3 fall 4 observe layer7 error-limit 10 on-error mark-down"
	if got != want {
		t.Errorf("serverCheckArgs:\n got %q\nwant %q", got, want)
	}
	if got, _ := serverCheckArgs(config.Health{}); got != " check" {
		t.Errorf("serverCheckArgs(zero) = %q, want \" check\"", got)
	}
	for _, bad := range []config.Health{
		{Interval: -1},
		{Passive: &config.Passive{Observe: "layer7", ErrorLimit: 10, OnError: "mark-down now"}},
		{Passive: &config.Passive{Observe: "layer9", ErrorLimit: 10, OnError: "mark-down"}},
		{Passive: &config.Passive{Observe: "layer7", ErrorLimit: 0, OnError: "mark-down"}},
	} {
		if got, err := serverCheckArgs(bad); err == nil {
			t.Errorf("serverCheckArgs(%+v) = %q, want an error", bad, got)
		}
	}
}

// startHTTP runs a server whose /healthz answers healthCode and health, and
// every other path code and its name.
func startHTTP(t *testing.T, name string, healthCode int, health string, code int) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{name: name, port: ln.Addr().(*net.TCPAddr).Port}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.WriteHeader(healthCode)
			io.WriteString(w, health)
			return
		}
		b.hits.Add(1)
		w.Header().Set("X-Name", name)
		w.WriteHeader(code)
		io.WriteString(w, name)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return b
}

// startTCP runs a line server that answers "PING" with reply.
func startTCP(t *testing.T, reply string) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				buf := make([]byte, 64)
				n, _ := c.Read(buf)
				if strings.HasPrefix(string(buf[:n]), "PING") {
					io.WriteString(c, reply)
				}
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// startHealthManager starts HAProxy for cfg and adds each server, gated.
func startHealthManager(t *testing.T, cfg *config.Config, servers ...Server) *Manager {
	t.Helper()
	requireHAProxy(t)
	cleanupHAProxy(t, cfg.StateDir)
	m := newTestManager(t, cfg)
	ctx := context.Background()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		s.Health = cfg.Groups[0].Health
		if err := m.AddServer(ctx, s, false); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// waitChecks waits until every named server of web has the status prefix and
// check status given, and returns the last stats.
func waitChecks(t *testing.T, m *Manager, want map[string][2]string) map[string]ServerStat {
	t.Helper()
	var got map[string]ServerStat
	waitFor(t, 15*time.Second, fmt.Sprintf("checks %v", want), func() (bool, string) {
		var err error
		if got, err = statsByName(t, m, "web"); err != nil {
			return false, err.Error()
		}
		for name, w := range want {
			s := got[name]
			if !strings.HasPrefix(string(s.Status), w[0]) || s.CheckStatus != w[1] {
				return false, fmt.Sprintf("%+v", got)
			}
			// A read under load once had a layer-7 status with neither
			// its code nor its text (between two checks 200 ms apart):
			// wait for a complete one.
			if strings.HasPrefix(s.CheckStatus, "L7") && s.CheckCode == 0 && s.CheckInfo == "" {
				return false, fmt.Sprintf("%s: %s without its code or text yet", name, s.CheckStatus)
			}
		}
		return true, ""
	})
	return got
}

// TestHealthCheckBody: an instance that answers its check with 200 but the
// wrong body is kept out of rotation, and one with the right body but the
// wrong status too; the body holds every character haproxy.cfg treats
// specially, so this also proves the escaping reaches HAProxy intact.
func TestHealthCheckBody(t *testing.T) {
	stateDir := t.TempDir()
	port := freePort(t)
	cfg := testConfig(stateDir, "127.0.0.1:"+strconv.Itoa(port))
	h := config.DefaultHealth
	h.Status, h.Body = []config.StatusRange{{Min: 200, Max: 204}}, trickyBody
	h.Interval, h.Timeout, h.Rise, h.Fall, h.FastInter = 200*time.Millisecond, time.Second, 2, 2, 0
	cfg.Groups[0].Health = h
	good := startHTTP(t, "good", 200, "status: "+trickyBody+"\n", 200)
	wrong := startHTTP(t, "wrong", 200, "I'm live", 200)
	s500 := startHTTP(t, "s500", 500, trickyBody, 500)
	m := startHealthManager(t, cfg,
		Server{Backend: "web", Name: "good", Addr: loopback(good.port)},
		Server{Backend: "web", Name: "wrong", Addr: loopback(wrong.port)},
		Server{Backend: "web", Name: "s500", Addr: loopback(s500.port)})

	got := waitChecks(t, m, map[string][2]string{"good": {"UP", "L7OK"}, "wrong": {"DOWN", "L7RSP"}, "s500": {"DOWN", "L7STS"}})
	if s := got["good"]; s.CheckCode != 200 || s.CheckDesc != "Layer7 check passed" {
		t.Errorf("good: %+v", s)
	}
	if s := got["wrong"]; s.CheckInfo != "HTTP content check did not match" || s.CheckDesc != "Layer7 invalid response" {
		t.Errorf("wrong: %+v", s)
	}
	if s := got["s500"]; s.CheckCode != 500 || s.CheckInfo != "Internal Server Error" {
		t.Errorf("s500: %+v", s)
	}
	// What a deploy reads of them: two answered wrongly, the one with its
	// refused status.
	for name, want := range map[string][2]int{"good": {0, 0}, "wrong": {1, 0}, "s500": {1, 500}} {
		s := got[name]
		if bad := s.AnsweredBadly(); bad != (want[0] == 1) || s.RefusedStatus() != want[1] {
			t.Errorf("%s: AnsweredBadly %v, RefusedStatus %d; want %v, %d", name, bad, s.RefusedStatus(), want[0] == 1, want[1])
		}
	}

	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	for i := range 20 {
		body, err := get(client, fmt.Sprintf("http://127.0.0.1:%d/", port))
		if err != nil || body != "good" {
			t.Fatalf("request %d: %q, %v; want good", i, body, err)
		}
	}
	if n := wrong.hits.Load() + s500.hits.Load(); n != 0 {
		t.Errorf("servers failing their checks got %d requests", n)
	}
}

// TestHealthCheckRegex checks body_regex against a real HAProxy (PCRE2).
func TestHealthCheckRegex(t *testing.T) {
	stateDir := t.TempDir()
	cfg := testConfig(stateDir, "127.0.0.1:"+strconv.Itoa(freePort(t)))
	h := config.DefaultHealth
	h.BodyRegex = `^\d+ "ok"$`
	h.Interval, h.Rise, h.Fall, h.FastInter = 200*time.Millisecond, 1, 1, 0
	cfg.Groups[0].Health = h
	num := startHTTP(t, "num", 200, `42 "ok"`, 200)
	text := startHTTP(t, "text", 200, `forty-two "ok"`, 200)
	m := startHealthManager(t, cfg,
		Server{Backend: "web", Name: "num", Addr: loopback(num.port)},
		Server{Backend: "web", Name: "text", Addr: loopback(text.port)})
	waitChecks(t, m, map[string][2]string{"num": {"UP", "L7OK"}, "text": {"DOWN", "L7RSP"}})
}

// TestHealthCheckTCP: send/expect against small TCP servers, and a plain
// connect check against a closed port.
func TestHealthCheckTCP(t *testing.T) {
	stateDir := t.TempDir()
	cfg := testConfig(stateDir, "127.0.0.1:"+strconv.Itoa(freePort(t)))
	cfg.Groups[0].Health = config.Health{Type: "tcp", Send: "PING\r\n", Expect: "+PONG", Interval: 200 * time.Millisecond, Timeout: time.Second, Rise: 2, Fall: 2}
	pong := startTCP(t, "+PONG\r\n")
	errPort := startTCP(t, "-ERR unknown\r\n")
	m := startHealthManager(t, cfg,
		Server{Backend: "web", Name: "pong", Addr: loopback(pong)},
		Server{Backend: "web", Name: "err", Addr: loopback(errPort)})
	waitChecks(t, m, map[string][2]string{"pong": {"UP", "L7OK"}, "err": {"DOWN", "L7RSP"}})

	stateDir = t.TempDir()
	cfg = testConfig(stateDir, "127.0.0.1:"+strconv.Itoa(freePort(t)))
	cfg.Groups[0].Health = config.Health{Type: "tcp", Interval: 200 * time.Millisecond, Rise: 1, Fall: 1}
	m = startHealthManager(t, cfg,
		Server{Backend: "web", Name: "open", Addr: loopback(pong)},
		Server{Backend: "web", Name: "closed", Addr: loopback(freePort(t))})
	waitChecks(t, m, map[string][2]string{"open": {"UP", "L4OK"}, "closed": {"DOWN", "L4CON"}})
}

// TestPassiveCheck: an instance whose check passes but whose traffic fails is
// marked down by observe layer7 on-error mark-down, and the healthy one never.
func TestPassiveCheck(t *testing.T) {
	stateDir := t.TempDir()
	port := freePort(t)
	cfg := testConfig(stateDir, "127.0.0.1:"+strconv.Itoa(port))
	h := config.DefaultHealth
	h.Interval, h.Rise, h.Fall, h.FastInter = time.Second, 2, 2, 0
	h.Passive = &config.Passive{Observe: "layer7", ErrorLimit: 3, OnError: "mark-down"}
	cfg.Groups[0].Health = h
	good := startHTTP(t, "good", 200, "ok", 200)
	// Healthy by its check, but every request fails with a status that
	// no retry covers (with retries: idempotent a 502-504 is retried on the
	// other server and never reaches the passive check).
	broken := startHTTP(t, "broken", 200, "ok", http.StatusInsufficientStorage)
	m := startHealthManager(t, cfg,
		Server{Backend: "web", Name: "good", Addr: loopback(good.port)},
		Server{Backend: "web", Name: "broken", Addr: loopback(broken.port)})
	before := waitChecks(t, m, map[string][2]string{"good": {"UP", "L7OK"}, "broken": {"UP", "L7OK"}})

	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	for range 20 {
		_, _ = get(client, fmt.Sprintf("http://127.0.0.1:%d/", port))
	}
	waitFor(t, 10*time.Second, "broken marked down by passive checks", func() (bool, string) {
		got, err := statsByName(t, m, "web")
		if err != nil {
			return false, err.Error()
		}
		return got["broken"].Downs > before["broken"].Downs && got["good"].Downs == before["good"].Downs, fmt.Sprintf("%+v", got)
	})
}

// hostile are values meant to break out of a haproxy.cfg word or line.
var hostile = []string{
	"ok", trickyBody, "a\nbackend evil", "a\r\nserver x 1.2.3.4:80", "a#b", `a"b`, "a'b", `a\`, `\x41`, "${HOME}",
	"a b", "\tx", "a\x00b", "%[env(HOME)]", "/ok", "/a b", "/a#b", "GET", "get", "GET /x", "h.example:80", "[::1]:80",
	"é", "\xff", "((", `^\d+$`, "}", "a;b",
}

// healthDocs returns configs that put the strings into every field of a
// health check that takes one.
func healthDocs(method, path, host, text, send, expect string) []string {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	head := "listen: 127.0.0.1:8080\ngroups:\n  - name: web\n    min_size: 1\n    max_size: 2\n    template: {command: [app]}\n    health: "
	return []string{
		head + fmt.Sprintf("{method: %s, path: %s, host: %s, body: %s}\n", q(method), q(path), q(host), q(text)),
		head + fmt.Sprintf("{path: %s, body_regex: %s}\n", q(path), q(text)),
		head + fmt.Sprintf("{type: tcp, send: %s, expect: %s}\n", q(send), q(expect)),
	}
}

// renderAccepted renders every config the config package accepts and checks
// that each backend line is a check keyword with nothing added: what a user
// writes can fill a word, never add a line or a keyword.
func renderAccepted(t *testing.T, dir string, docs []string) []string {
	t.Helper()
	allowed := []string{"balance roundrobin", "option httpchk", "option tcp-check", "tcp-check connect",
		"http-check send meth ", "http-check expect status ", "http-check expect string ", "http-check expect rstring ",
		"tcp-check send-binary ", "tcp-check expect binary ", "timeout check "}
	var rendered []string
	for _, doc := range docs {
		cfg, err := config.Parse("fuzz.yaml", []byte(doc))
		if err != nil {
			continue
		}
		cfg.StateDir = dir
		out, err := Render(cfg, PathsFor(dir))
		if err != nil {
			t.Fatalf("config accepted but Render refused: %v\n%s", err, doc)
		}
		sec := backendSection(t, out, "web")
		for _, l := range strings.Split(strings.TrimSuffix(sec, "\n"), "\n")[1:] {
			l = strings.TrimPrefix(l, "    ")
			if slices.Contains(sampleLines, l) {
				continue // constant: the adaptive access-log sampling
			}
			if !slices.ContainsFunc(allowed, func(p string) bool { return strings.HasPrefix(l, p) }) ||
				strings.HasPrefix(l, "http-check send meth ") && len(strings.Fields(l)) != 11 ||
				!strings.HasPrefix(l, "http-check send") && len(strings.Fields(l)) > 4 {
				t.Fatalf("unexpected backend line %q from:\n%s\nrendered:\n%s", l, doc, sec)
			}
		}
		rendered = append(rendered, out)
	}
	return rendered
}

// TestRenderHostileHealth: whatever the config package accepts renders to a
// config that haproxy -c accepts, with nothing injected.
func TestRenderHostileHealth(t *testing.T) {
	dir := t.TempDir()
	var docs []string
	for _, s := range hostile {
		docs = append(docs, healthDocs("GET", "/healthz", "localhost", s, s, s)...)
		docs = append(docs, healthDocs(s, s, s, "ok", "x", "y")...)
	}
	rendered := renderAccepted(t, dir, docs)
	if len(rendered) < len(hostile) {
		t.Fatalf("only %d of %d configs accepted", len(rendered), len(docs))
	}
	// One haproxy -c for all: the first config plus every other's backend.
	all := rendered[0]
	for i, out := range rendered[1:] {
		all += "\n" + strings.Replace(backendSection(t, out, "web"), "backend web\n", fmt.Sprintf("backend web%d\n", i), 1)
	}
	haproxyCheck(t, dir, all)
	t.Logf("%d of %d configs accepted; haproxy -c accepts them all", len(rendered), len(docs))
}

func FuzzRenderHealth(f *testing.F) {
	for _, s := range hostile {
		f.Add("GET", "/healthz", "localhost", s, s, s)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, method, path, host, text, send, expect string) {
		renderAccepted(t, dir, healthDocs(method, path, host, text, send, expect))
	})
}
