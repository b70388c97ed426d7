package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/jobrun"
)

// act runs `shoal instances ARGS... --sync` and checks its exit status.
func (e *shoalEnv) act(wantCode int, args ...string) string {
	e.t.Helper()
	out, stderr, code := e.cli(append(append([]string{"instances"}, args...), "--sync")...)
	e.t.Logf("shoal instances %s: exit %d\n%s%s", strings.Join(args, " "), code, out, stderr)
	if code != wantCode {
		e.t.Fatalf("shoal instances %s exited %d, want %d:\n%s%s", strings.Join(args, " "), code, wantCode, out, stderr)
	}
	return out + stderr
}

// instance returns the named instance of web in status (ok false if gone).
func (e *shoalEnv) instance(name string) (group.InstanceStatus, bool) {
	e.t.Helper()
	g, err := e.client().Group(context.Background(), "web")
	if err != nil {
		e.t.Fatal(err)
	}
	i := slices.IndexFunc(g.Instances, func(in group.InstanceStatus) bool { return in.Name == name })
	if i < 0 {
		return group.InstanceStatus{}, false
	}
	return g.Instances[i], true
}

// serverStatus is HAProxy's own word for a server of web ("UP", "DRAIN").
func (e *shoalEnv) serverStatus(name string) string {
	e.t.Helper()
	return e.serverStatuses()[name]
}

// serverStatuses reads every server of web's status from one show stat.
func (e *shoalEnv) serverStatuses() map[string]string {
	e.t.Helper()
	c := haproxy.Client{Socket: filepath.Join(e.stateDir(), "haproxy", "admin.sock")}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stats, err := c.Stats(ctx, "web")
	if err != nil {
		e.t.Fatalf("read HAProxy stats: %v", err)
	}
	out := map[string]string{}
	for _, s := range stats {
		out[s.Name] = string(s.Status)
	}
	return out
}

// dayActsUnderLoad runs replace, drain, undrain, standby and resume on a
// group of two under keep-alive load that never retries, hogs busy loops
// saturating the cores: not one request fails, each act's job is done, and
// HAProxy matches shoal's status after each.
func dayActsUnderLoad(t *testing.T, hogs int) {
	e := newEnv(t, "", groupSpec{Name: "web", Min: 1, Max: 3})
	e.start()
	if out, stderr, code := e.cli("scale", "web", "--size", "2", "--sync"); code != 0 {
		t.Fatalf("scale to 2 exited %d:\n%s%s", code, out, stderr)
	}
	if hogs > 0 {
		busy(t) // the saturated machine is this step's own and its batch's
		stopHogs := cpuHogs(t, hogs, 3*time.Minute)
		defer stopHogs()
	}
	stop := noRetryLoad(t, e, "http://"+e.listen+"/", nil)
	time.Sleep(time.Second)

	old, _ := e.instance("web-001")
	out := e.act(0, "replace", "web-001")
	if !strings.Contains(out, "replace web-001") || !strings.Contains(out, "launch before terminate") {
		t.Fatalf("replace output does not name the instance and its order:\n%s", out)
	}
	e.waitInService("web", 2)
	if in, ok := e.instance("web-001"); ok && in.PID == old.PID {
		t.Fatalf("web-001 still runs pid %d after its replace", old.PID)
	}
	e.checkInSync("web")

	// Two at once: one after the other, each with a surge of one.
	var pids []int
	var names []string
	for _, in := range groupOf(t, e.status(), "web").Instances {
		pids, names = append(pids, in.PID), append(names, in.Name)
	}
	out = e.act(0, append([]string{"replace"}, names...)...)
	e.waitInService("web", 2)
	for _, in := range groupOf(t, e.status(), "web").Instances {
		if slices.Contains(pids, in.PID) {
			t.Fatalf("%s still runs pid %d after replacing %v:\n%s", in.Name, in.PID, names, out)
		}
	}
	e.checkInSync("web")

	// drain: a replacement serves first, then the instance leaves rotation and runs on.
	dn := groupOf(t, e.status(), "web").Instances[1].Name
	d0, _ := e.instance(dn)
	e.act(0, "drain", dn)
	d, ok := e.instance(dn)
	if !ok || d.State != group.Drained || d.PID != d0.PID || !alive(d.PID) {
		t.Fatalf("%s after drain: %+v (present %t), want drained, pid %d running", dn, d, ok, d0.PID)
	}
	if st := e.serverStatus(dn); st != "DRAIN" {
		t.Fatalf("HAProxy has %s %q, want DRAIN", dn, st)
	}
	g, _ := e.client().Group(context.Background(), "web")
	if g.InService != 2 || len(g.Instances) != 3 {
		t.Fatalf("after drain: %d in service of %d instances, want 2 of 3 (the replacement serves)", g.InService, len(g.Instances))
	}
	out = e.act(3, "drain", dn)
	if !strings.Contains(out, dn+" is already drained") {
		t.Fatalf("a second drain does not say why it was refused:\n%s", out)
	}
	e.act(0, "undrain", dn)
	e.waitInService("web", 2)
	e.checkInSync("web")

	// standby and resume, with --decrement: the group shrinks by one while
	// the instance waits, and grows back on resume.
	name := groupOf(t, e.status(), "web").Instances[0].Name
	e.act(0, "standby", name, "--decrement")
	g, _ = e.client().Group(context.Background(), "web")
	if g.Desired != 1 {
		t.Fatalf("desired after standby --decrement = %d, want 1", g.Desired)
	}
	e.act(0, "resume", name)
	e.waitInService("web", 2)
	// standby without --decrement keeps the size with another instance.
	e.act(0, "standby", name)
	g, _ = e.client().Group(context.Background(), "web")
	if s, _ := e.instance(name); s.State != group.Standby || g.InService != 2 || g.Desired != 2 {
		t.Fatalf("after standby: %s %s, %d in service for desired %d; want standby, 2 for 2", name, s.State, g.InService, g.Desired)
	}
	e.act(0, "resume", name)
	e.waitInService("web", 2)
	time.Sleep(500 * time.Millisecond)
	res := stop()
	checkNoFailures(t, fmt.Sprintf("day-two acts (%d CPU hogs)", hogs), res)
	e.checkInSync("web")

	// Each act is an event.
	var types []string
	for _, ev := range e.events(api.EventsQuery{Group: "web"}) {
		types = append(types, ev.Rule+"."+string(ev.Code))
	}
	for _, want := range []string{"instance.replaced", "instance.drained", "instance.undrained", "instance.standby", "instance.resumed"} {
		if !slices.Contains(types, want) {
			t.Errorf("no %s event in %v", want, types)
		}
	}
}

func TestInstancesActsUnderLoad(t *testing.T) {
	parallel(t)
	dayActsUnderLoad(t, 0)
}

func TestInstancesActsUnderCPUContention(t *testing.T) {
	parallel(t)
	dayActsUnderLoad(t, 3)
}

// TestInstancesProtect: a scale-in takes the unprotected instance and stops
// at the protected ones, failing its job with why; the policy's scale-in
// does the same; both protected instances serve on.
func TestInstancesProtect(t *testing.T) {
	parallel(t)
	g := groupSpec{Name: "web", Min: 1, Max: 3}
	const top = "metrics: {warmup: 1s}\n"
	e := newEnv(t, top, g)
	e.start()
	e.waitInService("web", 1)
	if out, stderr, code := e.cli("scale", "web", "--size", "3", "--sync"); code != 0 {
		t.Fatalf("scale to 3 exited %d:\n%s%s", code, out, stderr)
	}
	// web-003 is the newest: scale_in newest would take it first.
	e.act(0, "protect", "web-003", "web-001")
	if in, _ := e.instance("web-003"); !in.Protected {
		t.Fatalf("web-003 not protected in status: %+v", in)
	}
	out := e.act(3, "protect", "web-003")
	if !strings.Contains(out, "web-003 is already protected") {
		t.Fatalf("a second protect does not say why it was refused:\n%s", out)
	}
	out, stderr, code := e.cli("scale", "web", "--size", "1", "--sync")
	t.Logf("scale to 1: exit %d\n%s%s", code, out, stderr)
	if code != 1 || !strings.Contains(out, "scale-in stopped at protected instances (web-001, web-003)") {
		t.Fatalf("scale to 1 exited %d, want 1 (failed) saying it stopped at web-001 and web-003:\n%s%s", code, out, stderr)
	}
	if _, ok := e.instance("web-002"); ok {
		t.Fatal("web-002, the unprotected one, was not retired")
	}
	for _, n := range []string{"web-001", "web-003"} {
		if in, ok := e.instance(n); !ok || in.State != group.InService {
			t.Fatalf("%s after the scale-in: %+v (present %t), want in service", n, in, ok)
		}
	}

	// The policy: a rule that always wants one fewer.
	if out, stderr, code := e.cli("scale", "web", "--size", "3", "--sync"); code != 0 {
		t.Fatalf("scale back to 3 exited %d:\n%s%s", code, out, stderr)
	}
	g.Extra = "    autoscale:\n      rules:\n        - {name: shrink, metric: size, above: 1, for: 1s, action: down}\n"
	e.writeConfig(top, g)
	e.reload()
	var failed jobrun.Job
	e.eventually("a policy job stops at the protected instances", 60*time.Second, func() error {
		list, err := e.client().Jobs(context.Background(), "web", 50)
		if err != nil {
			return err
		}
		for _, j := range list {
			if strings.HasPrefix(j.Source, "policy:") && j.State == jobrun.Failed && strings.Contains(j.Reason, "scale-in stopped at protected instances") {
				failed = j
				return nil
			}
		}
		return fmt.Errorf("none yet among %d jobs", len(list))
	})
	t.Logf("policy job: %+v", failed)
	time.Sleep(2 * time.Second) // more policy passes: still nothing protected goes
	s := groupOf(t, e.status(), "web")
	var names []string
	for _, in := range s.Instances {
		names = append(names, in.Name+" "+string(in.State))
	}
	if !slices.Equal(names, []string{"web-001 in-service", "web-003 in-service"}) {
		t.Fatalf("instances after the policy's scale-in: %v, want only the protected web-001 and web-003, in service", names)
	}
	// Unprotected, it goes: the desired size is 1. The policy's jobs may
	// hold the group's lock for a moment: an act then is ignored, and tried again.
	e.eventually("unprotect web-003", 30*time.Second, func() error {
		out, stderr, code := e.cli("instances", "unprotect", "web-003", "--sync")
		if code != 0 {
			return fmt.Errorf("exit %d: %s%s", code, out, stderr)
		}
		return nil
	})
	e.eventually("the scale-in takes the unprotected web-003", 60*time.Second, func() error {
		if _, ok := e.instance("web-003"); ok {
			return fmt.Errorf("web-003 still there")
		}
		return nil
	})
	e.checkInSync("web")
}

// TestInstancesReplaceFailedGate: a replace whose new instance never
// passes its health gate fails the job with the reason and leaves the old
// instance serving, with no request failed.
func TestInstancesReplaceFailedGate(t *testing.T) {
	parallel(t)
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken")
	// An instance started while the file exists answers its check with 500.
	g := groupSpec{Name: "web", Min: 1, Max: 2, Health: "{path: /healthz, interval: 300ms, rise: 2, fall: 2, timeout: 1s, grace: 4s}",
		Command: fmt.Sprintf(`["/bin/sh", "-c", "s=200; [ -e %s ] && s=500; exec %s --listen 127.0.0.1:{{.Port}} --name {{.Name}} --health-status $s"]`,
			broken, filepath.Join(binDir, "demo-backend"))}
	e := newEnv(t, "", g)
	e.start()
	e.waitInService("web", 1)
	old, _ := e.instance("web-001")
	stop := noRetryLoad(t, e, "http://"+e.listen+"/", nil)
	if err := os.WriteFile(broken, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	out := e.act(1, "replace", "web-001")
	if !strings.Contains(out, "the replacement failed: web-002 health check did not pass within 4s") || !strings.Contains(out, "web-001 serves on") {
		t.Fatalf("the failed replace does not say why, or that web-001 serves on:\n%s", out)
	}
	in, ok := e.instance("web-001")
	if !ok || in.State != group.InService || in.PID != old.PID {
		t.Fatalf("web-001 after the failed replace: %+v (present %t), want in service with pid %d", in, ok, old.PID)
	}
	time.Sleep(time.Second)
	checkNoFailures(t, "a replace that failed its gate", stop())
	e.waitInService("web", 1)
	e.checkInSync("web")
}

// TestInstancesStateSurvivesRestart: protection, a drain and a standby are
// in the store: after kill -9 of shoal and a new start they are as they
// were (HAProxy still has the held ones drained), and undrain and resume
// work on them. Refusals say why: an unknown instance, a drain without a
// replacement below min_size.
func TestInstancesStateSurvivesRestart(t *testing.T) {
	parallel(t)
	e := newEnv(t, "", groupSpec{Name: "web", Min: 2, Max: 4})
	e.start()
	e.waitInService("web", 2)
	out := e.act(2, "drain", "web-009")
	if !strings.Contains(out, `unknown instance "web-009"`) {
		t.Fatalf("drain of an unknown instance does not say so:\n%s", out)
	}
	// The API's answers: JSON errors with the right status.
	for _, tc := range []struct {
		act    string
		req    api.InstancesRequest
		status int
		want   string
	}{
		{"drain", api.InstancesRequest{Instances: []string{"web-009"}}, 404, `unknown instance "web-009"`},
		{"reboot", api.InstancesRequest{Instances: []string{"web-001"}}, 400, `unknown act "reboot"`},
		{"replace", api.InstancesRequest{Instances: []string{"web-001"}, Decrement: true}, 400, "decrement is an option of standby only"},
		{"drain", api.InstancesRequest{}, 400, "name at least one instance"},
	} {
		_, err := e.client().Instances(context.Background(), tc.act, tc.req)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Status != tc.status || !strings.Contains(ae.ErrorResponse.Error, tc.want) {
			t.Errorf("POST /v1/instances/%s %+v: %v, want %d %q", tc.act, tc.req, err, tc.status, tc.want)
		}
	}
	out = e.act(3, "drain", "web-001", "--no-replace")
	if !strings.Contains(out, "below min_size 2") {
		t.Fatalf("drain --no-replace below min_size does not say why:\n%s", out)
	}
	e.act(0, "protect", "web-001")
	e.act(0, "drain", "web-002")
	e.act(0, "standby", "web-003")
	before := groupOf(t, e.status(), "web")
	e.kill9()
	e.start()
	after := groupOf(t, e.status(), "web")
	view := func(g group.Status) string {
		var parts []string
		for _, in := range g.Instances {
			parts = append(parts, fmt.Sprintf("%s %s pid %d protected %t", in.Name, in.State, in.PID, in.Protected))
		}
		return strings.Join(parts, "; ") + fmt.Sprintf("; desired %d", g.Desired)
	}
	if view(after) != view(before) {
		t.Fatalf("after a restart:\n  %s\nbefore:\n  %s", view(after), view(before))
	}
	if in, _ := e.instance("web-001"); !in.Protected {
		t.Fatal("web-001 lost its protection")
	}
	for _, n := range []string{"web-002", "web-003"} {
		if st := e.serverStatus(n); st != "DRAIN" {
			t.Fatalf("HAProxy has %s %q after the restart, want DRAIN", n, st)
		}
	}
	_, body := httpGetUnix(t, e, "/metrics")
	for _, want := range []string{
		`shoal_group_instances{group="web",state="drained"} 1`,
		`shoal_group_instances{group="web",state="standby"} 1`,
		`shoal_group_instances_protected{group="web"} 1`,
		`shoal_group_size{group="web"} 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	e.act(0, "undrain", "web-002")
	e.act(0, "resume", "web-003")
	e.waitInService("web", 2)
	if _, ok := e.instance("web-001"); !ok {
		t.Fatal("the protected web-001 went in the scale-in after undrain and resume")
	}
	e.checkInSync("web")
}
