package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/jobrun"
)

// deployGroup is a group whose demo-backend answers /healthz with the
// template variable health, so that `deploy --set health=500` is a broken
// release; release changes nothing but the version. templateExtra are more
// lines of the template, indented 6 spaces.
func deployGroup(size int, deploy, templateExtra string) groupSpec {
	return groupSpec{
		Name: "web", Min: size, Max: size + 2,
		Command: fmt.Sprintf(`[%q, "--listen", "127.0.0.1:{{.Port}}", "--name", "{{.Name}}", "--health-status", "{{.Vars.health}}"]`,
			filepath.Join(binDir, "demo-backend")),
		Env:   `{RELEASE: "{{.Vars.release}}"}`,
		Extra: "      vars: {health: \"200\", release: \"1\"}\n" + templateExtra + "    deploy: " + deploy + "\n",
	}
}

func versions(g group.Status) map[string]int {
	out := map[string]int{}
	for _, in := range g.Instances {
		out[in.Version]++
	}
	return out
}

// TestDeployBrokenVersionRollsBack deploys a release whose health check
// answers 500 under keep-alive load: the deploy stops at the first new
// instance, removes it, the serving template starts replacements again, the job
// fails with the reason, and no request fails.
func TestDeployBrokenVersionRollsBack(t *testing.T) {
	parallel(t)
	e := newEnv(t, "", deployGroup(2, "{max_surge: 1, min_ready: 500ms, failure_threshold: 1}", ""))
	e.start()
	e.waitInService("web", 2)
	before := groupOf(t, e.status(), "web")
	if before.Version == "" || versions(before)[before.Version] != 2 {
		t.Fatalf("instances do not carry the group's version %q: %+v", before.Version, before.Instances)
	}

	stop := load(t, e)
	time.Sleep(500 * time.Millisecond)
	out, stderr, code := e.cli("deploy", "web", "--set", "health=500", "--sync")
	t.Logf("shoal deploy:\n%s%s", out, stderr)
	if code != 1 {
		t.Fatalf("deploy of a broken release exited %d, want 1 (failed)", code)
	}
	if !strings.Contains(out, "rolled back: web-003 failed health check 2 times: HTTP 500") {
		t.Fatalf("deploy output lacks the rollback reason:\n%s", out)
	}
	e.waitInService("web", 2)
	time.Sleep(500 * time.Millisecond)
	res := stop()
	t.Logf("%d requests, %d failures, spread %v", res.Requests, res.Failures, res.ByInstance)
	if res.Failures != 0 {
		t.Fatalf("%d of %d requests failed during the deploy: %v", res.Failures, res.Requests, res.FailureSamples)
	}
	if res.Requests < 100 {
		t.Fatalf("only %d requests went through", res.Requests)
	}

	after := groupOf(t, e.status(), "web")
	if after.Version != before.Version || versions(after)[before.Version] != 2 || after.Deploying != "" {
		t.Fatalf("after the rollback: version %q (deploying %q), instances %v; want all on %s", after.Version, after.Deploying, versions(after), before.Version)
	}
	e.checkInSync("web")
	list, err := e.client().Jobs(context.Background(), "web", 1)
	if err != nil {
		t.Fatal(err)
	}
	if j := list[0]; j.Kind != jobrun.Deploy || j.State != jobrun.Failed || !strings.HasPrefix(j.Reason, "rolled back: web-003 failed health check 2 times: HTTP 500") || j.Version == before.Version {
		t.Fatalf("job %+v: want a failed deploy of another version with the rollback reason", j)
	}
	// The broken variable did not stick: a replacement runs the old version.
	if out, _, code := e.cli("deploy", "web", "--status"); code != 0 || !strings.Contains(out, "new ("+before.Version+"): 2") || !strings.Contains(out, "old: 0") {
		t.Fatalf("deploy --status exited %d:\n%s", code, out)
	}
}

// TestDeployUnderLoad rolls a new release out to 4 instances under
// keep-alive load: every instance ends on the new version, no request fails,
// a scale request while the deploy runs is ignored (one job per group), and
// a variable the template does not declare is refused with the known ones.
func TestDeployUnderLoad(t *testing.T) {
	parallel(t)
	e := newEnv(t, "", deployGroup(4, "{max_surge: 1, max_unavailable: 0, min_ready: 1s}", ""))
	e.start()
	e.waitInService("web", 4)
	old := groupOf(t, e.status(), "web").Version

	if _, stderr, code := e.cli("deploy", "web", "--set", "colour=blue"); code != 2 || !strings.Contains(stderr, `unknown template variable "colour"`) || !strings.Contains(stderr, "health, release") {
		t.Fatalf("deploy with an unknown variable exited %d: %s", code, stderr)
	}
	if _, stderr, code := e.cli("deploy", "web", "--set", "release"); code != 2 {
		t.Fatalf("deploy --set without = exited %d: %s", code, stderr)
	}

	stop := load(t, e)
	time.Sleep(500 * time.Millisecond)
	out, stderr, code := e.cli("deploy", "web", "--set", "release=2")
	if code != 0 || !strings.Contains(out, "accepted") {
		t.Fatalf("deploy exited %d:\n%s%s", code, out, stderr)
	}
	id := strings.Fields(out)[1]
	if _, _, code := e.cli("scale", "web", "up"); code != 3 {
		t.Fatalf("scale during a deploy exited %d, want 3 (ignored: another job runs)", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	j, err := e.client().Job(ctx, id, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != jobrun.Done || j.Kind != jobrun.Deploy {
		t.Fatalf("deploy job %+v, want done", j)
	}
	time.Sleep(500 * time.Millisecond)
	res := stop()
	t.Logf("%d requests, %d failures, spread %v", res.Requests, res.Failures, res.ByInstance)
	if res.Failures != 0 {
		t.Fatalf("%d of %d requests failed during the deploy: %v", res.Failures, res.Requests, res.FailureSamples)
	}
	if res.Requests < 200 {
		t.Fatalf("only %d requests went through", res.Requests)
	}

	g := groupOf(t, e.status(), "web")
	if g.Version == old || g.Version != j.Version || versions(g)[g.Version] != 4 || len(g.Instances) != 4 || g.InService != 4 {
		t.Fatalf("after the deploy: version %s (was %s, job %s), %d in service, versions %v", g.Version, old, j.Version, g.InService, versions(g))
	}
	e.checkInSync("web")
	// The deploy is in the group's event log (shoal events) beside the
	// autoscaler's decisions: its start and its end, with the job id.
	out, stderr, code = e.cli("events", "web", "-o", "json")
	var deployEvents []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev api.Event
		if err := json.Unmarshal([]byte(line), &ev); err == nil && ev.Outcome == decision.Deploy && ev.JobID == id {
			deployEvents = append(deployEvents, string(ev.Code))
		}
	}
	if code != 0 || strings.Join(deployEvents, ",") != "running,done" {
		t.Fatalf("shoal events -o json exited %d with deploy events %v, want running,done:\n%s%s", code, deployEvents, out, stderr)
	}
	out, _, code = e.cli("deploy", "web", "--status")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("new (%s): 4", g.Version)) || !strings.Contains(out, "old: 0") {
		t.Fatalf("deploy --status exited %d:\n%s", code, out)
	}
	if out, _, _ := e.cli("status"); !strings.Contains(out, "version "+g.Version) {
		t.Fatalf("status does not show the version:\n%s", out)
	}
	// The deployed variable stays in force for replacements and across a
	// restart of shoal.
	e.stop()
	e.start()
	e.waitInService("web", 4)
	if g := groupOf(t, e.status(), "web"); g.Version != j.Version || versions(g)[j.Version] != 4 {
		t.Fatalf("after a restart: version %s, versions %v; want %s", g.Version, versions(g), j.Version)
	}
}

// TestPreStartFailureIsRetried: a pre_start hook (the seed's rsync at
// boot) that fails fails its instance, which is started again; the core
// goes on serving and the hook's output is in the instance's log.
func TestPreStartFailureIsRetried(t *testing.T) {
	parallel(t) // waits out hook retries, no load
	mark := filepath.Join(t.TempDir(), "synced-once")
	g := groupSpec{Name: "web", Min: 1, Max: 2,
		Extra: fmt.Sprintf("      pre_start: {command: [/bin/sh, -c, 'if [ -e %s ]; then echo \"rsync ok for $1\"; else touch %s; echo \"rsync failed for $1\"; exit 1; fi', hook, '{{.Name}}'], timeout: 10s}\n", mark, mark),
	}
	e := newEnv(t, "", g)
	e.start()
	e.waitInService("web", 1)
	st := groupOf(t, e.status(), "web")
	found := false
	for _, f := range st.LastFailures {
		found = found || strings.Contains(f.Reason, "pre_start: exit status 1")
	}
	if !found {
		t.Fatalf("no failure names the pre_start hook: %+v", st.LastFailures)
	}
	b, err := os.ReadFile(filepath.Join(e.stateDir(), "logs", "web-001.log"))
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	if i, k := strings.Index(log, "rsync failed for web-001"), strings.Index(log, "rsync ok for web-001"); i < 0 || k < i {
		t.Fatalf("instance log lacks the failed then the passing hook run:\n%s", log)
	}
	// The core is unharmed: it scales as before.
	scaleSync(t, e, "up")
	e.waitInService("web", 2)
}

// TestPreStopRunsBeforeDrain: pre_stop runs before the instance is drained
// and stopped, with its output in the instance's log.
func TestPreStopRunsBeforeDrain(t *testing.T) {
	parallel(t) // waits out a drain, no load
	g := groupSpec{Name: "web", Min: 1, Max: 2,
		Extra: "      pre_stop: {command: [/bin/sh, -c, 'echo \"deregistering $1 from port $2\"', hook, '{{.Name}}', '{{.Port}}'], timeout: 5s}\n",
	}
	e := newEnv(t, "", g)
	e.start()
	e.waitInService("web", 1)
	scaleSync(t, e, "up")
	e.waitInService("web", 2)
	addr := ""
	for _, in := range groupOf(t, e.status(), "web").Instances {
		if in.Name == "web-002" {
			addr = in.Addr
		}
	}
	scaleSync(t, e, "down")
	b, err := os.ReadFile(filepath.Join(e.stateDir(), "logs", "web-002.log"))
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	hook := strings.Index(log, "deregistering web-002 from port "+port)
	done := strings.Index(log, "shoal: pre_stop done")
	term := strings.Index(log, "shutting down")
	if hook < 0 || done < hook || term < done {
		t.Fatalf("want the pre_stop output, then shoal's line, then the instance stopping:\n%s", log)
	}
	// shoal drained it after the hook: the drain is logged after the hook began.
	if !strings.Contains(e.log.String(), "instance draining") {
		t.Fatalf("no drain logged:\n%s", e.log)
	}
}

// TestDeployRollbackReplacesNewInstancesInService: the first instance of a
// release passes and takes an old one's place, the second fails its
// pre_start; the rollback brings the old version back instance by instance
// (the new one in service is drained only once an old-version replacement
// is ready), with no failed request.
func TestDeployRollbackReplacesNewInstancesInService(t *testing.T) {
	parallel(t)
	marker := filepath.Join(t.TempDir(), "first-new-instance-started")
	// A release=2 instance may start once: the second fails in pre_start.
	e := newEnv(t, "", deployGroup(2, "{max_surge: 1, min_ready: 500ms, failure_threshold: 1}",
		fmt.Sprintf("      pre_start: {command: [/bin/sh, -c, 'if [ \"$RELEASE\" = 2 ]; then [ -e %s ] && exit 1; touch %s; fi; exit 0'], timeout: 10s}\n", marker, marker)))
	e.start()
	e.waitInService("web", 2)
	old := groupOf(t, e.status(), "web").Version

	stop := load(t, e)
	time.Sleep(500 * time.Millisecond)
	out, stderr, code := e.cli("deploy", "web", "--set", "release=2", "--sync")
	t.Logf("shoal deploy:\n%s%s", out, stderr)
	if code != 1 || !strings.Contains(out, "rolled back: ") || !strings.Contains(out, "pre_start: exit status 1") {
		t.Fatalf("deploy exited %d, want 1 with a rollback naming the pre_start failure", code)
	}
	newVersion := strings.TrimSuffix(strings.Fields(out)[8], ",") // "job 1 accepted: group web deploy of version V, ..."
	if !strings.Contains(out, "in-service (version "+newVersion+")") {
		t.Fatalf("no instance of the new version %s went in service before the rollback:\n%s", newVersion, out)
	}
	e.waitInService("web", 2)
	time.Sleep(500 * time.Millisecond)
	res := stop()
	t.Logf("%d requests, %d failures, spread %v", res.Requests, res.Failures, res.ByInstance)
	if res.Failures != 0 {
		t.Fatalf("%d of %d requests failed during the deploy and rollback: %v", res.Failures, res.Requests, res.FailureSamples)
	}
	after := groupOf(t, e.status(), "web")
	if after.Version != old || versions(after)[old] != 2 {
		t.Fatalf("after the rollback: version %s, versions %v; want all on %s", after.Version, versions(after), old)
	}
	e.checkInSync("web")
	// The new instance that served was drained like any other retirement.
	if !strings.Contains(e.log.String(), "for=deploy") || !strings.Contains(e.log.String(), "instance draining") {
		t.Fatalf("no deploy retirement and drain logged:\n%s", e.log)
	}
}

// TestReloadThenDeploy is the config path: the template changes in the
// file, `shoal reload` makes it the configured one (the running instances
// and the serving version stay), and `shoal deploy` rolls it out under load
// and makes it the serving version.
func TestReloadThenDeploy(t *testing.T) {
	parallel(t)
	g := deployGroup(2, "{max_surge: 1}", "")
	e := newEnv(t, "", g)
	e.start()
	e.waitInService("web", 2)
	old := groupOf(t, e.status(), "web").Version

	g.Extra = strings.Replace(g.Extra, `release: "1"`, `release: "2"`, 1)
	e.writeConfig("", g)
	e.reload()
	st := groupOf(t, e.status(), "web")
	if st.Version != old || st.Configured == "" || st.Configured == old || versions(st)[old] != 2 {
		t.Fatalf("after the reload: serving %s (was %s), configured %q, instances %v; want the old version serving on both and a new one configured", st.Version, old, st.Configured, versions(st))
	}
	if out, _, _ := e.cli("deploy", "web", "--status"); !strings.Contains(out, "new ("+st.Configured+"): 0") || !strings.Contains(out, "old ("+old+"): 2") {
		t.Fatalf("deploy --status after the reload:\n%s", out)
	}
	if out, _, _ := e.cli("status"); !strings.Contains(out, "configured "+st.Configured+", not deployed") {
		t.Fatalf("status after the reload does not show the configured version:\n%s", out)
	}

	stop := load(t, e)
	time.Sleep(300 * time.Millisecond)
	out, stderr, code := e.cli("deploy", "web", "--sync")
	if code != 0 {
		t.Fatalf("deploy exited %d:\n%s%s", code, out, stderr)
	}
	time.Sleep(300 * time.Millisecond)
	checkNoFailures(t, "deploy after a reload", stop())
	// It replaced every instance: not a no-op.
	if list, err := e.client().Jobs(context.Background(), "web", 1); err != nil || list[0].State != jobrun.Done || list[0].Noop {
		t.Fatalf("deploy job %+v, %v; want done, not a no-op", list, err)
	}
	if after := groupOf(t, e.status(), "web"); after.Version != st.Configured || after.Configured != "" || versions(after)[st.Configured] != 2 || len(after.Instances) != 2 {
		t.Fatalf("after the deploy: serving %s, configured %q, versions %v; want both on %s, serving", after.Version, after.Configured, versions(after), st.Configured)
	}
	e.checkInSync("web")
}

// TestPolicyWaitsForDeploy: a policy that wants to scale while a deploy
// runs is held back with the deploy's job as the reason (one job per
// group), and the deploy finishes on every instance.
func TestPolicyWaitsForDeploy(t *testing.T) {
	parallel(t) // waits out a deploy and a policy, no load
	g := deployGroup(1, "{max_surge: 1, min_ready: 2s}", "")
	g.Max, g.CooldownUp = 3, "1h"
	// Scales 1 → 2 at once, then wants 3 but waits for its cooldown (the
	// deploy's surge instance counts in size, hence below 4).
	g.Extra += "    autoscale:\n      rules:\n        - {name: grow, metric: size, below: 4, for: 2s, action: up}\n"
	e := newEnv(t, "metrics: {warmup: 1s}\n", g)
	e.start()
	e.waitEvent("the policy scales 1 → 2", 30*time.Second, 0, accepted("grow", "up"))
	e.waitInService("web", 2)

	out, stderr, code := e.cli("deploy", "web", "--set", "release=2")
	if code != 0 {
		t.Fatalf("deploy exited %d:\n%s%s", code, out, stderr)
	}
	id := strings.Fields(out)[1]
	held := e.waitEvent("the policy is held back by the deploy", 30*time.Second, 0, func(ev api.Event) bool {
		return ev.Code == "job_running" && strings.Contains(ev.Reason, "job "+id+" is still running")
	})
	t.Logf("held back: %s", held.Reason)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	j, err := e.client().Job(ctx, id, 2*time.Minute)
	if err != nil || j.State != jobrun.Done {
		t.Fatalf("deploy job %+v, %v; want done", j, err)
	}
	if st := groupOf(t, e.status(), "web"); st.Desired != 2 || versions(st)[j.Version] != 2 {
		t.Fatalf("after the deploy: desired %d, versions %v; want 2 on %s", st.Desired, versions(st), j.Version)
	}
}

// cliWithin runs the CLI like cli but fails the test if it has not
// returned within d: a deploy --sync that never ends is the defect.
func (e *shoalEnv) cliWithin(d time.Duration, args ...string) (string, string, int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "shoal"), append(args, "-c", e.cfgPath)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		e.t.Fatalf("shoal %s did not return within %s:\n%s%s", strings.Join(args, " "), d, out.String(), errb.String())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		e.t.Fatal(err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// killInstance SIGKILLs the named instance's process.
func killInstance(t *testing.T, e *shoalEnv, name string) (pid int) {
	t.Helper()
	for _, in := range groupOf(t, e.status(), "web").Instances {
		if in.Name == name {
			if err := syscall.Kill(in.PID, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			return in.PID
		}
	}
	t.Fatalf("no instance %s", name)
	return 0
}

// TestDeployAfterReloadRollsBackToServing is the ordinary workflow with a
// broken release: the template is edited in the file (its /healthz now
// answers 500), `shoal reload`, `shoal deploy web --sync`. The reload does
// not put the never-served template in force; the deploy fails at the first
// new instance and rolls back to what the instances in service run, and
// --sync returns with the job failed and the reason. The group serves from
// the old version throughout with no failed request, takes a scale request
// afterwards, and — across a kill -9 of the core too — replaces a crashed
// instance with the old version, not the reloaded one.
func TestDeployAfterReloadRollsBackToServing(t *testing.T) {
	parallel(t)
	g := deployGroup(2, "{max_surge: 1, min_ready: 500ms, failure_threshold: 1}", "")
	e := newEnv(t, "", g)
	e.start()
	e.waitInService("web", 2)
	old := groupOf(t, e.status(), "web").Version

	stop := load(t, e)
	time.Sleep(300 * time.Millisecond)
	g.Extra = strings.Replace(g.Extra, `{health: "200", release: "1"}`, `{health: "500", release: "2"}`, 1)
	e.writeConfig("", g)
	e.reload()
	st := groupOf(t, e.status(), "web")
	if st.Version != old || st.Configured == "" || st.Configured == old || versions(st)[old] != 2 {
		t.Fatalf("after the reload: serving %q, configured %q, instances %v; want %s serving on both and the reloaded version configured", st.Version, st.Configured, versions(st), old)
	}
	broken := st.Configured

	began := time.Now()
	out, stderr, code := e.cliWithin(90*time.Second, "deploy", "web", "--sync")
	t.Logf("shoal deploy returned after %s:\n%s%s", time.Since(began).Round(time.Millisecond), out, stderr)
	if code != 1 || !strings.Contains(out, "job 1 failed") || !strings.Contains(out, "rolled back: web-003 failed health check 2 times: HTTP 500") {
		t.Fatalf("deploy of a broken release exited %d, want 1 with the job failed and the rollback reason", code)
	}
	if want := "rolling back to " + old; !strings.Contains(e.log.String(), want) {
		t.Fatalf("the log lacks %q (the version in service)", want)
	}
	e.waitInService("web", 2)
	time.Sleep(300 * time.Millisecond)
	res := stop()
	checkNoFailures(t, "deploy and rollback after a reload", res)
	for name := range res.ByInstance {
		if name != "web-001" && name != "web-002" {
			t.Fatalf("%s took requests; only the old version's web-001 and web-002 should: %v", name, res.ByInstance)
		}
	}
	after := groupOf(t, e.status(), "web")
	if after.Version != old || after.Configured != broken || after.Deploying != "" || versions(after)[old] != 2 || len(after.Instances) != 2 {
		t.Fatalf("after the rollback: serving %q, configured %q, deploying %q, instances %v; want both on %s", after.Version, after.Configured, after.Deploying, versions(after), old)
	}
	e.checkInSync("web")
	list, err := e.client().Jobs(context.Background(), "web", 1)
	if err != nil {
		t.Fatal(err)
	}
	if j := list[0]; j.Kind != jobrun.Deploy || j.State != jobrun.Failed || j.Version != broken || !strings.HasPrefix(j.Reason, "rolled back: web-003 failed health check 2 times: HTTP 500") {
		t.Fatalf("job %+v: want a failed deploy of %s with the rollback reason", j, broken)
	}

	// The job is over: a scale request is accepted and starts the old version.
	scaleSync(t, e, "up")
	e.waitInService("web", 3)
	if st := groupOf(t, e.status(), "web"); versions(st)[old] != 3 {
		t.Fatalf("after scaling up: instances %v, want 3 on %s", versions(st), old)
	}

	// kill -9 of the core loses nothing: the serving version is the stored
	// one, and a crashed instance is replaced by it.
	e.kill9()
	e.start()
	e.waitInService("web", 3)
	if st := groupOf(t, e.status(), "web"); st.Version != old || st.Configured != broken {
		t.Fatalf("after kill -9 and restart: serving %q, configured %q; want %s and %s", st.Version, st.Configured, old, broken)
	}
	killed := killInstance(t, e, "web-002")
	e.eventually("web-002 is replaced", 60*time.Second, func() error {
		st := groupOf(t, e.status(), "web")
		for _, in := range st.Instances {
			// The killed process itself reads as in service until shoal
			// sees it exit: only a new pid is the replacement.
			if in.Name == "web-002" && in.PID != killed && in.State == group.InService && in.Version == old && st.InService == 3 {
				return nil
			}
		}
		return fmt.Errorf("instances %+v", st.Instances)
	})
	if st := groupOf(t, e.status(), "web"); versions(st)[old] != 3 {
		t.Fatalf("after the replacement: instances %v, want 3 on %s", versions(st), old)
	}
	e.checkInSync("web")
}

// TestDeployRollbackThatCannotFinishFails: the new release fails in
// pre_start and, doing so, breaks the old one too (its pre_start fails
// while a marker file exists). The rollback cannot bring an old-version
// instance up: after failure_threshold failures the job fails with both
// reasons instead of retrying for ever, the lock is free, and the group
// recovers on the old version by itself once the marker is gone.
func TestDeployRollbackThatCannotFinishFails(t *testing.T) {
	parallel(t) // waits out a failing rollback, no load
	marker := filepath.Join(t.TempDir(), "old-version-broken")
	e := newEnv(t, "", deployGroup(2, "{max_surge: 0, max_unavailable: 1, failure_threshold: 1}",
		fmt.Sprintf("      pre_start: {command: [/bin/sh, -c, 'if [ \"$RELEASE\" = 2 ]; then touch %s; exit 1; fi; [ ! -e %s ]'], timeout: 10s}\n", marker, marker)))
	e.start()
	e.waitInService("web", 2)
	old := groupOf(t, e.status(), "web").Version

	began := time.Now()
	out, stderr, code := e.cliWithin(90*time.Second, "deploy", "web", "--set", "release=2", "--sync")
	t.Logf("shoal deploy returned after %s:\n%s%s", time.Since(began).Round(time.Millisecond), out, stderr)
	if code != 1 || !strings.Contains(out, "rolled back: ") || !strings.Contains(out, "the rollback to "+old+" failed: ") {
		t.Fatalf("deploy exited %d, want 1 with the rollback's own failure", code)
	}
	list, err := e.client().Jobs(context.Background(), "web", 1)
	if err != nil {
		t.Fatal(err)
	}
	if j := list[0]; j.State != jobrun.Failed || strings.Count(j.Reason, "pre_start: exit status 1") != 2 {
		t.Fatalf("job %+v: want failed, naming both pre_start failures", j)
	}
	if st := groupOf(t, e.status(), "web"); st.Version != old || st.Deploying != "" || st.InService != 1 {
		t.Fatalf("after the failed rollback: serving %q, deploying %q, %d in service; want %s, none, 1", st.Version, st.Deploying, st.InService, old)
	}
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	// Back-off after three crashes is at most 4 s; one more failed attempt may
	// double it.
	e.eventually("the group recovers on the old version", 60*time.Second, func() error {
		if st := groupOf(t, e.status(), "web"); st.InService != 2 || versions(st)[old] != 2 {
			return fmt.Errorf("%d in service, versions %v", st.InService, versions(st))
		}
		return nil
	})
	scaleSync(t, e, "up")
	if st := groupOf(t, e.status(), "web"); versions(st)[old] != 3 {
		t.Fatalf("after scaling up: versions %v, want 3 on %s", versions(st), old)
	}
	e.checkInSync("web")
}

// TestReloadRemovingGroupFailsItsDeploy removes a group by a reload while
// a deploy rolls it out: the deploy's job fails saying the group was
// removed (it did not put its version on any instance), and the group,
// added back, serves the version it served, not the interrupted deploy's.
func TestReloadRemovingGroupFailsItsDeploy(t *testing.T) {
	parallel(t)
	web := deployGroup(2, "{max_surge: 1, min_ready: 3s, failure_threshold: 1}", "")
	other := groupSpec{Name: "api", Min: 1, Max: 1, Extra: "    path_prefixes: [/api]\n"}
	e := newEnv(t, "", web, other)
	e.start()
	e.waitInService("web", 2)
	e.waitInService("api", 1)
	before := groupOf(t, e.status(), "web").Version

	ctx := context.Background()
	j, err := e.client().Deploy(ctx, "web", api.DeployRequest{Set: map[string]string{"release": "2"}})
	if err != nil {
		t.Fatal(err)
	}
	e.eventually("a new instance of the deploy in service", 15*time.Second, func() error {
		if v := versions(groupOf(t, e.status(), "web"))[j.Version]; v == 0 {
			return fmt.Errorf("no instance of %s yet", j.Version)
		}
		return nil
	})
	e.removeGroupFailsJob(ctx, j.ID, "deploy", other)

	e.writeConfig("", web, other)
	if out := e.reload(); !strings.Contains(out, "added web") {
		t.Fatalf("shoal reload output: %q", out)
	}
	e.waitInService("web", 2)
	if after := groupOf(t, e.status(), "web"); after.Version != before || versions(after)[before] != 2 {
		t.Fatalf("the group added back serves %s, instances %v; want %s, what it served before the interrupted deploy", after.Version, versions(after), before)
	}
	e.checkInSync("web")
	e.checkInSync("api")
}
