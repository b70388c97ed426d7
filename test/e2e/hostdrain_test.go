package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestSSHHostDrain: `shoal hosts drain` moves a host's instances (2 of a
// group of 4) to the other host one at a time, launch before terminate,
// under keep-alive load: no request fails, the host ends empty and
// cordoned, and the drain reports both moved.
func TestSSHHostDrain(t *testing.T) {
	parallel(t)
	lab := newLab(t, 2)
	a, b := lab.Hosts[0], lab.Hosts[1]
	g := sshGroup("web", "rack", 4, 4, "    placement: {strategy: spread}\n    disruption: {max_unavailable: 1}\n")
	e := newEnv(t, sshTimeouts+sshProviders(lab, t.TempDir(), map[string][]sshHost{"rack": {{h: a}, {h: b}}}), g)
	e.start()
	e.waitInService("web", 4)
	if got := e.perHost("web"); got[a.Addr] != 2 || got[b.Addr] != 2 {
		t.Fatalf("spread: %v", got)
	}
	stop := sshLoad(t, e)
	time.Sleep(500 * time.Millisecond)
	out, stderr, code := e.cli("hosts", "drain", a.Addr)
	if code != 0 || !strings.Contains(out, "moving its 2 instance(s)") {
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
		if ds[0].State != "done" || len(ds[0].Moved) != 2 {
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
	if out, _, _ := e.cli("hosts", "drains"); !strings.Contains(out, "done, 2 of 2 moved") {
		t.Errorf("shoal hosts drains:\n%s", out)
	}
}

// TestSSHHostDrainResume: a host drain of 2 instances (of a group of 4)
// under keep-alive load, with shoal killed (kill -9) while it replaces the
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
	e := newEnv(t, sshTimeouts+sshProviders(lab, t.TempDir(), map[string][]sshHost{"rack": {{h: a}, {h: b}}}), g)
	e.start()
	e.waitInService("web", 4)
	if got := e.perHost("web"); got[a.Addr] != 2 || got[b.Addr] != 2 {
		t.Fatalf("spread: %v", got)
	}
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
	t.Logf("%d requests, %d failed", res.Requests, res.Failures)
	if res.Failures != 0 {
		t.Errorf("%d of %d requests failed across the drain and the kill: %v", res.Failures, res.Requests, res.FailureSamples)
	}
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
