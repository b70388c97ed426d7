package haproxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/proc"
)

const (
	// startTimeout bounds how long a new master may take to answer on its
	// admin socket.
	startTimeout = 10 * time.Second
	// cmdTimeout bounds one runtime API command.
	cmdTimeout = 5 * time.Second
	// replaceGrace is how long a previous master with another configuration
	// may finish its requests after a soft stop before it is killed.
	replaceGrace = 5 * time.Second
	// killGrace is the time between SIGTERM and SIGKILL once a stop gives up.
	killGrace = time.Second

	backoffMin   = time.Second
	backoffMax   = 30 * time.Second
	backoffReset = 60 * time.Second
)

// Manager owns the HAProxy master process and the set of servers it should
// have. The registry is the truth: whenever HAProxy (re)starts, the servers
// in the registry are added to it. All methods are safe for concurrent use.
type Manager struct {
	// cfg is guarded by mu; Start and Reload, which write it, hold life too.
	cfg    *config.Config
	log    *slog.Logger
	paths  Paths
	client *Client
	master *Client

	// servers serializes the runtime API commands that change one server.
	servers keyedMutex
	// reloadMu is held shared around runtime API commands and exclusively by
	// Reload, so that no command reaches a worker being replaced and the
	// servers written into the reloaded configuration are the registry's.
	reloadMu sync.RWMutex

	// life serializes Start, Stop, Detach and Reload.
	life sync.Mutex

	// stats is the answer of every backend's servers that Stats serves.
	stats serverStats

	mu       sync.Mutex
	registry map[serverKey]*entry
	// unsynced are the servers a change could not reach HAProxy for; the
	// resync loop is kicked to bring them in line (resync.go).
	unsynced   map[serverKey]struct{}
	resyncKick chan struct{}
	// text and hash are the configuration HAProxy runs, without servers
	// (what Render returns); the master record carries the hash.
	text, hash string
	proc       *proc.Process
	// up is true while proc's admin socket has answered: commands are sent.
	up bool
	// stopSupervisor cancels the supervision goroutine; supervisorDone is
	// closed when it has returned. Both are nil when not supervising.
	stopSupervisor context.CancelFunc
	supervisorDone chan struct{}
	// restarts counts masters started after one exited unexpectedly.
	restarts atomic.Int64
	// onRestart, if set, is told of each such restart and why.
	onRestart func(reason string)

	// tokenMu guards tokens, the ACME challenges shoal answers now, and
	// the file that lists them (see SetChallenge).
	tokenMu sync.Mutex
	tokens  map[string]bool

	// hardStopFloor is the least hard-stop-after rendered: minHardStop;
	// a test waits out a shorter one.
	hardStopFloor time.Duration
}

// Server is a dynamic HAProxy server, one instance of a group.
type Server struct {
	Backend string
	Name    string
	// Addr is IP:port, as an instance's record has it: HAProxy gives
	// dynamic servers named by a host name no address.
	Addr   string
	Health config.Health
	// Proto is the group's proto: "h2" speaks HTTP/2 (h2c) to the server.
	Proto string
	// Weight is HAProxy's weight, 1 to 256; 0 means 100, and WeightOff
	// HAProxy's 0 (out of rotation, checks running).
	Weight int
	// MaxConn is HAProxy's maxconn (0: no limit) and SlowStart its
	// slowstart (0: none), from the group's limits and slow_start.
	MaxConn   int
	SlowStart time.Duration
}

type serverKey struct{ backend, name string }

type entry struct {
	srv Server
	// ready servers passed their checks once; after a restart of HAProxy they
	// are added without the gate that keeps new ones out until checked.
	ready bool
	// draining servers get "state drain" again if HAProxy restarts.
	draining bool
}

// NewManager returns a Manager for cfg. Servers may be added before Start:
// Start adds them to HAProxy, or reconciles an adopted HAProxy with them.
func NewManager(cfg *config.Config, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := PathsFor(cfg.StateDir)
	return &Manager{
		cfg:        cfg,
		log:        log.With("component", "haproxy"),
		paths:      p,
		client:     &Client{Socket: p.AdminSocket},
		master:     &Client{Socket: p.MasterSocket},
		registry:   make(map[serverKey]*entry),
		resyncKick: make(chan struct{}, 1),
		tokens:     make(map[string]bool),

		hardStopFloor: minHardStop,
	}
}

// Runtime runs cmd on the current worker (with payload, see ExecPayload,
// when it is not empty), never on one a reload is replacing. It is what the
// certificate store sends its SSL commands through.
func (m *Manager) Runtime(ctx context.Context, cmd, payload string) (string, error) {
	m.reloadMu.RLock()
	defer m.reloadMu.RUnlock()
	if payload == "" {
		return m.client.Exec(ctx, cmd)
	}
	return m.client.ExecPayload(ctx, cmd, payload)
}

// Closing makes every HTTP frontend of an HA node close each connection
// after its answer (on) or keep it alive again (off): the old holder of the
// VIP drains before a handover (keepalived.Drainer).
func (m *Manager) Closing(ctx context.Context, on bool) error {
	m.reloadMu.RLock()
	defer m.reloadMu.RUnlock()
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	return m.client.Closing(ctx, on)
}

// Requests counts the requests HAProxy has in progress.
func (m *Manager) Requests(ctx context.Context) (int, error) {
	m.reloadMu.RLock()
	defer m.reloadMu.RUnlock()
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	return m.client.Requests(ctx)
}

// OnRestart makes f told, after each restart of HAProxy that followed an
// unexpected exit, why it exited. Call it before Start.
func (m *Manager) OnRestart(f func(reason string)) { m.onRestart = f }

// Restarts returns how many times HAProxy was restarted after it exited
// unexpectedly.
func (m *Manager) Restarts() int64 { return m.restarts.Load() }

// config returns the configuration in force: Reload replaces it.
func (m *Manager) config() *config.Config {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cfg
}

// Client returns a runtime API client for the admin socket.
func (m *Manager) Client() *Client { return m.client }

// PID returns the master's pid, or 0 when HAProxy is not running.
func (m *Manager) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == nil {
		return 0
	}
	return m.proc.PID()
}

// Start checks and writes HAProxy's configuration, adopts a master left
// running by an earlier Manager with the same configuration or starts a new
// one, adds the registered servers, and supervises the master until Stop.
// It returns once the admin socket answers.
func (m *Manager) Start(ctx context.Context) error {
	m.life.Lock()
	defer m.life.Unlock()
	if m.supervisorDone != nil {
		return errors.New("start haproxy: already started")
	}

	bin, err := m.binary(ctx)
	if err != nil {
		return err
	}
	text, err := render(m.cfg, m.paths, nil, m.hardStopFloor)
	if err != nil {
		return fmt.Errorf("render haproxy config: %w", err)
	}
	if err := os.MkdirAll(m.paths.Dir, 0o700); err != nil {
		return fmt.Errorf("create haproxy directory: %w", err)
	}
	// The configuration may load it; its text is shoal's, so every start
	// writes it (a reload then reads this version).
	if err := writeFileAtomic(m.paths.Lua, HoldScript()); err != nil {
		return fmt.Errorf("write haproxy lua script: %w", err)
	}
	// So may it the token list, which must exist (and a restarted shoal
	// has no challenge pending).
	m.tokenMu.Lock()
	err = m.writeTokens()
	m.tokenMu.Unlock()
	if err != nil {
		return err
	}
	if err := writeFileAtomic(m.paths.Config, []byte(text)); err != nil {
		return fmt.Errorf("write haproxy config: %w", err)
	}
	if out, err := checkConfig(ctx, bin, m.paths.Config, cmdTimeout); err != nil {
		if errors.Is(err, errCheckTimeout) {
			return fmt.Errorf("checking %s: %w: %s", m.paths.Config, err, out)
		}
		return fmt.Errorf("haproxy rejected %s (%w): %s", m.paths.Config, err, out)
	}
	hash := configHash(text)
	m.mu.Lock()
	m.text, m.hash = text, hash
	m.mu.Unlock()

	p, stale, err := m.adopt(ctx, hash, bin)
	if err != nil {
		return err
	}
	adopted := p != nil
	logStart := fileSize(m.paths.LogFile)
	if adopted {
		m.log.Info("adopted running haproxy", "pid", p.PID())
	} else if p, logStart, err = m.launch(ctx, bin); err != nil {
		return err
	}

	m.mu.Lock()
	m.proc, m.up = p, true
	m.mu.Unlock()
	m.sync(ctx, adopted)
	if err := ctx.Err(); err != nil {
		// Left running unsupervised, as after Detach: the next Start adopts it.
		m.mu.Lock()
		m.proc, m.up = nil, false
		m.mu.Unlock()
		return fmt.Errorf("start haproxy: add registered servers (haproxy %d left running): %w", p.PID(), err)
	}

	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	m.stopSupervisor, m.supervisorDone = cancel, done
	go func() {
		defer close(done)
		rctx, stopResync := context.WithCancel(sctx)
		var wg sync.WaitGroup
		wg.Go(func() { m.resyncLoop(rctx) })
		m.supervise(sctx, p, logStart, bin)
		stopResync()
		wg.Wait()
	}()
	if stale {
		m.log.Info("reloading the adopted haproxy with this configuration", "pid", p.PID())
		if err := m.replaceWorker(ctx, m.config(), text, hash, p.PID()); err != nil {
			// It keeps serving what it ran; the record still says so, and
			// the next start tries again.
			m.detach()
			return fmt.Errorf("start haproxy: the running haproxy %d (left running) did not take the configuration: %w", p.PID(), err)
		}
	}
	return nil
}

// Stop soft-stops HAProxy (SIGUSR1: listeners close, requests in flight
// finish), ends its idle keep-alive connections once no request is in
// flight, and ends supervision. If ctx ends first, the process group gets
// SIGTERM, then SIGKILL. Stopping a stopped Manager does nothing.
func (m *Manager) Stop(ctx context.Context) error {
	m.life.Lock()
	defer m.life.Unlock()
	p := m.detach()
	if p == nil {
		return nil
	}
	m.log.Info("stopping haproxy", "pid", p.PID())
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go m.endIdle(wctx, p)
	if err := softStop(ctx, p); err != nil {
		return err
	}
	if err := os.Remove(m.recordPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove haproxy master record: %w", err)
	}
	return nil
}

// Detach ends supervision but leaves HAProxy running, so that a later Start
// (after shoal itself restarts) adopts it without dropping a connection.
func (m *Manager) Detach() {
	m.life.Lock()
	defer m.life.Unlock()
	if p := m.detach(); p != nil {
		m.log.Info("leaving haproxy running", "pid", p.PID())
	}
}

// detach stops the supervisor and forgets the process, returning it.
func (m *Manager) detach() *proc.Process {
	if m.stopSupervisor != nil {
		m.stopSupervisor()
		<-m.supervisorDone
		m.stopSupervisor, m.supervisorDone = nil, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.proc
	m.proc, m.up = nil, false
	return p
}

// endIdle hard-stops the soft-stopping master p (SIGTERM) once its workers
// have no request in flight, until ctx ends. Each keeps its idle keep-alive
// connections for one more request (option idle-close-on-response, which
// keeps reloads hitless), up to timeout http-keep-alive: a stop, which
// leaves no worker to serve the next request, need not wait for them.
func (m *Manager) endIdle(ctx context.Context, p *proc.Process) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.Done():
			return
		case <-tick.C:
		}
		if m.onlyIdle(ctx) {
			_ = p.Signal(syscall.SIGTERM)
			return
		}
	}
}

// onlyIdle reports whether no worker of the master has a request in flight.
func (m *Manager) onlyIdle(ctx context.Context) bool {
	pl, err := m.showProc(ctx)
	if err != nil {
		return false
	}
	for _, pid := range append([]int{pl.current}, pl.old...) {
		if pid == 0 {
			continue
		}
		c := &Client{Socket: m.paths.MasterSocket, Process: pid}
		cctx, cancel := context.WithTimeout(ctx, cmdTimeout)
		n, err := c.Requests(cctx)
		cancel()
		if err != nil && strings.Contains(err.Error(), msgNoProcess) {
			continue // it has exited
		}
		if err != nil || n > 0 {
			return false
		}
	}
	return true
}

// softStop sends SIGUSR1 and waits for p to exit; once ctx ends it kills p.
func softStop(ctx context.Context, p *proc.Process) error {
	if err := p.Signal(syscall.SIGUSR1); err != nil && !errors.Is(err, proc.ErrGone) {
		return fmt.Errorf("soft-stop haproxy: %w", err)
	}
	select {
	case <-p.Done():
		return nil
	case <-ctx.Done():
	}
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killGrace+2*time.Second)
	defer cancel()
	if err := p.Stop(kctx, killGrace); err != nil {
		return fmt.Errorf("kill haproxy: %w", err)
	}
	return nil
}

var versionRE = regexp.MustCompile(`version ((\d+)\.(\d+)\S*)`)

// Version runs HAProxy binary bin with -v and returns the version it
// reports ("2.6.12-1+deb12u1") and its major and minor numbers.
func Version(ctx context.Context, bin string) (version string, major, minor int, err error) {
	vctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	out, err := exec.CommandContext(vctx, bin, "-v").Output()
	if err != nil {
		return "", 0, 0, fmt.Errorf("run %s -v: %w", bin, err)
	}
	v := versionRE.FindSubmatch(out)
	if v == nil {
		return "", 0, 0, fmt.Errorf("%s -v: no version in %q", bin, firstLine(string(out)))
	}
	major, _ = strconv.Atoi(string(v[2]))
	minor, _ = strconv.Atoi(string(v[3]))
	return string(v[1]), major, minor, nil
}

// binary finds HAProxy and checks that it is 2.6 or later.
func (m *Manager) binary(ctx context.Context) (string, error) {
	name := m.cfg.HAProxy.Binary
	if name == "" {
		name = "haproxy"
	}
	bin, err := exec.LookPath(name)
	if err != nil {
		where := "on PATH"
		if strings.ContainsRune(name, filepath.Separator) {
			where = "at that path"
		}
		cfgPath := m.cfg.Path
		if cfgPath == "" {
			cfgPath = "the config file"
		}
		return "", fmt.Errorf("haproxy not found (looked for %q %s): install it with \"apt-get install haproxy\" (Debian/Ubuntu) or set haproxy.binary in %s",
			name, where, cfgPath)
	}
	_, major, minor, err := Version(ctx, bin)
	if err != nil {
		return "", err
	}
	if major < 2 || major == 2 && minor < 6 {
		return "", fmt.Errorf("%s is HAProxy %d.%d; shoal needs 2.6 or later", bin, major, minor)
	}
	return bin, nil
}

// masterRecord identifies the running master across restarts of shoal.
type masterRecord struct {
	PID          int    `json:"pid"`
	PIDStart     uint64 `json:"pid_start"`
	ConfigSHA256 string `json:"config_sha256"`
}

func (m *Manager) recordPath() string { return filepath.Join(m.paths.Dir, "master.json") }

// writeRecord records p as the master running the configuration with hash.
func (m *Manager) writeRecord(p *proc.Process, hash string) error {
	b, err := json.Marshal(masterRecord{PID: p.PID(), PIDStart: p.StartTicks(), ConfigSHA256: hash})
	if err != nil {
		return err
	}
	return writeFileAtomic(m.recordPath(), b)
}

func configHash(text string) string {
	sum := sha256.Sum256([]byte(text))
	return hex.EncodeToString(sum[:])
}

// adopt returns the master named by master.json if it is still ours and
// answers; stale says that it runs another configuration than hash (an
// earlier file, or shoal's earlier version), which the caller reloads:
// replacing the master would refuse connections until the new one listens,
// and cut the requests in flight. A master of ours that does not answer, or
// runs another configuration with another binary than bin, is stopped, so
// that the new one can bind.
func (m *Manager) adopt(ctx context.Context, hash, bin string) (p *proc.Process, stale bool, err error) {
	b, err := os.ReadFile(m.recordPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read haproxy master record: %w", err)
	}
	var rec masterRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		m.log.Warn("ignoring unreadable haproxy master record", "path", m.recordPath(), "err", err)
		return nil, false, nil
	}
	p, err = proc.Adopt(rec.PID, rec.PIDStart)
	if errors.Is(err, proc.ErrGone) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("adopt haproxy master %d: %w", rec.PID, err)
	}
	var reason string
	switch err := m.answers(ctx); {
	case err != nil:
		reason = fmt.Sprintf("it does not answer (%v)", err)
	case rec.ConfigSHA256 == hash:
		return p, false, nil
	case runsBinary(p.PID(), bin):
		return p, true, nil
	default:
		// A reload re-executes the master's own command: it would run
		// another binary than haproxy.binary says.
		reason = "its configuration and binary differ"
	}
	m.log.Info("replacing haproxy from an earlier run", "pid", p.PID(), "reason", reason)
	sctx, cancel := context.WithTimeout(ctx, replaceGrace)
	defer cancel()
	if err := softStop(sctx, p); err != nil {
		return nil, false, fmt.Errorf("stop haproxy from an earlier run (pid %d): %w", p.PID(), err)
	}
	return nil, false, nil
}

// runsBinary reports whether the process pid was started as bin.
func runsBinary(pid int, bin string) bool {
	args := cmdline(pid)
	return len(args) > 0 && args[0] == bin
}

// answers checks both sockets: the master's, which proves the master is
// alive, and the worker's, which proves it serves.
func (m *Manager) answers(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	if _, err := m.master.Exec(ctx, "show proc"); err != nil {
		return err
	}
	_, err := m.client.Exec(ctx, "show info")
	return err
}

// launch claims the frontend's port, starts a master, records it and waits
// for its admin socket. It returns the size of the log before the start. On
// failure the process is gone and the error quotes HAProxy's log.
func (m *Manager) launch(ctx context.Context, bin string) (*proc.Process, int64, error) {
	if err := m.claimPort(ctx); err != nil {
		return nil, 0, fmt.Errorf("start haproxy: %w", err)
	}
	// After a reload the file also lists that moment's servers as static
	// lines: a new master starts from the configuration alone, and the
	// registry is added at runtime.
	m.mu.Lock()
	text, hash := m.text, m.hash
	m.mu.Unlock()
	if err := writeFileAtomic(m.paths.Config, []byte(text)); err != nil {
		return nil, 0, fmt.Errorf("start haproxy: write config: %w", err)
	}
	logStart := fileSize(m.paths.LogFile)
	p, err := proc.Start(proc.Spec{
		Argv: []string{bin, "-W", "-S", m.paths.MasterSocket + ",mode,600",
			"-f", m.paths.Config, "-p", m.paths.PIDFile},
		Env: os.Environ(),
		Dir: m.paths.Dir,
		Log: m.paths.LogFile,
	})
	if err != nil {
		return nil, 0, fmt.Errorf("start haproxy: %w", err)
	}
	// Recorded before anything else: a master no record names would be
	// found only by the port it holds.
	if err := m.writeRecord(p, hash); err != nil {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killGrace+2*time.Second)
		defer cancel()
		_ = p.Stop(kctx, killGrace)
		return nil, 0, fmt.Errorf("start haproxy: write master record (haproxy %d stopped): %w", p.PID(), err)
	}
	if err := m.waitAdmin(ctx, p); err != nil {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killGrace+2*time.Second)
		defer cancel()
		_ = p.Stop(kctx, killGrace)
		if tail := logTail(m.paths.LogFile, logStart); tail != "" {
			err = fmt.Errorf("%w; %s says: %s", err, m.paths.LogFile, tail)
		}
		return nil, 0, fmt.Errorf("start haproxy: %w", err)
	}
	m.log.Info("haproxy started", "pid", p.PID())
	return p, logStart, nil
}

func (m *Manager) waitAdmin(ctx context.Context, p *proc.Process) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		actx, acancel := context.WithTimeout(ctx, time.Second)
		out, err := m.client.Exec(actx, "show info")
		acancel()
		if err == nil {
			// The socket path may still belong to another master's worker
			// (one that failed to be stopped): only p's own worker counts.
			if err = workerOf(out, p.PID()); err == nil {
				return nil
			}
		}
		select {
		case <-p.Done():
			return fmt.Errorf("haproxy exited during start-up (%s)", p.ExitReason())
		case <-ctx.Done():
			return fmt.Errorf("admin socket %s did not answer within %s: %w", m.paths.AdminSocket, startTimeout, err)
		case <-tick.C:
		}
	}
}

// workerOf checks that "show info" output comes from a worker of master.
func workerOf(info string, master int) error {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "Pid: "); ok {
			pid, _ := strconv.Atoi(strings.TrimSpace(v))
			if pp := parentPID(pid); pp != master {
				return fmt.Errorf("admin socket answered for haproxy worker %d of master %d, not of %d", pid, pp, master)
			}
			return nil
		}
	}
	return errors.New("show info: no Pid line")
}

// supervise restarts the master whenever it exits, with exponential back-off,
// and adds the registry to the new one. It returns when ctx ends.
// logStart is where p's output begins in the log.
func (m *Manager) supervise(ctx context.Context, p *proc.Process, logStart int64, bin string) {
	delay := backoffMin
	upSince := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.Done():
		}
		if ctx.Err() != nil {
			return // Stop raced with the exit it caused.
		}
		m.mu.Lock()
		m.proc, m.up = nil, false
		m.mu.Unlock()
		if time.Since(upSince) >= backoffReset {
			delay = backoffMin
		}
		why := fmt.Sprintf("haproxy (pid %d) exited unexpectedly: %s", p.PID(), p.ExitReason())
		m.log.Error("haproxy exited unexpectedly; restarting", "pid", p.PID(), "reason", p.ExitReason(),
			"log", logTail(m.paths.LogFile, logStart), "restart_in", delay)
		for {
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			delay = min(2*delay, backoffMax)
			np, start, err := m.launch(ctx, bin)
			if err == nil {
				p, logStart = np, start
				break
			}
			if ctx.Err() != nil {
				return
			}
			m.log.Error("haproxy restart failed", "err", err, "retry_in", delay)
		}
		upSince = time.Now()
		m.restarts.Add(1)
		m.mu.Lock()
		m.proc, m.up = p, true
		m.mu.Unlock()
		m.sync(ctx, false)
		if m.onRestart != nil {
			m.onRestart(fmt.Sprintf("%s; restarted as pid %d", why, p.PID()))
		}
	}
}

// logTail returns HAProxy's last alert lines after offset from, or its last
// lines when there are no alerts.
func logTail(path string, from int64) string {
	const maxTail = 4 << 10
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil {
		from = max(from, fi.Size()-maxTail)
	}
	b, err := io.ReadAll(io.NewSectionReader(f, max(from, 0), maxTail))
	if err != nil {
		return ""
	}
	var alerts, all []string
	for line := range bytes.Lines(b) {
		s := strings.TrimSpace(string(line))
		// HAProxy also logs runtime API errors, which say nothing about the process.
		if s == "" || strings.Contains(s, " : CLI : ") {
			continue
		}
		all = append(all, s)
		if strings.HasPrefix(s, "[ALERT]") {
			alerts = append(alerts, s)
		}
	}
	if len(alerts) == 0 {
		alerts = all
	}
	return strings.Join(alerts[max(0, len(alerts)-3):], " | ")
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// writeFileAtomic replaces path with data, synced to disk, so that a crash
// leaves either the old file or the new one.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// keyedMutex is a set of mutexes by server, each waited for with a context.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[serverKey]*keyLock
}

type keyLock struct {
	ch   chan struct{}
	refs int
}

// lock returns the unlock function once the lock for k is held.
func (km *keyedMutex) lock(ctx context.Context, k serverKey) (func(), error) {
	km.mu.Lock()
	if km.locks == nil {
		km.locks = make(map[serverKey]*keyLock)
	}
	l := km.locks[k]
	if l == nil {
		l = &keyLock{ch: make(chan struct{}, 1)}
		km.locks[k] = l
	}
	l.refs++
	km.mu.Unlock()

	release := func() {
		km.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(km.locks, k)
		}
		km.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, fmt.Errorf("wait for server %s/%s: %w", k.backend, k.name, ctx.Err())
	}
}

// errCheckTimeout is a `haproxy -c` that did not finish in time: on a
// machine too busy to run it, not a config HAProxy refused (its error was
// "signal: killed", which read as a rejection).
var errCheckTimeout = errors.New("haproxy -c did not finish in time")

// checkConfig runs `haproxy -c` on path within timeout and returns its
// output, trimmed, when it fails.
func checkConfig(ctx context.Context, bin, path string, timeout time.Duration) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := exec.CommandContext(cctx, bin, "-c", "-f", path).CombinedOutput()
	if err != nil && errors.Is(cctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("%w (%s): %v", errCheckTimeout, timeout, err)
	}
	if err != nil {
		return strings.TrimSpace(string(out)), err
	}
	return "", nil
}
