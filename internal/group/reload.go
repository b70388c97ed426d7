package group

import (
	"context"
	"fmt"

	"github.com/shoal-lb/shoal/internal/config"
)

// conf returns the group's configuration in force.
func (g *Group) conf() config.Group { return *g.live.Load() }

// Update applies a reloaded configuration of the same group (c.Name is the
// group's name): sizes, plans, cooldowns, policy, drain and replace times
// take effect at once (a desired size outside the new range is clamped to
// it and recorded); a changed health check applies to instances started
// from now on, and HAProxy's side of it changes with HAProxy's reload. A
// changed template is what the next deploy rolls out: replacements and
// scale-ups keep starting the serving one (see Deploy). Running instances
// are left alone.
//
// Update cannot fail: a reload calls it once HAProxy runs the new config,
// when going back is no longer possible. A failed write of the clamped size
// is logged; the stored size is clamped into the configured range again at
// the next start, which gives the same size.
func (g *Group) Update(ctx context.Context, c config.Group) {
	g.stateMu.Lock()
	defer g.stateMu.Unlock()
	g.live.Store(&c)
	g.setTemplate(c.Template)
	g.setWarmPool()
	g.mu.Lock()
	g.startOutliersLocked()
	old := g.desired
	desired := c.Range().Clamp(old)
	g.desired = desired
	gs := g.stateLocked()
	if desired != old {
		g.notifyLocked()
	}
	g.mu.Unlock()
	if desired != old {
		g.log.Info("desired size moved into the reloaded range", "from", old, "desired", desired, "min_size", c.MinSize, "max_size", c.MaxSize)
		if err := g.putState(ctx, gs); err != nil {
			g.log.Error("recording the clamped desired size failed; the next start clamps the stored size again", "desired", desired, "err", err)
		}
	}
	g.poke()
}

// RetireAll drains and stops every instance (the group is being removed) and
// returns once none is left, or when ctx ends. The group's Run must be
// running; cancel it afterwards.
func (g *Group) RetireAll(ctx context.Context) error {
	g.mu.Lock()
	g.removed = true
	g.desired = 0
	g.notifyLocked()
	g.mu.Unlock()
	g.poke()
	for {
		g.mu.Lock()
		n, ch := len(g.insts), g.changed
		g.mu.Unlock()
		if n == 0 {
			// Recorded without its serving template: a group added back
			// later starts from its own.
			return g.persistState(context.WithoutCancel(ctx))
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("group %s: %d instances still retiring: %w", g.cfg.Name, n, ctx.Err())
		}
	}
}

// KeepInstances makes the end of Run leave every instance running and
// recorded as it is (a drain in progress too), for the next run of shoal to
// adopt: shoal is being restarted or upgraded, not stopped.
func (g *Group) KeepInstances() { g.keep.Store(true) }
