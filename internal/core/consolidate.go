package core

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/consolidate"
	"github.com/shoal-lb/shoal/internal/event"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/hostdrain"
	"github.com/shoal-lb/shoal/internal/provider"
)

// Host consolidation (placement.consolidation of a pack-placed group):
// after the group scales in and its size has stayed put for `after`, with
// every instance in service, one part-used host of its provider is emptied
// when consolidate.Decide finds it can be: its instances replaced one at a
// time on the other hosts in use (launch before terminate, through the same
// replacer as host drains and recycling), each when its group's disruption
// budget allows. One consolidation runs at a time in all of shoal.
//
//	each consolidateEvery, per consolidating group:
//	  a scale-in not handled yet, settled for `after`? ──no──► nothing
//	     │ yes
//	     ▼
//	  consolidate.Decide(the provider's hosts and every group's instances)
//	     │ no host: event host.consolidation_skipped (each host's reason; none
//	     │ when one host holds everything), handled
//	     ▼
//	  budgets allow? ──no──► event host.consolidation_waiting (once per reason), next tick
//	     │ yes: event host.consolidating; placement avoids the host
//	     ▼
//	  hostdrain.Drain (one move at a time, each within the budget)
//	     │ some left or the host not empty: event host.consolidation_failed, retry after `after`
//	     ▼
//	  event host.consolidated (empty: it can be powered off), look again at once
//
// The scale-in handled is this run's (group.ConsolidationView.ScaledIn): a
// restart forgets one not handled yet.
const consolidateEvery = 2 * time.Second

// Each move waits at most consolidateMaxWait for its group's budget
// (asking every consolidatePoll); past it the consolidation ends, and is
// tried again `after` later.
const (
	consolidatePoll    = time.Second
	consolidateMaxWait = 2 * time.Minute
)

// consolidator runs the groups' consolidation loops.
type consolidator struct {
	groups func() []*group.Group
	provs  *providers
	rep    group.Replacer
	st     eventRecorder
	log    *slog.Logger
	// mu makes consolidations one at a time.
	mu sync.Mutex
}

// consolidation is one group's loop's state between its ticks.
type consolidation struct {
	// handled is the scale-in last handled (decided on, nothing to do).
	handled time.Time
	// retryAt holds a failed consolidation back.
	retryAt time.Time
	// waited is the reason the last wait was recorded with.
	waited string
	// moved: this scale-in emptied a host already, so finding no other
	// is no news.
	moved bool
}

// loop returns g's consolidation loop, which runs until ctx ends.
func (k *consolidator) loop(g *group.Group) func(context.Context) {
	return func(ctx context.Context) {
		t := time.NewTicker(consolidateEvery)
		defer t.Stop()
		var st consolidation
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				for k.look(ctx, g, &st) && ctx.Err() == nil {
				}
			}
		}
	}
}

// look is one look of g's loop: it reports whether it emptied a host
// (another may be emptied at once).
func (k *consolidator) look(ctx context.Context, g *group.Group, st *consolidation) bool {
	c := g.Config()
	cc := c.Placement.Consolidation
	if cc == nil || c.Placement.Strategy != config.PlacePack {
		return false
	}
	v := g.Consolidation()
	now := time.Now()
	if v.ScaledIn.IsZero() || !v.ScaledIn.After(st.handled) || now.Before(v.Resized.Add(cc.After)) || now.Before(st.retryAt) || v.Unsettled != "" {
		return false
	}
	prov, ok := k.provs.Get(c.Provider)
	if !ok {
		return false
	}
	hl, ok := prov.(provider.HostLister)
	if !ok {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	hosts, groups, byName := k.input(c.Provider, hl)
	d := consolidate.Decide(hosts, groups)
	if d.Plan == nil {
		inUse := 0
		for _, h := range hosts {
			if len(h.Instances) > 0 {
				inUse++
			}
		}
		// One host in use is packed already: no news.
		if !st.moved && inUse > 1 {
			var why []string
			for _, s := range d.Skipped {
				why = append(why, s.Host+": "+s.Reason)
			}
			k.record(ctx, g.Name(), event.HostConsolidationSkipped, c.Provider, fmt.Sprintf("after group %s's scale-in, no host of provider %s could be emptied: %s", g.Name(), c.Provider, strings.Join(why, "; ")))
		}
		st.handled, st.moved, st.waited = v.ScaledIn, false, ""
		return false
	}
	p := d.Plan
	for _, m := range p.Moves {
		if ok, why := byName[m.Instance.Group].VoluntaryAllowed(); !ok {
			if why != st.waited {
				st.waited = why
				k.record(ctx, g.Name(), event.HostConsolidationWaiting, p.Host, fmt.Sprintf("host %s could be emptied by moving %s; the moves wait for group %s's disruption budget: %s", p.Host, moveList(p.Moves), m.Instance.Group, why))
			}
			return false
		}
	}
	st.waited = ""
	k.record(ctx, g.Name(), event.HostConsolidating, p.Host, fmt.Sprintf("emptying host %s (provider %s) after group %s's scale-in: moving %s, launch before terminate", p.Host, c.Provider, g.Name(), moveList(p.Moves)))
	k.log.Info("consolidating a host", "provider", c.Provider, "host", p.Host, "moves", len(p.Moves))
	k.provs.vacating.put(c.Provider, p.Host, true)
	defer k.provs.vacating.put(c.Provider, p.Host, false)
	ins := make([]hostdrain.Instance, len(p.Moves))
	for i, m := range p.Moves {
		ins[i] = hostdrain.Instance{Group: m.Instance.Group, Name: m.Instance.Name}
	}
	waited := ""
	r := hostdrain.Drain{Host: p.Host, Instances: ins, Replacer: k.rep, Poll: consolidatePoll, MaxWait: consolidateMaxWait,
		Budget: func(name string) (bool, string) {
			gg := byName[name]
			if gg == nil {
				return false, "group " + name + " is gone"
			}
			ok, why := gg.VoluntaryAllowed()
			if !ok && why != waited {
				waited = why
				k.record(ctx, g.Name(), event.HostConsolidationWaiting, p.Host, fmt.Sprintf("emptying host %s: the next move waits for group %s's disruption budget: %s", p.Host, name, why))
			}
			return ok, why
		},
	}.Run(ctx)
	left := 0
	if len(r.Left) == 0 {
		left = awaitEmpty(ctx, hl, p.Host)
	}
	if len(r.Left) > 0 || left != 0 {
		var why []string
		for _, l := range r.Left {
			why = append(why, l.Name+": "+l.Reason)
		}
		if len(why) == 0 {
			why = append(why, fmt.Sprintf("every move done, but the provider still counts %d instance(s) there after %s", left, emptyWait))
		}
		st.retryAt = time.Now().Add(max(cc.After, consolidateEvery))
		k.record(ctx, g.Name(), event.HostConsolidationFailed, p.Host, fmt.Sprintf("emptying host %s ended with %d of %d moved: %s; tried again in %s", p.Host, len(r.Moved), len(p.Moves), strings.Join(why, "; "), max(cc.After, consolidateEvery)))
		return false
	}
	st.moved = true
	k.log.Info("host consolidated: empty", "provider", c.Provider, "host", p.Host)
	k.record(ctx, g.Name(), event.HostConsolidated, p.Host, fmt.Sprintf("host %s (provider %s) is empty: consolidation moved %s; it can be powered off or returned (`shoal hosts cordon %s` first keeps new instances off it)", p.Host, c.Provider, moveList(p.Moves), p.Host))
	return true
}

// input builds Decide's hosts and groups for provider prov: every host with
// every instance there of any group (those of groups not consolidating,
// or not settled, pinned; what the host runs that no group owns, pinned
// too), and the consolidating groups on it by name.
func (k *consolidator) input(prov string, hl provider.HostLister) ([]consolidate.Host, map[string]consolidate.Group, map[string]*group.Group) {
	groups := map[string]consolidate.Group{}
	byName := map[string]*group.Group{}
	onHost := map[string][]consolidate.Instance{}
	for _, g := range k.groups() {
		c := g.Config()
		if c.Provider != prov {
			continue
		}
		byName[g.Name()] = g
		v := g.Consolidation()
		pin := ""
		switch {
		case c.Placement.Consolidation == nil || c.Placement.Strategy != config.PlacePack:
			pin = "group " + g.Name() + " does not consolidate"
		case v.Unsettled != "":
			pin = "group " + g.Name() + " is not settled (" + v.Unsettled + ")"
		default:
			groups[g.Name()] = consolidate.Group{MaxMoves: c.Placement.Consolidation.MaxMoves, Labels: c.Placement.Labels}
		}
		for _, in := range v.Instances {
			ci := consolidate.Instance{Name: in.Name, Group: g.Name(), CPUs: in.CPUs, Pinned: in.Pinned}
			if ci.Pinned == "" {
				ci.Pinned = pin
			}
			onHost[in.Host] = append(onHost[in.Host], ci)
		}
	}
	var hosts []consolidate.Host
	for _, s := range hl.Hosts() {
		h := consolidate.Host{Name: s.Name, Labels: s.Labels, CapInstances: s.CapacityInstances, CapCores: s.CapacityCores, Instances: onHost[s.Name]}
		switch {
		case s.Cordoned:
			h.Closed = "cordoned"
		case s.State != provider.HostUp:
			h.Closed = s.State
		}
		for i := len(h.Instances); i < s.Instances; i++ {
			h.Instances = append(h.Instances, consolidate.Instance{Name: fmt.Sprintf("(unowned %d)", i+1), Pinned: "no group owns it"})
		}
		hosts = append(hosts, h)
	}
	return hosts, groups, byName
}

// emptyWait bounds how long a host whose instances all moved may take to
// count none (the provider forgets a stopped instance as its stop ends).
const emptyWait = 10 * time.Second

// awaitEmpty waits up to emptyWait until the provider counts no instance
// on host, and returns how many it counts then.
func awaitEmpty(ctx context.Context, hl provider.HostLister, host string) int {
	deadline := time.Now().Add(emptyWait)
	for {
		n := 0
		for _, s := range hl.Hosts() {
			if s.Name == host {
				n = s.Instances
			}
		}
		if n == 0 || time.Now().After(deadline) {
			return n
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return n
		case <-t.C:
		}
	}
}

// moveList words the moves: "web-3 → 10.0.0.2, web-4 → 10.0.0.3".
func moveList(ms []consolidate.Move) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.Instance.Name + " → " + m.To
	}
	return strings.Join(parts, ", ")
}

func (k *consolidator) record(ctx context.Context, g string, t event.Type, subject, msg string) {
	d := event.Record(g, t, time.Now(), subject, msg)
	if err := k.st.InsertDecision(context.WithoutCancel(ctx), &d); err != nil {
		k.log.Warn("recording a consolidation event failed", "host", subject, "err", err)
	}
}
