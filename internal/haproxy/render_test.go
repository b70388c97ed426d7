package haproxy

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/testdep"
)

func testConfig(stateDir, listen string) *config.Config {
	health := config.DefaultHealth
	health.Interval, health.Timeout, health.Rise, health.Fall, health.FastInter = 200*time.Millisecond, 500*time.Millisecond, 2, 2, 0
	return routed(&config.Config{
		Listen:   listen,
		StateDir: stateDir,
		HAProxy:  config.HAProxy{Binary: "haproxy", Timeouts: config.DefaultTimeouts},
		Groups: []config.Group{
			{Name: "web", Balance: "roundrobin", Health: health},
			{Name: "api", Balance: "leastconn", Hosts: []string{"api.example.com"}, PathPrefixes: []string{"/v1/", "/v2/"}, Health: health},
			{Name: "static", Balance: "first", PathPrefixes: []string{"/static"}, Health: health},
		},
	})
}

// routed makes cfg's frontend from its listen shorthand, as Load does.
func routed(cfg *config.Config) *config.Config {
	cfg.Frontends = []config.Frontend{config.Shorthand(cfg.Listen, cfg.Compression, cfg.Groups)}
	return cfg
}

// TestRenderWildcardHost: *.example.com routes any subdomain, with or
// without a port in the Host header, and HAProxy accepts the rule.
func TestRenderWildcardHost(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir, "127.0.0.1:8080")
	cfg.Groups[1].Hosts = []string{"api.example.com", "*.example.org", "*.xn--bcher-kva.example"}
	got, err := Render(routed(cfg), PathsFor(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"    acl r1_host hdr(host) -i api.example.com\n",
		"    acl r1_host hdr_beg(host) -i api.example.com:\n",
		"    acl r1_host hdr(host),field(1,:) -m end -i .example.org .xn--bcher-kva.example\n",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("config lacks %q:\n%s", w, got)
		}
	}
	bin := testdep.Command(t, "haproxy", "haproxy")
	path := filepath.Join(dir, "haproxy.cfg")
	writeFile(t, path, got)
	if out, err := exec.Command(bin, "-c", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
}

func TestRender(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir, "127.0.0.1:8080")
	cfg.Compression = &config.Compression{Types: []string{"text/html", "application/json"}}
	cfg.HAProxy.Global = []string{"nbthread 1"}
	cfg.HAProxy.Defaults = []string{"timeout server 60s"}
	cfg.AccessLog.Sample = 10
	cfg.Groups[1].Retries = config.RetriesIdempotent
	p := PathsFor(dir)
	got, err := Render(routed(cfg), p)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"global\n",
		"    stats socket " + p.AdminSocket + " mode 600 level admin expose-fd listeners\n",
		"    hard-stop-after 40000ms\n    noreuseport\n",
		"    nbthread 1\n",
		"\ndefaults\n    mode http\n",
		"    retries 3\n    option redispatch 1\n",
		"    retry-on conn-failure\n",
		"    timeout connect 5000ms\n    timeout client 30000ms\n    timeout server 30000ms\n",
		"    timeout http-request 10000ms\n    timeout http-keep-alive 10000ms\n    timeout queue 30000ms\n",
		"    timeout server 60s\n",
		"\nfrontend shoal\n    bind 127.0.0.1:8080\n    option forwardfor\n",
		"    option idle-close-on-response\n",
		"    http-request set-header X-Forwarded-Proto http\n",
		"    log unix@" + p.LogSocket + " format raw sample 1:10 local0\n",
		"    log-format \"%Ts.%ms %ci:%cp %b %s %ST %Tw %Tc %Tr %Ta %B %rc %tsc %[var(txn.shoal_sample)] %HM %HU\"\n",
		"    compression algo gzip\n    compression type text/html application/json\n",
		"    acl r1_host hdr(host) -i api.example.com\n",
		"    acl r1_host hdr_beg(host) -i api.example.com:\n",
		"    acl r1_path path_beg /v1/ /v2/\n",
		"    acl r2_path path_beg /static\n",
		"    use_backend api if r1_host r1_path\n",
		"    use_backend static if r2_path\n",
		"    default_backend web\n",
		"\nbackend web\n    balance roundrobin\n    option httpchk\n" +
			"    http-check send meth GET uri /healthz ver HTTP/1.1 hdr Host localhost\n" +
			"    http-check expect status 200-399\n    timeout check 500ms\n",
		"\nbackend api\n    balance leastconn\n",
		// retries: idempotent is the api group's alone.
		"    retry-on conn-failure empty-response junk-response response-timeout 502 503 504\n" +
			"    http-request disable-l7-retry if !{ method GET HEAD OPTIONS PUT DELETE TRACE }\n\nbackend static\n",
		"\nbackend static\n    balance first\n",
	}
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("config lacks %q:\n%s", w, got)
		}
	}
	if n := strings.Count(got, "retry-on "); n != 2 {
		t.Errorf("%d retry-on lines, want 2 (defaults' and group api's):\n%s", n, got)
	}
	if n := strings.Count(got, "disable-l7-retry"); n != 1 {
		t.Errorf("%d disable-l7-retry rules, want 1 (group api's):\n%s", n, got)
	}
	if strings.Contains(got, "\n    server ") {
		t.Errorf("config has static servers; all servers must be dynamic:\n%s", got)
	}
	// The default backend comes after every routing rule.
	if strings.Index(got, "default_backend") < strings.LastIndex(got, "use_backend") {
		t.Errorf("default_backend before use_backend:\n%s", got)
	}

	if bin, err := exec.LookPath("haproxy"); err == nil {
		path := filepath.Join(dir, "haproxy.cfg")
		writeFile(t, path, got)
		if out, err := exec.Command(bin, "-c", "-f", path).CombinedOutput(); err != nil {
			t.Fatalf("haproxy -c: %v\n%s", err, out)
		}
	}
}

// TestHardStopAfter: a replaced worker may finish whatever the timeouts
// allow (a wait for the server after connecting, an idle keep-alive
// connection, also a frontend's own) and 5 s more, and never less than 30 s.
func TestHardStopAfter(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*config.Config)
		want string
	}{
		{"defaults", func(*config.Config) {}, "40000ms"},
		{"short timeouts", func(c *config.Config) {
			c.HAProxy.Timeouts.Connect, c.HAProxy.Timeouts.Server, c.HAProxy.Timeouts.HTTPKeepAlive = time.Second, 5*time.Second, time.Second
		}, "30000ms"},
		{"timeout server 60s", func(c *config.Config) { c.HAProxy.Timeouts.Server = time.Minute }, "70000ms"},
		{"timeout http-keep-alive 90s", func(c *config.Config) { c.HAProxy.Timeouts.HTTPKeepAlive = 90 * time.Second }, "95000ms"},
		{"a frontend's http-keep-alive 2m", func(c *config.Config) { c.Frontends[0].Timeouts.HTTPKeepAlive = 2 * time.Minute }, "125000ms"},
	} {
		dir := t.TempDir()
		cfg := testConfig(dir, "127.0.0.1:8080")
		tc.edit(cfg)
		got, err := Render(cfg, PathsFor(dir))
		if err != nil {
			t.Fatal(err)
		}
		if want := "\n    hard-stop-after " + tc.want + "\n"; !strings.Contains(got, want) {
			t.Errorf("%s: config lacks %q:\n%s", tc.name, want, got)
		}
	}
}

func TestRenderVariants(t *testing.T) {
	dir := t.TempDir()
	p := PathsFor(dir)

	cfg := testConfig(dir, ":80")
	cfg.Groups = cfg.Groups[1:] // no group without routing
	got, err := Render(routed(cfg), p)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"default_backend", "compression"} {
		if strings.Contains(got, bad) {
			t.Errorf("config has %q:\n%s", bad, got)
		}
	}
	if !strings.Contains(got, "    bind :80\n") {
		t.Errorf("config lacks bind :80:\n%s", got)
	}

	cfg = testConfig(dir, "[::1]:8443")
	cfg.Groups[0].Health.Timeout = 0
	got, err = Render(cfg, p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "    bind [::1]:8443\n") {
		t.Errorf("config lacks IPv6 bind:\n%s", got)
	}
	web := got[strings.Index(got, "\nbackend web\n"):strings.Index(got, "\nbackend api\n")]
	if strings.Contains(web, "timeout check") {
		t.Errorf("timeout check without a health timeout:\n%s", web)
	}

	cfg = testConfig(dir, "127.0.0.1:80")
	cfg.Groups[0].Health.Timeout = 1500 * time.Microsecond
	if got, _ = Render(cfg, p); !strings.Contains(got, "timeout check 2ms\n") {
		t.Errorf("1.5ms not rounded up to 2ms:\n%s", got)
	}
}

func TestRenderRejects(t *testing.T) {
	dir := t.TempDir()
	p := PathsFor(dir)
	cases := map[string]func(c *config.Config, p *Paths){
		"newline in global":      func(c *config.Config, _ *Paths) { c.HAProxy.Global = []string{"nbthread 1\nfrontend evil"} },
		"CR in defaults":         func(c *config.Config, _ *Paths) { c.HAProxy.Defaults = []string{"option forwardfor\r"} },
		"section in defaults":    func(c *config.Config, _ *Paths) { c.HAProxy.Defaults = []string{"backend evil"} },
		"host with space":        func(c *config.Config, _ *Paths) { c.Groups[1].Hosts = []string{"a.com b.com"} },
		"host with comment":      func(c *config.Config, _ *Paths) { c.Groups[1].Hosts = []string{"a.com#x"} },
		"path with space":        func(c *config.Config, _ *Paths) { c.Groups[1].PathPrefixes = []string{"/a b"} },
		"path with quote":        func(c *config.Config, _ *Paths) { c.Groups[1].PathPrefixes = []string{`/a"`} },
		"relative path prefix":   func(c *config.Config, _ *Paths) { c.Groups[1].PathPrefixes = []string{"api"} },
		"health path newline":    func(c *config.Config, _ *Paths) { c.Groups[0].Health.Path = "/h\nbackend x" },
		"group name with space":  func(c *config.Config, _ *Paths) { c.Groups[0].Name = "web evil" },
		"duplicate group":        func(c *config.Config, _ *Paths) { c.Groups[1].Name = "web" },
		"static balance":         func(c *config.Config, _ *Paths) { c.Groups[0].Balance = "static-rr" },
		"balance injection":      func(c *config.Config, _ *Paths) { c.Groups[0].Balance = "roundrobin\nserver x 1.2.3.4:80" },
		"compression type space": func(c *config.Config, _ *Paths) { c.Compression = &config.Compression{Types: []string{"text/html x"}} },
		"listen without port":    func(c *config.Config, _ *Paths) { c.Listen = "127.0.0.1" },
		"listen injection":       func(c *config.Config, _ *Paths) { c.Listen = "127.0.0.1 ssl crt /x:80" },
		"relative socket":        func(_ *config.Config, p *Paths) { p.AdminSocket = "admin.sock" },
		"socket too long":        func(_ *config.Config, p *Paths) { p.AdminSocket = "/" + strings.Repeat("a", 100) },
		"socket with space":      func(_ *config.Config, p *Paths) { p.AdminSocket = "/tmp/a b.sock" },
		// config.Load resolves every timeout; zero would be "no timeout".
		"timeout left zero":  func(c *config.Config, _ *Paths) { c.HAProxy.Timeouts.Queue = 0 },
		"timeout over limit": func(c *config.Config, _ *Paths) { c.HAProxy.Timeouts.Client = maxTimer + time.Millisecond },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			cfg, paths := testConfig(dir, "127.0.0.1:8080"), p
			mutate(cfg, &paths)
			if got, err := Render(routed(cfg), paths); err == nil {
				t.Fatalf("Render accepted it:\n%s", got)
			}
		})
	}
}

func TestPathsFor(t *testing.T) {
	p := PathsFor("/var/lib/shoal")
	if p.Dir != "/var/lib/shoal/haproxy" || p.AdminSocket != "/var/lib/shoal/haproxy/admin.sock" ||
		p.MasterSocket != "/var/lib/shoal/haproxy/master.sock" || p.Config != "/var/lib/shoal/haproxy/haproxy.cfg" {
		t.Errorf("PathsFor = %+v", p)
	}
	if rel := PathsFor("state"); !filepath.IsAbs(rel.Dir) || !filepath.IsAbs(rel.LogFile) {
		t.Errorf("PathsFor(relative) = %+v, want absolute paths", rel)
	}
}

// TestRenderTimeoutsFromConfig: the timeouts rendered are the ones config
// resolved, its defaults (config.DefaultTimeouts) for the keys left out.
func TestRenderTimeoutsFromConfig(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Parse("shoal.yaml", []byte("listen: 127.0.0.1:8080\nhaproxy:\n  timeouts: {connect: 250ms, queue: 2s}\n"+
		"groups:\n  - name: web\n    min_size: 1\n    max_size: 2\n    template: {command: [app]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.StateDir = dir
	got, err := Render(cfg, PathsFor(dir))
	if err != nil {
		t.Fatal(err)
	}
	def := config.DefaultTimeouts
	want := fmt.Sprintf("    timeout connect 250ms\n    timeout client %s\n    timeout server %s\n"+
		"    timeout http-request %s\n    timeout http-keep-alive %s\n    timeout queue 2000ms\n",
		ms(def.Client), ms(def.Server), ms(def.HTTPRequest), ms(def.HTTPKeepAlive))
	if !strings.Contains(got, want) {
		t.Errorf("config lacks\n%s\ngot:\n%s", want, got)
	}
}
