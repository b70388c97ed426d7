package group

import (
	"context"
	"time"

	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/store"
)

// emptyPoolWait bounds the deletion of a warm pool's servers when the
// group stops with its instances.
const emptyPoolWait = 2 * time.Minute

// setWarmPool tells the provider that keeps the group's warm pool (a
// cloud's, or an ssh provider's running pool) the pool and serving
// template, and the group's other providers that keep pools that it has
// none there: at restore (before the provider
// sweeps strays, so that it adopts the pool's servers), at Run, at a
// reload, and when a deploy changes the serving template (its members of
// the old template are replaced).
func (g *Group) setWarmPool() {
	if g.fenced.Load() {
		return
	}
	g.mu.Lock()
	tmpl := g.dep.tmpl
	g.mu.Unlock()
	c := g.conf()
	keeper := g.poolerName()
	// Every provider of the group that keeps pools hears of it: the one
	// keeping the pool, and the others that none is theirs (a reload that
	// removed the pool, or moved it).
	for _, gp := range c.ProviderList() {
		wp, ok := g.provs[gp.Name].(provider.WarmPooler)
		if !ok {
			continue
		}
		if gp.Name != keeper {
			wp.SetWarmPool(g.cfg.Name, nil, tmpl)
			continue
		}
		if wc, ok := wp.(provider.WarmChecker); ok {
			wc.SetWarmCheck(g.cfg.Name, c.Health, c.Placement)
		}
		wp.SetWarmPool(g.cfg.Name, c.WarmPool, tmpl)
	}
}

// emptyWarmPool deletes the pool's servers: the group stops with its
// instances (shoal stopping without keeping them, or the group removed).
func (g *Group) emptyWarmPool() {
	wp, ok := g.pooler()
	if !ok || g.keep.Load() || g.fenced.Load() || g.conf().WarmPool == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), emptyPoolWait)
	defer cancel()
	if err := wp.EmptyWarmPool(ctx, g.cfg.Name); err != nil {
		g.log.Warn("deleting the warm pool's servers failed; the next start sweeps them", "err", err)
	}
}

// recordPoolLeft records the time in the pool of the servers that left
// it since the last call (see provider.WarmPooler.WarmPoolLeft): billed,
// toward cost_per_hour and max_hourly_cost. A kill -9 loses the spans
// not recorded yet (at most resyncEvery's).
func (g *Group) recordPoolLeft(ctx context.Context) {
	for _, gp := range g.conf().ProviderList() {
		wp, ok := g.provs[gp.Name].(provider.WarmPooler)
		if !ok {
			continue
		}
		for _, s := range wp.WarmPoolLeft(g.cfg.Name) {
			if s.Joined.IsZero() || !s.Left.After(s.Joined) {
				continue
			}
			u := store.Usage{Name: s.Name, Provider: gp.Name, Started: s.Joined, Ended: s.Left, Pool: true}
			if err := g.st.AddUsage(context.WithoutCancel(ctx), g.cfg.Name, u); err != nil {
				g.log.Warn("recording the usage of a warm pool server failed", "server", s.Name, "err", err)
			}
		}
	}
}

// warmPool is the group's pool servers, for Status.
func (g *Group) warmPool() []provider.WarmServer {
	if wp, ok := g.pooler(); ok {
		return wp.WarmPool(g.cfg.Name)
	}
	return nil
}

// pooler is the provider of the group's list that keeps warm pools (the
// config allows one in a group with a pool).
func (g *Group) pooler() (provider.WarmPooler, bool) {
	wp, _ := g.poolerEntry()
	return wp, wp != nil
}

// poolerName is the name of the group's entry of its pooler ("" if none).
func (g *Group) poolerName() string {
	_, name := g.poolerEntry()
	return name
}

func (g *Group) poolerEntry() (provider.WarmPooler, string) {
	c := g.conf()
	if c.WarmPool == nil {
		return nil, ""
	}
	for _, gp := range c.ProviderList() {
		if wp, ok := g.provs[gp.Name].(provider.WarmPooler); ok && (c.WarmPool.Provider == "" || gp.Name == c.WarmPool.Provider) {
			return wp, gp.Name
		}
	}
	return nil, ""
}
