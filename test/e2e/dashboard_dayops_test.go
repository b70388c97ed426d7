package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/dashboard/tour"
	"github.com/shoal-lb/shoal/internal/group"
)

// TestDashboardDayOps clicks the dashboard's day-two buttons in headless
// Chromium, each confirmed in the page's dialog, on a group of two on the
// ssh provider's namespace hosts under keep-alive load: protect an
// instance, put the other on standby and resume it, cordon and uncordon a
// host, then drain the protected instance's host. Each act's job is shown
// done, and the instance's or host's mark changes on the page and in the
// core; a second drain of the host while it drains, and an act while the
// drain's replace job runs, are refused with their reasons on the page.
// Not one request fails.
func TestDashboardDayOps(t *testing.T) {
	parallel(t) // alone from the tour on: Chromium drives the page
	if _, err := tour.Browser(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip("dashboard browser test skipped:", err)
	}
	lab := newLab(t, 2)
	a, b := lab.Hosts[0], lab.Hosts[1]
	const token = "dayops-s3cret"
	port := freePort(t)
	g := sshGroup("web", "rack", 2, 3, "    placement: {strategy: spread}\n    disruption: {max_unavailable: 1}\n")
	// A new instance passes its gate in about 4 s: the drain's replace
	// job runs long enough for the page to see it and act meanwhile.
	g.Health = strings.Replace(g.Health, "rise: 1,", "rise: 8,", 1)
	e := newEnv(t, sshTimeouts+fmt.Sprintf("admin:\n  listen: 127.0.0.1:%d\n  token: %s\n", port, token)+
		sshProviders(lab, t.TempDir(), map[string][]sshHost{"rack": {{h: a}, {h: b}}}), g)
	e.start()
	e.waitInService("web", 2)
	on := map[string]string{} // host address → its instance
	for _, in := range groupOf(t, e.status(), "web").Instances {
		h, _, _ := net.SplitHostPort(in.Addr)
		on[h] = in.Name
	}
	onA, onB := on[a.Addr], on[b.Addr]
	if onA == "" || onB == "" {
		t.Fatalf("spread: %v", on)
	}
	// Beside the shared tests, Chromium's login and polls were cut off
	// ("context canceled") in two of this stop's runs, as the other
	// dashboard tests' were before they ran alone.
	alone(t)
	stop := sshLoad(t, e)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	p, err := tour.Open(ctx, tour.Options{URL: fmt.Sprintf("http://127.0.0.1:%d", port), Token: token, Group: "web", Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	row := func(name string) string {
		return fmt.Sprintf(`document.querySelector('#instances tbody tr[data-instance=%q]')`, name)
	}
	hostRow := func(addr string) string {
		return fmt.Sprintf(`document.querySelector('#host-table tbody tr[data-host=%q]')`, addr)
	}
	done := func(what string, ans tour.Answer, err error) {
		t.Helper()
		t.Logf("%s: %+v", what, ans)
		if err != nil {
			t.Fatal(err)
		}
		if ans.State != "done" || ans.Job == "" {
			t.Fatalf("%s: the page shows %+v, want its job done", what, ans)
		}
	}
	wait := func(what, expr string) {
		t.Helper()
		if err := p.WaitFor(what, expr); err != nil {
			t.Fatal(err)
		}
	}
	instance := func(name string) group.InstanceStatus {
		t.Helper()
		in, ok := e.instance(name)
		if !ok {
			t.Fatalf("instance %s is gone", name)
		}
		return in
	}

	ans, err := p.InstanceAct(onA, "protect")
	done("protect "+onA, ans, err)
	wait(onA+" marked protected", row(onA)+`.dataset.marks.split(" ").includes("protected")`)
	if !instance(onA).Protected {
		t.Fatalf("%s is not protected in the core", onA)
	}

	ans, err = p.InstanceAct(onB, "standby")
	done("standby "+onB, ans, err)
	wait(onB+" shown on standby", row(onB)+`.dataset.state === "standby" && `+row(onB)+`.dataset.marks.includes("standby")`)
	if s := instance(onB).State; s != group.Standby {
		t.Fatalf("%s is %s in the core, want standby", onB, s)
	}
	ans, err = p.InstanceAct(onB, "resume")
	done("resume "+onB, ans, err)
	wait(onB+" back in service", row(onB)+` === null || `+row(onB)+`.dataset.state === "in-service"`)

	hans, err := p.HostAct(b.Addr, "cordon")
	t.Logf("cordon %s: %+v", b.Addr, hans)
	if err != nil || hans.Error != "" || !strings.Contains(hans.Text, "cordoned") {
		t.Fatalf("cordon %s: %+v, %v", b.Addr, hans, err)
	}
	wait(b.Addr+" marked cordoned", hostRow(b.Addr)+`.dataset.cordoned === "true" && `+hostRow(b.Addr)+`.querySelector('[data-mark="cordoned"]') !== null`)
	if !e.hostStatuses()[b.Addr].Cordoned {
		t.Fatalf("%s is not cordoned in the core", b.Addr)
	}
	if hans, err = p.HostAct(b.Addr, "uncordon"); err != nil || hans.Error != "" {
		t.Fatalf("uncordon %s: %+v, %v", b.Addr, hans, err)
	}
	wait(b.Addr+" uncordoned", hostRow(b.Addr)+`.dataset.cordoned === "false"`)
	if e.hostStatuses()[b.Addr].Cordoned {
		t.Fatalf("%s is still cordoned in the core", b.Addr)
	}
	// The surplus of the resume has gone by scale-in before the drain.
	e.waitInService("web", 2)
	e.eventually("the group settles at 2", time.Minute, func() error {
		if n := len(groupOf(t, e.status(), "web").Instances); n != 2 {
			return fmt.Errorf("%d instances", n)
		}
		return nil
	})

	hans, err = p.HostAct(a.Addr, "drain")
	t.Logf("drain %s: %+v", a.Addr, hans)
	if err != nil || hans.Error != "" || !strings.Contains(hans.Text, "moving its 1 instance(s)") {
		t.Fatalf("drain %s: %+v, %v", a.Addr, hans, err)
	}
	// Refused while it runs: the host's second drain (the API's error) and
	// an act on the group while the drain's replace job runs (an ignored
	// job with its reason).
	wait("the drain's replace job runs", `Array.from(document.querySelectorAll("#jobs tbody tr")).some((tr) => tr.textContent.includes("replace") && tr.textContent.includes("running"))`)
	if ans, err = p.InstanceAct(onB, "protect"); err != nil || ans.State != "ignored" || !strings.Contains(ans.Text, "another job") || !strings.Contains(ans.Text, "is running for group web") {
		t.Errorf("protect %s while the drain's replace job runs: %+v, %v; want it shown ignored with the reason", onB, ans, err)
	}
	if hans, err = p.HostAct(a.Addr, "drain"); err != nil || !strings.Contains(hans.Error, "a drain of this host is running") || !strings.Contains(hans.Text, hans.Error) {
		t.Errorf("a second drain of %s while it drains: %+v, %v; want the page to show it refused", a.Addr, hans, err)
	}
	if instance(onB).Protected {
		t.Errorf("the refused protect of %s protected it", onB)
	}
	wait("the page shows the drain done", hostRow(a.Addr)+`.dataset.drain === "done"`)
	var drainText string
	if err := p.Eval(hostRow(a.Addr)+`.textContent`, &drainText); err != nil || !strings.Contains(drainText, "done, 1 of 1 moved") {
		t.Errorf("host row after the drain: %q, %v", drainText, err)
	}
	wait(onA+" gone from the page", row(onA)+` === null`)
	e.waitInService("web", 2)
	if got := e.perHost("web"); got[a.Addr] != 0 || got[b.Addr] != 2 {
		t.Errorf("after the drain: %v, want both on %s", got, b.Addr)
	}
	if !e.hostStatuses()[a.Addr].Cordoned {
		t.Error("the drained host is not cordoned")
	}
	res := stop()
	t.Logf("%d requests, %d failed", res.Requests, res.Failures)
	if res.Failures != 0 {
		t.Errorf("%d of %d requests failed: %v", res.Failures, res.Requests, res.FailureSamples)
	}
	if errs := p.PageErrors(); len(errs) > 0 {
		t.Errorf("the page's script failed: %q", errs)
	}
	out, _, _ := e.cli("jobs", "-o", "json")
	if n := strings.Count(out, `"source": "dashboard"`); n < 4 {
		t.Errorf("shoal jobs lists %d jobs from the dashboard, want protect, standby, resume and the refused protect:\n%s", n, out)
	}
}
