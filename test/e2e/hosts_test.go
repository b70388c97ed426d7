package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/shoal-lb/shoal/internal/api"
)

// TestSSHCordon: a cordoned host takes no new instances (its own keep
// serving), a scale-out with no uncordoned room fails saying so, the cordon
// survives a restart of shoal, and uncordon lets instances back on; bad
// hosts are refused with the right status.
func TestSSHCordon(t *testing.T) {
	parallel(t)
	lab := newLab(t, 2)
	a, b := lab.Hosts[0], lab.Hosts[1]
	hosts := []sshHost{{h: a, extra: "capacity: {instances: 4}"}, {h: b, extra: "capacity: {instances: 4}"}}
	g := sshGroup("web", "rack", 2, 8, "    placement: {strategy: spread}\n")
	e := newEnv(t, sshTimeouts+sshProviders(lab, t.TempDir(), map[string][]sshHost{"rack": hosts}), g)
	e.start()
	e.waitInService("web", 2)
	if got := e.perHost("web"); got[a.Addr] != 1 || got[b.Addr] != 1 {
		t.Fatalf("spread before the cordon: %v, want one on each host", got)
	}

	out, stderr, code := e.cli("hosts", "cordon", a.Addr)
	if code != 0 || !strings.Contains(out, "host "+a.Addr+" (provider rack) cordoned") {
		t.Fatalf("shoal hosts cordon %s exited %d:\n%s%s", a.Addr, code, out, stderr)
	}
	if out, _, _ := e.cli("hosts", "cordon", a.Addr); !strings.Contains(out, "was cordoned already") {
		t.Errorf("a second cordon says:\n%s", out)
	}
	// Bad input: JSON errors with their status, and the CLI's exit.
	for _, c := range []struct {
		host, prov string
		status     int
		want       []string
	}{
		// The hosts are listed in address order, whichever is a.
		{"192.0.2.99", "", http.StatusNotFound, []string{`unknown host "192.0.2.99": no provider has it; the hosts are rack/`, "rack/" + a.Addr, "rack/" + b.Addr}},
		{a.Addr, "other", http.StatusNotFound, []string{"provider other has no such host"}},
	} {
		_, err := e.client().HostAct(context.Background(), "cordon", c.host, c.prov)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Status != c.status || !containsAll(ae.Error(), c.want...) {
			t.Errorf("cordon %s (provider %q): %v, want %d %q", c.host, c.prov, err, c.status, c.want)
		}
	}
	if _, stderr, code := e.cli("hosts", "uncordon", "nosuch"); code == 0 || !strings.Contains(stderr, `unknown host "nosuch"`) {
		t.Errorf("uncordon nosuch exited %d: %s", code, stderr)
	}

	// Two more: both on b, although spread would put one on a.
	scaleSync(t, e, "--size", "4")
	e.waitInService("web", 4)
	if got := e.perHost("web"); got[a.Addr] != 1 || got[b.Addr] != 3 {
		t.Fatalf("after 2 → 4 with %s cordoned: %v, want 1 there (kept) and 3 on %s", a.Addr, got, b.Addr)
	}
	if hs := e.hostStatuses(); !hs[a.Addr].Cordoned || hs[b.Addr].Cordoned {
		t.Fatalf("GET /v1/hosts: %+v", hs)
	}
	if out, _, _ := e.cli("status"); !strings.Contains(out, "up,cordoned") {
		t.Errorf("shoal status does not show the cordon:\n%s", out)
	}

	// A restart of shoal (instances kept and adopted) keeps the cordon.
	e.signalStop(syscall.SIGTERM)
	e.start()
	e.waitInService("web", 4)
	if hs := e.hostStatuses(); !hs[a.Addr].Cordoned {
		t.Fatalf("after a restart %s is not cordoned: %+v", a.Addr, hs[a.Addr])
	}
	_, metrics := httpGetUnix(t, e, "/metrics")
	for _, want := range []string{
		fmt.Sprintf(`shoal_host_cordoned{host=%q,provider="rack"} 1`, a.Addr),
		fmt.Sprintf(`shoal_host_cordoned{host=%q,provider="rack"} 0`, b.Addr),
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	scaleSync(t, e, "--size", "5")
	e.waitInService("web", 5)
	if got := e.perHost("web"); got[a.Addr] != 1 || got[b.Addr] != 4 {
		t.Fatalf("after a restart and 4 → 5: %v, want the new one on %s", got, b.Addr)
	}

	// b is full (capacity 4) and a cordoned: a scale-out fails saying why.
	out, stderr, code = e.cli("scale", "web", "--size", "6", "--sync")
	if code == 0 || !strings.Contains(out+stderr, "cordoned") {
		t.Fatalf("scale to 6 with no uncordoned room exited %d:\n%s%s", code, out, stderr)
	}

	// Uncordoned, a takes instances again.
	if out, _, code := e.cli("hosts", "uncordon", a.Addr); code != 0 || !strings.Contains(out, "uncordoned") {
		t.Fatalf("uncordon exited %d: %s", code, out)
	}
	scaleSync(t, e, "--size", "6")
	e.waitInService("web", 6)
	if got := e.perHost("web"); got[a.Addr] != 2 {
		t.Fatalf("after uncordon and 5 → 6: %v, want a second instance on %s", got, a.Addr)
	}
	// Both acts are in the event log.
	var seen []string
	for _, ev := range e.events(api.EventsQuery{Limit: 200}) {
		if ev.Rule == "host" && (ev.Code == "cordoned" || ev.Code == "uncordoned") {
			seen = append(seen, fmt.Sprintf("%s %s", ev.Code, ev.Sources))
		}
	}
	if len(seen) != 2 {
		t.Errorf("host events: %v, want one cordoned and one uncordoned", seen)
	}
	e.checkServedOnce("web", 6)
}

// containsAll reports whether s holds every one of subs.
func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
