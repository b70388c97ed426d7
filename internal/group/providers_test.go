package group

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/store"
)

// TestPickProvider: the first provider with room that is not skipped; a
// group with one always uses it; none when every one is full or skipped.
func TestPickProvider(t *testing.T) {
	for _, tc := range []struct {
		name  string
		slots []slot
		want  int
	}{
		{"first has room", []slot{{room: 2}, {room: -1}}, 0},
		{"first full", []slot{{room: 0}, {room: -1}}, 1},
		{"first skipped", []slot{{room: 3, skipped: true}, {room: -1}}, 1},
		{"unbounded first", []slot{{room: -1}, {room: 5}}, 0},
		{"all full or skipped", []slot{{room: 0}, {room: -1, skipped: true}}, -1},
		{"one provider, full and skipped", []slot{{room: 0, skipped: true}}, 0},
	} {
		if got := pickProvider(tc.slots); got != tc.want {
			t.Errorf("%s: pickProvider = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestSkipFor: 30 s, doubling, at most 10 min.
func TestSkipFor(t *testing.T) {
	for failed, want := range map[int]time.Duration{1: 30 * time.Second, 2: time.Minute, 3: 2 * time.Minute, 5: 8 * time.Minute, 6: 10 * time.Minute, 40: 10 * time.Minute} {
		if got := skipFor(failed); got != want {
			t.Errorf("skipFor(%d) = %s, want %s", failed, got, want)
		}
	}
}

// TestByProvider: the last provider's instances go first, each keeping
// the scale_in rule's order.
func TestByProvider(t *testing.T) {
	in := func(name, prov string) pick { return pick{in: &instance{name: name, prov: prov}, why: "newest"} }
	list := []config.GroupProvider{{Name: "rack"}, {Name: "cloud"}}
	got := byProvider([]pick{in("a", "rack"), in("b", "cloud"), in("c", "rack"), in("d", "cloud")}, func(p string) int { return rankOf(list, p) })
	var names []string
	for _, p := range got {
		names = append(names, p.in.name)
	}
	if strings.Join(names, ",") != "b,d,a,c" {
		t.Errorf("order = %v, want b,d,a,c", names)
	}
	if !strings.Contains(got[0].why, "on provider cloud") || !strings.HasSuffix(got[0].why, "newest") {
		t.Errorf("why = %q", got[0].why)
	}
}

// multiReconciler is a group over two fake providers: local (max 2) then
// cloud, each instance recording where it started.
func multiReconciler(t *testing.T, desired int, cloudFail error, setup ...func(*reconciler)) (*reconciler, *fakeProvider) {
	var cloud *fakeProvider
	r := newReconciler(t, desired, func(r *reconciler) {
		cloud = &fakeProvider{clk: r.clk, ev: r.ev, insts: map[string]*fakeInstance{}, fail: cloudFail}
		c := r.g.conf()
		c.Providers = []config.GroupProvider{{Name: config.ProviderLocal, Max: 2}, {Name: "cloud", CostPerHour: 0.5}}
		r.g.live.Store(&c)
		r.g.provs["cloud"] = cloud
		for _, f := range setup {
			f(r)
		}
	})
	return r, cloud
}

func (r *reconciler) provOf(name string) string {
	r.g.mu.Lock()
	defer r.g.mu.Unlock()
	if in := r.g.insts[name]; in != nil {
		return in.prov
	}
	return ""
}

// TestProvidersFillInOrder: 4 instances fill local up to its max 2, then
// the cloud; the records name their provider; a scale-in to 2 retires
// the cloud's first, even under scale_in oldest, which alone would retire
// local ones.
func TestProvidersFillInOrder(t *testing.T) {
	r, cloud := multiReconciler(t, 4, nil)
	r.bringUp("web-001", "web-002", "web-003", "web-004")
	onCloud := 0
	for _, n := range []string{"web-001", "web-002", "web-003", "web-004"} {
		if r.provOf(n) == "cloud" {
			onCloud++
			if cloud.instance(n) == nil {
				t.Errorf("%s is on cloud but the cloud did not start it", n)
			}
		}
		if rec, _ := r.g.Record(n); rec.Provider != r.provOf(n) {
			t.Errorf("%s's record names provider %q, want %q", n, rec.Provider, r.provOf(n))
		}
	}
	if onCloud != 2 || len(r.prov.startTimes()) != 2 {
		t.Fatalf("%d on the cloud, %d local starts; want 2 and 2", onCloud, len(r.prov.startTimes()))
	}
	// oldest would retire the local ones first: the provider order wins.
	c := r.g.conf()
	c.ScaleIn = config.ScaleInOldest
	r.g.live.Store(&c)
	if err := r.g.SetDesired(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two retiring", func() bool {
		r.g.mu.Lock()
		defer r.g.mu.Unlock()
		return len(r.g.activeLocked()) == 2
	})
	r.g.mu.Lock()
	for _, in := range r.g.activeLocked() {
		if in.prov != config.ProviderLocal {
			t.Errorf("%s on %s kept; the cloud's should go first", in.name, in.prov)
		}
	}
	r.g.mu.Unlock()
	st := r.g.Status(context.Background())
	if len(st.Providers) != 2 || st.Providers[0].Name != config.ProviderLocal || st.Providers[0].Instances != 2 || st.Providers[1].Instances != 0 || st.Providers[1].CostPerHour != 0.5 {
		t.Errorf("status providers = %+v", st.Providers)
	}
}

// TestProviderSkipped: a cloud that refuses is skipped for a back-off,
// said in the events, and the failure is no crash loop; local stays full
// at its max, so nothing more starts until the back-off ends and the cloud
// is tried again.
func TestProviderSkipped(t *testing.T) {
	refused := errors.New("API refused: 503")
	r, cloud := multiReconciler(t, 3, refused)
	r.bringUp("web-001", "web-002")
	f := r.awaitFailure(1)
	if f.crash || !strings.Contains(f.Reason, "provider cloud") {
		t.Errorf("failure %+v: want the provider's, no crash", f)
	}
	waitFor(t, "the skip in the events", func() bool {
		r.st.mu.Lock()
		defer r.st.mu.Unlock()
		for _, d := range r.st.decisions {
			if d.Rule == "provider" && d.Code == "skipped" && strings.Contains(d.Reason, "skipped for 30s") && strings.Contains(d.Reason, "503") {
				return true
			}
		}
		return false
	})
	if n := len(cloud.startTimes()); n != 1 {
		t.Fatalf("cloud asked %d times, want 1", n)
	}
	st := r.g.Status(context.Background())
	if st.Providers[1].SkippedUntil.IsZero() || !strings.Contains(st.Providers[1].SkipReason, "503") {
		t.Errorf("status of the skipped cloud: %+v", st.Providers[1])
	}
	// Within the back-off the cloud is not asked again.
	r.clk.Advance(10 * time.Second)
	if n := len(cloud.startTimes()); n != 1 {
		t.Fatalf("cloud asked %d times within its back-off, want 1", n)
	}
	// After it, the cloud is tried again and takes the instance.
	cloud.mu.Lock()
	cloud.fail = nil
	cloud.mu.Unlock()
	r.clk.Advance(skipMin)
	waitFor(t, "the cloud asked again", func() bool { return len(cloud.startTimes()) == 2 })
}

// TestRestoreOnItsProvider: after a restart each recorded instance is
// adopted by the provider its record names, an older record's (no
// provider) by the group's first; one whose provider left the group's
// list is not adopted (its provider's sweep stops it).
func TestRestoreOnItsProvider(t *testing.T) {
	var kept []provider.Record
	r, cloud := multiReconciler(t, 3, nil, func(r *reconciler) {
		rec := func(name string, idx int, prov string) store.Instance {
			return store.Instance{Record: provider.Record{Group: "web", Name: name, Index: idx, ID: name, Addr: "127.0.0.1:2000" + strconv.Itoa(idx),
				Host: "127.0.0.1", Provider: prov}, State: string(InService), StateSince: r.clk.Now()}
		}
		kept = r.g.Restore(context.Background(), []store.Instance{
			rec("web-001", 1, ""), rec("web-002", 2, config.ProviderLocal), rec("web-003", 3, "cloud"), rec("web-004", 4, "gone")})
	})
	if r.prov.instance("web-001") == nil || r.prov.instance("web-002") == nil || cloud.instance("web-003") == nil ||
		r.prov.instance("web-003") != nil || cloud.instance("web-001") != nil {
		t.Fatal("an instance adopted by another provider than its record's")
	}
	want := map[string]string{"web-001": config.ProviderLocal, "web-002": config.ProviderLocal, "web-003": "cloud"}
	if len(kept) != 3 {
		t.Fatalf("kept %+v, want web-001..003", kept)
	}
	for _, rec := range kept {
		if rec.Provider != want[rec.Name] || r.provOf(rec.Name) != want[rec.Name] {
			t.Errorf("%s kept on %q (instance on %q), want %q", rec.Name, rec.Provider, r.provOf(rec.Name), want[rec.Name])
		}
	}
	if _, ok := r.state("web-004"); ok {
		t.Error("web-004, on a provider no longer the group's, adopted")
	}
}

// TestCostBudget: max_hourly_cost counts the last hour's instance-hours
// at each provider's cost_per_hour, plus an hour of each new instance on
// the provider it would come from: local (max 2, free) is full, so new
// ones are the cloud's at 0.5 an hour.
func TestCostBudget(t *testing.T) {
	var t0 time.Time
	r, _ := multiReconciler(t, 2, nil, func(r *reconciler) {
		c := r.g.conf()
		c.MaxHourlyCost = 1.6
		r.g.live.Store(&c)
		t0 = r.clk.Now()
		// An hour on the cloud ended 30 minutes ago: 0.5 h in the last
		// hour, 0.25; an older one on local costs nothing.
		r.st.usage = []store.Usage{
			{Name: "web-008", Provider: "cloud", Started: t0.Add(-90 * time.Minute), Ended: t0.Add(-30 * time.Minute)},
			{Name: "web-009", Provider: config.ProviderLocal, Started: t0.Add(-90 * time.Minute), Ended: t0.Add(-30 * time.Minute)},
		}
	})
	r.bringUp("web-001", "web-002")
	ctx := context.Background()
	u, err := r.g.UsageSince(ctx, t0.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(u.ByProvider["cloud"]-0.5) > 0.01 || math.Abs(u.ByProvider[config.ProviderLocal]-0.5) > 0.01 {
		t.Errorf("last hour by provider %v, want 0.5 h each", u.ByProvider)
	}
	// 0.25 spent + 2 × 0.5 = 1.25: within 1.6; 3 more make 1.75.
	if reason := r.g.BudgetRefusal(ctx, 4); reason != "" {
		t.Errorf("scale-out to 4 refused: %s", reason)
	}
	want := "max_hourly_cost 1.6: the last hour's instance-hours cost 0.25; 3 more for an hour would cost 1.50 more, 1.75 in all"
	if reason := r.g.BudgetRefusal(ctx, 5); reason != want {
		t.Errorf("scale-out to 5: %q, want %q", reason, want)
	}
}

// TestSlotsRoom: a provider with hosts has the free instance capacity of
// its hosts that are up and not cordoned, less the launches its provider
// was not asked for yet (those it was asked for it counts itself); an
// entry's max bounds it; a host without instance capacity makes it
// unbounded.
func TestSlotsRoom(t *testing.T) {
	g := scaleInGroup(t, config.ScaleInNewest, nil)
	c := g.conf()
	c.Providers = []config.GroupProvider{{Name: "rack"}, {Name: "cloud", Max: 3}}
	g.live.Store(&c)
	g.provs = Providers{"rack": fullHosts{[]provider.HostStatus{
		{Name: "a", State: provider.HostUp, Instances: 1, CapacityInstances: 2},
		{Name: "b", State: provider.HostUp, Instances: 3, CapacityInstances: 4},
		{Name: "c", State: provider.HostDown, CapacityInstances: 5},
		{Name: "d", State: provider.HostUp, CapacityInstances: 5, Cordoned: true},
	}}, "cloud": &fakeProvider{}}
	g.mu.Lock()
	g.insts = map[string]*instance{
		"web-001": {name: "web-001", prov: "rack", state: Starting},               // launched, not asked yet
		"web-002": {name: "web-002", prov: "rack", state: InService, asked: true}, // counted by its host
		"web-003": {name: "web-003", prov: "cloud", state: InService, asked: true},
	}
	g.mu.Unlock()
	rooms := g.hostRooms()
	g.mu.Lock()
	slots := g.slotsLocked(rooms)
	next := g.nextProviderLocked(rooms)
	g.mu.Unlock()
	// rack: a 1 + b 1 free, less web-001; cloud: max 3 less web-003.
	if slots[0].room != 1 || slots[1].room != 2 || next != "rack" {
		t.Errorf("slots %+v, next %q; want rack 1, cloud 2, next rack", slots, next)
	}
	g.provs["rack"] = fullHosts{[]provider.HostStatus{{Name: "a", State: provider.HostUp, Instances: 9}}}
	if r := g.hostRooms()["rack"]; !r.unbounded {
		t.Errorf("a host without instance capacity: %+v, want unbounded", r)
	}
}
