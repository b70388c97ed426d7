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
