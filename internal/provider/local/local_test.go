package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/instance"
	"github.com/shoal-lb/shoal/internal/portrange"
	"github.com/shoal-lb/shoal/internal/proc"
	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/testport"
)

// helperEnv makes the test binary act as an instance (see runHelper) instead
// of running the tests. Its value is the mode.
const helperEnv = "SHOAL_LOCAL_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		runHelper(mode, os.Args[1:])
		return
	}
	os.Exit(m.Run())
}

// helperInfo is what a helper instance reports over HTTP.
type helperInfo struct {
	Args []string
	Env  map[string]string
	Dir  string
}

// runHelper serves helperInfo on 127.0.0.1:args[0] until SIGTERM. Modes:
// "serve"; "ignore-term", which survives SIGTERM; "exit1", which exits at once;
// "chatty", which also writes lines to stdout all the time; "counter", which
// writes numbered lines.
func runHelper(mode string, args []string) {
	fmt.Printf("helper %s starting: %q\n", mode, args)
	fmt.Fprintln(os.Stderr, "helper stderr line")
	switch mode {
	case "exit1":
		os.Exit(1)
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
	}
	if len(args) < 1 {
		fmt.Fprintln(os.Stderr, "helper: no port")
		os.Exit(2)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", args[0]))
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	dir, _ := os.Getwd()
	info := helperInfo{Args: os.Args, Dir: dir, Env: map[string]string{}}
	for _, k := range []string{envStateDir, envInstance, "HELPER_PORT", "HELPER_NAME"} {
		info.Env[k] = os.Getenv(k)
	}
	// Listening is said, and SIGTERM handled, before the first answer:
	// a test that got one reads the line and may stop the helper at once.
	fmt.Println("helper listening")
	term := make(chan os.Signal, 1)
	if mode != "ignore-term" {
		signal.Notify(term, syscall.SIGTERM)
	}
	go http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		json.NewEncoder(w).Encode(info)
	}))

	if mode == "ignore-term" {
		select {} // until SIGKILL
	}
	if mode == "counter" {
		// Writes "line N", N from 1, every 2 ms until stopped.
		go func() {
			for i := 1; ; i++ {
				fmt.Printf("line %d\n", i)
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	if mode == "chatty" {
		// Writes about 100 KB/s to its log until stopped.
		line := strings.Repeat("x", 99)
		go func() {
			for {
				fmt.Println(line)
				time.Sleep(time.Millisecond)
			}
		}()
	}
	<-term
	os.Exit(0)
}

// helperTemplate runs this test binary as an instance in mode.
func helperTemplate(t *testing.T, mode string) config.Template {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := config.NewTemplate(
		[]string{exe, "{{.Port}}", "name={{.Name}}", "group={{.Group}}", "index={{.Index}}"},
		map[string]string{helperEnv: mode, "HELPER_PORT": "{{.Port}}", "HELPER_NAME": "{{.Name}}"})
	if err != nil {
		t.Fatal(err)
	}
	tmpl.Dir = t.TempDir()
	tmpl.StopTimeout = 5 * time.Second
	return tmpl
}

// start starts an instance and makes sure it is gone when the test ends.
func start(t *testing.T, p *Provider, name string, tmpl config.Template) provider.Instance {
	t.Helper()
	inst, err := p.Start(context.Background(), provider.Spec{Group: "web", Name: name, Index: 3, Template: tmpl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(t, inst) })
	return inst
}

// startServing starts an instance and waits until it answers as itself.
func startServing(t *testing.T, p *Provider, name string, tmpl config.Template) provider.Instance {
	t.Helper()
	inst := start(t, p, name, tmpl)
	if got := get(t, addrPort(inst.Record().Addr)).Env["HELPER_NAME"]; got != name {
		t.Fatalf("port of %s answered as %q", name, got)
	}
	return inst
}

func stop(t *testing.T, inst provider.Instance) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := inst.Stop(ctx); err != nil {
		t.Errorf("stop %s: %v", inst.Record().Name, err)
	}
}

// get fetches the helper's info, retrying until it serves.
func get(t *testing.T, port int) helperInfo {
	t.Helper()
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	var lastErr error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(url)
		if err != nil {
			lastErr = err
			continue
		}
		var info helperInfo
		err = json.NewDecoder(resp.Body).Decode(&info)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("decode helper info: %v", err)
		}
		return info
	}
	t.Fatalf("instance on port %d never served: %v", port, lastErr)
	return helperInfo{}
}

func waitDone(t *testing.T, inst provider.Instance) {
	t.Helper()
	select {
	case <-inst.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("instance %s (pid %d) did not exit", inst.Record().Name, inst.PID())
	}
}

// running reports whether pid is still the process that started at start.
func running(pid int, start uint64) bool {
	got, err := proc.StartTicks(pid)
	return err == nil && got == start
}

func TestStartServesLogsAndStops(t *testing.T) {
	t.Parallel()
	stateDir := t.TempDir()
	p := New(stateDir, nil)
	tmpl := helperTemplate(t, "serve")
	inst := start(t, p, "web-003", tmpl)

	rec := inst.Record()
	d := mustDecode(t, rec)
	if rec.Group != "web" || rec.Name != "web-003" || rec.Index != 3 || rec.Host != "127.0.0.1" ||
		addrPort(rec.Addr) <= 0 || rec.Addr != "127.0.0.1:"+strconv.Itoa(addrPort(rec.Addr)) ||
		d.PID <= 0 || d.PID != inst.PID() || d.Marker != "web-003" || rec.StartedAt.IsZero() ||
		rec.ID != fmt.Sprintf("%d-%d", d.PID, d.PIDStart) {
		t.Errorf("record = %+v, data %+v", rec, d)
	}
	if start, err := proc.StartTicks(d.PID); err != nil || start != d.PIDStart {
		t.Errorf("PIDStart = %d, /proc says %d (%v)", d.PIDStart, start, err)
	}

	info := get(t, addrPort(rec.Addr))
	port := strconv.Itoa(addrPort(rec.Addr))
	wantArgs := []string{port, "name=web-003", "group=web", "index=3"}
	if !slices.Equal(info.Args[1:], wantArgs) {
		t.Errorf("argv = %q, want [exe %q]", info.Args, wantArgs)
	}
	wantEnv := map[string]string{envStateDir: stateDir, envInstance: "web-003", "HELPER_PORT": port, "HELPER_NAME": "web-003"}
	for k, v := range wantEnv {
		if info.Env[k] != v {
			t.Errorf("env %s = %q, want %q", k, info.Env[k], v)
		}
	}
	if info.Dir != tmpl.Dir {
		t.Errorf("working directory = %q, want %q", info.Dir, tmpl.Dir)
	}

	logDir := filepath.Join(stateDir, "logs")
	fi, err := os.Stat(logDir)
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode().Perm(); m != 0o700 {
		t.Errorf("log directory mode = %o, want 700", m)
	}
	b, err := os.ReadFile(filepath.Join(logDir, "web-003.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "helper listening") || !strings.Contains(string(b), "helper stderr line") {
		t.Errorf("log = %q, want stdout and stderr of the instance", b)
	}

	stop(t, inst)
	waitDone(t, inst)
	if running(d.PID, d.PIDStart) {
		t.Errorf("pid %d still running after Stop", d.PID)
	}
	if r := inst.ExitReason(); r != "exit status 0" {
		t.Errorf("exit reason = %q, want exit status 0", r)
	}
}

func TestStartRelativeCommandUsesDir(t *testing.T) {
	t.Parallel()
	tmpl := helperTemplate(t, "serve")
	if err := os.Mkdir(filepath.Join(tmpl.Dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(tmpl.Command[0], filepath.Join(tmpl.Dir, "bin", "x")); err != nil {
		t.Fatal(err)
	}
	cmd := slices.Clone(tmpl.Command)
	cmd[0] = "./bin/x"
	rel, err := config.NewTemplate(cmd, tmpl.Env)
	if err != nil {
		t.Fatal(err)
	}
	rel.Dir, rel.StopTimeout = tmpl.Dir, tmpl.StopTimeout

	inst := start(t, New(t.TempDir(), nil), "web-001", rel)
	info := get(t, addrPort(inst.Record().Addr))
	if want := filepath.Join(tmpl.Dir, "bin", "x"); info.Args[0] != want {
		t.Errorf("argv[0] = %q, want %q", info.Args[0], want)
	}
	if info.Dir != tmpl.Dir {
		t.Errorf("working directory = %q, want %q", info.Dir, tmpl.Dir)
	}
}

func TestStartErrors(t *testing.T) {
	t.Parallel()
	p := New(t.TempDir(), nil)
	tmpl := helperTemplate(t, "serve")

	missing, err := config.NewTemplate([]string{"./no-such-program"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	missing.Dir = t.TempDir()
	for name, spec := range map[string]provider.Spec{
		"missing command": {Group: "web", Name: "web-001", Template: missing},
		"bad name":        {Group: "web", Name: "../web-001", Template: tmpl},
		"empty name":      {Group: "web", Template: tmpl},
	} {
		if inst, err := p.Start(context.Background(), spec); err == nil {
			stop(t, inst)
			t.Errorf("%s: Start succeeded", name)
		}
	}
	if len(p.ports) != 0 {
		t.Errorf("ports still reserved after failed starts: %v", p.ports)
	}
}

func TestStartQuickExit(t *testing.T) {
	t.Parallel()
	inst := start(t, New(t.TempDir(), nil), "web-001", helperTemplate(t, "exit1"))
	waitDone(t, inst)
	if r := inst.ExitReason(); r != "exit status 1" {
		t.Errorf("exit reason = %q, want exit status 1", r)
	}
}

func TestStartDistinctPorts(t *testing.T) {
	t.Parallel()
	p := New(t.TempDir(), nil)
	tmpl := helperTemplate(t, "serve")
	seen := map[int]bool{}
	for i := range 5 {
		port := addrPort(start(t, p, fmt.Sprintf("web-%03d", i), tmpl).Record().Addr)
		if seen[port] {
			t.Errorf("port %d handed out twice", port)
		}
		seen[port] = true
	}
}

func TestStopKillsWhenTERMIgnored(t *testing.T) {
	t.Parallel()
	tmpl := helperTemplate(t, "ignore-term")
	tmpl.StopTimeout = 300 * time.Millisecond
	inst := start(t, New(t.TempDir(), nil), "web-001", tmpl)
	get(t, addrPort(inst.Record().Addr)) // SIGTERM is ignored once it serves

	began := time.Now()
	stop(t, inst)
	if d := time.Since(began); d < tmpl.StopTimeout {
		t.Errorf("Stop returned after %v, before StopTimeout", d)
	}
	waitDone(t, inst)
	if r := inst.ExitReason(); !strings.Contains(r, "killed") {
		t.Errorf("exit reason = %q, want killed", r)
	}
}

func TestAdopt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stateDir := t.TempDir()
	tmpl := helperTemplate(t, "serve")
	inst := start(t, New(stateDir, nil), "web-001", tmpl)
	rec := inst.Record()
	get(t, addrPort(rec.Addr))

	// A second Provider for the same state dir stands in for a restarted shoal.
	p2 := New(stateDir, nil)
	adopted, err := p2.Adopt(ctx, rec, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(adopted.Record(), rec) || adopted.PID() != inst.PID() {
		t.Errorf("adopted record = %+v, want %+v", adopted.Record(), rec)
	}
	if _, ok := p2.ports[addrPort(rec.Addr)]; !ok {
		t.Errorf("adopted port %d not tracked", addrPort(rec.Addr))
	}

	self, err := proc.StartTicks(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	wrongName, wrongMarker := rec, withData(t, rec, func(d *procData) { d.Marker = "web-002" })
	wrongName.Name = "web-002"
	reused := withData(t, rec, func(d *procData) { d.PIDStart++ })
	notMarked := withData(t, rec, func(d *procData) { d.PID, d.PIDStart = os.Getpid(), self })
	zeroPID := withData(t, rec, func(d *procData) { d.PID = 0 })
	noData, otherData := rec, rec
	noData.Data = nil
	otherData.Data = []byte(`"i-0123456789abcdef0"`)
	for name, c := range map[string]struct {
		p   *Provider
		rec instance.Record
	}{
		"other marker":    {p2, wrongMarker},
		"no data":         {p2, noData},
		"other data":      {p2, otherData},
		"other state dir": {New(t.TempDir(), nil), rec},
		"other name":      {p2, wrongName},
		"reused pid":      {p2, reused},
		"unmarked":        {p2, notMarked},
		"zero pid":        {p2, zeroPID},
	} {
		if got, err := c.p.Adopt(ctx, c.rec, tmpl); !errors.Is(err, provider.ErrGone) {
			if got != nil {
				stop(t, got)
			}
			t.Errorf("%s: Adopt error = %v, want ErrGone", name, err)
		}
	}

	stop(t, adopted)
	waitDone(t, inst)
	waitDone(t, adopted)
	if _, err := p2.Adopt(ctx, rec, tmpl); !errors.Is(err, provider.ErrGone) {
		t.Errorf("Adopt of an exited instance: %v, want ErrGone", err)
	}
}

// startUnmanaged runs the helper outside any Provider, in the test's own
// process group unless ownGroup, and kills it when the test ends.
func startUnmanaged(t *testing.T, env []string, ownGroup bool) (port int) {
	t.Helper()
	port = testport.Free(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, strconv.Itoa(port))
	cmd.Env = append(os.Environ(), append(env, helperEnv+"=serve")...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: ownGroup}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	get(t, port)
	return port
}

// serving reports whether the helper on port answers right now.
func serving(port int) bool {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}

func TestStopStrays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stateDir := t.TempDir()
	tmpl := helperTemplate(t, "serve")
	p1 := New(stateDir, nil)
	// Each serves before the next starts: two Providers hand out ports
	// independently, and a port asked of the kernel before the last instance
	// bound its own could be the same one.
	kept := startServing(t, p1, "web-001", tmpl)
	stray := startServing(t, p1, "web-002", tmpl)
	other := startServing(t, New(t.TempDir(), nil), "web-003", tmpl)
	// Marked, but in the test binary's process group: stopping that group
	// would kill the test itself.
	inForeignGroup := startUnmanaged(t, []string{envStateDir + "=" + stateDir, envInstance + "=web-004"}, false)
	unmarked := startUnmanaged(t, nil, true)

	// Instances the Provider itself runs are never strays.
	if got, err := p1.StopStrays(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("StopStrays of the starting Provider = %+v, %v; want none", got, err)
	}

	stopped, err := New(stateDir, nil).StopStrays(ctx, []instance.Record{kept.Record()})
	if err != nil {
		t.Fatal(err)
	}
	sd := mustDecode(t, stray.Record())
	want := []instance.Record{procData{PID: sd.PID, PIDStart: sd.PIDStart, Marker: "web-002"}.record("web-002", 0)}
	if !reflect.DeepEqual(stopped, want) {
		t.Errorf("StopStrays = %+v, want %+v", stopped, want)
	}
	waitDone(t, stray)

	for _, in := range []provider.Instance{kept, other} {
		if !serving(addrPort(in.Record().Addr)) {
			t.Errorf("%s was stopped", in.Record().Name)
		}
	}
	for name, port := range map[string]int{"marked process in a foreign group": inForeignGroup, "unmarked process": unmarked} {
		if !serving(port) {
			t.Errorf("%s was stopped", name)
		}
	}

	again, err := New(stateDir, nil).StopStrays(ctx, []instance.Record{kept.Record()})
	if err != nil || len(again) != 0 {
		t.Errorf("second StopStrays = %+v, %v; want none", again, err)
	}
}

// forkingTemplate is an instance whose leader forks a long sleeper and then
// exits: the shape of a daemon that leaves children behind when it dies.
func forkingTemplate(t *testing.T) config.Template {
	t.Helper()
	tmpl, err := config.NewTemplate([]string{"/bin/sh", "-c", "sleep 1000 & exec sleep 0.3"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.Dir = t.TempDir()
	tmpl.StopTimeout = 2 * time.Second
	return tmpl
}

func startForking(t *testing.T, p *Provider, name string) provider.Instance {
	t.Helper()
	inst, err := p.Start(context.Background(), provider.Spec{Group: "web", Name: name, Index: 1, Template: forkingTemplate(t)})
	if err != nil {
		t.Fatal(err)
	}
	pgid := inst.PID()
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
	waitDone(t, inst)
	if !proc.GroupRunning(pgid) {
		t.Fatal("the instance's child is not running; the test proves nothing")
	}
	return inst
}

func TestStopAfterLeaderExitStopsChildren(t *testing.T) {
	t.Parallel()
	inst := startForking(t, New(t.TempDir(), nil), "web-001")
	stop(t, inst)
	if proc.GroupRunning(inst.PID()) {
		t.Fatal("Stop of an exited instance left its children running")
	}
}

func TestStopStraysFindsOrphansOfADeadLeader(t *testing.T) {
	t.Parallel()
	stateDir := t.TempDir()
	inst := startForking(t, New(stateDir, nil), "web-001")

	// A marked process run by hand inside someone's live group (here a shell
	// that is not marked) is not an instance: it and its group are left alone.
	shell := exec.Command("/bin/sh", "-c", `env SHOAL_STATE_DIR="$0" SHOAL_INSTANCE=web-009 sleep 1000 & wait`, stateDir)
	shell.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := shell.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-shell.Process.Pid, syscall.SIGKILL)
		_ = shell.Wait()
	})
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if markedMember(stateDir, shell.Process.Pid) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hand-run marked process did not show up")
		}
	}

	stopped, err := New(stateDir, nil).StopStrays(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(stopped) != 1 || stopped[0].Name != "web-001" || mustDecode(t, stopped[0]).PID == inst.PID() {
		t.Fatalf("StopStrays = %+v, want the orphaned child of web-001 only", stopped)
	}
	if proc.GroupRunning(inst.PID()) {
		t.Fatal("the orphaned child still runs")
	}
	if !markedMember(stateDir, shell.Process.Pid) {
		t.Fatal("the marked process in a foreign live group was stopped")
	}
}

// markedMember reports whether group pgid has a running member marked with stateDir.
func markedMember(stateDir string, pgid int) bool {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pgid {
			continue
		}
		if g, err := proc.Pgid(pid); err != nil || g != pgid {
			continue
		}
		env, _ := proc.Environ(pid)
		if slices.Contains(env, envStateDir+"="+stateDir) {
			return true
		}
	}
	return false
}

func mustDecode(t *testing.T, rec instance.Record) procData {
	t.Helper()
	d, err := decode(rec.Data)
	if err != nil {
		t.Fatalf("record %+v: %v", rec, err)
	}
	return d
}

// withData returns rec with its provider data changed by edit.
func withData(t *testing.T, rec instance.Record, edit func(*procData)) instance.Record {
	t.Helper()
	d := mustDecode(t, rec)
	edit(&d)
	rec.Data = d.record(rec.Name, 0).Data
	return rec
}

// TestPortsBelowTheEphemeralRange: instances' ports come from 20000 up to
// the kernel's ephemeral range, never twice while reserved, and a port
// something already listens on is passed over.
func TestPortsBelowTheEphemeralRange(t *testing.T) {
	to := min(portsTo, portrange.EphemeralStart())
	if to-portsFrom < 1000 {
		t.Skipf("the ephemeral range starts at %d: no room below it", to)
	}
	p := New(t.TempDir(), nil)
	first, err := p.reservePort()
	if err != nil {
		t.Fatal(err)
	}
	// Something else listens on the next one.
	next := first + 1
	if next >= to {
		next = portsFrom
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(next)))
	if err != nil {
		t.Skipf("port %d is taken already: %v", next, err)
	}
	defer l.Close()
	second, err := p.reservePort()
	if err != nil {
		t.Fatal(err)
	}
	for _, port := range []int{first, second} {
		if port < portsFrom || port >= to {
			t.Errorf("port %d, want one in %d-%d", port, portsFrom, to-1)
		}
	}
	if second == first || second == next {
		t.Errorf("ports %d then %d with %d listened on: want another", first, second, next)
	}
}
