// Package e2e tests shoal as an operator runs it: the real shoal binary, real
// HAProxy, real demo-backend instances and real HTTP traffic on 127.0.0.1.
//
// Tests run side by side (each has its own state directory, ports and
// HAProxy); a step that saturates the CPU or measures the machine runs
// alone (machine_sched_test.go says how they share it).
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/proc"
	"github.com/shoal-lb/shoal/internal/testhost"
	"github.com/shoal-lb/shoal/internal/testport"
)

var binDir string

func TestMain(m *testing.M) {
	// The test binary doubles as an instance with a slow endpoint (see
	// slowBackend) when a test's template asks for it.
	if addr := os.Getenv(slowBackendEnv); addr != "" {
		slowBackend(addr)
		return
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if _, err := exec.LookPath("haproxy"); err != nil {
		if _, err := os.Stat("/usr/sbin/haproxy"); err != nil {
			// Without HAProxy nothing here can run: skip the suite in one
			// line, so `go test ./...` passes on a machine with only Go; CI
			// must have it, so there it fails.
			if os.Getenv("CI") != "" {
				fmt.Fprintln(os.Stderr, "e2e: haproxy is not installed (CI is set): run `make test-deps`")
				return 1
			}
			fmt.Println("e2e: skipped: haproxy is not installed (run `make test-deps` for these tests)")
			return 0
		}
		os.Setenv("PATH", os.Getenv("PATH")+":/usr/sbin")
	}
	dir, err := os.MkdirTemp("", "shoal-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	// loadgen is the client the HA tests run inside a network namespace;
	// standin the instance that costs least (TestScaleHundredInstances).
	for _, pkg := range []string{"cmd/shoal", "cmd/demo-backend", "cmd/loadgen", "internal/testbin/standin"} {
		args := []string{"build", "-o", dir}
		// SHOAL_E2E_RACE=1 runs the suite against a race-detecting shoal.
		if os.Getenv("SHOAL_E2E_RACE") != "" && pkg == "cmd/shoal" {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, "./"+pkg)...)
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, out)
			return 1
		}
	}
	// A test that runs past -timeout panics, and no t.Cleanup runs then:
	// what every live env started would outlive the suite. Sweep it first.
	flag.Parse()
	if d, ok := flag.Lookup("test.timeout").Value.(flag.Getter).Get().(time.Duration); ok && d > 0 {
		w := time.AfterFunc(d-min(d/10, 30*time.Second), sweepLive)
		defer w.Stop()
	}
	// make test runs the packages' tests beside this suite's shared part;
	// no step alone runs until they are done.
	if path := os.Getenv("SHOAL_E2E_LINE_AFTER"); path != "" {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		machine.holdLineWhile(ctx, path, len(slowFirst)+1+notHeld) // aloneLast's but the first
	}
	return m.Run()
}

// live lists the envs whose processes their cleanup has not yet stopped,
// and the test hosts not yet closed.
var live struct {
	sync.Mutex
	envs map[*shoalEnv]bool
	labs map[*testhost.Lab]bool
}

// sweepLive kills, just before the suite's timeout, every process of a
// live env, every process run from binDir (shoal serve itself) and
// everything on the test hosts (closing them).
func sweepLive() {
	live.Lock()
	defer live.Unlock()
	fmt.Fprintf(os.Stderr, "e2e: the suite is about to time out; killing the processes of %d live env(s) and %d lab(s) of test hosts\n", len(live.envs), len(live.labs))
	for l := range live.labs {
		_ = l.Close()
	}
	for e := range live.envs {
		for _, pid := range e.ourProcesses() {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	entries, _ := os.ReadDir("/proc")
	for _, d := range entries {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", d.Name(), "exe")); err == nil && filepath.Dir(exe) == binDir {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// groupSpec is the part of a test config that varies.
type groupSpec struct {
	Name       string
	Min, Max   int
	Plans      string // YAML flow mapping, e.g. "{small: 2, big: 4}"
	CooldownUp string
	CooldownDn string
	Extra      string // more YAML lines for the group, indented 4 spaces
	Command    string // YAML flow list replacing the demo-backend command
	Env        string // YAML flow mapping for template.env
	Template   string // more YAML lines for the template, indented 6 spaces
	Health     string // YAML flow mapping replacing the default health settings
	Drain      string // drain_timeout, default 5s
	// Cloud is a group on a cloud provider (set in Extra): it has no
	// template, since its servers run their image.
	Cloud bool
	// Container is the template's container keys (image, port, args),
	// one flow mapping's inner text, replacing the command.
	Container string
}

// shoalEnv is one shoal core under test with its own state dir and ports.
type shoalEnv struct {
	t       *testing.T
	dir     string
	cfgPath string
	listen  string
	cmd     *exec.Cmd
	log     *syncBuffer
	exited  chan struct{}
	// netns, when set, is the network namespace shoal serve runs in (an
	// HA node of a test lab); its socket is a file, reached from here.
	netns string
	// cgroupName, when set, makes each start run shoal serve, with all it
	// runs (HAProxy, keepalived), in a new cgroup (cgroup), so that a test
	// can kill them as one. A new one each time: this kernel (6.18) kills
	// what is cloned into a group that was killed before.
	cgroupName string
	cgroup     *testhost.Cgroup
	starts     int
}

// freePort returns a port of 127.0.0.1 nothing listens on now, one no other
// caller in this run got, outside the kernel's ephemeral range (testport).
func freePort(t *testing.T) int {
	t.Helper()
	return testport.Free(t)
}

// newEnv writes a config for groups and registers cleanup that leaves no
// process behind, even when the test fails.
func newEnv(t *testing.T, extraTop string, groups ...groupSpec) *shoalEnv {
	t.Helper()
	dir := t.TempDir()
	e := &shoalEnv{t: t, dir: dir, cfgPath: filepath.Join(dir, "shoal.yaml"), listen: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	e.writeConfig(extraTop, groups...)
	live.Lock()
	if live.envs == nil {
		live.envs = map[*shoalEnv]bool{}
	}
	live.envs[e] = true
	live.Unlock()
	t.Cleanup(e.cleanup)
	return e
}

// writeConfig (re)writes the env's config file for groups.
func (e *shoalEnv) writeConfig(extraTop string, groups ...groupSpec) {
	e.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %s\nstate_dir: state\nhaproxy:\n  global: [\"nbthread 1\"]\n%s\ngroups:\n", e.listen, extraTop)
	for _, g := range groups {
		fmt.Fprintf(&b, "  - name: %s\n    min_size: %d\n    max_size: %d\n", g.Name, g.Min, g.Max)
		if g.Plans != "" {
			fmt.Fprintf(&b, "    plans: %s\n", g.Plans)
		}
		up, dn := g.CooldownUp, g.CooldownDn
		if up == "" {
			up = "0s"
		}
		if dn == "" {
			dn = "0s"
		}
		drain := g.Drain
		if drain == "" {
			drain = "5s"
		}
		fmt.Fprintf(&b, "    cooldown: {up: %s, down: %s}\n    drain_timeout: %s\n", up, dn, drain)
		health := g.Health
		if health == "" {
			health = "{path: /healthz, interval: 300ms, rise: 2, fall: 2, timeout: 1s, grace: 15s}"
		}
		fmt.Fprintf(&b, "    health: %s\n", health)
		if g.Container != "" {
			fmt.Fprintf(&b, "    template: {%s, stop_timeout: 3s}\n", g.Container)
		} else if !g.Cloud {
			command := g.Command
			if command == "" {
				command = fmt.Sprintf(`[%q, "--listen", "127.0.0.1:{{.Port}}", "--name", "{{.Name}}"]`, filepath.Join(binDir, "demo-backend"))
			}
			fmt.Fprintf(&b, "    template:\n      command: %s\n      stop_timeout: 3s\n", command)
			if g.Env != "" {
				fmt.Fprintf(&b, "      env: %s\n", g.Env)
			}
			b.WriteString(g.Template)
		}
		b.WriteString(g.Extra)
	}
	if err := os.WriteFile(e.cfgPath, []byte(b.String()), 0o600); err != nil {
		e.t.Fatal(err)
	}
}

func (e *shoalEnv) stateDir() string { return filepath.Join(e.dir, "state") }

// start runs `shoal serve` and waits until its socket answers.
func (e *shoalEnv) start() {
	e.t.Helper()
	e.log = &syncBuffer{}
	e.cmd = exec.Command(filepath.Join(binDir, "shoal"), "serve", "-c", e.cfgPath)
	if e.netns != "" {
		// ip netns exec execs shoal: the pid stays shoal's own.
		e.cmd = exec.Command("ip", "netns", "exec", e.netns, filepath.Join(binDir, "shoal"), "serve", "-c", e.cfgPath)
	}
	e.cmd.Stdout, e.cmd.Stderr = e.log, e.log
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if e.cgroupName != "" {
		e.starts++
		cg, err := testhost.NewCgroup(fmt.Sprintf("%s-%d", e.cgroupName, e.starts))
		if errors.Is(err, testhost.ErrUnsupported) && os.Getenv("CI") == "" {
			e.t.Skip(err)
		}
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(func() { _ = cg.Close() })
		e.cgroup = cg
		e.cmd.SysProcAttr.UseCgroupFD, e.cmd.SysProcAttr.CgroupFD = true, cg.FD()
	}
	if err := e.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.exited = make(chan struct{})
	go func() { _ = e.cmd.Wait(); close(e.exited) }()
	c := e.client()
	e.eventually("core answers on its socket", 20*time.Second, func() error {
		select {
		case <-e.exited:
			e.t.Fatalf("shoal serve exited early:\n%s", e.log)
		default:
		}
		_, err := c.Status(context.Background())
		return err
	})
}

// stop sends SIGINT (stop everything: HAProxy and the instances too) and
// waits for a clean exit.
func (e *shoalEnv) stop() { e.signalStop(syscall.SIGINT) }

// signalStop sends sig and waits for a clean exit. SIGTERM leaves HAProxy
// and the instances running (shutdown: keep, the default).
func (e *shoalEnv) signalStop(sig syscall.Signal) {
	e.t.Helper()
	_ = e.cmd.Process.Signal(sig)
	select {
	case <-e.exited:
	case <-time.After(60 * time.Second):
		e.t.Fatalf("shoal did not stop within 60s after %v:\n%s", sig, e.log)
	}
	if code := e.cmd.ProcessState.ExitCode(); code != 0 {
		e.t.Fatalf("shoal exited %d after %v, want 0:\n%s", code, sig, e.log)
	}
}

// kill9 kills the core only, leaving HAProxy and instances running.
func (e *shoalEnv) kill9() {
	_ = e.cmd.Process.Kill()
	<-e.exited
}

func (e *shoalEnv) cleanup() {
	if e.cmd != nil && e.cmd.ProcessState == nil {
		_ = e.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-e.exited:
		case <-time.After(30 * time.Second):
			_ = e.cmd.Process.Kill()
		}
	}
	// Whatever is left (after a failure or a kill -9) goes too.
	for _, pid := range e.ourProcesses() {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	live.Lock()
	delete(live.envs, e)
	live.Unlock()
	if e.t.Failed() && e.log != nil {
		e.t.Logf("shoal log:\n%s", e.log)
	}
	// An HA node's keepalived says when and why the VIP moved.
	if b, err := os.ReadFile(filepath.Join(e.stateDir(), "keepalived", "keepalived.log")); e.t.Failed() && err == nil {
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		e.t.Logf("keepalived log (last %d lines):\n%s", min(len(lines), 200), strings.Join(lines[max(0, len(lines)-200):], "\n"))
	}
}

// ourProcesses lists live processes started for this env's state dir: the
// instances (marked in their environment) and the HAProxy master.
func (e *shoalEnv) ourProcesses() []int {
	var pids []int
	marker := "SHOAL_STATE_DIR=" + e.stateDir()
	entries, _ := os.ReadDir("/proc")
	for _, d := range entries {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if env, err := proc.Environ(pid); err == nil && slices.Contains(env, marker) && alive(pid) {
			pids = append(pids, pid)
		}
	}
	// The recorded master, if it is still that HAProxy: pids wrap here
	// (pid_max 32768, tens of thousands of processes a run), and killing a
	// dead master's reused pid killed another test's `shoal scale`.
	if pid := e.haproxyPID(); pid > 0 && alive(pid) {
		if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && bytes.Contains(cmd, []byte(e.stateDir())) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func (e *shoalEnv) haproxyPID() int {
	b, err := os.ReadFile(filepath.Join(e.stateDir(), "haproxy", "master.json"))
	if err != nil {
		return 0
	}
	var m struct {
		PID int `json:"pid"`
	}
	_ = json.Unmarshal(b, &m)
	return m.PID
}

// alive is true for a running (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] != 'Z' && s[i+2] != 'X'
}

func (e *shoalEnv) client() *api.Client {
	return api.NewClient(filepath.Join(e.stateDir(), "shoal.sock"))
}

// cli runs the shoal CLI and returns its stdout, stderr and exit code.
func (e *shoalEnv) cli(args ...string) (string, string, int) {
	e.t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "shoal"), append(args, "-c", e.cfgPath)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// status reads GET /v1/status on the admin socket. (Tests poll it: through
// the CLI, a new process each time, 37 % of a core went to shoal CLIs
// starting while eight tests ran. TestHealthBodyCheck runs the CLI.s.)
func (e *shoalEnv) status() api.StatusResponse {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := e.client().Status(ctx)
	if err != nil {
		e.t.Fatalf("GET /v1/status: %v", err)
	}
	return s
}

// haproxyServers reads a backend's servers from HAProxy's own admin socket:
// name → address.
func (e *shoalEnv) haproxyServers(backend string) map[string]string {
	e.t.Helper()
	c := haproxy.Client{Socket: filepath.Join(e.stateDir(), "haproxy", "admin.sock")}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stats, err := c.Stats(ctx, backend)
	if err != nil {
		e.t.Fatalf("read HAProxy stats: %v", err)
	}
	out := map[string]string{}
	for _, s := range stats {
		out[s.Name] = s.Addr
	}
	return out
}

// checkInSync asserts that HAProxy's server list equals shoal's status.
func (e *shoalEnv) checkInSync(groupName string) {
	e.t.Helper()
	want := map[string]string{}
	for _, g := range e.status().Groups {
		if g.Name == groupName {
			for _, in := range g.Instances {
				want[in.Name] = in.Addr
			}
		}
	}
	got := e.haproxyServers(groupName)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		e.t.Fatalf("HAProxy servers %v != shoal status %v", got, want)
	}
}

// waitInService waits until groupName has n instances, all in service.
func (e *shoalEnv) waitInService(groupName string, n int) {
	e.t.Helper()
	e.eventually(fmt.Sprintf("%s has %d instances in service", groupName, n), 45*time.Second, func() error {
		s, err := e.client().Group(context.Background(), groupName)
		if err != nil {
			return err
		}
		if len(s.Instances) != n || s.InService != n {
			return fmt.Errorf("%d instances, %d in service", len(s.Instances), s.InService)
		}
		return nil
	})
}

func (e *shoalEnv) eventually(what string, timeout time.Duration, f func() error) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.t.Fatalf("timed out waiting until %s: %v", what, err)
}

// osStat returns a file's permission bits.
func osStat(path string) (os.FileMode, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Mode().Perm(), nil
}

// syncBuffer collects shoal's output while tests read it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
