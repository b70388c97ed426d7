package group

import (
	"context"
	"errors"
	"math"
	"slices"
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
