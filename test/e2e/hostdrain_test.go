package e2e

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
)

// TestSSHHostDrain: `shoal hosts drain` moves a host's 4 instances (a
// group of 4, packed on it) to the other host one at a time, launch before
// terminate, under keep-alive load: no request fails, the host ends empty
// and cordoned, and the drain reports all 4 moved.
func TestSSHHostDrain(t *testing.T) {
	parallel(t)
	lab := newLab(t, 2)
	g := sshGroup("web", "rack", 4, 4, "    placement: {strategy: pack}\n    disruption: {max_unavailable: 1}\n")
	e := newEnv(t, sshTimeouts+sshProviders(lab, t.TempDir(), map[string][]sshHost{"rack": {{h: lab.Hosts[0]}, {h: lab.Hosts[1]}}}), g)
	e.start()
	e.waitInService("web", 4)
	a, b := lab.Hosts[0], lab.Hosts[1]
	if e.perHost("web")[b.Addr] == 4 {
		a, b = b, a
	}
	if got := e.perHost("web"); got[a.Addr] != 4 {
		t.Fatalf("pack: %v, want all 4 on one host", got)
	}
	stop := sshLoad(t, e)
	time.Sleep(500 * time.Millisecond)
	out, stderr, code := e.cli("hosts", "drain", a.Addr)
	if code != 0 || !strings.Contains(out, "moving its 4 instance(s)") {
		t.Fatalf("hosts drain exited %d:\n%s%s", code, out, stderr)
	}
	e.eventually("the drain ends", 2*time.Minute, func() error {
		ds, err := e.client().HostDrains(context.Background())
		if err != nil {
			return err
		}
		if len(ds) != 1 || ds[0].State == "running" {
			return fmt.Errorf("drains %+v", ds)
		}
		if ds[0].State != "done" || len(ds[0].Moved) != 4 {
			t.Fatalf("drain ended %+v", ds[0])
		}
		return nil
	})
	e.waitInService("web", 4)
	res := stop()
	t.Logf("%d requests, %d failed", res.Requests, res.Failures)
	if res.Failures != 0 {
		t.Fatalf("%d of %d requests failed during the drain: %v", res.Failures, res.Requests, res.FailureSamples)
	}
	if got := e.perHost("web"); got[a.Addr] != 0 || got[b.Addr] != 4 {
		t.Fatalf("after the drain: %v, want all 4 on %s", got, b.Addr)
	}
	if !e.hostStatuses()[a.Addr].Cordoned {
		t.Fatal("the drained host is not cordoned")
	}
	if out, _, _ := e.cli("hosts", "drains"); !strings.Contains(out, "done, 4 of 4 moved") {
		t.Errorf("shoal hosts drains:\n%s", out)
	}
}

// TestSSHHostDrainResume: a host drain of 2 instances (of a group of 4)
// under keep-alive load, busy loops saturating the cores, with shoal killed (kill -9) while it replaces the
// second: HAProxy and the instances keep serving, the drain stays recorded
// in the store, and the restarted shoal resumes it. The host ends empty
// and cordoned, the group whole on the other host, not one request failed,
// and no instance is left running that shoal does not list.
func TestSSHHostDrainResume(t *testing.T) {
	parallel(t)
	lab := newLab(t, 2)
	a, b := lab.Hosts[0], lab.Hosts[1]
	g := sshGroup("web", "rack", 4, 5, "    placement: {strategy: spread}\n    disruption: {max_unavailable: 1}\n")
	// A new instance passes its gate in about 4 s: the kill lands while
	// the second replacement is under way.
	g.Health = strings.Replace(g.Health, "rise: 1,", "rise: 8,", 1)
	// No host dies here. Restarted under busy loops, shoal's handshakes
	// took longer than 2 s, the only other host was taken for down and the
	// resumed drain's replacement found none.
	e := newEnv(t, sshTimeouts+calmSSH(sshProviders(lab, t.TempDir(), map[string][]sshHost{"rack": {{h: a}, {h: b}}})), g)
	e.start()
	e.waitInService("web", 4)
	if got := e.perHost("web"); got[a.Addr] != 2 || got[b.Addr] != 2 {
		t.Fatalf("spread: %v", got)
	}
	// The drain, the kill and the restart run with the cores saturated.
	busy(t)
	stopHogs := cpuHogs(t, 2, 4*time.Minute)
	defer stopHogs()
	stop := sshLoad(t, e)
	time.Sleep(500 * time.Millisecond)
	if out, stderr, code := e.cli("hosts", "drain", a.Addr); code != 0 || !strings.Contains(out, "moving its 2 instance(s)") {
		t.Fatalf("hosts drain exited %d:\n%s%s", code, out, stderr)
	}
	e.eventually("the drain replaces the second instance", 2*time.Minute, func() error {
		ds, err := e.client().HostDrains(context.Background())
		if err != nil {
			return err
		}
		if len(ds) != 1 || ds[0].State != "running" {
			t.Fatalf("drains %+v: want the one running", ds)
		}
		if !strings.HasPrefix(ds[0].Progress, "2/2: replacing") {
			return fmt.Errorf("progress %q", ds[0].Progress)
		}
		return nil
	})
	e.kill9()
	t.Log("shoal killed mid-drain")
	e.start()
	e.eventually("the resumed drain ends", 2*time.Minute, func() error {
		ds, err := e.client().HostDrains(context.Background())
		if err != nil {
			return err
		}
		if len(ds) != 1 || ds[0].State == "running" {
			return fmt.Errorf("drains %+v", ds)
		}
		if ds[0].State != "done" {
			t.Fatalf("the resumed drain ended %+v", ds[0])
		}
		return nil
	})
	e.waitInService("web", 4)
	e.eventually("the group settles at 4, all on "+b.Addr, time.Minute, func() error {
		got := e.perHost("web")
		if got[a.Addr] != 0 || got[b.Addr] != 4 {
			return fmt.Errorf("per host %v", got)
		}
		return nil
	})
	res := stop()
	stopHogs()
	t.Logf("%d requests, %d failed", res.Requests, res.Failures)
	if res.Failures != 0 {
		t.Errorf("%d of %d requests failed across the drain and the kill: %v", res.Failures, res.Requests, res.FailureSamples)
	}
	shareAgain(t)
	if !e.hostStatuses()[a.Addr].Cordoned {
		t.Error("the drained host is not cordoned after the restart")
	}
	// What runs on the hosts is what shoal lists: nothing leaked.
	listed := map[string]bool{}
	for _, in := range groupOf(t, e.status(), "web").Instances {
		listed[in.Name] = true
	}
	e.eventually("no instance runs that shoal does not list", 30*time.Second, func() error {
		for _, h := range lab.Hosts {
			for pid, name := range e.hostInstances(h) {
				if !listed[name] {
					return fmt.Errorf("%s runs %s (pid %d), which shoal does not list (%v)", h.Addr, name, pid, listed)
				}
			}
		}
		return nil
	})
	if n := len(e.hostInstances(a)) + len(e.hostInstances(b)); n != 4 {
		t.Errorf("%d instances run on the hosts, want 4", n)
	}
	if !strings.Contains(e.log.String(), "host drain resumed") {
		t.Error("shoal's log does not say the drain resumed")
	}
	// The drain's record ended with it: another restart resumes nothing.
	e.kill9()
	e.start()
	time.Sleep(time.Second)
	if ds, err := e.client().HostDrains(context.Background()); err != nil || len(ds) != 0 {
		t.Errorf("after a second restart: drains %+v, %v; want none", ds, err)
	}
}

// TestSSHHostDrainNoRoom: a host drain that cannot finish, the other host
// being full (capacity 2 instances each, a group of 4 spread 2/2), reports
// each instance left and why, and changes nothing else: the host stays
// cordoned, the same 4 instances serve (names and pids), none is stopped
// or started, and under keep-alive load no request fails.
func TestSSHHostDrainNoRoom(t *testing.T) {
	parallel(t)
	lab := newLab(t, 2)
	a, b := lab.Hosts[0], lab.Hosts[1]
	g := sshGroup("web", "rack", 4, 5, "    placement: {strategy: spread}\n    disruption: {max_unavailable: 1}\n")
	full := "capacity: {instances: 2}"
	e := newEnv(t, sshTimeouts+sshProviders(lab, t.TempDir(), map[string][]sshHost{"rack": {{h: a, extra: full}, {h: b, extra: full}}}), g)
	e.start()
	e.waitInService("web", 4)
	before := map[string]int{}
	for _, in := range groupOf(t, e.status(), "web").Instances {
		before[in.Name] = in.PID
	}
	stop := sshLoad(t, e)
	time.Sleep(500 * time.Millisecond)
	if out, stderr, code := e.cli("hosts", "drain", a.Addr); code != 0 {
		t.Fatalf("hosts drain exited %d:\n%s%s", code, out, stderr)
	}
	var d api.HostDrain
	e.eventually("the drain ends", 2*time.Minute, func() error {
		ds, err := e.client().HostDrains(context.Background())
		if err != nil {
			return err
		}
		if len(ds) != 1 || ds[0].State == "running" {
			return fmt.Errorf("drains %+v", ds)
		}
		d = ds[0]
		return nil
	})
	t.Logf("drain: %+v", d)
	if d.State != "incomplete" || len(d.Moved) != 0 || len(d.Left) != 2 {
		t.Fatalf("the drain ended %+v; want incomplete, none moved, both left", d)
	}
	for _, l := range d.Left {
		if !strings.Contains(l.Reason, "replace failed") || !strings.Contains(l.Reason, "capacity") {
			t.Errorf("%s left because %q; want the failed replacement's reason naming the capacity", l.Instance, l.Reason)
		}
	}
	if out, _, _ := e.cli("hosts", "drains"); !strings.Contains(out, "incomplete, 0 of 2 moved") {
		t.Errorf("shoal hosts drains:\n%s", out)
	}
	e.waitInService("web", 4)
	after := map[string]int{}
	for _, in := range groupOf(t, e.status(), "web").Instances {
		after[in.Name] = in.PID
	}
	if !maps.Equal(before, after) {
		t.Errorf("instances before the drain %v, after %v; want the same", before, after)
	}
	if got := e.perHost("web"); got[a.Addr] != 2 || got[b.Addr] != 2 {
		t.Errorf("after the drain: %v, want 2 and 2", got)
	}
	if !e.hostStatuses()[a.Addr].Cordoned {
		t.Error("the host is not cordoned")
	}
	res := stop()
	t.Logf("%d requests, %d failed", res.Requests, res.Failures)
	if res.Failures != 0 {
		t.Errorf("%d of %d requests failed: %v", res.Failures, res.Requests, res.FailureSamples)
	}
	found := false
	for _, ev := range e.events(api.EventsQuery{Limit: 200}) {
		found = found || (ev.Rule == "host" && ev.Code == "drain_failed" && strings.Contains(ev.Reason, "2 instance(s) left"))
	}
	if !found {
		t.Error("no host.drain_failed event naming the 2 instances left")
	}
}

// TestSSHHostDrainWaitsForWindow: a host drain outside its group's
// disruption window moves nothing: the drain says it waits and why, and
// shoal events says so once (recycle.waiting, naming the host drain); the
// instances serve on where they were.
func TestSSHHostDrainWaitsForWindow(t *testing.T) {
	parallel(t)
	lab := newLab(t, 2)
	a, b := lab.Hosts[0], lab.Hosts[1]
	// A one-minute window half a day away: never now.
	at := time.Now().UTC().Add(12 * time.Hour)
	window := fmt.Sprintf("%s-%s", at.Format("15:04"), at.Add(time.Minute).Format("15:04"))
	g := sshGroup("web", "rack", 2, 3, fmt.Sprintf("    placement: {strategy: spread}\n    disruption: {max_unavailable: 1, windows: [%q]}\n", window+" UTC"))
	e := newEnv(t, sshTimeouts+sshProviders(lab, t.TempDir(), map[string][]sshHost{"rack": {{h: a}, {h: b}}}), g)
	e.start()
	e.waitInService("web", 2)
	before := e.perHost("web")
	if out, stderr, code := e.cli("hosts", "drain", a.Addr); code != 0 {
		t.Fatalf("hosts drain exited %d:\n%s%s", code, out, stderr)
	}
	e.eventually("the drain says it waits for the window", 30*time.Second, func() error {
		ds, err := e.client().HostDrains(context.Background())
		if err != nil {
			return err
		}
		if len(ds) != 1 || ds[0].State != "running" || !strings.Contains(ds[0].Progress, "waits: outside window") {
			return fmt.Errorf("drains %+v", ds)
		}
		return nil
	})
	time.Sleep(3 * time.Second) // a poll or more of waiting: still one event
	n := 0
	for _, ev := range e.events(api.EventsQuery{Group: "web", Limit: 200}) {
		if ev.Rule == "recycle" && ev.Code == "waiting" {
			n++
			if !strings.Contains(ev.Reason, "host "+a.Addr+" drain: the next replacement waits: outside window") {
				t.Errorf("recycle.waiting says %q; want the host drain and the window", ev.Reason)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d recycle.waiting events, want 1 (once per reason)", n)
	}
	if got := e.perHost("web"); !maps.Equal(got, before) {
		t.Errorf("instances per host %v while the drain waits, want %v", got, before)
	}
}
