// Package proc starts, adopts and stops the processes shoal owns (HAProxy and
// local instances). Every process gets its own process group so that stopping it
// also stops whatever it forked, and is identified by pid plus start time so a
// reused pid is never mistaken for ours.
package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrGone reports that a process no longer exists, is a zombie, or is another
// process that reused the pid.
var ErrGone = errors.New("process is gone")

// adoptPoll is how often an adopted process (not our child, so not waitable) is
// checked for exit.
const adoptPoll = 200 * time.Millisecond

// Spec describes a process to start.
type Spec struct {
	Argv []string
	// Env is the full environment.
	Env []string
	Dir string
	// Log is a file that stdout and stderr are appended to; "" discards them.
	Log string
}

// Process is a started or adopted process and its process group.
type Process struct {
	pid   int
	start uint64
	done  chan struct{}
	// group is false for a process adopted with AdoptMember: signals go to it
	// alone, not to the process group it is a member of.
	group bool

	mu     sync.Mutex
	reason string
}

// Start runs spec in a new process group and reaps it when it exits.
func Start(spec Spec) (*Process, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("start process: empty argv")
	}
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Env = spec.Env
	cmd.Dir = spec.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if spec.Log != "" {
		f, err := os.OpenFile(spec.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("open log for %s: %w", spec.Argv[0], err)
		}
		// The child keeps its own copy of the descriptor.
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.Argv[0], err)
	}
	p := &Process{pid: cmd.Process.Pid, done: make(chan struct{}), group: true}
	// The start time can only be missing if the child already exited and was
	// reaped, which cannot happen before Wait below.
	p.start, _ = StartTicks(p.pid)
	waitExec(p.pid)
	go func() {
		err := cmd.Wait()
		reason := "exit status 0"
		if err != nil {
			reason = err.Error()
		}
		p.finish(reason)
	}()
	return p, nil
}

// execWait bounds waitExec; exec finishes in microseconds unless the machine
// is badly overloaded.
const execWait = 2 * time.Second

// waitExec waits until the kernel has set up the new program's argument and
// environment area. cmd.Start returns as soon as exec has closed the
// close-on-exec descriptors, which is before that: until then
// /proc/PID/environ and /proc/PID/cmdline read empty, and the marker that
// Adopt and StopStrays rely on would look absent. argv is never empty, so a
// non-empty cmdline means the area is there.
func waitExec(pid int) {
	deadline := time.Now().Add(execWait)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || len(b) > 0 || isZombie(pid) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// Adopt re-attaches to a process started by an earlier shoal, identified by pid
// and start time. Exit is detected by polling because it is not our child.
// Signals go to its process group, which it leads.
func Adopt(pid int, start uint64) (*Process, error) {
	return adopt(pid, start, true)
}

// AdoptMember is Adopt for a process that does not lead its process group
// (say, the child of an instance whose leader is gone): signals go to that
// process alone.
func AdoptMember(pid int, start uint64) (*Process, error) {
	return adopt(pid, start, false)
}

func adopt(pid int, start uint64, group bool) (*Process, error) {
	if pid <= 0 {
		return nil, ErrGone
	}
	got, err := StartTicks(pid)
	if err != nil || got != start || isZombie(pid) {
		return nil, ErrGone
	}
	p := &Process{pid: pid, start: start, done: make(chan struct{}), group: group}
	go func() {
		t := time.NewTicker(adoptPoll)
		defer t.Stop()
		for range t.C {
			if got, err := StartTicks(pid); err != nil || got != start || isZombie(pid) {
				p.finish("exited (adopted process; exit status unknown)")
				return
			}
		}
	}()
	return p, nil
}

func (p *Process) finish(reason string) {
	p.mu.Lock()
	p.reason = reason
	p.mu.Unlock()
	close(p.done)
}

// PID returns the process id, which is also its process group id.
func (p *Process) PID() int { return p.pid }

// StartTicks returns the start time recorded when the process was started or adopted.
func (p *Process) StartTicks() uint64 { return p.start }

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// ExitReason says how the process exited; it is empty until Done is closed.
func (p *Process) ExitReason() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reason
}

// Signal sends sig to the process group (to the process alone if it was
// adopted with AdoptMember).
func (p *Process) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return ErrGone
	default:
	}
	target := p.pid
	if p.group {
		target = -p.pid
	}
	if err := syscall.Kill(target, sig); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return ErrGone
		}
		return fmt.Errorf("signal %v to process (group) %d: %w", sig, p.pid, err)
	}
	return nil
}

// Stop sends SIGTERM to the process group, SIGKILL after grace, and waits for
// the process to exit or ctx to end. SIGCONT follows SIGTERM so that a
// stopped (SIGSTOPped, hung) process can act on it. If the leader has already
// exited, what it left in its group gets the same treatment: nothing of the
// process outlives Stop.
func (p *Process) Stop(ctx context.Context, grace time.Duration) error {
	if err := p.Signal(syscall.SIGTERM); errors.Is(err, ErrGone) {
		<-p.waitOrDeadline(ctx)
		p.stopGroupRemains(ctx, grace)
		return nil
	}
	_ = p.Signal(syscall.SIGCONT)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		_ = p.Signal(syscall.SIGKILL)
		select {
		case <-p.done:
		case <-ctx.Done():
			return fmt.Errorf("stop process %d: %w", p.pid, ctx.Err())
		}
	case <-ctx.Done():
		_ = p.Signal(syscall.SIGKILL)
		return fmt.Errorf("stop process %d: %w", p.pid, ctx.Err())
	}
	p.killGroupRemains(ctx)
	return nil
}

// stopGroupRemains stops what an exited leader left in its process group:
// SIGTERM and SIGCONT, then SIGKILL after grace.
func (p *Process) stopGroupRemains(ctx context.Context, grace time.Duration) {
	if !p.group || !GroupRunning(p.pid) {
		return
	}
	_ = syscall.Kill(-p.pid, syscall.SIGTERM)
	_ = syscall.Kill(-p.pid, syscall.SIGCONT)
	deadline := time.Now().Add(grace)
	for GroupRunning(p.pid) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	p.killGroupRemains(ctx)
}

// killGroupRemains kills what the leader left behind in its process group and
// waits briefly until the group is empty, so Stop returning means nothing of
// this process is still running.
func (p *Process) killGroupRemains(ctx context.Context) {
	if !p.group {
		return
	}
	deadline := time.Now().Add(2 * time.Second)
	for GroupRunning(p.pid) && time.Now().Before(deadline) && ctx.Err() == nil {
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		time.Sleep(10 * time.Millisecond)
	}
}

// GroupRunning reports whether any process of group pgid is still running.
// Zombies do not count: once killed, an orphan may wait for a reaper that is
// not ours (in some containers pid 1 never reaps).
func GroupRunning(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return syscall.Kill(-pgid, 0) == nil
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, err := Pgid(pid); err == nil && g == pgid {
			return true
		}
	}
	return false
}

// Pgid returns the process group of a running process; a zombie counts as gone.
func Pgid(pid int) (int, error) {
	f, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	const pgrpIdx = 5 - 3
	if len(f) <= pgrpIdx || f[0] == "Z" || f[0] == "X" {
		return 0, ErrGone
	}
	g, err := strconv.Atoi(f[pgrpIdx])
	if err != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat process group: %w", pid, err)
	}
	return g, nil
}

func (p *Process) waitOrDeadline(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		select {
		case <-p.done:
		case <-ctx.Done():
		}
	}()
	return ch
}

// StartTicks reads a process's start time (clock ticks since boot) from
// /proc/PID/stat, the value that tells a live process from a reused pid.
func StartTicks(pid int) (uint64, error) {
	fields, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	// Field 22 of stat; fields here start at field 3 (state).
	const startTimeIdx = 22 - 3
	if len(fields) <= startTimeIdx {
		return 0, fmt.Errorf("parse /proc/%d/stat: too few fields", pid)
	}
	v, err := strconv.ParseUint(fields[startTimeIdx], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat start time: %w", pid, err)
	}
	return v, nil
}

// CPUTicks returns utime+stime of a process in clock ticks.
func CPUTicks(pid int) (uint64, error) {
	fields, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	const utimeIdx, stimeIdx = 14 - 3, 15 - 3
	if len(fields) <= stimeIdx {
		return 0, fmt.Errorf("parse /proc/%d/stat: too few fields", pid)
	}
	u, err1 := strconv.ParseUint(fields[utimeIdx], 10, 64)
	s, err2 := strconv.ParseUint(fields[stimeIdx], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat cpu times: %w", pid, err)
	}
	return u + s, nil
}

// statFields returns /proc/PID/stat from field 3 (state) on. The command name
// (field 2) is skipped by its closing parenthesis because it may hold spaces.
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, ErrGone
		}
		return nil, fmt.Errorf("read /proc/%d/stat: %w", pid, err)
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("parse /proc/%d/stat: no command name", pid)
	}
	return strings.Fields(string(b[i+1:])), nil
}

func isZombie(pid int) bool {
	fields, err := statFields(pid)
	return err != nil || len(fields) == 0 || fields[0] == "Z" || fields[0] == "X"
}

// Environ returns the environment a process was started with.
func Environ(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, ErrGone
		}
		return nil, fmt.Errorf("read environment of process %d: %w", pid, err)
	}
	var env []string
	for _, kv := range bytes.Split(b, []byte{0}) {
		if len(kv) > 0 {
			env = append(env, string(kv))
		}
	}
	return env, nil
}
