package group

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/event"
	"github.com/shoal-lb/shoal/internal/provider"
)

// Recycling replaces instances voluntarily: those older than max_lifetime
// and, with update.mode proactive, those started from another template than
// the serving one (drifted). Each replacement waits for the group's
// disruption budget (disruption.Budget: max_unavailable, windows); health
// replacements and scaling never ask it.
//
//	every recycleEvery:
//	  due instances (in service, not retiring; most overdue first)
//	     │ none: nothing
//	     ▼
//	  budget allows? ──no──► event recycle.waiting (once per reason), next tick
//	     │ yes
//	     ▼
//	  Replacer.Replace(first due) ──error──► event recycle.failed, next tick
//	     │ done (launch before terminate: the new one served first)
//	     ▼
//	  look again at once (the next due one need not wait a tick)
//
// One replacement at a time per group, whatever the budget's size: the
// budget bounds how many instances are out of service, counting those a
// scale-out or a health replacement has starting.
//
// Protection: instances an operator protected (`shoal instances protect`)
// are never recycled; held ones (drained, standby) are not in service, so
// not candidates either.

// Replacer replaces one instance of a group, launch before terminate, and
// returns once the replacement serves and the old instance is gone; the job
// manager's replace job is one.
type Replacer interface {
	Replace(ctx context.Context, group, instance string) error
}

// recycleEvery is how often a group looks for instances due.
const recycleEvery = 10 * time.Second

// maxJitter is the share of max_lifetime by which an instance's turn may
// come early: enough to spread a group started at once over a tenth of
// its lifetime, never past max_lifetime.
const maxJitter = 0.1

// lifetimeJitter is how much earlier than max_lifetime the named instance
// is due: a fixed share of up to maxJitter of it, from a hash of the name,
// so that it is the same after a restart of shoal.
func lifetimeJitter(name string, lifetime time.Duration) time.Duration {
	h := fnv.New64a()
	h.Write([]byte(name))
	frac := float64(h.Sum64()%1_000_000) / 1_000_000
	return time.Duration(frac * maxJitter * float64(lifetime))
}

// recycleCandidate is an instance in service, as due reads it.
type recycleCandidate struct {
	name    string
	started time.Time
	drifted bool
	// interrupted is the cloud's notice that it takes the instance back
	// (provider.Interrupter), "" for none.
	interrupted string
}

// dueInstance is an instance to recycle and why.
type dueInstance struct {
	name string
	why  string
	// at is when it became due (zero for drift alone), for the order.
	at time.Time
	// involuntary: the cloud takes it back anyway (an interruption);
	// replaced at once, outside the disruption budget.
	involuntary bool
}

// dueInstances returns the candidates due at now, most overdue first
// (drifted ones, due at once, after those of lifetime): older than
// lifetime less their jitter (lifetime 0: never), or drifted when
// proactive.
func dueInstances(now time.Time, cands []recycleCandidate, lifetime time.Duration, proactive bool) []dueInstance {
	var out, interrupted []dueInstance
	for _, c := range cands {
		if c.interrupted != "" {
			interrupted = append(interrupted, dueInstance{name: c.name, why: "interrupted: " + c.interrupted, involuntary: true})
			continue
		}
		if lifetime > 0 && !c.started.IsZero() {
			at := c.started.Add(lifetime - lifetimeJitter(c.name, lifetime))
			if !now.Before(at) {
				out = append(out, dueInstance{name: c.name, at: at,
					why: fmt.Sprintf("lifetime: started %s ago, max_lifetime %s", now.Sub(c.started).Round(time.Second), lifetime)})
				continue
			}
		}
		if proactive && c.drifted {
			out = append(out, dueInstance{name: c.name, why: "drift: started from another template than the serving one (update.mode proactive)"})
		}
	}
	slices.SortStableFunc(out, func(a, b dueInstance) int {
		if a.at.IsZero() != b.at.IsZero() {
			if a.at.IsZero() {
				return 1
			}
			return -1
		}
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.name, b.name))
	})
	// An interrupted instance goes before everything: it has minutes.
	return append(interrupted, out...)
}

// Unavailable counts the group's instances out of service against its
// desired size: those starting or unhealthy, and the places no instance
// fills yet. It is what the disruption budget bounds.
func (g *Group) Unavailable() (unavailable, total int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.unavailableLocked()
}

func (g *Group) unavailableLocked() (unavailable, total int) {
	active := g.activeLocked()
	inService := 0
	for _, in := range active {
		if in.state == InService {
			inService++
		}
	}
	return max(0, g.desired-inService), g.desired
}

// VoluntaryAllowed reports whether the disruption budget lets one more
// voluntary replacement (recycling, a host drain, a consolidation) start now, and why not.
func (g *Group) VoluntaryAllowed() (bool, string) {
	c := g.conf()
	un, total := g.Unavailable()
	return c.Disruption.Budget.Allowed(g.clk.Now(), un, total)
}

// InstancesOn returns the names of the group's instances on provider
// prov's host that are not on their way out, sorted: what a host drain
// moves.
func (g *Group) InstancesOn(prov, host string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for _, in := range g.insts {
		if in.prov == prov && in.rec.Host == host && !in.retiring && in.state != Draining && in.state != Stopping && in.state != Failed {
			out = append(out, in.name)
		}
	}
	slices.Sort(out)
	return out
}

// recycler is the state of a group's recycling loop between its ticks.
type recycler struct {
	r Replacer
	// waited is the reason the last wait was recorded with, so a long wait
	// is one event, not one per tick.
	waited string
}

// Recycle replaces the group's due instances through r, one at a time
// within the disruption budget, until ctx ends. Whoever runs the group's
// reconciler runs it beside it with the same lifetime (the registry's
// member loop), so it stops before the reconciler.
func (g *Group) Recycle(ctx context.Context, r Replacer) {
	tick, stop := g.clk.NewTicker(recycleEvery)
	defer stop()
	rc := &recycler{r: r}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			for g.recycleOnce(ctx, rc) && ctx.Err() == nil {
			}
		}
	}
}

// recycleOnce is one look of Recycle: it reports whether it replaced an
// instance (another may be due at once).
func (g *Group) recycleOnce(ctx context.Context, rc *recycler) bool {
	c := g.conf()
	proactive := c.Update.Mode == config.UpdateProactive
	now := g.clk.Now()
	g.mu.Lock()
	serving := g.dep.tmpl.Hash(g.cfg.Name)
	var cands []recycleCandidate
	for _, in := range g.insts {
		if in.state != InService || in.retiring || in.marks.protected {
			continue
		}
		cand := recycleCandidate{name: in.name, started: in.rec.StartedAt, drifted: in.hash != "" && in.hash != serving}
		if ir, ok := g.provOf(in).(provider.Interrupter); ok {
			// Reads the provider's newest listing only (its own lock).
			cand.interrupted = ir.Interrupted(in.rec)
		}
		cands = append(cands, cand)
	}
	g.mu.Unlock()
	due := dueInstances(now, cands, c.MaxLifetime, proactive)
	if len(due) == 0 {
		rc.waited = ""
		return false
	}
	first := due[0]
	if ok, why := g.VoluntaryAllowed(); !ok && !first.involuntary {
		if why != rc.waited {
			rc.waited = why
			g.record(ctx, event.RecycleWaiting, first.name, fmt.Sprintf("%s is due (%s), %d due in all; the replacement waits: %s", first.name, first.why, len(due), why))
		}
		return false
	}
	rc.waited = ""
	g.log.Info("recycling an instance", "instance", first.name, "why", first.why)
	g.record(ctx, event.RecycleStarted, first.name, fmt.Sprintf("replacing %s (%s)", first.name, first.why))
	if err := rc.r.Replace(ctx, g.cfg.Name, first.name); err != nil {
		g.record(ctx, event.RecycleFailed, first.name, fmt.Sprintf("replacing %s failed: %v", first.name, err))
		return false
	}
	return true
}
