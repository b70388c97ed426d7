// Package haproxy runs HAProxy as shoal's data plane: it renders HAProxy's
// configuration, talks to its runtime API, and supervises the master process
// while keeping HAProxy's dynamic servers in line with a registry.
//
// HAProxy 2.6 loses servers added at runtime on reload, so the configuration
// HAProxy starts with has no servers (the registry is added at runtime), and a
// reload (see Manager.Reload) writes every current server into it as a static
// line just before the master re-reads it.
package haproxy

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy/hapword"
)

// Paths are the files of one HAProxy instance. All are absolute.
type Paths struct {
	Dir          string
	Config       string
	AdminSocket  string
	MasterSocket string
	PIDFile      string
	LogFile      string
	// LogSocket is the unix datagram socket HAProxy sends its access log to.
	LogSocket string
	// Lua is the script that holds requests for groups that scale to zero.
	Lua string
	// Handoff is the socket an old worker hands its held requests to the
	// current one on (see holdLines).
	Handoff string
	// ACMETokens lists the paths of the ACME challenges shoal can answer
	// now, one a line (see SetChallenge).
	ACMETokens string
}

// PathsFor returns the paths under stateDir/haproxy.
func PathsFor(stateDir string) Paths {
	if abs, err := filepath.Abs(stateDir); err == nil {
		stateDir = abs
	}
	dir := filepath.Join(stateDir, "haproxy")
	return Paths{
		Dir:          dir,
		Config:       filepath.Join(dir, "haproxy.cfg"),
		AdminSocket:  filepath.Join(dir, "admin.sock"),
		MasterSocket: filepath.Join(dir, "master.sock"),
		PIDFile:      filepath.Join(dir, "haproxy.pid"),
		LogFile:      filepath.Join(dir, "haproxy.log"),
		LogSocket:    filepath.Join(dir, "log.sock"),
		Lua:          filepath.Join(dir, "hold.lua"),
		Handoff:      filepath.Join(dir, "hold.sock"),
		ACMETokens:   filepath.Join(dir, "acme-tokens.acl"),
	}
}

// maxSocketPath is the longest stats socket path HAProxy 2.6 accepts: it binds
// to PATH.PID.tmp first, which must fit in sun_path.
const maxSocketPath = config.MaxHAProxySocket

// defaultsLines keep clients error-free while servers come and go without
// ever replaying a write. Measured on 2.6.12: without redispatch and retries,
// a stream waiting to retry a server that was just deleted crashed the worker,
// and a killed backend cost errors. A connection failure is retried (and
// redispatched) for every method: nothing reached the instance. Every retry
// goes to another server ("redispatch 1"; plain redispatch moves only the
// last one): when a host dies, several servers die at once, and three
// retries on the dead one then a last on another dead one of that host
// answered 503 (seen with 4 of 12 servers on the dead host). The layer-7
// conditions are a group's choice (see retryLines): HAProxy copies every
// request of a backend that has them.
var defaultsLines = []string{
	"mode http",
	"retries 3",
	"option redispatch 1",
	"retry-on conn-failure",
}

// retryLines are the backend lines of a group whose idempotent requests are
// retried after they were sent (retries: idempotent): when the instance may
// have acted on the request, only the idempotent methods are retried (a
// POST must not reach the application twice: disable-l7-retry leaves it
// the connection failure's retry only), and the application's own 500
// never. The copy HAProxy keeps of each request for them is what they cost
// (+1.7 to 2.8 µs of HAProxy CPU per request measured, bench/README.md), so the
// method rule is in the backend too: other groups' requests skip both.
var retryLines = []string{
	"retry-on conn-failure empty-response junk-response response-timeout 502 503 504",
	"http-request disable-l7-retry if !{ method GET HEAD OPTIONS PUT DELETE TRACE }",
}

// Render returns HAProxy's configuration for cfg. It refuses any value that
// could change the configuration's structure (newlines, spaces in words,
// comment or quote characters) rather than trying to escape it.
func Render(cfg *config.Config, p Paths) (string, error) {
	return render(cfg, p, nil, minHardStop)
}

// render is Render with static server lines (the words after "server") per
// backend.
// hardStopFloor is the least hard-stop-after (minHardStop but in tests).
func render(cfg *config.Config, p Paths, servers map[string][]string, hardStopFloor time.Duration) (string, error) {
	if err := checkPaths(p); err != nil {
		return "", err
	}
	var b strings.Builder
	line := func(format string, args ...any) {
		b.WriteString("    ")
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
	}

	t := cfg.HAProxy.Timeouts
	b.WriteString("global\n")
	line("stats socket %s mode 600 level admin expose-fd listeners", p.AdminSocket)
	line("hard-stop-after %s", ms(hardStopAfter(cfg, t, hardStopFloor)))
	// A second HAProxy (an orphan whose record was lost) must fail to bind
	// rather than share the port and serve a stale server list.
	line("noreuseport")
	if needsHold(cfg) {
		line("lua-load %s", p.Lua)
	}
	for _, l := range cfg.HAProxy.Global {
		if err := hapword.Line(l); err != nil {
			return "", fmt.Errorf("haproxy.global line %q: %w", l, err)
		}
		if l = strings.TrimSpace(l); l != "" {
			line("%s", l)
		}
	}

	b.WriteString("\ndefaults\n")
	for _, l := range defaultsLines {
		line("%s", l)
	}
	for _, to := range []struct {
		name string
		d    time.Duration
	}{
		{"connect", t.Connect}, {"client", t.Client}, {"server", t.Server},
		{"http-request", t.HTTPRequest}, {"http-keep-alive", t.HTTPKeepAlive}, {"queue", t.Queue},
	} {
		// config.Load fills in the defaults (config.DefaultTimeouts); zero
		// would be HAProxy's "no timeout".
		if to.d <= 0 || to.d > maxTimer {
			return "", fmt.Errorf("timeout %s %s: must be from 1ms to HAProxy's limit of %s", to.name, to.d, maxTimer)
		}
		line("timeout %s %s", to.name, ms(to.d))
	}
	for _, l := range cfg.HAProxy.Defaults {
		if err := hapword.Line(l); err != nil {
			return "", fmt.Errorf("haproxy.defaults line %q: %w", l, err)
		}
		if l = strings.TrimSpace(l); l != "" {
			line("%s", l)
		}
	}

	for _, fe := range cfg.Frontends {
		lines, err := frontendLines(cfg, fe, p)
		if err != nil {
			return "", fmt.Errorf("frontend %s: %w", fe.Name, err)
		}
		fmt.Fprintf(&b, "\nfrontend %s\n", fe.Name)
		for _, l := range lines {
			line("%s", l)
		}
	}

	if needsHold(cfg) {
		b.WriteString("\nfrontend " + handoffFrontend + "\n")
		for _, l := range handoffLines(p, len(cfg.Groups)) {
			line("%s", l)
		}
	}

	if cfg.HAProxy.Prometheus != "" {
		pbind, err := bindAddress(cfg.HAProxy.Prometheus)
		if err != nil {
			return "", fmt.Errorf("haproxy.prometheus: %w", err)
		}
		// HAProxy's built-in exporter; dynamic servers appear in it at once.
		b.WriteString("\nfrontend prometheus\n")
		line("bind %s", pbind)
		line("no log")
		line("http-request use-service prometheus-exporter if { path /metrics }")
		line("http-request return status 404 content-type text/plain string \"only /metrics is served here\\n\"")
	}

	tcp := cfg.TCPGroups()
	logs := cfg.LogsRequests()
	seen := make(map[string]bool)
	for i, g := range cfg.Groups {
		if !hapword.Name(g.Name) {
			return "", fmt.Errorf("group name %q: must be letters, digits, '-', '_', '.' or ':'", g.Name)
		}
		if seen[g.Name] {
			return "", fmt.Errorf("group name %q: used twice", g.Name)
		}
		seen[g.Name] = true
		balance, err := balanceLines(g)
		if err != nil {
			return "", fmt.Errorf("group %s: %w", g.Name, err)
		}
		checks, err := checkLines(g.Health)
		if err != nil {
			return "", fmt.Errorf("group %s: %w", g.Name, err)
		}
		fmt.Fprintf(&b, "\nbackend %s\n", g.Name)
		if tcp[g.Name] {
			if g.Health.Type != "tcp" || g.ScaleToZero != nil {
				return "", fmt.Errorf("group %s: a tcp frontend's group needs tcp health checks and cannot scale to zero", g.Name)
			}
			if g.Sticky != nil || g.Proto == config.ProtoH2 || g.Balance == config.BalanceHash && g.HashOn != config.HashOnSource {
				return "", fmt.Errorf("group %s: a tcp frontend's group cannot have sticky cookies, proto h2, or hash on anything but source", g.Name)
			}
			line("mode tcp")
		}
		for _, l := range balance {
			line("%s", l)
		}
		for _, l := range checks {
			line("%s", l)
		}
		for _, l := range limitLines(g) {
			line("%s", l)
		}
		if g.Retries == config.RetriesIdempotent && !tcp[g.Name] {
			for _, l := range retryLines {
				line("%s", l)
			}
		}
		if cfg.AccessLog.Adaptive && logs && !tcp[g.Name] {
			for _, l := range sampleLines {
				line("%s", l)
			}
		}
		if g.ScaleToZero != nil {
			page, err := wakingPageLine(g)
			if err != nil {
				return "", fmt.Errorf("group %s: %w", g.Name, err)
			}
			if page != "" {
				line("%s", page)
			}
			for _, l := range holdLines(g, i, t, p) {
				line("%s", l)
			}
		}
		for _, l := range servers[g.Name] {
			line("server %s", l)
		}
	}
	access, err := accessSections(cfg)
	if err != nil {
		return "", err
	}
	if access != nil {
		b.WriteString(strings.Join(access, "\n") + "\n")
	}
	acme, err := acmeBackendSection(cfg, p)
	if err != nil {
		return "", err
	}
	if acme != nil {
		b.WriteString("\n" + strings.Join(acme, "\n") + "\n")
	}
	return b.String(), nil
}

func checkPaths(p Paths) error {
	for _, f := range []struct{ name, path string }{
		{"directory", p.Dir}, {"config", p.Config}, {"admin socket", p.AdminSocket},
		{"master socket", p.MasterSocket}, {"pid file", p.PIDFile}, {"log file", p.LogFile},
		{"log socket", p.LogSocket}, {"lua script", p.Lua}, {"hand-off socket", p.Handoff}, {"acme token list", p.ACMETokens},
	} {
		if !filepath.IsAbs(f.path) {
			return fmt.Errorf("haproxy %s path %q: must be absolute", f.name, f.path)
		}
		// The paths are single words in the configuration and on the command line
		// (-S splits on commas).
		if hapword.FilePath(f.path) != nil {
			return fmt.Errorf("haproxy %s path %q: must not contain spaces, control characters, quotes, '#', '\\' or ','", f.name, f.path)
		}
	}
	// HAProxy 2.6 also refuses a "log unix@" path longer than this.
	for _, s := range []string{p.AdminSocket, p.MasterSocket, p.LogSocket, p.Handoff} {
		if len(s) > maxSocketPath {
			return fmt.Errorf("haproxy socket path %q: longer than HAProxy's limit of %d bytes; use a shorter state_dir", s, maxSocketPath)
		}
	}

	return nil
}

// bindAddress turns host:port into HAProxy's bind syntax.
func bindAddress(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("listen address %q: %w", listen, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("listen address %q: port must be a number from 1 to 65535", listen)
	}
	if host != "" && !hapword.Host(host) {
		return "", fmt.Errorf("listen address %q: host must be a host name or IP address", listen)
	}
	return net.JoinHostPort(host, port), nil
}

// minHardStop (the floor) and hardStopMargin set hardStopAfter.
const (
	minHardStop    = 30 * time.Second
	hardStopMargin = 5 * time.Second
)

// hardStopAfter bounds how long a worker a reload replaced may finish its
// work: at least as long as the timeouts let a request wait for its server
// (timeout connect, then timeout server) or an idle keep-alive connection
// stay open (timeout http-keep-alive ends the old worker's idle connections,
// see idle-close-on-response), and a margin more for a busy machine's late
// timers. Stopping sooner would cut a request the timeouts allow, or an idle
// connection just as a request arrives on it. A worker that held requests
// for a group that scales to zero waits for their answer through the
// hand-off (see holdLines) for up to the queue and server timeouts.
func hardStopAfter(cfg *config.Config, t config.Timeouts, floor time.Duration) time.Duration {
	// A request may wait in a group's queue (limits.queue_timeout) before
	// it reaches its server.
	longest := max(queueWait(cfg)+t.Connect+t.Server, t.HTTPKeepAlive)
	for _, fe := range cfg.Frontends {
		longest = max(longest, fe.Timeouts.HTTPKeepAlive)
	}
	if needsHold(cfg) {
		longest = max(longest, t.Queue+t.Server)
	}
	return min(max(floor, longest+hardStopMargin), maxTimer)
}

// maxTimer is the longest duration HAProxy's millisecond timers hold.
const maxTimer = hapword.MaxTimer

// ms renders d in HAProxy's millisecond syntax, rounding up so a positive
// duration never becomes 0 (which HAProxy reads as "no timeout").
func ms(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10) + "ms"
}
