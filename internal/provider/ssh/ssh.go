// Package ssh runs instances as processes on servers reached over SSH.
//
// One multiplexed SSH connection per host carries everything: starting and
// stopping instances, one batched /proc read per host per interval (exit
// detection and usage), log reads and rotation. Every process it starts
// carries three environment variables, SHOAL_OWNER (this shoal: see
// OwnerID), SHOAL_HOST (the host it was placed on) and SHOAL_INSTANCE: the
// marker that lets Adopt prove a recorded pid is still ours and lets
// StopStrays and the reconciliation of a returning host find what nobody
// tracks. The host is part of the marker because hosts may share a PID space
// (network namespaces on one machine in tests).
//
// Commands run on a host are argv, every word quoted for a POSIX shell, and
// the few scripts shoal needs there are constants taking their data as
// arguments (see scripts.go).
package ssh

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider"
)

// Options are what an ssh Provider takes from the rest of shoal: all of
// provider.Options.
type Options = provider.Options

// Marker environment variables.
const (
	envOwner    = "SHOAL_OWNER"
	envHost     = "SHOAL_HOST"
	envInstance = "SHOAL_INSTANCE"
	envHook     = "SHOAL_HOOK"
	// envPool marks a process started while its group had a warm pool
	// (see poolMarker).
	envPool = "SHOAL_POOL"
)

// strayGrace is how long a stray gets between SIGTERM and SIGKILL; its
// template, and so its own StopTimeout, is unknown.
const strayGrace = 5 * time.Second

var (
	_ provider.Provider    = (*Provider)(nil)
	_ provider.HostLister  = (*Provider)(nil)
	_ provider.Preflighter = (*Provider)(nil)
	_ provider.LogReader   = (*Provider)(nil)
	_ provider.Running     = (*Provider)(nil)
	_ provider.Reloader    = (*Provider)(nil)
)

// OwnerID is the value of SHOAL_OWNER for the shoal whose state directory
// is stateDir on this machine: a hash of the hostname and the absolute
// directory, so that shoals on two machines with the same path, or two on
// one machine, never take each other's instances for theirs.
func OwnerID(stateDir string) string {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		abs = stateDir
	}
	hn, _ := os.Hostname()
	sum := sha256.Sum256([]byte(hn + "\x00" + abs))
	return "shoal-" + hex.EncodeToString(sum[:8])
}

// Provider starts instances on the hosts of one ssh provider entry. It is
// safe for concurrent use.
type Provider struct {
	name  string
	owner string
	opts  Options
	log   *slog.Logger

	mu  sync.Mutex
	cfg Config
	// hosts by name (the host part of the address).
	hosts map[string]*host
	// run is set while Run runs: hosts added by Update start there.
	run *runState
	// runtimes are the container runtimes the sweeps look through;
	// images the container templates a connecting host pulls ahead, by
	// repository (see noteImage).
	runtimes map[string]bool
	images   map[string]config.Template
	// pools are the groups' running warm pools (pool.go), woken by
	// poolWake, their starts and stops in poolWG; poolLeft the instances
	// that left a pool since its group last asked.
	pools    map[string]*pool
	poolLeft map[string][]provider.WarmServer
	poolWake chan struct{}
	poolWG   sync.WaitGroup
	// swept: StopStrays ran, so the processes a killed shoal's pools
	// left are adopted (pools refill only from then on).
	swept bool
}

type runState struct {
	ctx context.Context
	wg  sync.WaitGroup
}

// New checks cfg (key files readable and parsed, known_hosts files
// readable) and returns a Provider; it does no network I/O. Run connects.
func New(name string, cfg Config, opts Options) (*Provider, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Logs == (config.InstanceLogs{}) {
		opts.Logs = config.DefaultInstanceLogs
	}
	owner := opts.Owner
	if owner == "" {
		owner = OwnerID(opts.StateDir)
	}
	p := &Provider{name: name, owner: owner, opts: opts, log: opts.Log.With("provider", name), hosts: make(map[string]*host), poolWake: make(chan struct{}, 1)}
	if err := p.Update(cfg); err != nil {
		return nil, err
	}
	return p, nil
}

// Name is the provider entry's name.
func (p *Provider) Name() string { return p.name }

// Reload applies a reloaded entry of type ssh (see Update).
func (p *Provider) Reload(pc config.Provider) error {
	c := Of(pc)
	if c == nil {
		return fmt.Errorf("ssh provider %s: the entry's type is %q, not %s", p.name, pc.Type, Type)
	}
	return p.Update(*c)
}

// Update applies a reloaded config: new hosts are added, capacity, labels,
// ports and credentials of the others applied (credentials from their next
// connection on). A removed host takes no new instances and is dropped once
// nothing of ours runs there.
func (p *Provider) Update(cfg Config) error {
	if cfg.ConnectTimeout <= 0 {
		return fmt.Errorf("ssh provider %s: connect_timeout must be positive", p.name)
	}
	type built struct {
		hc Host
		cc *gossh.ClientConfig
	}
	var hosts []built
	seen := make(map[string]bool)
	var errs []error
	for _, hc := range cfg.Hosts {
		name := hc.Name()
		if seen[name] {
			errs = append(errs, fmt.Errorf("host %s: listed twice", name))
			continue
		}
		seen[name] = true
		if hc.Ports == (PortRange{}) {
			hc.Ports = DefaultPorts
		}
		cc, err := clientConfig(hc, cfg.ConnectTimeout)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		hosts = append(hosts, built{hc, cc})
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ssh provider %s: %w", p.name, err)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	p.cfg = cfg
	for _, b := range hosts {
		name := b.hc.Name()
		if h := p.hosts[name]; h != nil {
			h.cfg, h.clientCfg, h.removed = b.hc, b.cc, false
			continue
		}
		h := newHost(name, b.hc, b.cc)
		p.hosts[name] = h
		if p.run != nil {
			p.startHost(h)
		}
	}
	for name, h := range p.hosts {
		if !seen[name] && !h.removed {
			h.removed = true
			p.log.Info("host removed from the config; it takes no new instances", "host", name, "instances", len(h.insts))
		}
	}
	return nil
}

// Run keeps a connection to every host and polls it each Interval until ctx
// ends; it returns once every goroutine it started has stopped and every
// connection is closed. It is called once.
func (p *Provider) Run(ctx context.Context) {
	rs := &runState{ctx: ctx}
	p.mu.Lock()
	p.run = rs
	for _, h := range p.hosts {
		p.startHost(h)
	}
	p.mu.Unlock()
	rs.wg.Go(func() { p.watch(ctx) })
	rs.wg.Go(func() { p.runPools(ctx) })
	<-ctx.Done()
	// From now on Update starts no connection manager: every wg.Go
	// happens before the Wait.
	p.mu.Lock()
	p.run = nil
	p.mu.Unlock()
	rs.wg.Wait()
	p.mu.Lock()
	for _, h := range p.hosts {
		if h.client != nil {
			h.client.Close()
			h.client = nil
		}
	}
	p.mu.Unlock()
}

// startHost starts h's connection manager; p.mu is held.
func (p *Provider) startHost(h *host) {
	ctx, cancel := context.WithCancel(p.run.ctx)
	h.cancel = cancel
	p.run.wg.Go(func() {
		defer cancel()
		p.manage(ctx, h)
	})
}

// settings returns what the config says of timing.
func (p *Provider) settings() (connectTimeout, downAfter time.Duration, remoteDir string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg.ConnectTimeout, p.cfg.HostDownAfter, p.cfg.RemoteDir
}

// reconnectMax is the longest wait between attempts to reach a host (a
// Config built in code, without it, has the default).
func (p *Provider) reconnectMax() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return cmp.Or(p.cfg.ReconnectMax, Defaults.ReconnectMax)
}

// logDir is where the instances' logs live on every host (relative to the
// login's home unless remote_dir is absolute).
func (p *Provider) logDir() string {
	_, _, dir := p.settings()
	if dir == "" {
		dir = ".shoal"
	}
	return path.Join(dir, p.owner, "logs")
}

// hostOf returns the configured host called name.
func (p *Provider) hostOf(name string) *host {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hosts[name]
}

// waitFirst waits until each of hs has had its first connection attempt,
// at most about connect_timeout: Start and Adopt may come before Run has
// connected.
func (p *Provider) waitFirst(ctx context.Context, hs ...*host) {
	ct, _, _ := p.settings()
	t := time.NewTimer(ct + 500*time.Millisecond)
	defer t.Stop()
	for _, h := range hs {
		select {
		case <-h.first:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// client returns h's connection, or an error wrapping ErrHostDown.
func (p *Provider) client(h *host) (*gossh.Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h.client == nil {
		why := h.lastErr
		if why == "" {
			why = "not connected yet"
		}
		return nil, fmt.Errorf("host %s: %w (%s)", h.name, provider.ErrHostDown, why)
	}
	return h.client, nil
}

// exec runs argv on h in a session of its own, bounded by ctx and
// opts.Timeout (0: connect_timeout, unless the output is streamed). A
// failure of the connection, rather than of the command, wraps ErrHostDown.
func (p *Provider) exec(ctx context.Context, h *host, argv []string, opts runOpts) ([]byte, error) {
	c, err := p.client(h)
	if err != nil {
		return nil, err
	}
	defer p.busy(h)()
	ct, _, _ := p.settings()
	if opts.Timeout == 0 && opts.Stdout == nil {
		opts.Timeout = ct
	}
	out, err := run(ctx, c, ct, argv, opts)
	return out, p.hostErr(ctx, h, err)
}

// sh runs a short command in h's shell (see shell), bounded by ctx and
// timeout (0: connect_timeout); errors as exec's.
func (p *Provider) sh(ctx context.Context, h *host, timeout time.Duration, argv []string) ([]byte, error) {
	p.mu.Lock()
	c, s := h.client, h.shell
	p.mu.Unlock()
	if c == nil || s == nil {
		_, err := p.client(h)
		if err == nil {
			err = fmt.Errorf("host %s: %w (no shell)", h.name, provider.ErrHostDown)
		}
		return nil, err
	}
	defer p.busy(h)()
	ct, _, _ := p.settings()
	if timeout == 0 {
		timeout = ct
	}
	out, err := s.run(ctx, c, timeout, argv)
	return out, p.hostErr(ctx, h, err)
}

// busy counts a command in flight on h, which keeps a removed host from
// being dropped (and its connection closed) under it; call the result when
// it is done.
func (p *Provider) busy(h *host) func() {
	p.mu.Lock()
	h.inFlight++
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		h.inFlight--
		p.mu.Unlock()
	}
}

// hostErr wraps ErrHostDown around an error of a command that did not run
// to an exit status (the connection failed or hung) while ctx was live.
func (p *Provider) hostErr(ctx context.Context, h *host, err error) error {
	if err != nil && exitStatus(err) < 0 && ctx.Err() == nil {
		// The connection manager notices on its next poll.
		return fmt.Errorf("host %s: %w: %w", h.name, provider.ErrHostDown, err)
	}
	return err
}

// data is what the ssh provider keeps in an instance's record
// (instance.Record.Data): enough to find the process again and prove it is
// still the instance.
type data struct {
	Host     string `json:"host"`
	PID      int    `json:"pid"`
	PIDStart uint64 `json:"pid_start"`
	Port     int    `json:"port"`
	// Marker is the instance's SHOAL_INSTANCE.
	Marker string `json:"marker"`
	// Container and Runtime are a container instance's ID and runtime;
	// PID is then the container's process.
	Container string `json:"container,omitempty"`
	Runtime   string `json:"runtime,omitempty"`
	// Pool is the group whose SHOAL_POOL the process carries (started
	// while its group had a warm pool): its Marker may be a pool name,
	// and a scale-in may return it to the pool.
	Pool string `json:"pool,omitempty"`
}

func decode(raw []byte) (data, error) {
	var d data
	if err := json.Unmarshal(raw, &d); err != nil {
		return data{}, fmt.Errorf("ssh instance data: %w", err)
	}
	return d, nil
}

// record returns the record of the process d serving as name.
func (d data) record(name string) provider.Record {
	raw, _ := json.Marshal(d) // numbers and strings: it cannot fail
	rec := provider.Record{Name: name, ID: d.Host + "/" + strconv.Itoa(d.PID) + "-" + strconv.FormatUint(d.PIDStart, 10), Host: d.Host, Data: raw}
	if d.Port > 0 {
		rec.Addr = net.JoinHostPort(d.Host, strconv.Itoa(d.Port))
	}
	return rec
}

// procKey identifies a process on a host: pid plus start time.
type procKey struct {
	pid   int
	start uint64
}

// markers are the marker variables of an instance called name on h.
func (p *Provider) markers(h *host, name string) []string {
	return []string{envOwner + "=" + p.owner, envHost + "=" + h.name, envInstance + "=" + name}
}

// Start places the instance on a host, reserves a port there, runs the
// pre_start hook and starts the process in its own session, returning once
// it runs (not yet healthy).
func (p *Provider) Start(ctx context.Context, spec provider.Spec) (provider.Instance, error) {
	if err := provider.CheckName(spec.Name); err != nil {
		return nil, fmt.Errorf("start instance: %w", err)
	}
	p.mu.Lock()
	all := slices.Collect(maps.Values(p.hosts))
	p.mu.Unlock()
	p.waitFirst(ctx, all...)
	if in := p.takeWarm(ctx, spec); in != nil {
		return in, nil
	}
	in, err := p.start(ctx, spec, false)
	if err != nil {
		return nil, err
	}
	return in, nil
}

// start places spec's instance and starts it there; a pool member
// (member) waits out of rotation in its group's pool.
func (p *Provider) start(ctx context.Context, spec provider.Spec, member bool) (*instance, error) {
	h, why, err := p.place(spec)
	if err != nil {
		return nil, fmt.Errorf("start instance %s: %w", spec.Name, err)
	}
	in, err := p.startOn(ctx, h, spec, why, member)
	if err != nil {
		p.unreserve(h, spec.Name)
		err = fmt.Errorf("start instance %s on %s: %w", spec.Name, h.name, err)
		p.mu.Lock()
		_, abandoned := h.abandoned[spec.Name]
		p.mu.Unlock()
		if abandoned {
			// At once, bounded on its own (ctx may be what ended); a host
			// that cannot be asked now is asked again (stopOwed) while it
			// answers, and when it is back.
			ct, _, _ := p.settings()
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*ct+strayGrace+5*time.Second)
			switch serr := p.stopAbandoned(sctx, h); {
			case errors.Is(serr, provider.ErrHostDown):
				err = fmt.Errorf("%w; what the launch may have started is stopped by its marker once host %s answers", err, h.name)
			case serr != nil:
				err = fmt.Errorf("%w; stopping what the launch may have started failed, asked again while the host answers: %v", err, serr)
			}
			cancel()
		}
		return nil, err
	}
	return in, nil
}

func (p *Provider) startOn(ctx context.Context, h *host, spec provider.Spec, why string, member bool) (*instance, error) {
	port, err := p.reservePort(ctx, h, spec.Name)
	if err != nil {
		return nil, err
	}
	tmpl := spec.Template
	td := config.TemplateData{Name: spec.Name, Host: h.name, Port: port, Index: spec.Index, Group: spec.Group}
	argv, tenv, err := tmpl.Expand(td)
	if err != nil {
		return nil, fmt.Errorf("expand template: %w", err)
	}
	pooled := ""
	if pm := p.poolMarker(spec.Group, tmpl, port); pm != "" && !tmpl.IsContainer() {
		// Found again by it after a restart, or returned by a scale-in.
		tenv, pooled = append(tenv, envPool+"="+pm), spec.Group
	}
	if !tmpl.IsContainer() && strings.Contains(argv[0], "=") {
		return nil, fmt.Errorf("command %q: a program name with '=' cannot be run through env(1)", argv[0])
	}
	if tmpl.PreStart != nil {
		// pre_start runs first, so that what it prepares (code synced at
		// boot, say) is there when the process starts.
		if err := p.runHook(ctx, h, "pre_start", tmpl.PreStart, tmpl, td); err != nil {
			return nil, err
		}
	}
	var d data
	if tmpl.IsContainer() {
		d, err = p.launchContainer(ctx, h, spec, port)
	} else {
		d, err = p.launch(ctx, h, spec.Name, tmpl, argv, tenv)
	}
	if err != nil {
		// The process may run although its launch failed (one that timed
		// out after setsid, say), and nothing tracks it: Start stops it by
		// its marker, or stopOwed does once the host answers.
		p.abandon(h, spec.Name)
		return nil, err
	}
	d.Host, d.Port, d.Marker, d.Pool = h.name, port, spec.Name, pooled
	rec := d.record(spec.Name)
	rec.Group, rec.Index, rec.StartedAt = spec.Group, spec.Index, time.Now()
	in := p.newInstance(h, rec, d, tmpl, true)
	in.placement = why
	p.mu.Lock()
	if member {
		in.pool = spec.Group
	}
	delete(h.pending, spec.Name)
	h.insts[spec.Name] = in
	p.mu.Unlock()
	p.log.Info("started instance", "group", rec.Group, "instance", rec.Name, "host", h.name, "pid", d.PID, "port", port, "placement", why)
	return in, nil
}

// launch starts a process instance on h and returns its pid and start time.
func (p *Provider) launch(ctx context.Context, h *host, name string, tmpl config.Template, argv, tenv []string) (data, error) {
	env := slices.Concat(tenv, p.markers(h, name))
	args := slices.Concat([]string{p.logDir(), workDir(tmpl.Dir), argv[0], name}, env, argv)
	ct, _, _ := p.settings()
	launch := slices.Concat([]string{"env"}, p.markers(h, name), script(launchScript, args...))
	out, err := p.sh(ctx, h, ct+5*time.Second, launch)
	if err != nil {
		return data{}, remoteError(h, err, argv[0], tmpl.Dir)
	}
	var d data
	if _, serr := fmt.Sscan(string(out), &d.PID, &d.PIDStart); serr != nil || d.PID <= 0 {
		return data{}, fmt.Errorf("launch: unexpected output %q", out)
	}
	return d, nil
}

// workDir is the working directory on the host: the template's, or the
// login's home.
func workDir(dir string) string {
	if dir == "" {
		return "."
	}
	return dir
}

// remoteError words a failed launch or hook: what is missing on which host.
func remoteError(h *host, err error, command, dir string) error {
	switch exitStatus(err) {
	case exitNoDir:
		return fmt.Errorf("working directory %s not found on host %s", dir, h.name)
	case exitNoCommand:
		return fmt.Errorf("command %s not found on host %s", command, h.name)
	}
	return err
}

// execMarked runs argv with the marker variables of instance name (and
// SHOAL_HOOK=hook when hook is set) in the environment of the remote shell
// itself, so that everything it forks is marked from the start.
func (p *Provider) execMarked(ctx context.Context, h *host, name, hook string, argv []string, opts runOpts) ([]byte, error) {
	env := p.markers(h, name)
	if hook != "" {
		env = append(env, envHook+"="+hook)
	}
	return p.exec(ctx, h, slices.Concat([]string{"env"}, env, argv), opts)
}

// runHook runs one lifecycle hook of an instance on its host to completion:
// argv expanded like the instance's command, the instance's env and working
// directory, output appended to the instance's log. It fails on a non-zero
// exit, on its timeout (timeout(1) kills it there) and when ctx ends.
func (p *Provider) runHook(ctx context.Context, h *host, hook string, hk *config.Hook, tmpl config.Template, td config.TemplateData) error {
	argv, err := tmpl.ExpandHook(hk, td)
	if err != nil {
		return fmt.Errorf("%s: expand: %w", hook, err)
	}
	_, tenv, err := tmpl.Expand(td)
	if err != nil {
		return fmt.Errorf("%s: expand env: %w", hook, err)
	}
	if strings.Contains(argv[0], "=") {
		return fmt.Errorf("%s: command %q: a program name with '=' cannot be run through env(1)", hook, argv[0])
	}
	secs := max(int((hk.Timeout+time.Second-1)/time.Second), 1)
	env := slices.Concat(tenv, p.markers(h, td.Name), []string{envHook + "=" + hook})
	args := slices.Concat([]string{p.logDir(), workDir(tmpl.Dir), argv[0], td.Name, strconv.Itoa(secs), hook}, env, argv)
	ct, _, _ := p.settings()
	start := time.Now()
	_, err = p.execMarked(ctx, h, td.Name, hook, script(hookScript, args...), runOpts{Timeout: time.Duration(secs)*time.Second + ct + 2*time.Second})
	if err != nil {
		if exitStatus(err) == 124 || exitStatus(err) == 137 {
			err = fmt.Errorf("timed out after %s; killed", hk.Timeout)
		}
		err = fmt.Errorf("%s on host %s: %w", hook, h.name, remoteError(h, err, argv[0], tmpl.Dir))
		p.log.Warn("hook failed", "hook", hook, "instance", td.Name, "host", h.name, "err", err)
		return err
	}
	p.log.Debug("hook done", "hook", hook, "instance", td.Name, "host", h.name, "took", time.Since(start))
	return nil
}

// reservePort picks a port of h's range that no instance of ours uses and
// nothing listens on there, and holds it for the instance called name.
func (p *Provider) reservePort(ctx context.Context, h *host, name string) (int, error) {
	out, err := p.sh(ctx, h, 0, script(listenScript))
	if err != nil {
		return 0, fmt.Errorf("read listening ports: %w", err)
	}
	listening := parseListening(out)
	p.mu.Lock()
	defer p.mu.Unlock()
	used := make(map[int]bool)
	for port := range listening {
		used[port] = true
	}
	for _, in := range h.insts {
		used[in.d.Port] = true
	}
	for _, ps := range h.pending {
		if ps.port > 0 {
			used[ps.port] = true
		}
	}
	r := h.cfg.Ports
	for port := r.Min; port <= r.Max; port++ {
		if !used[port] {
			if ps, ok := h.pending[name]; ok {
				ps.port = port
				h.pending[name] = ps
			}
			return port, nil
		}
	}
	n := 0
	for port := range used {
		if port >= r.Min && port <= r.Max {
			n++
		}
	}
	return 0, fmt.Errorf("host %s: no free port in %d-%d (%d in use)", h.name, r.Min, r.Max, n)
}

// parseListening returns the local ports of the sockets in LISTEN state
// (0A) of /proc/net/tcp and tcp6.
func parseListening(out []byte) map[int]bool {
	ports := make(map[int]bool)
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != "0A" {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		if port, err := strconv.ParseUint(hexPort, 16, 16); err == nil {
			ports[int(port)] = true
		}
	}
	return ports
}

// Adopt re-attaches to a recorded instance after a restart of shoal: its
// host must be configured, its pid must run there with the recorded start
// time and carry our markers, or it is ErrGone. When the host is
// unreachable the instance is returned unverified: verified when the host
// connects (Done, "gone while shoal was down", if it is not there), Done
// when the host goes down.
func (p *Provider) Adopt(ctx context.Context, rec provider.Record, tmpl config.Template) (provider.Instance, error) {
	d, err := decode(rec.Data)
	if err != nil || d.PID <= 0 || d.Host == "" {
		return nil, fmt.Errorf("adopt instance %s: no ssh instance data: %w", rec.Name, provider.ErrGone)
	}
	h := p.hostOf(d.Host)
	if h == nil {
		return nil, fmt.Errorf("adopt instance %s: host %s is not in provider %s: %w", rec.Name, d.Host, p.name, provider.ErrGone)
	}
	// The marker is the instance's name, or the pool name of a warm
	// pool's process taken into service (see pool.go).
	if d.Marker != rec.Name && d.Pool == "" {
		return nil, fmt.Errorf("adopt instance %s: recorded as %q: %w", rec.Name, d.Marker, provider.ErrGone)
	}
	p.waitFirst(ctx, h)
	key := procKey{d.PID, d.PIDStart}
	p.mu.Lock()
	if in := h.insts[d.Marker]; in != nil {
		p.mu.Unlock()
		if in.key() == key {
			return in, nil
		}
		return nil, fmt.Errorf("adopt instance %s: another process (pid %d) runs as it on %s: %w", rec.Name, in.d.PID, h.name, provider.ErrGone)
	}
	p.mu.Unlock()

	verified := true
	if err := p.verify(ctx, h, d); errors.Is(err, provider.ErrHostDown) {
		verified = false
		p.log.Warn("adopting an instance on an unreachable host; verified when it connects", "instance", rec.Name, "host", h.name, "err", err)
	} else if err != nil {
		return nil, fmt.Errorf("adopt instance %s: %w", rec.Name, err)
	}
	p.noteRuntime(d.Runtime)
	in := p.newInstance(h, rec, d, tmpl, verified)
	p.mu.Lock()
	defer p.mu.Unlock()
	if other := h.insts[d.Marker]; other != nil {
		return nil, fmt.Errorf("adopt instance %s: adopted meanwhile: %w", rec.Name, provider.ErrGone)
	}
	h.insts[d.Marker] = in
	delete(h.lost, key)
	p.log.Info("adopted instance", "group", rec.Group, "instance", rec.Name, "host", h.name, "pid", d.PID, "verified", verified)
	return in, nil
}

// verify checks over SSH that d's process runs with its start time and
// carries our markers: nil, an error wrapping ErrGone, or one wrapping
// ErrHostDown when the host did not answer.
func (p *Provider) verify(ctx context.Context, h *host, d data) error {
	out, err := p.sh(ctx, h, 0, script(verifyScript, strconv.Itoa(d.PID), strconv.FormatUint(d.PIDStart, 10)))
	if exitStatus(err) == exitGone {
		return fmt.Errorf("pid %d on %s does not run (or is another process now): %w", d.PID, h.name, provider.ErrGone)
	}
	if err != nil {
		return err
	}
	want := p.markers(h, d.Marker)
	got := strings.Split(string(out), "\n")
	for _, kv := range want {
		if !slices.Contains(got, kv) {
			return fmt.Errorf("pid %d on %s lacks marker %s: %w", d.PID, h.name, kv, provider.ErrGone)
		}
	}
	for _, kv := range got {
		if strings.HasPrefix(kv, envHook+"=") {
			return fmt.Errorf("pid %d on %s is a hook: %w", d.PID, h.name, provider.ErrGone)
		}
	}
	return nil
}

// StopStrays stops, on every reachable host, the process groups led by
// marked processes of this owner that are neither in keep nor tracked, and
// returns what it stopped. Unreachable hosts are swept with the same keep
// when they connect.
func (p *Provider) StopStrays(ctx context.Context, keep []provider.Record) ([]provider.Record, error) {
	kept := make(map[string]map[procKey]bool)
	keptContainers := make(map[string]map[string]bool)
	for _, r := range keep {
		if d, err := decode(r.Data); err == nil && d.Host != "" {
			if kept[d.Host] == nil {
				kept[d.Host] = make(map[procKey]bool)
				keptContainers[d.Host] = make(map[string]bool)
			}
			kept[d.Host][procKey{d.PID, d.PIDStart}] = true
			if d.Container != "" {
				keptContainers[d.Host][d.Container] = true
				p.noteRuntime(d.Runtime)
			}
		}
	}
	p.mu.Lock()
	all := slices.Collect(maps.Values(p.hosts))
	p.mu.Unlock()
	p.waitFirst(ctx, all...)

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		stopped []provider.Record
		errs    []error
	)
	for _, h := range all {
		wg.Go(func() {
			recs, err := p.sweep(ctx, h, kept[h.name])
			if err == nil {
				var crecs []provider.Record
				crecs, err = p.sweepContainers(ctx, h, keptContainers[h.name])
				recs = append(recs, crecs...)
			}
			if errors.Is(err, provider.ErrHostDown) {
				p.mu.Lock()
				h.sweepKeep, h.sweepPending = kept[h.name], true
				p.mu.Unlock()
				p.log.Info("host unreachable; its strays are swept when it connects", "host", h.name)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			stopped = append(stopped, recs...)
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	p.mu.Lock()
	p.swept = true
	p.pokePools()
	p.mu.Unlock()
	slices.SortFunc(stopped, func(a, b provider.Record) int { return strings.Compare(a.ID, b.ID) })
	return stopped, errors.Join(errs...)
}

// sweep stops the untracked marked group leaders on h that keep does not
// name.
func (p *Provider) sweep(ctx context.Context, h *host, keep map[procKey]bool) ([]provider.Record, error) {
	ms, err := p.listMarked(ctx, h)
	if err != nil {
		return nil, err
	}
	var strays []marked
	p.mu.Lock()
	for _, m := range ms {
		if keep[m.key()] || p.trackedLocked(h, m) || p.adoptPoolLocked(h, m) {
			continue
		}
		strays = append(strays, m)
	}
	// A reconciliation that runs meanwhile (the host just connected)
	// spares what keep names, which a group is about to adopt.
	h.swept, h.sweepKeep = true, keep
	p.mu.Unlock()
	var recs []provider.Record
	var errs []error
	for _, m := range strays {
		p.log.Warn("stopping stray instance", "instance", m.name, "host", h.name, "pid", m.PID)
		if err := p.stopProcess(ctx, h, m.key(), strayGrace); err != nil && !errors.Is(err, errAlreadyGone) {
			errs = append(errs, fmt.Errorf("stop stray instance %s on %s: %w", m.name, h.name, err))
			continue
		}
		recs = append(recs, data{Host: h.name, PID: m.PID, PIDStart: m.StartTicks, Marker: m.name}.record(m.name))
	}
	return recs, errors.Join(errs...)
}

// errAlreadyGone: the process to stop had exited (or its pid is another
// process's now).
var errAlreadyGone = errors.New("already gone")

// stopProcess stops the process group led by k on h: SIGTERM, SIGKILL after
// grace, and returns once nothing of the group is left.
func (p *Provider) stopProcess(ctx context.Context, h *host, k procKey, grace time.Duration) error {
	ct, _, _ := p.settings()
	tenths := int(grace / (100 * time.Millisecond))
	_, err := p.exec(ctx, h, script(stopScript, strconv.Itoa(k.pid), strconv.FormatUint(k.start, 10), strconv.Itoa(tenths)),
		runOpts{Timeout: grace + ct + 5*time.Second})
	if exitStatus(err) == exitGone {
		return errAlreadyGone
	}
	return err
}
