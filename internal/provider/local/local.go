// Package local runs instances as processes on this machine.
//
// Every instance gets two environment variables, SHOAL_STATE_DIR and
// SHOAL_INSTANCE, that mark it as started by shoal for one state directory. The
// marker is what lets Adopt prove a recorded pid is still ours and StopStrays
// find instances that a crashed shoal never recorded.
package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/instance"
	"github.com/shoal-lb/shoal/internal/portrange"
	"github.com/shoal-lb/shoal/internal/proc"
	"github.com/shoal-lb/shoal/internal/provider"
)

// Marker environment variables.
const (
	envStateDir = "SHOAL_STATE_DIR"
	envInstance = "SHOAL_INSTANCE"
)

// host is where local instances listen.
const host = "127.0.0.1"

// strayGrace is how long a stray gets between SIGTERM and SIGKILL; its
// template, and so its own StopTimeout, is unknown.
const strayGrace = 5 * time.Second

// Provider starts instances as local processes. It is safe for concurrent use.
type Provider struct {
	stateDir string // absolute
	dirErr   error  // why stateDir could not be made absolute
	// owner marks the instances as this provider's: stateDir, or what
	// MarkAs set.
	owner string
	log   *slog.Logger

	mu sync.Mutex
	// ports holds the ports of instances this Provider started or adopted, so
	// that a port is not handed out twice while an instance has yet to bind
	// it. A nil process reserves a port for a Start in progress.
	ports map[int]*proc.Process
	// names holds the newest process of each instance name, so that the logs
	// of running instances are never expired.
	names map[string]*proc.Process
	// containers are the container IDs of the container instances p
	// started or adopted, by their process; runtimes the container
	// runtimes StopStrays looks through (see UseRuntimes).
	containers map[*proc.Process]string
	runtimes   map[string]bool

	// logMu orders a log's rotations with its followers' reads, and
	// rotations counts each log's rotations, by path: a follower reads the
	// count and the file under one read lock, so a log truncated and
	// written past the follower's offset again is not taken for the one
	// it was reading.
	logMu     sync.RWMutex
	rotations map[string]int
}

var _ provider.Provider = (*Provider)(nil)

// New returns a Provider whose instances are marked with stateDir and log to
// stateDir/logs. A nil log discards messages.
func New(stateDir string, log *slog.Logger) *Provider {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		err = fmt.Errorf("local provider: state directory %s: %w", stateDir, err)
	}
	return &Provider{stateDir: abs, owner: abs, dirErr: err, log: log, ports: make(map[int]*proc.Process), names: make(map[string]*proc.Process),
		containers: make(map[*proc.Process]string), runtimes: make(map[string]bool), rotations: make(map[string]int)}
}

// MarkAs marks the instances started from now on with owner instead of
// the state directory, and makes the provider adopt (and sweep) those so
// marked: the nodes of an HA pair on one machine share their instances,
// each with its own state directory. Call it before the first Start.
func (p *Provider) MarkAs(owner string) { p.owner = owner }

// Start allocates a port, expands the template and starts the instance in its
// own process group. It does not wait for the instance to serve, nor to
// survive: an instance that exits at once is returned and its Done closes.
func (p *Provider) Start(ctx context.Context, spec provider.Spec) (provider.Instance, error) {
	if p.dirErr != nil {
		return nil, p.dirErr
	}
	if err := provider.CheckName(spec.Name); err != nil {
		return nil, fmt.Errorf("start instance: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start instance %s: %w", spec.Name, err)
	}
	port, err := p.reservePort()
	if err != nil {
		return nil, fmt.Errorf("start instance %s: %w", spec.Name, err)
	}
	data := config.TemplateData{Name: spec.Name, Host: host, Port: port, Index: spec.Index, Group: spec.Group}
	// pre_start runs before the instance's process, so that what it
	// prepares (code synced at boot, say) is there when the process starts.
	if h := spec.Template.PreStart; h != nil {
		if err := p.runHook(ctx, "pre_start", h, spec.Template, data); err != nil {
			p.releasePort(port)
			return nil, fmt.Errorf("start instance %s: %w", spec.Name, err)
		}
	}
	if spec.Template.IsContainer() {
		in, err := p.startContainer(ctx, spec, port)
		if err != nil {
			p.releasePort(port)
			return nil, fmt.Errorf("start instance %s: %w", spec.Name, err)
		}
		p.track(port, spec.Name, in.proc, in.d.Container)
		return in, nil
	}
	pr, err := p.start(spec, port)
	if err != nil {
		p.releasePort(port)
		return nil, fmt.Errorf("start instance %s: %w", spec.Name, err)
	}
	p.track(port, spec.Name, pr, "")

	d := procData{PID: pr.PID(), PIDStart: pr.StartTicks(), Marker: spec.Name}
	rec := d.record(spec.Name, port)
	rec.Group, rec.Index, rec.StartedAt = spec.Group, spec.Index, time.Now()
	p.log.Debug("started instance", "group", rec.Group, "instance", rec.Name, "pid", d.PID, "port", port)
	return &localInstance{rec: rec, d: d, port: port, proc: pr, stopTimeout: spec.Template.StopTimeout, p: p, tmpl: spec.Template}, nil
}

// track notes an instance's process, its port (0: none known) and its
// container ("" for a process).
func (p *Provider) track(port int, name string, pr *proc.Process, containerID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if port > 0 {
		p.ports[port] = pr
	}
	p.names[name] = pr
	if containerID != "" {
		p.containers[pr] = containerID
	}
}

func (p *Provider) start(spec provider.Spec, port int) (*proc.Process, error) {
	tmpl := spec.Template
	argv, tenv, err := tmpl.Expand(config.TemplateData{Name: spec.Name, Host: host, Port: port, Index: spec.Index, Group: spec.Group})
	if err != nil {
		return nil, fmt.Errorf("expand template: %w", err)
	}
	if argv[0], err = resolveCommand(argv[0], tmpl.Dir); err != nil {
		return nil, err
	}
	logDir := filepath.Join(p.stateDir, "logs")
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return nil, fmt.Errorf("create log directory: %w", err)
	}
	// exec uses the last value of a repeated variable, so the template
	// overrides shoal's environment and nothing overrides the marker.
	env := slices.Concat(os.Environ(), tenv, []string{
		envStateDir + "=" + p.owner,
		envInstance + "=" + spec.Name,
	})
	return proc.Start(proc.Spec{
		Argv: argv,
		Env:  env,
		Dir:  tmpl.Dir,
		Log:  filepath.Join(logDir, spec.Name+".log"),
	})
}

// resolveCommand finds the program to run. A name with a slash is relative to
// the instance's working directory, not to shoal's; a bare name is looked up
// on PATH.
func resolveCommand(name, dir string) (string, error) {
	if strings.Contains(name, "/") && !filepath.IsAbs(name) {
		name = filepath.Join(dir, name)
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("find command: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("find command %s: %w", path, err)
	}
	return abs, nil
}

// Adopt re-attaches to a recorded instance if its pid still runs with the
// recorded start time and carries this state directory's marker, both read
// from the record's provider data.
func (p *Provider) Adopt(ctx context.Context, rec instance.Record, tmpl config.Template) (provider.Instance, error) {
	if p.dirErr != nil {
		return nil, p.dirErr
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("adopt instance %s: %w", rec.Name, err)
	}
	// The marker is checked before proc.Adopt, which would otherwise watch a
	// foreign process until it exits. Adopt's start time check then proves the
	// environment read belonged to the recorded process.
	// A record without our data (none yet, or another provider's) names no
	// process of ours.
	d, err := decode(rec.Data)
	if err != nil || d.PID <= 0 {
		return nil, fmt.Errorf("adopt instance %s (pid %d): %w", rec.Name, d.PID, provider.ErrGone)
	}
	port := addrPort(rec.Addr)
	if d.Container != "" {
		pr, err := p.adoptContainer(ctx, rec, d)
		if err != nil {
			return nil, err
		}
		p.track(port, rec.Name, pr, d.Container)
		p.log.Info("adopted container", "group", rec.Group, "instance", rec.Name, "container", d.Container, "pid", d.PID, "port", port)
		return &localInstance{rec: rec, d: d, port: port, proc: pr, stopTimeout: tmpl.StopTimeout, p: p, tmpl: tmpl}, nil
	}
	// Unreadable means exited, or another user's process: not ours either way.
	env, err := proc.Environ(d.PID)
	if err != nil {
		return nil, fmt.Errorf("adopt instance %s (pid %d): %w", rec.Name, d.PID, provider.ErrGone)
	}
	if name, ok := p.marker(env); !ok || name != d.Marker || name != rec.Name {
		return nil, fmt.Errorf("adopt instance %s (pid %d): not marked as this instance: %w", rec.Name, d.PID, provider.ErrGone)
	}
	pr, err := proc.Adopt(d.PID, d.PIDStart)
	if errors.Is(err, proc.ErrGone) {
		return nil, fmt.Errorf("adopt instance %s (pid %d): %w", rec.Name, d.PID, provider.ErrGone)
	}
	if err != nil {
		return nil, fmt.Errorf("adopt instance %s (pid %d): %w", rec.Name, d.PID, err)
	}
	p.track(port, rec.Name, pr, "")
	p.log.Info("adopted instance", "group", rec.Group, "instance", rec.Name, "pid", d.PID, "port", port)
	return &localInstance{rec: rec, d: d, port: port, proc: pr, stopTimeout: tmpl.StopTimeout, p: p, tmpl: tmpl}, nil
}

// marker returns the SHOAL_INSTANCE of env if env carries this Provider's
// SHOAL_STATE_DIR.
func (p *Provider) marker(env []string) (name string, ok bool) {
	var ours, named bool
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case envStateDir:
			ours = v == p.owner
		case envInstance:
			name, named = v, true
		}
	}
	return name, ours && named
}

// StopStrays stops marked instances of this state directory that are neither
// in keep nor started or adopted by p: the process group of a marked group
// leader, and a marked process whose group leader is gone (what an instance
// forked and left behind when it died). A marked process inside a live group
// whose leader is not marked (say, run by hand from a shell) is left alone,
// because it is not an instance and stopping its group would hit the others.
func (p *Provider) StopStrays(ctx context.Context, keep []instance.Record) ([]instance.Record, error) {
	if p.dirErr != nil {
		return nil, p.dirErr
	}
	strays, err := p.findStrays(keep)
	if err != nil {
		return nil, err
	}
	// Containers are found by their labels, in their runtimes.
	cstopped, cerr := p.stopContainerStrays(ctx, keep)

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		stopped []stray
		errs    []error
	)
	for _, s := range strays {
		wg.Go(func() {
			err := p.stopStray(ctx, s)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, proc.ErrGone):
				// It exited by itself since the scan.
			case err != nil:
				errs = append(errs, err)
			default:
				stopped = append(stopped, s)
			}
		})
	}
	wg.Wait()
	slices.SortFunc(stopped, func(a, b stray) int { return a.d.PID - b.d.PID })
	var recs []instance.Record
	for _, s := range stopped {
		recs = append(recs, s.d.record(s.name, 0))
	}
	return append(recs, cstopped...), errors.Join(append(errs, cerr)...)
}

func (p *Provider) stopStray(ctx context.Context, s stray) error {
	// Adopting re-checks the start time, so a pid reused since the scan is not hit.
	adopt := proc.Adopt
	if s.orphan {
		adopt = proc.AdoptMember
	}
	pr, err := adopt(s.d.PID, s.d.PIDStart)
	if err != nil {
		return err
	}
	p.log.Warn("stopping stray instance", "instance", s.name, "pid", s.d.PID)
	if err := pr.Stop(ctx, strayGrace); err != nil {
		return fmt.Errorf("stop stray instance %s: %w", s.name, err)
	}
	return nil
}

// stray is a marked process to stop: a group leader, or an orphan whose
// group leader is gone (stopped on its own, not by group).
type stray struct {
	name   string
	d      procData
	orphan bool
}

// findStrays scans /proc for marked processes not in keep.
func (p *Provider) findStrays(keep []instance.Record) ([]stray, error) {
	type id struct {
		pid   int
		start uint64
	}
	kept := make(map[id]bool, len(keep))
	for _, r := range keep {
		// Records of another provider name no process of ours.
		if d, err := decode(r.Data); err == nil {
			kept[id{d.PID, d.PIDStart}] = true
		}
	}
	// What this Provider started or adopted is never a stray, whatever keep says.
	p.mu.Lock()
	for _, pr := range p.ports {
		if pr != nil {
			kept[id{pr.PID(), pr.StartTicks()}] = true
		}
	}
	p.mu.Unlock()
	// Never shoal itself or its group, even if it was started with a marker.
	self, selfGroup := os.Getpid(), syscall.Getpgrp()

	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("find stray instances: %w", err)
	}
	var strays []stray
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid == selfGroup {
			continue
		}
		// Processes of other users are unreadable and not ours; processes
		// that exit during the scan are gone: skip both.
		env, err := proc.Environ(pid)
		if err != nil {
			continue
		}
		name, ok := p.marker(env)
		if !ok {
			continue
		}
		pgid, err := proc.Pgid(pid)
		if err != nil || pgid == selfGroup {
			continue
		}
		orphan := false
		if pgid != pid {
			// A member of a live group belongs to its leader: a marked leader
			// is handled as itself (stray or kept), any other leader makes
			// it foreign. Only a member whose leader is gone is a stray.
			if _, err := proc.Pgid(pgid); err == nil || !errors.Is(err, proc.ErrGone) {
				continue
			}
			orphan = true
		}
		start, err := proc.StartTicks(pid)
		if err != nil || kept[id{pid, start}] {
			continue
		}
		strays = append(strays, stray{name: name, d: procData{PID: pid, PIDStart: start, Marker: name}, orphan: orphan})
	}
	return strays, nil
}

// reservePort finds a free port on host that no instance of this Provider uses.
func (p *Provider) reservePort() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for port, pr := range p.ports {
		if pr != nil && exited(pr) {
			delete(p.ports, port)
		}
	}
	for pr := range p.containers {
		if exited(pr) {
			delete(p.containers, pr)
		}
	}
	from, to := portsFrom, min(portsTo, portrange.EphemeralStart())
	if to-from < 1000 {
		// No room below the ephemeral range: ask the kernel, as before.
		for range 100 {
			port, err := freePort()
			if err != nil {
				return 0, err
			}
			if _, used := p.ports[port]; !used {
				p.ports[port] = nil
				return port, nil
			}
		}
		return 0, errors.New("allocate port: every free port found is in use by an instance")
	}
	for range to - from {
		port := nextPort(from, to)
		if _, used := p.ports[port]; !used && bindable(port) {
			p.ports[port] = nil
			return port, nil
		}
	}
	return 0, fmt.Errorf("allocate port: no free port in %d-%d", from, to-1)
}

// portWalk is where the next search for a free port begins, one for the
// process: Providers side by side in it (tests, or groups) would otherwise
// walk the same ports and hand one out twice before either instance bound
// it.
var portWalk struct {
	sync.Mutex
	next int
}

// nextPort returns the walk's next port in [from, to).
func nextPort(from, to int) int {
	portWalk.Lock()
	defer portWalk.Unlock()
	if portWalk.next < from || portWalk.next >= to {
		portWalk.next = from + os.Getpid()*97%(to-from) // shoals side by side walk apart
	}
	port := portWalk.next
	if portWalk.next++; portWalk.next >= to {
		portWalk.next = from
	}
	return port
}

// Instances' ports come from portsFrom up to portsTo or the kernel's
// ephemeral range, whichever begins first, as Nomad's dynamic ports do: a
// port the kernel picks is in the ephemeral range, which HAProxy's health
// checks and every other outgoing connection take their source ports from,
// and at 1,000 instances one such was now and then taken between its pick
// and the instance's bind (the instance exited, failing the scale-out).
const portsFrom, portsTo = 20000, 32000

// bindable says nothing listens on host's TCP port now.
func bindable(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func (p *Provider) releasePort(port int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.ports, port)
}

// freePort asks the kernel for a port that is free right now (when there
// is no room below its ephemeral range). Another process could take it
// before the instance binds it; the instance then fails and is replaced.
func freePort() (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("allocate port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("allocate port: %w", err)
	}
	return port, nil
}

func exited(pr *proc.Process) bool {
	select {
	case <-pr.Done():
		return true
	default:
		return false
	}
}

// procData is what the local provider keeps in an instance's record
// (instance.Record.Data): the process and the marker that prove a recorded
// pid is still the instance.
type procData struct {
	PID int `json:"pid"`
	// PIDStart is the start time in clock ticks since boot, from
	// /proc/PID/stat: a reused pid has another.
	PIDStart uint64 `json:"pid_start"`
	// Marker is the instance's SHOAL_INSTANCE (a container's
	// shoal.instance label).
	Marker string `json:"marker"`
	// Container and Runtime are a container instance's ID and runtime;
	// PID is then its process.
	Container string `json:"container,omitempty"`
	Runtime   string `json:"runtime,omitempty"`
}

func decode(raw []byte) (procData, error) {
	var d procData
	if err := json.Unmarshal(raw, &d); err != nil {
		return procData{}, fmt.Errorf("local instance data: %w", err)
	}
	return d, nil
}

// record returns the record of the process d serving as name on port (0: none known).
func (d procData) record(name string, port int) instance.Record {
	raw, _ := json.Marshal(d) // numbers and a string: it cannot fail
	rec := instance.Record{Name: name, ID: strconv.Itoa(d.PID) + "-" + strconv.FormatUint(d.PIDStart, 10), Host: host, Data: raw}
	if port > 0 {
		rec.Addr = net.JoinHostPort(host, strconv.Itoa(port))
	}
	return rec
}

// addrPort returns the port of a host:port address, 0 if it has none.
func addrPort(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	port, _ := strconv.Atoi(p)
	return port
}

// localInstance is a local process serving as an instance.
type localInstance struct {
	rec         instance.Record
	d           procData
	port        int
	proc        *proc.Process
	stopTimeout time.Duration
	p           *Provider
	// tmpl is the template the instance was started (or adopted) with; its
	// pre_stop hook runs before the instance is drained.
	tmpl config.Template
}

// PreStop runs the template's pre_stop hook, if it has one.
func (in *localInstance) PreStop(ctx context.Context) error {
	h := in.tmpl.PreStop
	if h == nil {
		return nil
	}
	td := config.TemplateData{Name: in.rec.Name, Host: host, Port: in.port, Index: in.rec.Index, Group: in.rec.Group}
	if err := in.p.runHook(ctx, "pre_stop", h, in.tmpl, td); err != nil {
		return fmt.Errorf("instance %s: %w", in.rec.Name, err)
	}
	return nil
}

func (in *localInstance) Record() instance.Record { return in.rec }

func (in *localInstance) PID() int { return in.d.PID }

func (in *localInstance) Done() <-chan struct{} { return in.proc.Done() }

func (in *localInstance) ExitReason() string { return in.proc.ExitReason() }

// Stop sends SIGTERM to the instance's process group, SIGKILL after the
// template's StopTimeout, and waits until the process is gone.
func (in *localInstance) Stop(ctx context.Context) error {
	stop := in.proc.Stop
	if in.d.Container != "" {
		stop = func(ctx context.Context, _ time.Duration) error { return in.stopContainer(ctx) }
	}
	if err := stop(ctx, in.stopTimeout); err != nil {
		return fmt.Errorf("stop instance %s: %w", in.rec.Name, err)
	}
	return nil
}
