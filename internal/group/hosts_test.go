package group

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider"
)

// TestScaleInMostLoadedHostFirst: scale-in takes from the most used host,
// the group's policy choosing among that host's instances, and the load
// falls with each pick; the reason names the host.
func TestScaleInMostLoadedHostFirst(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC)
	inst := func(name, host string, ago time.Duration) *instance {
		return &instance{name: name, state: InService, rec: provider.Record{Host: host, StartedAt: t0.Add(-ago)}}
	}
	a1, a2 := inst("web-001", "a", 4*time.Hour), inst("web-002", "a", 2*time.Hour)
	b1, c1 := inst("web-003", "b", time.Hour), inst("web-004", "c", 3*time.Hour)
	starting := &instance{name: "web-005", state: Starting, since: t0, rec: provider.Record{Host: "c"}}
	active := []*instance{a1, a2, b1, c1, starting}
	hosts := map[string]hostLoad{
		"a": {provider.HostStatus{Name: "a", Instances: 6, CapacityInstances: 10}},
		"b": {provider.HostStatus{Name: "b", Instances: 4, CapacityInstances: 10}},
		"c": {provider.HostStatus{Name: "c", Instances: 2, CapacityInstances: 10}},
	}
	names := func(ps []pick) string {
		var out []string
		for _, p := range ps {
			out = append(out, p.in.name)
		}
		return strings.Join(out, " ")
	}
	plain := scaleInOrder(active, config.ScaleInNewest, nil)
	if got := names(plain); got != "web-005 web-003 web-002 web-004 web-001" {
		t.Fatalf("without hosts: %s", got)
	}
	// a (6/10) loses its newest, web-002, then, still the most used at
	// 5/10, web-001; b's web-003 (4/10) beats c's web-004 (2/10).
	picks := byHost(plain, hosts, 1)
	if got := names(picks); got != "web-005 web-002 web-001 web-003 web-004" {
		t.Fatalf("by host: %s, want the starting web-005, then a's, b's, c's", got)
	}
	if !strings.HasPrefix(picks[1].why, "host a most loaded (6/10 instances); scale_in newest") ||
		!strings.HasPrefix(picks[2].why, "host a most loaded (5/10 instances)") {
		t.Errorf("reasons %q, %q; want host a and its load named", picks[1].why, picks[2].why)
	}
	// Cores bound a host as much as instances: c at 3.5/4 cores is the most used.
	hosts["c"] = hostLoad{provider.HostStatus{Name: "c", Instances: 2, Cores: 3.5, CapacityCores: 4}}
	if got := names(byHost(plain, hosts, 1)); got != "web-005 web-004 web-002 web-001 web-003" {
		t.Errorf("with c's cores nearly used: %s, want c's web-004 first", got)
	}
	// Unbounded hosts compare by their instance counts.
	unbounded := map[string]hostLoad{
		"a": {provider.HostStatus{Name: "a", Instances: 1}},
		"b": {provider.HostStatus{Name: "b", Instances: 3}},
		"c": {provider.HostStatus{Name: "c", Instances: 2}},
	}
	if got := names(byHost(plain, unbounded, 1)); got != "web-005 web-003 web-004 web-002 web-001" {
		t.Errorf("unbounded hosts: %s, want b's, then c's, then a's", got)
	}
}

// TestReclaim: an instance found on a returning host is taken back only
// while the group wants one more and nothing has its name; taken back, it
// goes through the health gate before HAProxy rotates it in.
func TestReclaim(t *testing.T) {
	r := newReconciler(t, 2, nil)
	r.awaitStarts(2)
	r.bringUp("web-001", "web-002")
	ctx := context.Background()
	lost := r.prov.instance("web-002").Record()

	// Its host died: the instance is dropped; replacements fail to start
	// (no capacity left elsewhere), so the group wants one more.
	r.prov.mu.Lock()
	r.prov.fail = errors.New("no host has room")
	r.prov.mu.Unlock()
	gone := r.watchGone("web-002")
	r.prov.instance("web-002").exit("host is down")
	gone()

	// Not the serving version: refused.
	stale := lost
	stale.ID = "unknown"
	if r.g.Reclaim(ctx, stale) {
		t.Fatal("an instance the group never ran was taken back")
	}
	if !r.g.Reclaim(ctx, lost) {
		t.Fatal("the group wants one more and nothing has the name, yet the instance was not taken back")
	}
	// The same instance reported twice is not taken twice.
	if r.g.Reclaim(ctx, lost) {
		t.Fatal("taken back twice")
	}
	r.bringUp("web-002")
	if s, _ := r.state("web-002"); s != InService {
		t.Fatalf("web-002 %s after its checks passed; want in service", s)
	}

	// A replacement that took the name first makes a returning copy a stray.
	r.prov.mu.Lock()
	r.prov.fail = nil
	r.prov.mu.Unlock()
	lost = r.prov.instance("web-001").Record()
	gone = r.watchGone("web-001")
	r.prov.instance("web-001").exit("host is down")
	gone()
	// Its second crash in a row backs the replacement off 2 s.
	f := r.awaitFailure(2)
	r.clk.awaitAfterFunc(t, f.At.Add(2*time.Second), "the back-off")
	r.clk.Advance(2 * time.Second)
	r.awaitGate("web-001")
	if r.g.Reclaim(ctx, lost) {
		t.Fatal("taken back while its replacement has the name: two servers of one name")
	}
}
