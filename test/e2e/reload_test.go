package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/jobrun"
	"github.com/shoal-lb/shoal/internal/loadgen"
	"github.com/shoal-lb/shoal/internal/proc"
	"github.com/shoal-lb/shoal/internal/testcert"
)

// worker returns the pid of HAProxy's current worker, from its admin socket.
func (e *shoalEnv) worker() int {
	e.t.Helper()
	c := haproxy.Client{Socket: filepath.Join(e.stateDir(), "haproxy", "admin.sock")}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := c.Exec(ctx, "show info")
	if err != nil {
		e.t.Fatalf("show info: %v", err)
	}
	for line := range strings.Lines(out) {
		if v, ok := strings.CutPrefix(line, "Pid: "); ok {
			var pid int
			fmt.Sscan(v, &pid)
			return pid
		}
	}
	e.t.Fatalf("show info has no Pid: %q", out)
	return 0
}

// reload runs `shoal reload` and fails the test unless it exits 0.
func (e *shoalEnv) reload() string {
	e.t.Helper()
	out, stderr, code := e.cli("reload")
	if code != 0 {
		e.t.Fatalf("shoal reload exited %d:\n%s%s", code, out, stderr)
	}
	return out
}

func checkNoFailures(t *testing.T, what string, res loadgen.Result) {
	t.Helper()
	t.Logf("%s: %d requests, %d failures, spread %v", what, res.Requests, res.Failures, res.ByInstance)
	if res.Failures != 0 {
		t.Fatalf("%s: %d of %d requests failed: %v", what, res.Failures, res.Requests, res.FailureSamples)
	}
	if res.Requests < 50 {
		t.Fatalf("%s: only %d requests went through", what, res.Requests)
	}
}

// TestReloadInvalidConfigKeepsOld: a reload of a broken file changes
// nothing: exit status 2 with every error at its position, the old config
// keeps serving (same HAProxy worker) and no request fails.
func TestReloadInvalidConfigKeepsOld(t *testing.T) {
	parallel(t)
	e := newEnv(t, "", web)
	e.start()
	e.waitInService("web", 2)
	worker := e.worker()
	stop := load(t, e)
	time.Sleep(300 * time.Millisecond)

	bad := web
	bad.Min, bad.Max = 4, 3 // min above max
	e.writeConfig("", bad)
	out, stderr, code := e.cli("reload")
	if code != 2 {
		t.Fatalf("shoal reload of an invalid config exited %d, want 2:\n%s%s", code, out, stderr)
	}
	if !strings.Contains(stderr, "shoal.yaml:") || !strings.Contains(stderr, "max_size: must be >= min_size") {
		t.Fatalf("shoal reload does not name the error's position and field:\n%s", stderr)
	}
	// Asked through the socket alone, the core itself reads the file and
	// answers with the same errors.
	_, stderr, code = e.cli("reload", "--socket", filepath.Join(e.stateDir(), "shoal.sock"))
	if code != 2 || !strings.Contains(stderr, "shoal.yaml:9:") || !strings.Contains(stderr, "max_size: must be >= min_size") {
		t.Fatalf("shoal reload --socket of an invalid config: exit %d, want 2 with the error's position:\n%s", code, stderr)
	}
	// SIGHUP reports the same in the log and changes nothing either.
	_ = e.cmd.Process.Signal(syscall.SIGHUP)
	e.eventually("the failed SIGHUP reload is logged", 10*time.Second, func() error {
		if !strings.Contains(e.log.String(), "config reload failed") {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond)
	checkNoFailures(t, "invalid reload", stop())
	if w := e.worker(); w != worker {
		t.Fatalf("HAProxy's worker changed %d → %d on an invalid config", worker, w)
	}
	s, err := e.client().Group(context.Background(), "web")
	if err != nil {
		t.Fatal(err)
	}
	if s.MinSize != 2 || s.MaxSize != 5 || s.InService != 2 {
		t.Fatalf("the running config changed: min %d max %d, %d in service", s.MinSize, s.MaxSize, s.InService)
	}

	// Non-reloadable settings are refused with what to do instead.
	e.writeConfig("admin: {socket: other.sock}\n", web)
	_, stderr, code = e.cli("reload", "--socket", filepath.Join(e.stateDir(), "shoal.sock"))
	if code != 2 || !strings.Contains(stderr, "admin changed") || !strings.Contains(stderr, "--keep-running") {
		t.Fatalf("a changed admin socket: exit %d, want 2 with the reason:\n%s", code, stderr)
	}
}

// TestCLIReachesCoreWithBrokenConfig: after a bad edit of shoal.yaml under a
// running core, the commands that talk to the core still find its socket in
// the file: status and jobs answer (the file's errors are a warning), reload
// reaches the core, which refuses the file with its errors and keeps the
// running config, and stop stops it. Both an invalid value and a YAML syntax
// error below state_dir.
func TestCLIReachesCoreWithBrokenConfig(t *testing.T) {
	parallel(t) // waits for scale jobs, no load
	e := newEnv(t, "", web)
	e.start()
	e.waitInService("web", 2)
	good, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	bad := web
	bad.Min, bad.Max = 4, 3
	e.writeConfig("", bad)
	valueError, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"invalid value", string(valueError), "shoal.yaml:9:15: groups[0].max_size: must be >= min_size"},
		{"YAML syntax error", string(good) + "  - name: api\n   min_size: 1\n", "invalid YAML"},
	} {
		if err := os.WriteFile(e.cfgPath, []byte(tc.doc), 0o600); err != nil {
			t.Fatal(err)
		}
		out, stderr, code := e.cli("status")
		if code != 0 || !strings.Contains(out, "group web") || !strings.Contains(stderr, "warning") || !strings.Contains(stderr, tc.want) {
			t.Fatalf("%s: shoal status exited %d, want 0 with the group and the file's errors as a warning:\n%s%s", tc.name, code, out, stderr)
		}
		out, stderr, code = e.cli("jobs")
		if code != 0 || !strings.Contains(stderr, tc.want) {
			t.Fatalf("%s: shoal jobs exited %d, want 0 with a warning:\n%s%s", tc.name, code, out, stderr)
		}
		// The refusal is the core's: its message, and each error once.
		out, stderr, code = e.cli("reload")
		if code != 2 || !strings.Contains(stderr, "the running config stays in force") || strings.Count(stderr, tc.want) != 1 {
			t.Fatalf("%s: shoal reload exited %d, want 2 with the core's refusal and the error once:\n%s%s", tc.name, code, out, stderr)
		}
		s, err := e.client().Group(context.Background(), "web")
		if err != nil {
			t.Fatal(err)
		}
		if s.MinSize != 2 || s.MaxSize != 5 || s.InService != 2 {
			t.Fatalf("%s: the running config changed: min %d max %d, %d in service", tc.name, s.MinSize, s.MaxSize, s.InService)
		}
	}
	out, stderr, code := e.cli("stop")
	if code != 0 || !strings.Contains(out, "shoal stopped") {
		t.Fatalf("shoal stop with a broken config exited %d:\n%s%s", code, out, stderr)
	}
	select {
	case <-e.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("shoal serve still runs after shoal stop returned")
	}
	if left := e.ourProcesses(); len(left) > 0 {
		t.Fatalf("processes left after shoal stop: %v", left)
	}
}

// TestReloadAddsGroupAndRoute adds a group routed by path prefix under load:
// HAProxy is reloaded without a failed request and the new route serves.
func TestReloadAddsGroupAndRoute(t *testing.T) {
	parallel(t)
	e := newEnv(t, "", web)
	e.start()
	e.waitInService("web", 2)
	worker := e.worker()
	stop := load(t, e)
	time.Sleep(300 * time.Millisecond)

	// demo-backend serves /work; the load goes to / (group web).
	api := groupSpec{Name: "api", Min: 1, Max: 2, Extra: "    path_prefixes: [/work]\n"}
	e.writeConfig("", web, api)
	out := e.reload()
	if !strings.Contains(out, "HAProxy reloaded") || !strings.Contains(out, "added api") {
		t.Fatalf("shoal reload output: %q", out)
	}
	e.waitInService("api", 1)
	resp, err := http.Get("http://" + e.listen + "/work?ms=1")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Instance") != "api-001" {
		t.Fatalf("/work answered %d from %q, want 200 from api-001", resp.StatusCode, resp.Header.Get("X-Instance"))
	}
	time.Sleep(300 * time.Millisecond)
	checkNoFailures(t, "reload adding a group", stop())
	if w := e.worker(); w == worker {
		t.Fatalf("HAProxy's worker is still %d: not reloaded", worker)
	}
	e.checkInSync("web")
	e.checkInSync("api")
}

// TestReloadMinSizeOnly: a change HAProxy's config does not show applies
// without reloading HAProxy.
func TestReloadMinSizeOnly(t *testing.T) {
	parallel(t)
	flat := groupSpec{Name: "web", Min: 2, Max: 5}
	e := newEnv(t, "", flat)
	e.start()
	e.waitInService("web", 2)
	worker := e.worker()

	bigger := flat
	bigger.Min = 3
	e.writeConfig("", bigger)
	out := e.reload()
	if !strings.Contains(out, "HAProxy unchanged") || !strings.Contains(out, "changed web") {
		t.Fatalf("shoal reload output: %q", out)
	}
	e.waitInService("web", 3)
	if w := e.worker(); w != worker {
		t.Fatalf("HAProxy's worker changed %d → %d for a min_size change", worker, w)
	}
	if s := e.status().Groups[0]; s.MinSize != 3 || s.Desired != 3 {
		t.Fatalf("after the reload: min_size %d, desired %d; want 3, 3", s.MinSize, s.Desired)
	}
	e.checkInSync("web")

	// shutdown: stop makes SIGTERM stop everything; it applies on reload.
	e.writeConfig("shutdown: stop\n", bigger)
	if out := e.reload(); !strings.Contains(out, "HAProxy unchanged") {
		t.Fatalf("shoal reload output: %q", out)
	}
	e.signalStop(syscall.SIGTERM)
	if left := e.ourProcesses(); len(left) > 0 {
		t.Fatalf("processes left after SIGTERM with shutdown: stop: %v", left)
	}
}

// TestReloadsKeepRuntimeServers reloads HAProxy three times in a row under
// load, with servers added at runtime (one in service after a scale-up, one
// still behind its health gate): no request fails and no server is lost.
func TestReloadsKeepRuntimeServers(t *testing.T) {
	parallel(t)
	e := newEnv(t, "", web)
	e.start()
	e.waitInService("web", 2)
	scaleSync(t, e, "up")
	stop := load(t, e)
	time.Sleep(300 * time.Millisecond)

	for i := 1; i <= 3; i++ {
		before := e.worker()
		servers := e.haproxyServers("web")
		e.writeConfig(fmt.Sprintf("  timeouts: {server: %ds}\n", 30+i), web)
		out := e.reload()
		if !strings.Contains(out, "HAProxy reloaded") {
			t.Fatalf("reload %d: %q", i, out)
		}
		if w := e.worker(); w == before {
			t.Fatalf("reload %d: worker still %d", i, w)
		}
		if got := e.haproxyServers("web"); fmt.Sprint(got) != fmt.Sprint(servers) {
			t.Fatalf("reload %d: HAProxy's servers %v, before %v", i, got, servers)
		}
		e.checkInSync("web")
	}
	checkNoFailures(t, "3 reloads", stop())
	if s := e.status().Groups[0]; s.InService != 3 {
		t.Fatalf("%d in service after the reloads, want 3", s.InService)
	}
	if !strings.Contains(e.log.String(), "haproxy reloaded") {
		t.Fatalf("the reloads are not logged:\n%s", e.log)
	}
}

// TestRestartKeepsServing stops shoal with SIGTERM (shutdown: keep) and with
// `shoal stop --keep-running` under load, after a reload of HAProxy: HAProxy
// and the instances keep serving, and each next `shoal serve` adopts the same
// processes.
func TestRestartKeepsServing(t *testing.T) {
	parallel(t)
	e := newEnv(t, "", web)
	e.start()
	e.waitInService("web", 2)
	haproxyPID := e.haproxyPID()
	var pids []int
	for _, in := range e.status().Groups[0].Instances {
		pids = append(pids, in.PID)
	}
	stop := load(t, e)
	time.Sleep(300 * time.Millisecond)
	// After a reload HAProxy runs another configuration: its record must
	// follow, or the next start would replace it instead of adopting it.
	e.writeConfig("  timeouts: {server: 31s}\n", web)
	if out := e.reload(); !strings.Contains(out, "HAProxy reloaded") {
		t.Fatalf("shoal reload output: %q", out)
	}

	for _, how := range []string{"SIGTERM", "shoal stop --keep-running"} {
		if how == "SIGTERM" {
			e.signalStop(syscall.SIGTERM)
		} else {
			out, stderr, code := e.cli("stop", "--keep-running")
			if code != 0 || !strings.Contains(out, "keep serving") {
				t.Fatalf("shoal stop --keep-running exited %d:\n%s%s", code, out, stderr)
			}
			<-e.exited
		}
		for _, pid := range append([]int{haproxyPID}, pids...) {
			if !alive(pid) {
				t.Fatalf("after %s: pid %d is gone", how, pid)
			}
		}
		time.Sleep(500 * time.Millisecond) // serving with no core at all
		e.start()
		e.waitInService("web", 2)
		var now []int
		for _, in := range e.status().Groups[0].Instances {
			now = append(now, in.PID)
		}
		if !slices.Equal(now, pids) || e.haproxyPID() != haproxyPID {
			t.Fatalf("after %s and a start: instances %v HAProxy %d; want the same %v and %d adopted", how, now, e.haproxyPID(), pids, haproxyPID)
		}
		e.checkInSync("web")
	}
	checkNoFailures(t, "2 restarts of shoal", stop())

	out, stderr, code := e.cli("stop")
	if code != 0 {
		t.Fatalf("shoal stop exited %d:\n%s%s", code, out, stderr)
	}
	<-e.exited
	for _, pid := range append([]int{haproxyPID}, pids...) {
		if alive(pid) {
			t.Fatalf("pid %d still alive after shoal stop", pid)
		}
	}
}

// TestReloadRemovesGroupDrains removes a group while a slow request is in
// flight on it: the request completes, then its instances stop and its
// backend leaves HAProxy.
func TestReloadRemovesGroupDrains(t *testing.T) {
	parallel(t)
	api := slowGroup(t, groupSpec{Name: "api", Min: 1, Max: 1, Extra: "    path_prefixes: [/sleep]\n", Drain: "10s"})
	e := newEnv(t, "", web, api)
	e.start()
	e.waitInService("web", 2)
	e.waitInService("api", 1)
	g, err := e.client().Group(context.Background(), "api")
	if err != nil {
		t.Fatal(err)
	}
	apiPID := g.Instances[0].PID
	stop := load(t, e)

	slow := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + e.listen + "/sleep?ms=2000")
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != 200 {
				err = fmt.Errorf("HTTP %d", resp.StatusCode)
			}
		}
		slow <- err
	}()
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	e.writeConfig("", web)
	out := e.reload()
	if !strings.Contains(out, "removed api") || !strings.Contains(out, "HAProxy reloaded") {
		t.Fatalf("shoal reload output: %q", out)
	}
	select {
	case err := <-slow:
		if err != nil {
			t.Fatalf("the request in flight on the removed group failed: %v", err)
		}
	default:
		t.Fatal("the reload returned before the removed group's request in flight had finished: not drained")
	}
	if took := time.Since(start); took < 1500*time.Millisecond {
		t.Fatalf("the reload took %v: the 2 s request was not waited for", took)
	}
	if alive(apiPID) {
		t.Fatalf("the removed group's instance %d is still running", apiPID)
	}
	for _, g := range e.status().Groups {
		if g.Name == "api" {
			t.Fatal("the removed group is still in status")
		}
	}
	c := haproxy.Client{Socket: filepath.Join(e.stateDir(), "haproxy", "admin.sock")}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if stats, err := c.Stats(ctx, "api"); err == nil && len(stats) > 0 {
		t.Fatalf("HAProxy still has backend api: %v", stats)
	}
	time.Sleep(300 * time.Millisecond)
	checkNoFailures(t, "removing a group", stop())
	e.checkInSync("web")
}

// TestReloadKeepsGateClosed reloads HAProxy while a new instance is behind
// its health gate (its process listens only after 2 s): the reload must not
// put it in rotation untested, and it goes in service once its checks pass.
func TestReloadKeepsGateClosed(t *testing.T) {
	parallel(t)
	slow := web
	slow.Command = fmt.Sprintf(`["/bin/sh", "-c", "sleep 2; exec %s --listen 127.0.0.1:{{.Port}} --name {{.Name}}"]`, filepath.Join(binDir, "demo-backend"))
	e := newEnv(t, "", slow)
	e.start()
	e.waitInService("web", 2)
	stop := load(t, e)
	out, stderr, code := e.cli("scale", "web", "up")
	if code != 0 {
		t.Fatalf("shoal scale web up exited %d:\n%s%s", code, out, stderr)
	}
	e.eventually("web-003 is in HAProxy behind its gate", 10*time.Second, func() error {
		if _, ok := e.haproxyServers("web")["web-003"]; !ok {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	e.writeConfig("  timeouts: {server: 31s}\n", slow)
	if out := e.reload(); !strings.Contains(out, "HAProxy reloaded") {
		t.Fatalf("shoal reload output: %q", out)
	}
	c := haproxy.Client{Socket: filepath.Join(e.stateDir(), "haproxy", "admin.sock")}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stats, err := c.Stats(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range stats {
		if st.Name == "web-003" && strings.HasPrefix(string(st.Status), "UP") {
			t.Fatalf("web-003 is %s right after the reload, before its process listens", st.Status)
		}
	}
	e.waitInService("web", 3)
	time.Sleep(300 * time.Millisecond)
	checkNoFailures(t, "a reload with a gated instance", stop())
	e.checkInSync("web")
}

// TestReloadFailureKeepsOldWorker: a config `haproxy -c` accepts but HAProxy
// cannot run (its new listen address is taken) fails the reload loudly; the
// old worker keeps serving, and the next good reload works.
func TestReloadFailureKeepsOldWorker(t *testing.T) {
	parallel(t)
	e := newEnv(t, "", web)
	e.start()
	e.waitInService("web", 2)
	worker := e.worker()
	stop := load(t, e)

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	listen := e.listen
	e.listen = taken.Addr().String()
	e.writeConfig("", web)
	e.listen = listen
	out, stderr, code := e.cli("reload")
	if code != 1 || !strings.Contains(stderr, "keeps serving") {
		t.Fatalf("a reload HAProxy cannot run: exit %d, want 1 saying the old worker keeps serving:\n%s%s", code, out, stderr)
	}
	t.Logf("failed reload: %s", stderr)
	if w := e.worker(); w != worker {
		t.Fatalf("HAProxy's worker changed %d → %d on a failed reload", worker, w)
	}

	e.writeConfig("  timeouts: {server: 31s}\n", web)
	if out := e.reload(); !strings.Contains(out, "HAProxy reloaded") {
		t.Fatalf("the next reload: %q", out)
	}
	if w := e.worker(); w == worker {
		t.Fatalf("HAProxy's worker is still %d after a good reload", w)
	}
	time.Sleep(300 * time.Millisecond)
	checkNoFailures(t, "a failed and a good reload", stop())
	e.checkInSync("web")
}

// TestReloadKeepsDownServerOut: an instance in service that HAProxy has DOWN
// (SIGSTOPped) stays out of rotation across a reload, instead of coming back
// UP untested, and returns once its checks pass again.
func TestReloadKeepsDownServerOut(t *testing.T) {
	parallel(t)
	g := web
	g.Extra = "    replace_after: 60s\n"
	e := newEnv(t, "", g)
	e.start()
	e.waitInService("web", 2)
	victim := e.status().Groups[0].Instances[0]
	if err := syscall.Kill(victim.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(victim.PID, syscall.SIGCONT)
	c := haproxy.Client{Socket: filepath.Join(e.stateDir(), "haproxy", "admin.sock")}
	health := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stats, err := c.Stats(ctx, "web")
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range stats {
			if st.Name == victim.Name {
				return string(st.Status)
			}
		}
		return "missing"
	}
	e.eventually("the stopped instance is DOWN", 15*time.Second, func() error {
		if h := health(); !strings.HasPrefix(h, "DOWN") {
			return fmt.Errorf("%s", h)
		}
		return nil
	})
	e.writeConfig("  timeouts: {server: 31s}\n", g)
	if out := e.reload(); !strings.Contains(out, "HAProxy reloaded") {
		t.Fatalf("shoal reload output: %q", out)
	}
	if h := health(); strings.HasPrefix(h, "UP") || h == "missing" {
		t.Fatalf("the DOWN instance is %s right after the reload", h)
	}
	if err := syscall.Kill(victim.PID, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	e.waitInService("web", 2)
	if pid := e.status().Groups[0].Instances[0].PID; pid != victim.PID {
		t.Fatalf("the instance was replaced (pid %d → %d), want it back in service", victim.PID, pid)
	}
	e.checkInSync("web")
}

// TestReloadFailureChangesNothing: a reload HAProxy cannot run (its new
// listen address is taken) changes nothing at all — the changed group keeps
// its bounds and its policy runner the old rule, the group the file removes
// keeps serving and the one it adds does not start — and once the port is
// free, reloading the same file applies all of it, the new policy included.
func TestReloadFailureChangesNothing(t *testing.T) {
	parallel(t) // waits for reloads; its own taken port, no load
	sizeRule := func(name, action string) string {
		return fmt.Sprintf("    autoscale:\n      rules:\n        - {name: %s, metric: size, below: 100, for: 1s, action: %s}\n", name, action)
	}
	oldWeb := groupSpec{Name: "web", Min: 1, Max: 2, Extra: sizeRule("old", "down")}
	apiGroup := groupSpec{Name: "api", Min: 1, Max: 1, Extra: "    path_prefixes: [/work]\n"}
	e := newEnv(t, "", oldWeb, apiGroup)
	e.start()
	e.waitInService("web", 1)
	e.waitInService("api", 1)
	// The old rule decides: it would scale in, but web is at min_size.
	// Its window is one metrics interval: it decides at the first
	// evaluation after the collector's first sample (it once waited for
	// one that ran after the collector had recorded its newest sample:
	// seconds, and on a loaded machine for ever).
	inService := time.Now()
	first := e.waitEvent("the old rule's decision", time.Minute, 0, func(ev api.Event) bool { return ev.Rule == "old" })
	t.Logf("the old rule decided %s after both groups were in service", time.Since(inService).Round(time.Millisecond))
	apiPID := groupOf(t, e.status(), "api").Instances[0].PID
	worker := e.worker()

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { taken.Close() })
	newWeb := groupSpec{Name: "web", Min: 1, Max: 3, Extra: sizeRule("new", "up")}
	extra := groupSpec{Name: "extra", Min: 1, Max: 1, Extra: "    path_prefixes: [/extra]\n"}
	oldListen := e.listen
	e.listen = taken.Addr().String()
	e.writeConfig("", newWeb, extra)
	e.listen = oldListen
	out, stderr, code := e.cli("reload")
	if code != 1 || !strings.Contains(stderr, "nothing changed") {
		t.Fatalf("a reload HAProxy cannot run: exit %d, want 1 saying nothing changed:\n%s%s", code, out, stderr)
	}
	t.Logf("failed reload: %s", stderr)

	// Several policy intervals later, everything still runs the old config.
	time.Sleep(4 * time.Second)
	if w := e.worker(); w != worker {
		t.Fatalf("HAProxy's worker changed %d → %d on a failed reload", worker, w)
	}
	s := e.status()
	if len(s.Groups) != 2 {
		t.Fatalf("groups after the failed reload: %+v; want web and api only", s.Groups)
	}
	if g := groupOf(t, s, "web"); g.MinSize != 1 || g.MaxSize != 2 || g.Desired != 1 || len(g.Instances) != 1 {
		t.Fatalf("web after the failed reload: min %d max %d desired %d, %d instances; want the old 1, 2, 1, 1",
			g.MinSize, g.MaxSize, g.Desired, len(g.Instances))
	}
	if g := groupOf(t, s, "api"); len(g.Instances) != 1 || g.Instances[0].PID != apiPID || g.InService != 1 {
		t.Fatalf("api after the failed reload that removes it: %+v; want its instance %d still in service", g.Instances, apiPID)
	}
	for _, ev := range e.events(api.EventsQuery{Group: "web", After: first.ID}) {
		if ev.Rule != "old" {
			t.Fatalf("after the failed reload the policy decided with rule %q: %+v", ev.Rule, ev)
		}
	}
	// The policy the API shows for web (what a policy test replays) is the old one too.
	decisions, err := e.client().PolicyTest(context.Background(), "web", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range decisions {
		if d.Rule != "old" {
			t.Fatalf("policy test after the failed reload decides with rule %q: %+v", d.Rule, d)
		}
	}
	resp, err := http.Get("http://" + e.listen + "/work?ms=1")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Instance") != "api-001" {
		t.Fatalf("/work answered %d from %q after the failed reload, want 200 from api-001", resp.StatusCode, resp.Header.Get("X-Instance"))
	}

	// The port is free: the same file now applies in full.
	taken.Close()
	e.listen = taken.Addr().String()
	out = e.reload()
	for _, want := range []string{"HAProxy reloaded", "added extra", "removed api", "changed web"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the second reload's output %q does not say %q", out, want)
		}
	}
	e.waitEvent("the new rule scales web up", time.Minute, first.ID, accepted("new", "up"))
	e.waitInService("web", 3)
	e.waitInService("extra", 1)
	s = e.status()
	if g := groupOf(t, s, "web"); g.MaxSize != 3 {
		t.Fatalf("web's max_size is %d after the good reload, want 3", g.MaxSize)
	}
	for _, g := range s.Groups {
		if g.Name == "api" {
			t.Fatal("api is still in status after the good reload removed it")
		}
	}
	if alive(apiPID) {
		t.Fatalf("the removed group's instance %d is still running", apiPID)
	}
	e.checkInSync("web")
	e.checkInSync("extra")
}

// TestReloadCPUsDividesByNewCores: after a reload changes template.cpus, the
// CPU % shoal reports for a group's running instance (the metrics API, what
// policies read) is its CPU time divided by the new core count, measured
// here from /proc while the instance burns CPU under load.
func TestReloadCPUsDividesByNewCores(t *testing.T) {
	parallel(t) // both figures are of one process: others' load moves them together
	g := groupSpec{Name: "web", Min: 1, Max: 1, Extra: "      cpus: 1\n"}
	e := newEnv(t, "metrics: {warmup: 1s}\n", g)
	e.start()
	e.waitInService("web", 1)
	pid := e.status().Groups[0].Instances[0].PID
	stopLoad := cpuLoad(t, e, 2)

	// measure compares the group's CPU % over a window with the instance's
	// CPU time over about the same seconds, read from /proc, as a % of cores.
	measure := func(cores float64) {
		t.Helper()
		const window = 5 * time.Second
		t0 := time.Now()
		c0, err := proc.CPUTicks(pid)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(window + time.Second)
		c1, err := proc.CPUTicks(pid)
		if err != nil {
			t.Fatal(err)
		}
		// /proc counts CPU time in USER_HZ ticks, 100 per second on Linux.
		used := time.Duration(c1-c0) * 10 * time.Millisecond
		want := 100 * used.Seconds() / time.Since(t0).Seconds() / cores
		doc, err := e.client().Metrics(context.Background(), "web", window, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(doc.Instances) != 1 || doc.Instances[0].Cores != cores || doc.CPU.Avg == nil {
			t.Fatalf("metrics with cpus %v: %+v; want one instance with %v cores and a CPU average", cores, doc.Instances, cores)
		}
		got := *doc.CPU.Avg
		t.Logf("cpus %v: shoal reports %.1f %%, /proc gives %.1f %% (%v of CPU)", cores, got, want, used)
		if want < 5 {
			t.Fatalf("the instance used only %v of CPU: the load did not reach it", used)
		}
		if r := got / want; r < 0.6 || r > 1.6 {
			t.Fatalf("with cpus %v shoal reports %.1f %% CPU, /proc gives %.1f %%: not divided by %v cores", cores, got, want, cores)
		}
	}
	time.Sleep(2 * time.Second) // the load's first seconds are in the window
	measure(1)

	g.Extra = "      cpus: 4\n"
	e.writeConfig("metrics: {warmup: 1s}\n", g)
	if out := e.reload(); !strings.Contains(out, "changed web") {
		t.Fatalf("shoal reload output: %q", out)
	}
	time.Sleep(2 * time.Second) // samples from before the reload leave the window
	measure(4)
	if res := stopLoad(); res.Failures != 0 {
		t.Fatalf("%d of %d requests failed: %v", res.Failures, res.Requests, res.FailureSamples)
	}
	if pid2 := e.status().Groups[0].Instances[0].PID; pid2 != pid {
		t.Fatalf("the instance was replaced (pid %d → %d): the reload must only change how its CPU is counted", pid, pid2)
	}
}

// TestReloadRemovingGroupFailsItsScaleJob removes a group by a reload while
// a job scales it up (its new instances still starting): the job fails
// saying the group was removed, rather than counting the removal's empty
// group as the size it asked for.
func TestReloadRemovingGroupFailsItsScaleJob(t *testing.T) {
	parallel(t) // waits for a scale job to fail, no load
	slow := web
	slow.Command = fmt.Sprintf(`["/bin/sh", "-c", "sleep 2; exec %s --listen 127.0.0.1:{{.Port}} --name {{.Name}}"]`, filepath.Join(binDir, "demo-backend"))
	other := groupSpec{Name: "api", Min: 1, Max: 1, Extra: "    path_prefixes: [/api]\n"}
	e := newEnv(t, "", slow, other)
	e.start()
	e.waitInService("web", 2)
	e.waitInService("api", 1)

	ctx := context.Background()
	size := 4
	j, err := e.client().Scale(ctx, "web", api.ScaleRequest{Size: &size})
	if err != nil {
		t.Fatal(err)
	}
	e.removeGroupFailsJob(ctx, j.ID, "scale", other)
	e.checkInSync("api")
}

// removeGroupFailsJob reloads a config of only keep, which removes web, and
// checks that web's running job (a kind of job) fails saying so.
func (e *shoalEnv) removeGroupFailsJob(ctx context.Context, id, kind string, keep ...groupSpec) {
	e.t.Helper()
	e.writeConfig("", keep...)
	if out := e.reload(); !strings.Contains(out, "removed web") {
		e.t.Fatalf("shoal reload output: %q", out)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// WaitJob's error is the failed job's reason, checked below.
	done, err := e.client().WaitJob(wctx, id)
	if !done.State.Terminal() {
		e.t.Fatalf("%s job of the removed group did not end: %v", kind, err)
	}
	if done.State != jobrun.Failed || !strings.Contains(done.Reason, "removed by a config reload") {
		e.t.Fatalf("%s job of the removed group: %s %q; want failed, saying the group was removed", kind, done.State, done.Reason)
	}
}

// cpuHogs runs n busy-loop processes (at the test's own priority) until
// stop or lifetime, whichever comes first, so that a test sees the machine
// saturated as operators' machines are when they reload: its own, or in a
// busy step the machine's, shared with the busy steps beside it.
func cpuHogs(t *testing.T, n int, lifetime time.Duration) (stop func()) {
	t.Helper()
	if runsBusy(t) {
		return machine.hogs.request(t, n, lifetime)
	}
	own := &hogPool{life: lifetime + time.Second}
	return own.request(t, n, lifetime)
}

// noRetryLoad is HTTP/1.1 load on url (https with tlsConfig) from 16
// keep-alive connections whose client never sends a request twice (wrk's
// behavior): a connection closed under a request counts as a failed request.
func noRetryLoad(t *testing.T, e *shoalEnv, url string, tlsConfig *tls.Config) (stop func() loadgen.Result) {
	t.Helper()
	stop, err := loadgen.Start(context.Background(), loadgen.Options{
		URL: url, Concurrency: 16, Timeout: 10 * time.Second, NoRetries: true, TLS: tlsConfig,
		Header: http.Header{"Accept-Encoding": {"gzip"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop() })
	return stop
}

// TestReloadsUnderCPUContention: 20 config-changing reloads (compression off
// and on, a group with a route added, a timeout) while three busy loops
// saturate the machine's cores and 16 keep-alive connections send requests
// that are never retried: not one request fails. An old worker that closed
// its idle connections at once would cut requests that arrive on them as it
// does (a busy machine makes that likely: 2 to 9 per run of this test
// without option idle-close-on-response).
func TestReloadsUnderCPUContention(t *testing.T) {
	parallel(t)
	const gz = "compression:\n  types: [text/html]\n"
	apiGroup := groupSpec{Name: "api", Min: 1, Max: 1, Extra: "    path_prefixes: [/work]\n"}
	e := newEnv(t, gz, web)
	e.start()
	e.waitInService("web", 2)
	busy(t) // the saturated machine is this step's own and its batch's
	stopHogs := cpuHogs(t, 3, 90*time.Second)
	stop := noRetryLoad(t, e, "http://"+e.listen+"/", nil)
	time.Sleep(time.Second)

	const reloads = 20
	e.reloads(reloads, func(i int) {
		// Each reload turns compression off or on again; the third also
		// adds a group with a route, the seventh and later change a timeout.
		top, groups := "", []groupSpec{web}
		if i >= 6 {
			top = "  timeouts: {server: 31s}\n" // continues haproxy:
		}
		if i%2 == 1 {
			top += gz
		}
		if i >= 2 {
			groups = append(groups, apiGroup)
		}
		e.writeConfig(top, groups...)
	})
	res := stop()
	stopHogs()
	what := fmt.Sprintf("%d reloads under CPU contention", reloads)
	t.Logf("%s: %d requests, failures by kind %v", what, res.Requests, res.FailureKinds)
	checkNoFailures(t, what, res)
	e.waitInService("api", 1)
	e.checkInSync("web")
	e.checkInSync("api")
}

// reloads runs n reloads of HAProxy, each after write(i) wrote a changed
// config, and checks that each replaced the worker.
func (e *shoalEnv) reloads(n int, write func(i int)) {
	e.t.Helper()
	for i := range n {
		before := e.worker()
		write(i)
		if out := e.reload(); !strings.Contains(out, "HAProxy reloaded") {
			e.t.Fatalf("reload %d: %q", i+1, out)
		}
		if w := e.worker(); w == before {
			e.t.Fatalf("reload %d: worker still %d", i+1, w)
		}
		time.Sleep(200 * time.Millisecond) // the old worker's connections move over under load
	}
}

// TestReloadsUnderCPUContentionTLS: the same on a TLS frontend (ALPN h2 and
// http/1.1), with 16 HTTP/1.1 connections whose requests are never retried
// and an HTTP/2 client (16 streams at a time) beside them, whose only
// resends are those HTTP/2 makes safe (streams a GOAWAY says were not
// processed): 6 reloads that turn the frontend's compression off and on
// and add a route to a new group fail no request of either (without
// idle-close-on-response, 18 HTTP/1.1 requests failed, and no HTTP/2 one;
// with 8 reloads, 25 and 31).
func TestReloadsUnderCPUContentionTLS(t *testing.T) {
	parallel(t)
	ca := testcert.NewCA(t)
	apiGroup := groupSpec{Name: "api", Min: 1, Max: 1}
	e := newEnv(t, "", web)
	certs := filepath.Join(e.dir, "certs")
	if err := os.Mkdir(certs, 0o700); err != nil {
		t.Fatal(err)
	}
	ca.Valid(t, "a.test").Write(t, certs, "a")
	secure := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	write := func(gzip, api bool) {
		fe := fmt.Sprintf("frontends:\n  - name: edge\n    bind: [%s, %s]\n", e.listen, secure) +
			"    tls: {certificates: [{cert: certs/a.crt, key: certs/a.key}], bind: [" + secure + "]}\n"
		if gzip {
			fe += "    compression: {types: [text/html]}\n"
		}
		groups := []groupSpec{web}
		routes := "    routes: [{group: web}]\n"
		if api {
			groups = append(groups, apiGroup)
			routes = "    routes: [{path_prefix: [/work], group: api}, {group: web}]\n"
		}
		e.writeConfig(fe+routes, groups...)
		b, err := os.ReadFile(e.cfgPath)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Replace(string(b), "listen: "+e.listen+"\n", "", 1)
		if err := os.WriteFile(e.cfgPath, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(true, false)
	e.start()
	e.waitInService("web", 2)

	tlsConfig := &tls.Config{ServerName: "a.test", RootCAs: ca.Pool}
	busy(t) // the saturated machine is this step's own and its batch's
	stopHogs := cpuHogs(t, 3, 90*time.Second)
	h1 := noRetryLoad(t, e, "https://"+secure+"/", tlsConfig)
	h2, err := loadgen.Start(context.Background(), loadgen.Options{
		URL: "https://" + secure + "/", Concurrency: 16, Timeout: 10 * time.Second,
		TLS: tlsConfig, HTTP2: true, Header: http.Header{"Accept-Encoding": {"gzip"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h2() })
	time.Sleep(time.Second)

	const reloads = 6
	e.reloads(reloads, func(i int) { write(i%2 == 1, i >= 2) })
	res1, res2 := h1(), h2()
	stopHogs()
	loads := []struct {
		proto string
		res   loadgen.Result
	}{{"HTTP/1.1", res1}, {"HTTP/2.0", res2}}
	for _, r := range loads {
		t.Logf("%s: %d requests, failures by kind %v, by protocol %v", r.proto, r.res.Requests, r.res.FailureKinds, r.res.ByProto)
	}
	for _, r := range loads {
		what := fmt.Sprintf("%d reloads under CPU contention, %s over TLS", reloads, r.proto)
		checkNoFailures(t, what, r.res)
		if r.res.ByProto[r.proto] != r.res.Requests-r.res.Failures {
			t.Fatalf("%s: responses by protocol %v, want all %s", what, r.res.ByProto, r.proto)
		}
	}
	e.waitInService("api", 1)
	e.checkInSync("web")
	e.checkInSync("api")
}

// TestRestartWithChangedHAProxyConfig: shoal stopped with --keep-running and
// started again with a config that changes HAProxy's (compression on, as an
// upgrade of shoal that renders another configuration would): the running
// HAProxy is adopted and reloaded, not replaced, and under keep-alive load
// whose requests are never retried, with the CPU saturated, no request fails.
func TestRestartWithChangedHAProxyConfig(t *testing.T) {
	parallel(t)
	e := newEnv(t, "", web)
	e.start()
	e.waitInService("web", 2)
	haproxyPID := e.haproxyPID()
	busy(t) // the saturated machine is this step's own and its batch's
	stopHogs := cpuHogs(t, 3, 90*time.Second)
	stop := noRetryLoad(t, e, "http://"+e.listen+"/", nil)
	time.Sleep(time.Second)

	out, stderr, code := e.cli("stop", "--keep-running")
	if code != 0 {
		t.Fatalf("shoal stop --keep-running exited %d:\n%s%s", code, out, stderr)
	}
	<-e.exited
	worker := e.worker()
	e.writeConfig("compression:\n  types: [text/html]\n", web)
	e.start()
	e.waitInService("web", 2)
	time.Sleep(time.Second)
	res := stop()
	stopHogs()
	t.Logf("a restart of shoal with HAProxy's config changed: %d requests, failures by kind %v", res.Requests, res.FailureKinds)
	if pid := e.haproxyPID(); pid != haproxyPID {
		t.Errorf("HAProxy was replaced (master %d → %d), not reloaded", haproxyPID, pid)
	}
	if w := e.worker(); w == worker {
		t.Errorf("HAProxy's worker is still %d: the changed config was not applied", w)
	}
	checkNoFailures(t, "a restart of shoal with HAProxy's config changed", res)
	e.checkInSync("web")
}
