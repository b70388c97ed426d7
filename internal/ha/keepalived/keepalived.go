// Package keepalived runs keepalived (VRRP) for an HA pair's virtual IP:
// shoal renders its configuration, starts it, restarts it when it exits and
// reads its state. The VIP goes to the node with the highest effective
// priority: its base priority, plus 50 while its leader check passes (the
// etcd leader), and none at all while its health check fails (FAULT: its
// HAProxy or core is unhealthy).
//
// One keepalived's life under a Supervisor:
//
//	Start ──► SYN guard ──► sweep strays ──► clear stale VIP ──► run keepalived ◄──┐
//	                                                               │             │
//	                                                          exits (crash,  back-off
//	                                                          kill -9) ──► clear stale VIP
//	Stop ──► SIGTERM (keepalived sends priority 0 and drops the VIP),
//	         SIGKILL after stopGrace ──► clear stale VIP ──► delete the guard
//
// A keepalived killed with SIGKILL leaves the VIP on its interface (issue
// 27 measured it): two nodes would answer ARP for it. So the VIP is removed
// before each start and after each exit. When the whole node's processes
// die, nothing removes it until the node starts again: the guard, an
// nftables table that outlives them, makes the kernel drop the SYNs to the
// VIP that no socket takes rather than refuse them, so clients send them
// again and reach the standby once it has the VIP (guard, handover.go).
//
// A graceful handover (Handover, handover.go) drains the node before the
// VIP moves: new connections held with nftables, each connection closed
// after its answer, then FAULT through a track file, which keepalived reads
// at once.
//
// keepalived reports its state (BACKUP, MASTER, FAULT, STOP) in order on a
// FIFO in Dir (vrrp_notify_fifo) that the Supervisor reads: no notify script
// runs.
//
// Each keepalived carries SHOAL_KEEPALIVED=<Dir> in its environment, which
// its children inherit, so that a shoal restarted after a crash finds and
// stops what an earlier run left (sweep) before starting its own.
package keepalived

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/proc"
)

// Options configures one node's keepalived.
type Options struct {
	VIP      config.HAVIP
	Priority int
	Node     string
	// Dir is keepalived's state directory: keepalived.conf, pid files,
	// the notify FIFO and keepalived.log.
	Dir string
	// Check is the argv of the health track script (shoal ha check
	// --socket SOCK); LeaderCheck that of the leader track script (with
	// --leader), which adds 50 to the priority while it passes. Either may
	// be empty: no such script.
	Check       []string
	LeaderCheck []string
	// Netns, for tests, runs keepalived and ip inside this network
	// namespace (ip netns exec); "" is the current one.
	Netns string
	Log   *slog.Logger
}

// Files in Dir.
const (
	confFile    = "keepalived.conf"
	fifoFile    = "notify.fifo"
	logFile     = "keepalived.log"
	pidFile     = "keepalived.pid"
	vrrpPidFile = "vrrp.pid"
)

// markerEnv marks the processes of the keepalived whose Dir is its value.
const markerEnv = "SHOAL_KEEPALIVED"

// Supervision timings. stopGrace bounds keepalived's shutdown after
// SIGTERM (it sends its priority-0 advert and removes the VIP in
// milliseconds); a keepalived that ran for stableRun before exiting is
// restarted after the shortest back-off again.
const (
	stopGrace  = 5 * time.Second
	minBackoff = 500 * time.Millisecond
	maxBackoff = 30 * time.Second
	stableRun  = time.Minute
	cmdTimeout = 5 * time.Second
)

// Supervisor runs one keepalived and restarts it when it exits.
type Supervisor struct {
	o    Options
	argv []string
	nft  string // the nft binary
	vip  netip.Prefix
	log  *slog.Logger
	fifo *os.File

	cancel context.CancelFunc
	done   chan struct{} // closed when run returns
	reader chan struct{} // closed when readStates returns

	mu    sync.Mutex
	proc  *proc.Process
	state string

	stopOnce sync.Once
	stopErr  error
}

// Start clears a stale VIP, renders keepalived.conf into o.Dir, checks it
// with keepalived -t and runs keepalived. It fails on a configuration that
// keepalived refuses, a missing interface, or a track script that
// keepalived would disable as unsafe. ctx bounds Start alone: keepalived
// runs, and is restarted, until Stop.
func Start(ctx context.Context, o Options) (*Supervisor, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	s := &Supervisor{o: o, log: o.Log.With("component", "keepalived")}
	if err := s.prepare(ctx); err != nil {
		return nil, fmt.Errorf("keepalived: %w", err)
	}
	// Opened read-write, the FIFO never reads end-of-file between two
	// keepalived runs, and keepalived's open never waits for a reader.
	fifo, err := os.OpenFile(filepath.Join(s.o.Dir, fifoFile), os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("keepalived: open notify FIFO: %w", err)
	}
	s.fifo = fifo
	if err := sweep(ctx, s.o.Dir, s.log); err != nil {
		fifo.Close()
		return nil, fmt.Errorf("keepalived: %w", err)
	}
	if err := s.clearVIP(ctx); err != nil {
		fifo.Close()
		return nil, fmt.Errorf("keepalived: %w", err)
	}
	p, err := s.launch()
	if err != nil {
		fifo.Close()
		return nil, fmt.Errorf("keepalived: %w", err)
	}
	s.proc = p
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	s.done, s.reader = make(chan struct{}), make(chan struct{})
	go s.readStates()
	go s.run(runCtx, p)
	return s, nil
}

// prepare resolves the binary and scripts, checks the interface, and
// writes keepalived.conf and the FIFO.
func (s *Supervisor) prepare(ctx context.Context) error {
	o := &s.o
	if o.Dir == "" {
		return errors.New("no state directory")
	}
	// Absolute: the marker, compared as a string, must not depend on the
	// working directory.
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	o.Dir = dir
	if s.vip, err = netip.ParsePrefix(o.VIP.Address); err != nil {
		return fmt.Errorf("vip address %q: expected a CIDR such as 10.0.0.100/24", o.VIP.Address)
	}
	bin, err := binary(o.VIP.Keepalived, "keepalived")
	if err != nil {
		return err
	}
	// nftables keeps a crashed node from refusing connections (guard) and
	// holds them during a step-down (Handover).
	if s.nft, err = binary("nft", "nftables"); err != nil {
		return fmt.Errorf("the VIP's SYN guard and step-down need nft: %w", err)
	}
	if o.Check, err = resolveScript(o.Check); err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	if o.LeaderCheck, err = resolveScript(o.LeaderCheck); err != nil {
		return fmt.Errorf("leader check: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	fifo := filepath.Join(dir, fifoFile)
	text, err := render(*o, s.vip, fifo)
	if err != nil {
		return err
	}
	if _, err := s.addrs(ctx); err != nil {
		return err
	}
	conf := filepath.Join(dir, confFile)
	if err := writeFileAtomic(conf, []byte(text)); err != nil {
		return fmt.Errorf("write %s: %w", conf, err)
	}
	if fi, err := os.Lstat(fifo); err == nil && fi.Mode().Type() != os.ModeNamedPipe {
		if err := os.Remove(fifo); err != nil {
			return fmt.Errorf("replace %s: %w", fifo, err)
		}
	}
	if err := syscall.Mkfifo(fifo, 0o600); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create %s: %w", fifo, err)
	}
	// Not yielded: a yield left by a run that died mid-handover would keep
	// this node from ever holding the VIP.
	if err := s.yield(false); err != nil {
		return err
	}
	if err := s.guard(ctx); err != nil {
		return err
	}
	tctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	if out, err := s.command(tctx, bin, "--config-test", "--use-file", conf).CombinedOutput(); err != nil {
		return fmt.Errorf("%s refuses %s: %w: %s", bin, conf, err, strings.TrimSpace(string(out)))
	}
	s.argv = s.wrap(bin, "--dont-fork", "--log-console", "--log-detail", "--no-syslog", "--vrrp",
		"--use-file", conf, "--pid", filepath.Join(dir, pidFile), "--vrrp_pid", filepath.Join(dir, vrrpPidFile))
	return nil
}

// binary finds a program of Debian's package pkg: name ("": pkg) as given
// if it has a slash, else in PATH, then in /usr/sbin (often not in a
// service's PATH).
func binary(name, pkg string) (string, error) {
	if name == "" {
		name = pkg
	}
	path, err := exec.LookPath(name)
	if err != nil && !strings.Contains(name, "/") {
		path, err = exec.LookPath(filepath.Join("/usr/sbin", name))
	}
	if err != nil {
		return "", fmt.Errorf("find %s (apt-get install %s): %w", name, pkg, err)
	}
	return path, nil
}

// wrap prefixes argv with ip netns exec when the Supervisor runs in a
// namespace.
func (s *Supervisor) wrap(argv ...string) []string {
	if s.o.Netns == "" {
		return argv
	}
	return append([]string{"ip", "netns", "exec", s.o.Netns}, argv...)
}

func (s *Supervisor) command(ctx context.Context, argv ...string) *exec.Cmd {
	argv = s.wrap(argv...)
	return exec.CommandContext(ctx, argv[0], argv[1:]...)
}

func (s *Supervisor) launch() (*proc.Process, error) {
	// keepalived refuses to start ("daemon is already running") while a
	// pid file names a live process, and a killed keepalived's VRRP child
	// lingers as a zombie that no one may reap (pid 1 in some containers).
	// Only our keepalived uses these files, and none runs now.
	for _, f := range []string{pidFile, vrrpPidFile} {
		if err := os.Remove(filepath.Join(s.o.Dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("remove old pid file: %w", err)
		}
	}
	env := append(os.Environ(), markerEnv+"="+s.o.Dir)
	p, err := proc.Start(proc.Spec{Argv: s.argv, Env: env, Dir: s.o.Dir, Log: filepath.Join(s.o.Dir, logFile)})
	if err != nil {
		return nil, err
	}
	s.log.Info("keepalived started", "pid", p.PID(), "vip", s.vip.String(), "interface", s.o.VIP.Interface, "priority", s.o.Priority)
	return p, nil
}

// run restarts keepalived with back-off each time it exits, until ctx ends.
func (s *Supervisor) run(ctx context.Context, p *proc.Process) {
	defer close(s.done)
	backoff := minBackoff
	started := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.Done():
		}
		s.setState("")
		s.log.Warn("keepalived exited; restarting", "pid", p.PID(), "reason", p.ExitReason(),
			"log", filepath.Join(s.o.Dir, logFile), "in", backoff)
		// A VRRP child that outlived its parent would go on holding the
		// VIP and advertising: it gets SIGTERM, then SIGKILL.
		if err := p.Stop(ctx, stopGrace); err != nil {
			s.log.Error("stop what the exited keepalived left", "err", err)
		}
		if err := s.clearVIP(ctx); err != nil {
			s.log.Error("clear stale VIP", "err", err)
		}
		if time.Since(started) >= stableRun {
			backoff = minBackoff
		}
		for {
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, maxBackoff)
			var err error
			if p, err = s.launch(); err == nil {
				break
			}
			s.log.Error("restart keepalived", "err", err, "in", backoff)
		}
		started = time.Now()
		s.mu.Lock()
		s.proc = p
		s.mu.Unlock()
	}
}

// readStates follows keepalived's notify FIFO: lines such as
// `INSTANCE "shoal" MASTER 150`.
func (s *Supervisor) readStates() {
	defer close(s.reader)
	sc := bufio.NewScanner(s.fifo)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || f[0] != "INSTANCE" || f[1] != `"`+instance+`"` {
			continue
		}
		state := f[2]
		if !slices.Contains([]string{"MASTER", "BACKUP", "FAULT"}, state) {
			state = "" // STOP, DELETED: not running
		}
		s.log.Info("vrrp state", "state", f[2], "priority", strings.Join(f[3:], " "))
		s.setState(state)
	}
}

func (s *Supervisor) setState(state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state = state
}

// State is keepalived's VRRP state: MASTER (it holds the VIP), BACKUP,
// FAULT (a track script fails, or the interface is down), or "" while
// keepalived is not running or has not reported yet.
func (s *Supervisor) State() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.proc.Done():
		return ""
	default:
		return s.state
	}
}

// Stop stops keepalived: SIGTERM, on which keepalived sends a priority-0
// advert (the backup takes over at once) and removes the VIP; SIGKILL after
// stopGrace or when ctx ends. The VIP is cleared if it is still there.
func (s *Supervisor) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		s.cancel()
		<-s.done
		s.mu.Lock()
		p := s.proc
		s.mu.Unlock()
		var errs []error
		if err := p.Stop(ctx, stopGrace); err != nil {
			errs = append(errs, fmt.Errorf("stop keepalived: %w", err))
		}
		if err := s.clearVIP(context.WithoutCancel(ctx)); err != nil {
			errs = append(errs, err)
		}
		if err := s.unguard(context.WithoutCancel(ctx)); err != nil {
			errs = append(errs, err)
		}
		s.fifo.Close()
		<-s.reader
		s.setState("")
		s.log.Info("keepalived stopped", "pid", p.PID())
		s.stopErr = errors.Join(errs...)
	})
	return s.stopErr
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o600); err != nil { // an old tmp keeps its mode
		return err
	}
	return os.Rename(tmp, path)
}
