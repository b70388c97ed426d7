package group

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/provider"
)

// maxGone bounds the versions of finished instances a group remembers for
// Reclaim.
const maxGone = 256

// hostLoad is how used a host is, for scale-in (see moreLoaded).
type hostLoad struct {
	status provider.HostStatus
}

// fraction is the share of the host's capacity its instances take: the
// larger of the instance and core fractions where each is bounded, 0 on a
// host without capacity, which has nothing to run out of.
func (h hostLoad) fraction() float64 {
	s := h.status
	f := 0.0
	if s.CapacityInstances > 0 {
		f = float64(s.Instances) / float64(s.CapacityInstances)
	}
	if s.CapacityCores > 0 {
		f = max(f, s.Cores/s.CapacityCores)
	}
	return f
}

// moreLoaded reports whether a is more loaded than b: the larger fraction
// of its capacity used, then, where that ties (hosts without capacity
// among themselves), more instances. A count and a fraction are never
// compared, so a host at 9/10 goes before an unbounded one with 20
// instances: it is the one that runs out.
func moreLoaded(a, b hostLoad) bool {
	if c := cmp.Compare(a.fraction(), b.fraction()); c != 0 {
		return c > 0
	}
	return a.status.Instances > b.status.Instances
}

// String writes the load as status shows it: "5/8 instances".
func (h hostLoad) String() string {
	s := h.status
	switch {
	case s.CapacityInstances > 0:
		return fmt.Sprintf("%d/%d instances", s.Instances, s.CapacityInstances)
	case s.CapacityCores > 0:
		return fmt.Sprintf("%g/%g cores", s.Cores, s.CapacityCores)
	}
	return fmt.Sprintf("%d instances, unbounded", s.Instances)
}

// hostLoads returns the hosts of the group's providers with several, by
// name; nil when none has (local, clouds). It asks the providers, so it is
// called without g.mu.
func (g *Group) hostLoads() map[string]hostLoad {
	var out map[string]hostLoad
	for _, gp := range g.conf().ProviderList() {
		hl, ok := g.provs[gp.Name].(provider.HostLister)
		if !ok {
			continue
		}
		if out == nil {
			out = map[string]hostLoad{}
		}
		for _, h := range hl.Hosts() {
			out[h.Name] = hostLoad{status: h}
		}
	}
	return out
}

// hostProvider is the group's provider with hosts that has host (its
// first when none has): whose instance a returning host found.
func (g *Group) hostProvider(host string) string {
	first := ""
	for _, gp := range g.conf().ProviderList() {
		hl, ok := g.provs[gp.Name].(provider.HostLister)
		if !ok {
			continue
		}
		if first == "" {
			first = gp.Name
		}
		for _, h := range hl.Hosts() {
			if h.Name == host {
				return gp.Name
			}
		}
	}
	if first == "" {
		return g.conf().ProviderList()[0].Name
	}
	return first
}

// byHost reorders picks, the scale-in order of one group's instances, so
// that those in service come from the most loaded host first: each pick
// takes the first instance, in the policy's order, of the host that is then
// the most used, and lowers that host's load by what the instance took
// (cores: the group's template.cpus). Those that serve nobody keep their
// place at the front. Without hosts the order is left as it is.
func byHost(picks []pick, hosts map[string]hostLoad, cores float64) []pick {
	if len(hosts) == 0 {
		return picks
	}
	out := make([]pick, 0, len(picks))
	var rest []pick
	for _, p := range picks {
		if p.in.state == InService {
			rest = append(rest, p)
		} else {
			out = append(out, p)
		}
	}
	loads := make(map[string]hostLoad, len(hosts))
	for k, v := range hosts {
		loads[k] = v
	}
	for len(rest) > 0 {
		best := -1
		for i, p := range rest {
			if best < 0 {
				best = i
				continue
			}
			a, b := loads[p.in.rec.Host], loads[rest[best].in.rec.Host]
			// Strictly more loaded wins; a tie keeps the policy's order.
			if moreLoaded(a, b) {
				best = i
			}
		}
		p := rest[best]
		rest = append(rest[:best], rest[best+1:]...)
		h := p.in.rec.Host
		if l, ok := loads[h]; ok {
			p.why = fmt.Sprintf("host %s most loaded (%s); %s", h, l, p.why)
			l.status.Instances--
			l.status.Cores -= cores
			loads[h] = l
		}
		out = append(out, p)
	}
	return out
}

// hostDown reports whether the instance ran on a host its provider has
// marked down: its end says nothing about its program.
func (g *Group) hostDown(in *instance) bool {
	g.mu.Lock()
	host := in.rec.Host
	g.mu.Unlock()
	if host == "" {
		return false
	}
	h, ok := g.hostLoads()[host]
	return ok && h.status.State == provider.HostDown
}

// recordPlacement writes where a started instance went and why, for
// `shoal events`, when its provider placed it on one of several hosts.
func (g *Group) recordPlacement(ctx context.Context, in *instance, pi provider.Instance) {
	pl, ok := pi.(provider.Placed)
	if !ok {
		return
	}
	g.mu.Lock()
	current := len(g.activeLocked())
	desired := g.desired
	g.mu.Unlock()
	d := decision.Record{Group: g.cfg.Name, Time: g.clk.Now(), Rule: string(decision.Placement),
		Sources: []string{in.name}, Current: current, Recommendation: desired,
		Outcome: decision.Placement, Code: decision.Code(g.conf().Placement.Strategy),
		Reason: fmt.Sprintf("%s placed on %s: %s", in.name, in.rec.Host, pl.Placement())}
	if err := g.st.InsertDecision(context.WithoutCancel(ctx), &d); err != nil {
		g.log.Warn("recording a placement failed", "instance", in.name, "err", err)
	}
}

// Checks reports HAProxy's view of the named instance's checks: passing
// when it is UP; known is false when HAProxy has no such server or gave no
// answer. An ssh provider asks it to tell a dead host from a broken link.
func (g *Group) Checks(ctx context.Context, name string) (passing, known bool) {
	st, ok := g.stats.server(ctx, name)
	if !ok {
		return false, false
	}
	switch {
	case st.Status.IsUp():
		return true, true
	case st.Status.IsDown():
		return false, true
	}
	return false, false
}

// goneVersions owns the template versions of a group's finished
// instances by provider ID, the newest maxGone: Reclaim takes back only an
// instance of the serving version. It is read and written with the
// instance set, under the group's mu.
type goneVersions struct {
	byID  map[string]string
	order []string // IDs as remembered, oldest first
}

// remember keeps the version of a finished instance (id "": one the
// provider never started, which no host can give back).
func (v *goneVersions) remember(id, version string) {
	if id == "" {
		return
	}
	if v.byID == nil {
		v.byID = map[string]string{}
	}
	if _, ok := v.byID[id]; !ok {
		v.order = append(v.order, id)
	}
	v.byID[id] = version
	if len(v.order) > maxGone {
		delete(v.byID, v.order[0])
		v.order = v.order[1:]
	}
}

// version returns the remembered version of the instance with id.
func (v *goneVersions) version(id string) (string, bool) {
	version, ok := v.byID[id]
	return version, ok
}

// forget drops id: its instance is back. Its place in order goes too, or
// a later remember of the same id would be listed twice and its eviction
// would drop the newer entry early.
func (v *goneVersions) forget(id string) {
	delete(v.byID, id)
	v.order = slices.DeleteFunc(v.order, func(o string) bool { return o == id })
}

// Reclaim is asked, when a host that was down comes back, about an
// instance of this group still running there that the group gave up: it
// takes it back, adopting it through the provider and putting it through
// the health gate like a new instance, only if the group still wants one
// more (fewer active than desired, not removed), no instance has its name
// or index, and it runs the serving template version. It reports whether
// it took it; if not, the provider stops it.
//
// Taking it and launching a replacement cannot both happen: the name is
// reserved under g.mu before the provider is asked, so a launch picks
// another index, and a launch that came first makes the name taken.
func (g *Group) Reclaim(ctx context.Context, rec provider.Record) bool {
	prov := rec.Provider
	if prov == "" {
		prov = g.hostProvider(rec.Host)
	}
	g.mu.Lock()
	version, known := g.gone.version(rec.ID)
	ok := g.runCtx != nil && g.runCtx.Err() == nil && !g.removed && known && g.dep.takesBack(version) &&
		len(g.activeLocked()) < g.desired && g.insts[rec.Name] == nil && !g.indexUsedLocked(rec.Index)
	if !ok {
		g.mu.Unlock()
		g.log.Info("instance found on a returning host not taken back; it is stopped", "instance", rec.Name, "host", rec.Host,
			"known_version", known, "version", version, "serving", g.dep.version)
		return false
	}
	runCtx, tmpl := g.runCtx, g.dep.tmpl
	in := &instance{name: rec.Name, index: rec.Index, prov: prov, asked: true, state: Starting, since: g.clk.Now(), retire: make(chan struct{}),
		version: version, tmpl: tmpl, hash: tmpl.Hash(g.cfg.Name), rec: rec}
	g.gone.forget(rec.ID)
	g.insts[in.name] = in
	g.churn++
	g.notifyLocked()
	g.mu.Unlock()

	pi, err := g.provs[prov].Adopt(ctx, rec, tmpl)
	if err != nil {
		g.log.Warn("instance on a returning host could not be taken back", "instance", rec.Name, "host", rec.Host, "err", err)
		g.forget(in)
		return false
	}
	g.mu.Lock()
	if g.runCtx == nil {
		// shoal is stopping: the reconciler no longer runs lifecycles.
		g.mu.Unlock()
		g.forget(in)
		return false
	}
	in.inst, in.rec = pi, recordOn(pi, prov)
	g.spawn(runCtx, in, true)
	g.mu.Unlock()
	g.log.Info("instance on a returning host taken back; in service once its checks pass", "instance", rec.Name, "host", rec.Host)
	g.persist(ctx, in)
	return true
}

// Record returns the provider's record of the named instance; ok is false
// when the group has no such instance or it has not started yet.
func (g *Group) Record(name string) (rec provider.Record, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	in := g.insts[name]
	if in == nil || in.inst == nil {
		return provider.Record{}, false
	}
	return in.rec, true
}
