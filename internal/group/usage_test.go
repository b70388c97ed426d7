package group

import (
	"context"
	"errors"
	"github.com/shoal-lb/shoal/internal/config"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/store"
)

// TestUsageAndBudget: instance-hours count the instances running now and
// those that ended (from the store) since the time asked; a scale-out
// past max_hourly_instances (instances that ran in the last hour plus
// those it would start) is refused with the count, a smaller one is not.
func TestUsageAndBudget(t *testing.T) {
	var t0 time.Time
	r := newReconciler(t, 2, func(r *reconciler) {
		c := r.g.conf()
		c.MaxHourlyInstances = 4
		r.g.live.Store(&c)
		t0 = r.clk.Now()
		r.st.usage = []store.Usage{
			// Ended 30 minutes ago after 2 hours: in the last hour's count.
			{Name: "web-008", Started: t0.Add(-150 * time.Minute), Ended: t0.Add(-30 * time.Minute)},
			// Ended 2 hours ago: not in the last hour's.
			{Name: "web-009", Started: t0.Add(-3 * time.Hour), Ended: t0.Add(-2 * time.Hour)},
		}
	})
	r.awaitStarts(2)
	ctx := context.Background()

	u, err := r.g.UsageSince(ctx, t0.Add(-4*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// 2 h + 1 h ended; the two running ones started at t0, now.
	if u.Running != 2 || u.Ended != 2 || math.Abs(u.InstanceHours-3) > 0.01 {
		t.Errorf("usage over 4 h = %+v, want 2 running, 2 ended, 3 instance-hours", u)
	}
	if u, _ := r.g.UsageSince(ctx, t0.Add(-time.Hour)); u.Ended != 1 || math.Abs(u.InstanceHours-0.5) > 0.01 {
		t.Errorf("usage over the last hour = %+v, want web-008's last 30 minutes", u)
	}

	if reason := r.g.BudgetRefusal(ctx, 3); reason != "" {
		t.Errorf("scale-out to 3 (2 running + 1 ended + 1 = 4, the budget) refused: %s", reason)
	}
	want := "max_hourly_instances 4: 3 instances ran in the last hour (2 running, 1 ended since); 2 more would make 5"
	if reason := r.g.BudgetRefusal(ctx, 4); reason != want {
		t.Errorf("scale-out to 4: %q, want %q", reason, want)
	}
	if reason := r.g.BudgetRefusal(ctx, 1); reason != "" {
		t.Errorf("a scale-in refused: %s", reason)
	}
}

// TestUsageOfFailedBoot: a start that fails after its cloud created the
// server (it did not boot in time) counts as usage from the create on,
// as the cloud bills it: in instance-hours and in the budget's count.
func TestUsageOfFailedBoot(t *testing.T) {
	var created time.Time
	r := newReconciler(t, 1, func(r *reconciler) {
		created = r.clk.Now().Add(-10 * time.Minute)
		r.prov.fail = &provider.CreatedError{Created: created, Err: errors.New("server i-1: not running within boot_timeout 10m0s")}
	})
	r.awaitStarts(1)
	var got []store.Usage
	waitFor(t, "the failed boot's usage recorded", func() bool {
		r.st.mu.Lock()
		defer r.st.mu.Unlock()
		got = slices.Clone(r.st.usage)
		return len(got) > 0
	})
	if u := got[0]; u.Name != "web-001" || !u.Started.Equal(created) || u.Ended.Before(created.Add(10*time.Minute)) {
		t.Fatalf("usage recorded %+v, want web-001 from its create (%s) to its failure", u, created)
	}
	u, err := r.g.UsageSince(context.Background(), created.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if u.Ended < 1 || u.InstanceHours < 10.0/60-0.01 {
		t.Errorf("usage = %+v, want the failed boot's 10 minutes counted", u)
	}
}

// fakePooler is a provider keeping a warm pool: its members now, and the
// servers that left it (deleted, or taken), handed out once.
type fakePooler struct {
	*fakeProvider
	mu      sync.Mutex
	members []provider.WarmServer
	left    []provider.WarmServer
}

func (p *fakePooler) SetWarmPool(string, *config.WarmPool, config.Template) {}
func (p *fakePooler) EmptyWarmPool(context.Context, string) error           { return nil }
func (p *fakePooler) WarmPool(string) []provider.WarmServer {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.members)
}
func (p *fakePooler) WarmPoolLeft(string) []provider.WarmServer {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.left
	p.left = nil
	return l
}

// TestWarmPoolCost: a warm pool's servers count toward the group's cost
// (cost_per_hour of the provider keeping the pool, max_hourly_cost) while
// in the pool and, once deleted, for the time they were its (recorded in
// the store, so it outlives the provider's memory); they are not counted
// as instances by max_hourly_instances.
func TestWarmPoolCost(t *testing.T) {
	var t0 time.Time
	var wp *fakePooler
	r := newReconciler(t, 1, func(r *reconciler) {
		t0 = r.clk.Now()
		c := r.g.conf()
		c.Providers = []config.GroupProvider{{Name: config.ProviderLocal, CostPerHour: 2}}
		c.MaxHourlyCost = 10
		c.WarmPool = &config.WarmPool{Size: 1, State: config.WarmRunning, Provider: config.ProviderLocal}
		// 1 running + 3 more: the pool's 2 servers would make it 6.
		c.MaxHourlyInstances = 4
		r.g.live.Store(&c)
		wp = &fakePooler{fakeProvider: r.prov,
			// In the pool for the last 30 minutes.
			members: []provider.WarmServer{{Name: "web-warm-a", State: "warm", Joined: t0.Add(-30 * time.Minute)}},
			// Deleted 10 minutes ago after an hour in the pool.
			left: []provider.WarmServer{{Name: "web-warm-b", State: "deleting", Joined: t0.Add(-70 * time.Minute), Left: t0.Add(-10 * time.Minute)}},
		}
		r.g.provs[config.ProviderLocal] = wp
	})
	r.awaitStarts(1)
	ctx := context.Background()
	u, err := r.g.UsageSince(ctx, t0.Add(-2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// 0.5 h (member) + 1 h (deleted) + ~0 (the instance started now).
	if math.Abs(u.InstanceHours-1.5) > 0.01 || math.Abs(u.ByProvider[config.ProviderLocal]-1.5) > 0.01 {
		t.Errorf("usage = %+v, want 1.5 instance-hours, all on %s", u, config.ProviderLocal)
	}
	if c := u.Cost(r.g.conf().ProviderList()); math.Abs(c-3) > 0.02 {
		t.Errorf("cost = %.2f, want 3 (1.5 h at 2/h)", c)
	}
	if u.Running != 1 || u.Ended != 0 {
		t.Errorf("usage counts %d running, %d ended; want 1 and 0 (pool servers are not instances)", u.Running, u.Ended)
	}
	r.st.mu.Lock()
	rec := slices.Clone(r.st.usage)
	r.st.mu.Unlock()
	if len(rec) != 1 || !rec[0].Pool || rec[0].Name != "web-warm-b" || rec[0].Provider != config.ProviderLocal {
		t.Fatalf("store's usage = %+v, want the deleted pool server's, marked Pool", rec)
	}
	// Asked again: read from the store (the provider handed it out once).
	if u2, _ := r.g.UsageSince(ctx, t0.Add(-2*time.Hour)); math.Abs(u2.InstanceHours-u.InstanceHours) > 0.01 {
		t.Errorf("usage asked again = %.3f h, want %.3f", u2.InstanceHours, u.InstanceHours)
	}
	// The last hour: the member's 0.5 h and b's 50 min, 1.33 h at 2/h =
	// 2.67; 3 more for an hour (6) fit in 10, 4 more (8) do not.
	if reason := r.g.BudgetRefusal(ctx, 4); reason != "" {
		t.Errorf("scale-out to 4 refused: %s", reason)
	}
	want := "max_hourly_cost 10: the last hour's instance-hours cost 2.67; 4 more for an hour would cost 8.00 more, 10.67 in all"
	if reason := r.g.BudgetRefusal(ctx, 5); reason != want {
		t.Errorf("scale-out to 5: %q, want %q", reason, want)
	}
}
