package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Env is what a benchmark runs in: a scratch directory for configs and logs,
// and the processes it started, each in its own process group, all stopped by
// Close.
type Env struct {
	Log   *slog.Logger
	Work  string // scratch directory; kept when the benchmark fails
	procs []*Proc
	ports map[int]bool
}

// NewEnv creates a scratch directory under $TMPDIR.
func NewEnv(log *slog.Logger) (*Env, error) {
	dir, err := os.MkdirTemp("", "shoal-bench.")
	if err != nil {
		return nil, fmt.Errorf("scratch directory: %w", err)
	}
	return &Env{Log: log, Work: dir, ports: map[int]bool{}}, nil
}

// Proc is a process the benchmark started.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	// Grace is how long Close waits after StopSignal before SIGKILL.
	Grace time.Duration
	// StopSignal asks the process to stop; 0 means SIGTERM.
	StopSignal syscall.Signal
	// Descendants, when set, makes Close also stop every process below this
	// one that is still there after it exits: shoal starts HAProxy and its
	// instances in process groups of their own, and if shoal failed to stop
	// them they must not outlive the benchmark.
	Descendants bool
	Done        chan struct{}
	err         error
}

// Start runs argv in its own process group with output to WORK/NAME.log.
func (e *Env) Start(name string, argv ...string) (*Proc, error) {
	logf, err := os.Create(filepath.Join(e.Work, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, Cmd: cmd, Grace: 5 * time.Second, Done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.Done)
	}()
	e.procs = append(e.procs, p)
	return p, nil
}

// StartBackend runs a demo-backend (the binary at path) called name on a
// free port of 127.0.0.1, with more flags in args, and waits until it
// answers /healthz.
func (e *Env) StartBackend(ctx context.Context, path, name string, args ...string) (*Proc, int, error) {
	port, err := e.FreePort()
	if err != nil {
		return nil, 0, err
	}
	argv := append([]string{path, "--listen", "127.0.0.1:" + strconv.Itoa(port), "--name", name}, args...)
	p, err := e.Start(name, argv...)
	if err != nil {
		return nil, 0, err
	}
	if err := WaitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/healthz", port), p, 10*time.Second); err != nil {
		return nil, 0, fmt.Errorf("demo-backend %s: %w: %s", name, err, e.LogTail(name, 3))
	}
	return p, port, nil
}

// Alive reports whether p is still running.
func (p *Proc) Alive() bool {
	select {
	case <-p.Done:
		return false
	default:
		return true
	}
}

// Pid returns p's process id.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// LogTail returns the last lines of p's log, for error messages.
func (e *Env) LogTail(name string, lines int) string {
	data, _ := os.ReadFile(filepath.Join(e.Work, name+".log"))
	all := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(all[max(0, len(all)-lines):], " | ")
}

// Stop sends p.StopSignal to p's process group, then SIGKILL after p.Grace.
func (p *Proc) Stop() {
	var below []int
	if p.Descendants {
		below = Descendants(p.Pid())
	}
	pgid := p.Pid()
	if p.Alive() {
		sig := p.StopSignal
		if sig == 0 {
			sig = syscall.SIGTERM
		}
		syscall.Kill(-pgid, sig)
		select {
		case <-p.Done:
		case <-time.After(p.Grace):
		}
	}
	syscall.Kill(-pgid, syscall.SIGKILL) // whatever is left in its group
	<-p.Done
	KillAll(below)
}

// KillAll sends SIGTERM to pids still alive, and SIGKILL to those left after 5 s.
func KillAll(pids []int) {
	var left []int
	for _, pid := range pids {
		if syscall.Kill(pid, syscall.SIGTERM) == nil {
			left = append(left, pid)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); len(left) > 0 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		left = slices.DeleteFunc(left, func(pid int) bool { return syscall.Kill(pid, 0) != nil || zombie(pid) })
	}
	for _, pid := range left {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// StatFields returns the fields of /proc/PID/stat after the command name.
func StatFields(pid int) ([]string, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	return strings.Fields(s[i+1:]), nil // [0] is the state, [1] the ppid
}

func zombie(pid int) bool {
	f, err := StatFields(pid)
	return err != nil || f[0] == "Z"
}

// Descendants returns every process below pid, children first.
func Descendants(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := StatFields(p)
		if err != nil || len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		children[ppid] = append(children[ppid], p)
	}
	var out []int
	var walk func(int)
	walk = func(p int) {
		for _, c := range children[p] {
			out = append(out, c)
			walk(c)
		}
	}
	walk(pid)
	return out
}

// CPUTicks returns utime+stime of pid in clock ticks.
func CPUTicks(pid int) (int64, error) {
	f, err := StatFields(pid)
	if err != nil {
		return 0, err
	}
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return u + s, nil
}

// ClockTicks is USER_HZ, 100 on every Linux that Go runs on.
const ClockTicks = 100

// RSSKiB returns pid's resident set size.
func RSSKiB(pid int) (int64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// ProcessCPU samples pid's CPU (% of one core) over d, and its RSS at the end.
func ProcessCPU(ctx context.Context, pid int, d time.Duration) (cpu, rssKiB float64, err error) {
	t0, err := CPUTicks(pid)
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	case <-time.After(d):
	}
	t1, err := CPUTicks(pid)
	if err != nil {
		return 0, 0, err
	}
	rss, err := RSSKiB(pid)
	if err != nil {
		return 0, 0, err
	}
	return 100 * float64(t1-t0) / ClockTicks / time.Since(start).Seconds(), float64(rss), nil
}

// Stop stops p now (it no longer waits for Close).
func (e *Env) Stop(p *Proc) {
	p.Stop()
	e.procs = slices.DeleteFunc(e.procs, func(q *Proc) bool { return q == p })
}

// Close stops every process, latest first, and removes the scratch
// directory unless keep is set (a failed run keeps its logs).
func (e *Env) Close(keep bool) error {
	for i := len(e.procs) - 1; i >= 0; i-- {
		e.procs[i].Stop()
	}
	e.procs = nil
	e.killLeftovers()
	if keep {
		e.Log.Info("logs kept", "dir", e.Work)
		return nil
	}
	return os.RemoveAll(e.Work)
}

// killLeftovers kills every process still running from the scratch
// directory or naming a file in it: what a shoal leaves when it is killed
// or does not come back after a kill -9 (its HAProxy, whose config is
// there, and its instances, stand-ins copied there). A scale run that
// failed at its restart left 100 stand-ins and their HAProxy running.
func (e *Env) killLeftovers() {
	names, err := os.ReadDir("/proc")
	if err != nil {
		e.Log.Warn("leftover processes not looked for", "err", err)
		return
	}
	mark := []byte(e.Work + string(os.PathSeparator))
	for _, n := range names {
		pid, err := strconv.Atoi(n.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", n.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, mark) {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			e.Log.Warn("killed a leftover process", "pid", pid, "cmdline", string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
		}
	}
}

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on and that
// this Env has not handed out before.
func (e *Env) FreePort() (int, error) {
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("free port: %w", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !e.ports[port] {
			e.ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("free port: none found")
}

// WaitHTTP waits until url answers 200, failing early if p exits. An https
// url's certificate is not verified: the benchmarks' are self-signed, and
// only on 127.0.0.1.
func WaitHTTP(ctx context.Context, url string, p *Proc, timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(timeout)
	for {
		resp, err := client.Get(url)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		if p != nil && !p.Alive() {
			return fmt.Errorf("%s exited before %s answered", p.Name, url)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer 200 within %v: %w", url, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// HAProxyPath finds HAProxy in PATH or /usr/sbin, where Debian puts it.
func HAProxyPath() string {
	if p, err := exec.LookPath("haproxy"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/haproxy"); err == nil {
		return "/usr/sbin/haproxy"
	}
	return ""
}

// StartHAProxyConfig checks cfg with haproxy -c, runs HAProxy on it as the
// process name and waits until url answers.
func StartHAProxyConfig(ctx context.Context, env *Env, hap, name, cfg, url string) (*Proc, error) {
	path := filepath.Join(env.Work, name+".cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, hap, "-c", "-q", "-f", path).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("haproxy -c: %v: %s", err, strings.TrimSpace(string(out)))
	}
	p, err := env.Start(name, hap, "-db", "-f", path)
	if err != nil {
		return nil, err
	}
	if err := WaitHTTP(ctx, url, p, 10*time.Second); err != nil {
		return nil, fmt.Errorf("haproxy did not start: %v: %s", err, env.LogTail(name, 3))
	}
	return p, nil
}
