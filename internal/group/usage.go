package group

import (
	"context"
	"fmt"
	"time"
)

// Usage is what a group's instances cost: the instance-hours they ran
// since a time, and how many ran (the instances that run now, starting
// ones included, and those that ended since).
type Usage struct {
	InstanceHours float64
	Running       int
	Ended         int
}

// UsageSince reads the group's usage since t: its instances now, and the
// store's record of those that ended. An instance counts from its start:
// for a cloud server, from its create, as the cloud bills it (the boot
// included, and a server that never booted too; see provider.CreatedError),
// and a warm pool's servers count from when they joined it (while they
// are its: one deleted earlier is not recorded).
func (g *Group) UsageSince(ctx context.Context, t time.Time) (Usage, error) {
	ended, err := g.st.Usage(ctx, g.cfg.Name, t)
	if err != nil {
		return Usage{}, err
	}
	now := g.clk.Now()
	var u Usage
	g.mu.Lock()
	for _, in := range g.insts {
		u.Running++
		if !in.rec.StartedAt.IsZero() {
			u.InstanceHours += now.Sub(later(in.rec.StartedAt, t)).Hours()
		}
	}
	g.mu.Unlock()
	// The warm pool's servers are billed too, though they are not the
	// group's instances (nor counted in Running: max_hourly_instances
	// bounds what serves).
	for _, s := range g.warmPool() {
		if !s.Joined.IsZero() {
			u.InstanceHours += now.Sub(later(s.Joined, t)).Hours()
		}
	}
	for _, e := range ended {
		u.Ended++
		u.InstanceHours += e.Ended.Sub(later(e.Started, t)).Hours()
	}
	return u, nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// BudgetRefusal says why a scale-out to target would exceed the group's
// max_hourly_instances, or "" if it would not (or there is no budget):
// the instances that ran in the last hour, plus those it would start.
func (g *Group) BudgetRefusal(ctx context.Context, target int) string {
	budget := g.conf().MaxHourlyInstances
	from := g.Desired()
	if budget == 0 || target <= from {
		return ""
	}
	u, err := g.UsageSince(ctx, g.clk.Now().Add(-time.Hour))
	if err != nil {
		// Without the store's answer the budget cannot be kept: refuse.
		return fmt.Sprintf("max_hourly_instances %d: the instances of the last hour could not be counted: %v", budget, err)
	}
	if ran, more := u.Running+u.Ended, target-from; ran+more > budget {
		return fmt.Sprintf("max_hourly_instances %d: %d instances ran in the last hour (%d running, %d ended since); %d more would make %d",
			budget, ran, u.Running, u.Ended, more, ran+more)
	}
	return ""
}
