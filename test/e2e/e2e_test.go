package e2e

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/jobrun"
	"github.com/shoal-lb/shoal/internal/loadgen"
)

var web = groupSpec{Name: "web", Min: 2, Max: 5, Plans: "{smallest: 2, medium: 3, largest: 5}"}

// loadConcurrency is how many keep-alive connections load uses.
const loadConcurrency = 4

// loadPace is the least time between the requests of one of load's
// connections: up to 1,000 requests a second in all, one in flight most of
// the time, without taking the cores from the tests beside it (unpaced, one
// test's load took both; at 2 ms, the suite's shared part kept both cores
// 93 % busy). A step that needs a busy machine saturates it on purpose
// (cpuHogs), alone.
const loadPace = 4 * time.Millisecond

// load sends keep-alive requests through the balancer until stop is called.
func load(t *testing.T, e *shoalEnv) (stop func() loadgen.Result) {
	t.Helper()
	stop, err := loadgen.Start(context.Background(), loadgen.Options{URL: "http://" + e.listen + "/", Concurrency: loadConcurrency, Timeout: 10 * time.Second, Pace: loadPace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop() })
	return stop
}

func scaleSync(t *testing.T, e *shoalEnv, args ...string) {
	t.Helper()
	out, stderr, code := e.cli(append([]string{"scale", "web"}, append(args, "--sync")...)...)
	if code != 0 {
		t.Fatalf("shoal scale web %v exited %d:\n%s%s", args, code, out, stderr)
	}
	if !strings.Contains(out, "done") {
		t.Fatalf("shoal scale output does not say done:\n%s", out)
	}
}

// TestScaleUnderLoad scales 2→3→5→3→2 (up/down along the ladder and jumps)
// while a client sends keep-alive requests: no request may fail and HAProxy's
// server list must equal shoal's status after every step.
func TestScaleUnderLoad(t *testing.T) {
	parallel(t)
	e := newEnv(t, "", web)
	e.start()
	e.waitInService("web", 2)
	e.checkInSync("web")

	stop := load(t, e)
	time.Sleep(500 * time.Millisecond)
	for _, step := range []struct {
		args []string
		size int
	}{
		{[]string{"up"}, 3},
		{[]string{"--plan", "largest"}, 5},
		{[]string{"down"}, 3},
		{[]string{"--size", "2"}, 2},
	} {
		scaleSync(t, e, step.args...)
		s := e.status().Groups[0]
		if s.Desired != step.size || len(s.Instances) != step.size || s.InService != step.size {
			t.Fatalf("after scale %v: desired %d, %d instances, %d in service; want %d", step.args, s.Desired, len(s.Instances), s.InService, step.size)
		}
		e.checkInSync("web")
	}
	res := stop()
	t.Logf("%d requests, %d failures, spread %v", res.Requests, res.Failures, res.ByInstance)
	if res.Failures != 0 {
		t.Fatalf("%d of %d requests failed while scaling: %v", res.Failures, res.Requests, res.FailureSamples)
	}
	if res.Requests < 100 {
		t.Fatalf("only %d requests went through", res.Requests)
	}
	if len(res.ByInstance) < 5 {
		t.Fatalf("traffic reached %d instances, want all 5 at the largest plan: %v", len(res.ByInstance), res.ByInstance)
	}
	e.stop()
	if left := e.ourProcesses(); len(left) > 0 {
		t.Fatalf("processes left after shoal stopped: %v", left)
	}
}

// TestKilledInstanceIsReplaced SIGKILLs an instance under load: it leaves
// rotation and a new one takes its place.
func TestKilledInstanceIsReplaced(t *testing.T) {
	parallel(t)
	e := newEnv(t, "", web)
	e.start()
	e.waitInService("web", 2)
	stop := load(t, e)
	time.Sleep(500 * time.Millisecond)

	victim := e.status().Groups[0].Instances[0]
	if err := syscall.Kill(victim.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.eventually("the killed instance is replaced", 30*time.Second, func() error {
		s, err := e.client().Group(context.Background(), "web")
		if err != nil {
			return err
		}
		if s.InService != 2 || len(s.Instances) != 2 {
			return fmt.Errorf("%d in service of %d", s.InService, len(s.Instances))
		}
		for _, in := range s.Instances {
			if in.PID == victim.PID {
				return fmt.Errorf("pid %d still listed", victim.PID)
			}
		}
		return nil
	})
	for _, addr := range e.haproxyServers("web") {
		if addr == victim.Addr {
			t.Fatalf("HAProxy still routes to the killed instance at %s", addr)
		}
	}
	e.checkInSync("web")
	res := stop()
	t.Logf("%d requests, %d failures %v", res.Requests, res.Failures, res.FailureSamples)
	// A response already streaming to the client when its instance is killed
	// cannot be retried by any balancer: at most one per connection in flight.
	// Everything after the kill must be retried or routed elsewhere.
	if res.Failures > loadConcurrency {
		t.Fatalf("%d requests failed after SIGKILL of an instance, want at most %d (those in flight): %v", res.Failures, loadConcurrency, res.FailureSamples)
	}
	s := e.status().Groups[0]
	if len(s.LastFailures) == 0 || !strings.Contains(s.LastFailures[0].Reason, "exited") {
		t.Fatalf("status does not report the failure: %+v", s.LastFailures)
	}
}

// TestCoreKill9RestartAdopts kills the core with SIGKILL: HAProxy and the
// instances keep serving, and a restarted core adopts them all.
func TestCoreKill9RestartAdopts(t *testing.T) {
	parallel(t)
	e := newEnv(t, "", web)
	e.start()
	e.waitInService("web", 2)
	scaleSync(t, e, "up")
	before := e.status().Groups[0]
	haproxyPID := e.haproxyPID()

	stop := load(t, e)
	e.kill9()
	time.Sleep(time.Second)
	e.start()
	e.waitInService("web", 3)
	res := stop()
	if res.Failures != 0 {
		t.Fatalf("%d of %d requests failed across a kill -9 and restart of the core: %v", res.Failures, res.Requests, res.FailureSamples)
	}

	after := e.status().Groups[0]
	var bp, ap []int
	for _, in := range before.Instances {
		bp = append(bp, in.PID)
	}
	for _, in := range after.Instances {
		ap = append(ap, in.PID)
	}
	if fmt.Sprint(bp) != fmt.Sprint(ap) {
		t.Fatalf("instances were not adopted: pids before %v, after %v", bp, ap)
	}
	if e.haproxyPID() != haproxyPID {
		t.Fatalf("HAProxy was restarted (pid %d → %d) instead of adopted", haproxyPID, e.haproxyPID())
	}
	e.checkInSync("web")
	// No strays: every live process of ours is an adopted instance or HAProxy.
	want := append(slices.Clone(ap), haproxyPID)
	got := e.ourProcesses()
	slices.Sort(want)
	slices.Sort(got)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("live processes %v, want exactly %v (instances + HAProxy)", got, want)
	}
	e.stop()
	for _, pid := range want {
		if alive(pid) {
			t.Fatalf("pid %d still alive after shoal stopped", pid)
		}
	}
}

// TestStrayStoppedOnRestart: an instance process nothing records (e.g. started
// just before a crash) is stopped by the next core.
func TestStrayStoppedOnRestart(t *testing.T) {
	parallel(t) // waits for a core restart, no load
	e := newEnv(t, "", web)
	e.start()
	e.waitInService("web", 2)
	e.kill9()
	// Forge a stray: an instance-marked process not in shoal's records.
	stray := startMarked(t, e.stateDir())
	e.start()
	e.waitInService("web", 2)
	e.eventually("the stray is stopped", 15*time.Second, func() error {
		if alive(stray) {
			return fmt.Errorf("pid %d alive", stray)
		}
		return nil
	})
}

func startMarked(t *testing.T, stateDir string) int {
	t.Helper()
	p, err := os.StartProcess("/bin/sleep", []string{"sleep", "300"}, &os.ProcAttr{
		Env: []string{"SHOAL_STATE_DIR=" + stateDir, "SHOAL_INSTANCE=web-099"},
		Sys: &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill(); _, _ = p.Wait() })
	go func() { _, _ = p.Wait() }()
	return p.Pid
}

// TestJobRules: cooldowns ignore with a reason, concurrent requests run one
// job, edges of the ladder are ignored, and bad names exit 2 with the valid ones.
func TestJobRules(t *testing.T) {
	parallel(t) // waits for scale jobs, no load
	g := web
	g.CooldownUp, g.CooldownDn = "1h", "1h"
	e := newEnv(t, "", g)
	e.start()
	e.waitInService("web", 2)

	// Concurrent requests on one group: exactly one runs.
	var wg sync.WaitGroup
	results := make([]jobrun.Job, 6)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j, err := e.client().Scale(context.Background(), "web", api.ScaleRequest{Direction: "up", Source: "test"})
			if err != nil {
				t.Error(err)
			}
			results[i] = j
		}()
	}
	wg.Wait()
	var accepted []jobrun.Job
	for _, j := range results {
		switch j.State {
		case jobrun.Accepted:
			accepted = append(accepted, j)
		case jobrun.Ignored:
			if !strings.Contains(j.Reason, "another job") {
				t.Fatalf("ignored with reason %q, want another job running", j.Reason)
			}
		default:
			t.Fatalf("job in state %s", j.State)
		}
	}
	if len(accepted) != 1 {
		t.Fatalf("%d jobs accepted of 6 concurrent requests, want 1", len(accepted))
	}
	j, err := e.client().Job(context.Background(), accepted[0].ID, time.Minute)
	if err != nil || j.State != jobrun.Done || j.Target != 3 {
		t.Fatalf("job %+v, err %v; want done at 3", j, err)
	}

	// Cooldown: the next scale-up is ignored and says until when (exit 3).
	out, _, code := e.cli("scale", "web", "up", "--sync")
	if code != 3 || !strings.Contains(out, "ignored") || !strings.Contains(out, "cooldown runs until") {
		t.Fatalf("scale up during cooldown: exit %d, output %q; want exit 3 with the cooldown", code, out)
	}

	// Unknown group and plan: exit 2 with the valid names.
	_, stderr, code := e.cli("scale", "nope", "up")
	if code != 2 || !strings.Contains(stderr, "web") {
		t.Fatalf("unknown group: exit %d, stderr %q", code, stderr)
	}
	_, stderr, code = e.cli("scale", "web", "--plan", "huge")
	if code != 2 || !strings.Contains(stderr, "smallest, medium, largest") {
		t.Fatalf("unknown plan: exit %d, stderr %q", code, stderr)
	}

	// Every job is listed, the unknown plan one as ignored.
	out, _, code = e.cli("jobs", "-o", "json")
	if code != 0 || strings.Count(out, `"state": "ignored"`) < 6 || !strings.Contains(out, `"source": "test"`) {
		t.Fatalf("jobs: exit %d\n%s", code, out)
	}
	out, _, code = e.cli("jobs", accepted[0].ID)
	if code != 0 || !strings.Contains(out, "done") {
		t.Fatalf("jobs ID: exit %d\n%s", code, out)
	}
}

// TestLadderEdges: down at the smallest plan and up at the largest are ignored;
// a jump to the current plan is done with nothing to change.
func TestLadderEdges(t *testing.T) {
	parallel(t) // waits for scale jobs, no load
	e := newEnv(t, "", groupSpec{Name: "web", Min: 1, Max: 2, Plans: "{one: 1, two: 2}"})
	e.start()
	e.waitInService("web", 1)
	out, _, code := e.cli("scale", "web", "down")
	if code != 3 || !strings.Contains(out, "already at the smallest plan (one: 1)") {
		t.Fatalf("down at the bottom: exit %d %q", code, out)
	}
	out, _, code = e.cli("scale", "web", "--plan", "one", "--sync")
	if code != 0 || !strings.Contains(out, "nothing to change") {
		t.Fatalf("jump to the current plan: exit %d %q", code, out)
	}
	scaleSync(t, e, "up")
	out, _, code = e.cli("scale", "web", "up")
	if code != 3 || !strings.Contains(out, "already at the largest plan (two: 2)") {
		t.Fatalf("up at the top: exit %d %q", code, out)
	}
}

// TestAdminTCPNeedsToken: the API over TCP answers only with the bearer token.
func TestAdminTCPNeedsToken(t *testing.T) {
	parallel(t)
	port := freePort(t)
	e := newEnv(t, fmt.Sprintf("admin:\n  listen: 127.0.0.1:%d\n  token: s3cret\n", port), groupSpec{Name: "web", Min: 1, Max: 2})
	e.start()
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/status", port)
	for _, tc := range []struct {
		auth string
		want int
	}{{"", 401}, {"Bearer wrong", 401}, {"Bearer s3cret", 200}} {
		req, _ := http.NewRequest("GET", url, nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want || !strings.Contains(resp.Header.Get("Content-Type"), "json") {
			t.Fatalf("auth %q: %d %s, want %d with JSON", tc.auth, resp.StatusCode, body, tc.want)
		}
	}
	// Bad requests get JSON errors with the right status, and change nothing.
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	for _, tc := range []struct {
		method, path, body string
		want               int
		msg                string
	}{
		{"POST", "/v1/groups/web/scale", `{"direction":"sideways"}`, 400, "direction must be"},
		{"POST", "/v1/groups/web/scale", `{"direction":"up","size":2}`, 400, "exactly one"},
		{"POST", "/v1/groups/web/scale", `{"size":9}`, 400, "outside"},
		{"POST", "/v1/groups/web/scale", `{not json`, 400, "invalid JSON"},
		{"POST", "/v1/groups/web/scale", `{"direction":"up","extra":1}`, 400, "unknown field"},
		{"POST", "/v1/groups/nope/scale", `{"direction":"up"}`, 404, "unknown group"},
		{"GET", "/v1/jobs/999", "", 404, "not found"},
		{"GET", "/v1/jobs/abc", "", 404, "not a job id"},
		{"GET", "/v1/jobs?limit=0", "", 400, "limit"},
		{"GET", "/v1/nothing", "", 404, "no such endpoint"},
	} {
		req, _ := http.NewRequest(tc.method, base+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer s3cret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct{ Error string }
		derr := json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != tc.want || derr != nil || !strings.Contains(body.Error, tc.msg) {
			t.Fatalf("%s %s %s: %d %q (%v), want %d with %q", tc.method, tc.path, tc.body, resp.StatusCode, body.Error, derr, tc.want, tc.msg)
		}
	}
	if s := e.status().Groups[0]; s.Desired != 1 {
		t.Fatalf("bad requests changed the group: desired %d", s.Desired)
	}

	fi, err := os.Stat(filepath.Join(e.stateDir(), "shoal.sock"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("unix socket mode %v, err %v; want 0600", fi.Mode().Perm(), err)
	}
}

// TestBadInput: an invalid config refuses to start with file:line:col, and the
// CLI without a running core says so in one line.
func TestBadInput(t *testing.T) {
	parallel(t)
	e := newEnv(t, "", groupSpec{Name: "web", Min: 3, Max: 2})
	_, stderr, code := e.cli("serve")
	if code != 2 || !strings.Contains(stderr, "shoal.yaml:") || !strings.Contains(stderr, "groups[0].max_size") {
		t.Fatalf("serve with min > max: exit %d, stderr %q; want 2 with file:line:col", code, stderr)
	}
	ok := newEnv(t, "", groupSpec{Name: "web", Min: 1, Max: 2})
	_, stderr, code = ok.cli("status")
	if code != 1 || !strings.Contains(stderr, "not running") || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Fatalf("status without a core: exit %d, stderr %q; want exit 1 and one line", code, stderr)
	}
}

// TestHAProxyDiesIsRestarted kills HAProxy's whole process group: shoal
// restarts it and puts every instance back in rotation.
func TestHAProxyDiesIsRestarted(t *testing.T) {
	parallel(t) // waits for HAProxy's restart, no load
	e := newEnv(t, "", web)
	e.start()
	e.waitInService("web", 2)
	before := e.haproxyPID()
	if err := syscall.Kill(-before, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.eventually("HAProxy is restarted with the servers back", 30*time.Second, func() error {
		pid := e.haproxyPID()
		if pid == before || !alive(pid) {
			return fmt.Errorf("HAProxy pid %d", pid)
		}
		resp, err := http.Get("http://" + e.listen + "/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
	e.checkInSync("web")
	if got := len(e.haproxyServers("web")); got != 2 {
		t.Fatalf("HAProxy has %d servers after its restart, want 2", got)
	}
	if !strings.Contains(e.log.String(), "haproxy exited unexpectedly; restarting") {
		t.Fatalf("the crash and restart are not logged:\n%s", e.log)
	}
}

// TestExamplesValidate: every shipped example config passes `shoal validate`.
func TestExamplesValidate(t *testing.T) {
	parallel(t)
	files, _ := filepath.Glob("../../examples/*/shoal.yaml")
	if len(files) < 2 {
		t.Fatalf("found %d example configs", len(files))
	}
	// validate checks that each template's program exists, as serve would:
	// the demo runs ../../bin/demo-backend (make build), the other finds it on PATH.
	build := exec.Command("go", "build", "-o", "bin/", "./cmd/demo-backend")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build demo-backend: %v\n%s", err, out)
	}
	for _, f := range files {
		if filepath.Base(filepath.Dir(f)) == "prometheus" {
			// Its token file and program are the operator's; TestMonitoringExamples
			// validates it with both in place.
			continue
		}
		cmd := exec.Command(filepath.Join(binDir, "shoal"), "validate", "-c", f)
		cmd.Env = append(os.Environ(), "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "OK") {
			t.Fatalf("shoal validate -c %s: %v\n%s", f, err, out)
		}
	}
}

// TestScaleInDrainsInFlightRequests: requests that are still running on the
// instances being retired finish normally.
func TestScaleInDrainsInFlightRequests(t *testing.T) {
	parallel(t)
	e := newEnv(t, "", web)
	e.start()
	e.waitInService("web", 2)
	scaleSync(t, e, "--plan", "largest")

	// 10 requests burning 400ms of CPU each land on every instance, the ones
	// retired included; on 2 cores they are still running at the scale-in.
	type answer struct {
		instance string
		err      error
	}
	answers := make(chan answer, 10)
	for range 10 {
		go func() {
			resp, err := http.Get("http://" + e.listen + "/work?ms=400")
			if err != nil {
				answers <- answer{err: err}
				return
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != 200 {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
			answers <- answer{resp.Header.Get("X-Instance"), err}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	scaleSync(t, e, "--plan", "smallest")
	retired := 0
	for range 10 {
		a := <-answers
		if a.err != nil {
			t.Fatalf("an in-flight request failed during scale-in: %v", a.err)
		}
		if a.instance != "web-001" && a.instance != "web-002" {
			retired++
		}
	}
	// Served by the instances being retired, not retried elsewhere.
	if retired == 0 {
		t.Fatal("no in-flight request was answered by a retired instance")
	}
	e.checkInSync("web")
	if s := e.status().Groups[0]; len(s.Instances) != 2 {
		t.Fatalf("%d instances after scale-in, want 2", len(s.Instances))
	}
}

// TestRunningJobFailsAcrossCoreRestart: a job running when the core is killed
// is failed with a reason by the next core, and the instance it was starting
// is adopted and still goes into service.
func TestRunningJobFailsAcrossCoreRestart(t *testing.T) {
	parallel(t) // waits for a core restart, no load
	slow := fmt.Sprintf(`["/bin/sh", "-c", "sleep 2; exec %s --listen 127.0.0.1:{{.Port}} --name {{.Name}}"]`, filepath.Join(binDir, "demo-backend"))
	e := newEnv(t, "", groupSpec{Name: "web", Min: 0, Max: 2, Command: slow})
	e.start()
	out, _, code := e.cli("scale", "web", "up")
	if code != 0 || !strings.Contains(out, "accepted") {
		t.Fatalf("scale up: exit %d %q", code, out)
	}
	id := strings.Fields(out)[1]
	time.Sleep(500 * time.Millisecond)
	starting := e.status().Groups[0].Instances
	if len(starting) != 1 || starting[0].State != "starting" {
		t.Fatalf("instances %+v, want one starting", starting)
	}
	e.kill9()
	e.start()
	j, err := e.client().Job(context.Background(), id, 0)
	if err != nil || j.State != jobrun.Failed || !strings.Contains(j.Reason, "restarted while the job was running") {
		t.Fatalf("job %+v, err %v; want failed because the core restarted", j, err)
	}
	e.waitInService("web", 1)
	if got := e.status().Groups[0].Instances[0].PID; got != starting[0].PID {
		t.Fatalf("instance pid %d, want the adopted %d", got, starting[0].PID)
	}
	e.checkInSync("web")
}

// TestCompression: with compression on, HAProxy gzips the page for clients
// that accept it, and only for them.
func TestCompression(t *testing.T) {
	parallel(t)
	e := newEnv(t, "compression:\n  types: [text/html]\n", groupSpec{Name: "web", Min: 1, Max: 1})
	e.start()
	e.waitInService("web", 1)
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	for _, gzipOK := range []bool{true, false} {
		req, _ := http.NewRequest("GET", "http://"+e.listen+"/", nil)
		if gzipOK {
			req.Header.Set("Accept-Encoding", "gzip")
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		var body io.Reader = resp.Body
		if enc := resp.Header.Get("Content-Encoding"); (enc == "gzip") != gzipOK {
			t.Fatalf("Accept-Encoding gzip %v: Content-Encoding %q", gzipOK, enc)
		}
		if gzipOK {
			zr, err := gzip.NewReader(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			body = zr
		}
		page, err := io.ReadAll(body)
		resp.Body.Close()
		if err != nil || len(page) < 8000 || !strings.Contains(string(page), "web-001") {
			t.Fatalf("page of %d bytes, err %v", len(page), err)
		}
	}
}
