package group

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider"
)

// Usage is what a group's instances cost: the instance-hours they ran
// since a time, and how many ran (the instances that run now, starting
// ones included, and those that ended since).
type Usage struct {
	InstanceHours float64
	Running       int
	Ended         int
	// ByProvider is InstanceHours by the provider they ran on.
	ByProvider map[string]float64
}

// Cost is u's instance-hours at each provider's cost_per_hour in list.
func (u Usage) Cost(list []config.GroupProvider) float64 {
	c := 0.0
	for _, gp := range list {
		c += u.ByProvider[gp.Name] * gp.CostPerHour
	}
	return c
}

// UsageSince reads the group's usage since t: its instances now, and the
// store's record of those that ended. An instance counts from its start:
// for a cloud server, from its create, as the cloud bills it (the boot
// included, and a server that never booted too; see provider.CreatedError),
// and a warm pool's servers count from when they joined it until they
// left it (deleted, or taken by a scale-out: then as an instance), on the
// provider that keeps the pool.
func (g *Group) UsageSince(ctx context.Context, t time.Time) (Usage, error) {
	g.recordPoolLeft(ctx)
	ended, err := g.st.Usage(ctx, g.cfg.Name, t)
	if err != nil {
		return Usage{}, err
	}
	now := g.clk.Now()
	u := Usage{ByProvider: map[string]float64{}}
	add := func(prov string, h float64) {
		u.InstanceHours += h
		u.ByProvider[prov] += h
	}
	g.mu.Lock()
	for _, in := range g.insts {
		u.Running++
		if !in.rec.StartedAt.IsZero() {
			add(in.prov, now.Sub(later(in.rec.StartedAt, t)).Hours())
		}
	}
	g.mu.Unlock()
	// The warm pool's servers are billed too, though they are not the
	// group's instances (nor counted in Running or Ended:
	// max_hourly_instances bounds what serves).
	pooler := g.poolerName()
	for _, s := range g.warmPool() {
		if !s.Joined.IsZero() {
			add(pooler, now.Sub(later(s.Joined, t)).Hours())
		}
	}
	for _, e := range ended {
		if e.Pool {
			add(cmp.Or(e.Provider, pooler), e.Ended.Sub(later(e.Started, t)).Hours())
			continue
		}
		u.Ended++
		add(g.providerOf(provider.Record{Provider: e.Provider}), e.Ended.Sub(later(e.Started, t)).Hours())
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
// max_hourly_instances or max_hourly_cost, or "" if it would not (or there
// is no budget): the instances that ran in the last hour, plus those it
// would start; their cost, plus an hour of each new one on the provider
// it would come from.
func (g *Group) BudgetRefusal(ctx context.Context, target int) string {
	c := g.conf()
	budget := c.MaxHourlyInstances
	from := g.Desired()
	if budget == 0 && c.MaxHourlyCost == 0 || target <= from {
		return ""
	}
	u, err := g.UsageSince(ctx, g.clk.Now().Add(-time.Hour))
	if c.MaxHourlyCost > 0 {
		if err != nil {
			return fmt.Sprintf("max_hourly_cost %g: the cost of the last hour could not be counted: %v", c.MaxHourlyCost, err)
		}
		spent, more := u.Cost(c.ProviderList()), g.newCost(target-from)
		if spent+more > c.MaxHourlyCost {
			return fmt.Sprintf("max_hourly_cost %g: the last hour's instance-hours cost %.2f; %d more for an hour would cost %.2f more, %.2f in all",
				c.MaxHourlyCost, spent, target-from, more, spent+more)
		}
	}
	if budget == 0 {
		return ""
	}
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

// newCost is what n new instances would cost for an hour, each on the
// provider the fill order gives it (the first with room, as a launch
// picks it; the last provider for those past every bound).
func (g *Group) newCost(n int) float64 {
	list := g.conf().ProviderList()
	rooms := map[string]hostRoom{}
	if len(list) > 1 {
		rooms = g.hostRooms()
	}
	g.mu.Lock()
	slots := g.slotsLocked(rooms)
	g.mu.Unlock()
	cost := 0.0
	for range n {
		i := pickProvider(slots)
		if i < 0 {
			i = len(slots) - 1
		}
		cost += list[i].CostPerHour
		if slots[i].room > 0 {
			slots[i].room--
		}
	}
	return cost
}
