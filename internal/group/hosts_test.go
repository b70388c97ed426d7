package group

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/decision"
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

// TestMoreLoaded: hosts compare by the fraction of their capacity used,
// never a count against a fraction: an unbounded host (fraction 0) goes
// after any host that uses some of its capacity, and hosts that tie on the
// fraction (unbounded ones among themselves) go by their instance count.
func TestMoreLoaded(t *testing.T) {
	bounded := func(n, capacity int) hostLoad {
		return hostLoad{provider.HostStatus{Instances: n, CapacityInstances: capacity}}
	}
	unbounded := func(n int) hostLoad { return hostLoad{provider.HostStatus{Instances: n}} }
	cores := func(n int, used, capacity float64) hostLoad {
		return hostLoad{provider.HostStatus{Instances: n, Cores: used, CapacityCores: capacity}}
	}
	for _, c := range []struct {
		name string
		a, b hostLoad
		want bool
	}{
		{"fractions", bounded(9, 10), bounded(2, 3), true},
		{"fractions, reversed", bounded(2, 3), bounded(9, 10), false},
		{"a bounded host before an unbounded one with more instances", bounded(1, 100), unbounded(20), true},
		{"an unbounded host after a bounded one", unbounded(20), bounded(1, 100), false},
		{"unbounded hosts by count", unbounded(3), unbounded(2), true},
		{"unbounded hosts, reversed", unbounded(2), unbounded(3), false},
		{"a tie on the fraction goes by count", bounded(4, 8), bounded(2, 4), true},
		{"equal: neither", bounded(2, 4), bounded(2, 4), false},
		{"cores bound as instances do", cores(1, 3.5, 4), bounded(8, 10), true},
		{"the larger of the two fractions", hostLoad{provider.HostStatus{Instances: 1, CapacityInstances: 10, Cores: 3, CapacityCores: 4}}, bounded(7, 10), true},
	} {
		if got := moreLoaded(c.a, c.b); got != c.want {
			t.Errorf("%s: moreLoaded(%v, %v) = %v, want %v", c.name, c.a, c.b, got, c.want)
		}
	}

	// In a scale-in over mixed hosts: a (1/10) first, then the unbounded
	// b (3 instances) before c (2).
	t0 := time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC)
	inst := func(name, host string) *instance {
		return &instance{name: name, state: InService, rec: provider.Record{Host: host, StartedAt: t0}}
	}
	picks := byHost([]pick{{in: inst("web-001", "c")}, {in: inst("web-002", "b")}, {in: inst("web-003", "a")}}, map[string]hostLoad{
		"a": {provider.HostStatus{Name: "a", Instances: 1, CapacityInstances: 10}},
		"b": {provider.HostStatus{Name: "b", Instances: 3}},
		"c": {provider.HostStatus{Name: "c", Instances: 2}},
	}, 1)
	var got []string
	for _, p := range picks {
		got = append(got, p.in.name)
	}
	if strings.Join(got, " ") != "web-003 web-002 web-001" {
		t.Errorf("mixed hosts: %v, want a's web-003, b's web-002, c's web-001", got)
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

// placedInstance is a fake instance its provider placed on a host.
type placedInstance struct {
	*fakeInstance
}

func (placedInstance) Placement() string {
	return "spread: 0 of web's instances on 10.0.0.3, fewest; 1/10 instances"
}

// placingProvider places every instance it starts; specs sees each spec.
type placingProvider struct {
	*fakeProvider
	specs chan provider.Spec
}

func (p placingProvider) Start(ctx context.Context, spec provider.Spec) (provider.Instance, error) {
	p.specs <- spec
	in, err := p.fakeProvider.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	return placedInstance{in.(*fakeInstance)}, nil
}

// TestPlacementRecorded: an instance a provider placed on one of its hosts
// is an event saying where and why; the group's placement reaches the
// provider with the spec.
func TestPlacementRecorded(t *testing.T) {
	specs := make(chan provider.Spec, 10)
	r := newReconciler(t, 1, func(r *reconciler) {
		c := r.g.conf()
		c.Placement = config.Placement{Strategy: config.PlaceSpread, Labels: map[string]string{"zone": "a"}}
		r.g.live.Store(&c)
		r.g.provs[config.ProviderLocal] = placingProvider{r.prov, specs}
	})
	r.awaitStarts(1)
	r.awaitGate("web-001")
	if spec := <-specs; spec.Placement.Strategy != config.PlaceSpread || spec.Placement.Labels["zone"] != "a" {
		t.Errorf("spec placement %+v; want the group's", spec.Placement)
	}
	r.st.mu.Lock()
	var ds []decision.Record
	for _, d := range r.st.decisions {
		if d.Outcome == decision.Placement {
			ds = append(ds, d)
		}
	}
	r.st.mu.Unlock()
	if len(ds) != 1 {
		t.Fatalf("decisions %+v; want one placement", ds)
	}
	d := ds[0]
	if d.Outcome != decision.Placement || d.Code != "spread" || d.Group != "web" || len(d.Sources) != 1 || d.Sources[0] != "web-001" ||
		d.Reason != "web-001 placed on 127.0.0.1: spread: 0 of web's instances on 10.0.0.3, fewest; 1/10 instances" {
		t.Fatalf("placement event %+v", d)
	}
}

// hostsProvider has one host, 127.0.0.1 (where the fakes run), down or up.
type hostsProvider struct {
	*fakeProvider
	down *atomic.Bool
}

func (p hostsProvider) Hosts() []provider.HostStatus {
	st := provider.HostUp
	if p.down.Load() {
		st = provider.HostDown
	}
	return []provider.HostStatus{{Name: "127.0.0.1", State: st}}
}

// TestHostDownIsNoCrash: instances that end because their host went down
// are replaced at once, however briefly they served: a host's failure is
// not a crash loop of the program.
func TestHostDownIsNoCrash(t *testing.T) {
	var down atomic.Bool
	r := newReconciler(t, 2, func(r *reconciler) { r.g.provs[config.ProviderLocal] = hostsProvider{r.prov, &down} })
	r.awaitStarts(2)
	r.bringUp("web-001", "web-002")
	down.Store(true)
	r.prov.instance("web-001").exit("host 127.0.0.1 down")
	r.prov.instance("web-002").exit("host 127.0.0.1 down")
	f1, f2 := r.awaitFailure(1), r.awaitFailure(2)
	if f1.crash || f2.crash {
		t.Fatalf("failures %+v, %+v counted as crashes", f1, f2)
	}
	starts := r.awaitStarts(4)
	if !starts[2].Equal(f2.At) || !starts[3].Equal(f2.At) {
		t.Fatalf("replacements started at %v; want at once, %v", starts[2:], f2.At)
	}
}

// TestRemovalRetried: a server HAProxy will not delete yet is retried, and
// its instance keeps its name until it is gone, so that its replacement
// does not become a second server of that name.
func TestRemovalRetried(t *testing.T) {
	r := newReconciler(t, 1, nil)
	r.awaitStarts(1)
	r.bringUp("web-001")
	r.poll(stableService) // served steadily: replaced at once
	r.lb.mu.Lock()
	r.lb.refuse = 2
	r.lb.mu.Unlock()
	gone := r.watchGone("web-001")
	r.prov.instance("web-001").exit("signal: killed")
	r.awaitGate("web-002") // the replacement took the next name
	for range 2 {
		r.clk.awaitWaiters(t, r.clk.Now().Add(removeRetry), 1, "the removal's retry")
		r.clk.Advance(removeRetry)
	}
	gone()
	wantEvents(t, r.ev, "web-001", "start", "add", "ready", "remove refused", "remove refused", "remove", "stop")
}

// TestSpecCarriesPlan: a provider starting an instance is told the
// group's plan at its desired size, which cloud drivers size servers by.
func TestSpecCarriesPlan(t *testing.T) {
	specs := make(chan provider.Spec, 10)
	r := newReconciler(t, 2, func(r *reconciler) {
		c := r.g.conf()
		c.Plans = []config.Plan{{Name: "small", Size: 2}, {Name: "large", Size: 4}}
		r.g.live.Store(&c)
		r.g.provs[config.ProviderLocal] = placingProvider{r.prov, specs}
	})
	r.awaitStarts(2)
	for range 2 {
		if spec := <-specs; spec.Plan != "small" {
			t.Errorf("spec plan %q; want small, the plan of size 2", spec.Plan)
		}
	}
}

// TestGoneVersions: the newest maxGone finished instances' versions are
// remembered by provider ID, the oldest forgotten first; an instance
// without an ID is not remembered; one taken back is forgotten.
func TestGoneVersions(t *testing.T) {
	var v goneVersions
	v.remember("", "v1")
	if _, ok := v.version(""); ok {
		t.Fatal("an instance without a provider ID was remembered")
	}
	for i := range maxGone + 1 {
		v.remember(fmt.Sprintf("srv-%d", i), fmt.Sprintf("v%d", i))
	}
	if _, ok := v.version("srv-0"); ok {
		t.Fatalf("the oldest of %d was kept beyond maxGone %d", maxGone+1, maxGone)
	}
	if got, ok := v.version("srv-1"); !ok || got != "v1" {
		t.Fatalf("srv-1: %q %v, want v1", got, ok)
	}
	v.remember("srv-1", "v9") // gone again: its newest version counts
	if got, _ := v.version("srv-1"); got != "v9" {
		t.Fatalf("srv-1 gone again: %q, want v9", got)
	}
	v.forget("srv-1")
	if _, ok := v.version("srv-1"); ok {
		t.Fatal("an instance taken back is still remembered")
	}
	// Taken back, then gone again: it is the newest, so it outlives the
	// next maxGone-1 that finish after it.
	v.remember("srv-1", "v10")
	for i := range maxGone - 1 {
		v.remember(fmt.Sprintf("later-%d", i), "v1")
	}
	if got, ok := v.version("srv-1"); !ok || got != "v10" {
		t.Fatalf("srv-1 gone again after it was taken back: %q %v, want v10 (evicted early: listed twice)", got, ok)
	}
}
