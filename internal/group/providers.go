package group

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/event"
	"github.com/shoal-lb/shoal/internal/provider"
)

// A group across providers: its config's providers list, in order. Each
// new instance comes from the first provider with room that is not
// skipped (pickProvider); a scale-in retires from the last provider first
// (byProvider); a provider whose start failed is skipped for a back-off
// that doubles from skipMin to skipMax while it keeps failing, and is
// used again at the first start it accepts:
//
//	         start refused (n = 1)                back-off over: the next
//	+------+ ----------------------> +---------+  launch that needs it asks it
//	| used |                         | skipped |------------------+
//	+------+ <---------------------- +---------+ <----------------+
//	         start accepted (n = 0)   for 30 s · 2^(n-1),  refused again (n+1)
//	                                  at most 10 min
//
// A refusal of a start asked before the back-off began (launches that
// went out together) is the same refusal: it does not count again.

// Providers are the built providers a group's config names, by name.
type Providers map[string]provider.Provider

const (
	// skipMin is how long a provider whose start failed is skipped
	// first; each failure after it doubles it, up to skipMax.
	skipMin = 30 * time.Second
	skipMax = 10 * time.Minute
)

// skip is a provider's back-off after failed starts.
type skip struct {
	until  time.Time
	failed int
	reason string
}

// slot is what the choice of a provider sees of one.
type slot struct {
	name string
	// room is how many more of the group's instances it takes now; -1:
	// no bound (its max is 0 and it has no hosts of bounded capacity).
	room    int
	skipped bool
}

// pickProvider returns the index of the slot the next instance starts
// on: the first with room that is not skipped; -1 when none has (every
// bounded one is full, the others skipped). A group with one provider
// always uses it, full or failing: its own error and the crash-loop
// back-off speak then.
func pickProvider(slots []slot) int {
	if len(slots) == 1 {
		return 0
	}
	for i, s := range slots {
		if !s.skipped && s.room != 0 {
			return i
		}
	}
	return -1
}

// skipFor is the back-off after a provider's failed-th failed start in a
// row.
func skipFor(failed int) time.Duration {
	d := skipMin
	for i := 1; i < failed && d < skipMax; i++ {
		d *= 2
	}
	return min(d, skipMax)
}

// byProvider orders picks (a scale-in order) so that those of the last
// provider in the group's list go first, each provider's keeping their
// order: the rented capacity goes before the own.
func byProvider(picks []pick, rank func(prov string) int) []pick {
	out := slices.Clone(picks)
	slices.SortStableFunc(out, func(a, b pick) int { return rank(b.in.prov) - rank(a.in.prov) })
	for i := range out {
		out[i].why = fmt.Sprintf("on provider %s (the group's last providers go first), %s", out[i].in.prov, out[i].why)
	}
	return out
}

// hostRoom is what a provider's hosts have free for new instances.
type hostRoom struct {
	hosted    bool // it places on hosts (HostLister)
	free      int  // instances that fit on its usable hosts
	unbounded bool // a usable host has no instance capacity
}

// hostRooms asks each provider with hosts what they have free: the hosts
// that are up and not cordoned. It asks the providers, so it is called
// without g.mu.
func (g *Group) hostRooms() map[string]hostRoom {
	out := map[string]hostRoom{}
	for _, gp := range g.conf().ProviderList() {
		hl, ok := g.provs[gp.Name].(provider.HostLister)
		if !ok {
			continue
		}
		r := hostRoom{hosted: true}
		for _, h := range hl.Hosts() {
			if h.State != provider.HostUp || h.Cordoned {
				continue
			}
			if h.CapacityInstances == 0 {
				r.unbounded = true
				continue
			}
			r.free += max(0, h.CapacityInstances-h.Instances)
		}
		out[gp.Name] = r
	}
	return out
}

// slotsLocked is the group's providers as pickProvider sees them now.
// g.mu must be held.
func (g *Group) slotsLocked(rooms map[string]hostRoom) []slot {
	now := g.clk.Now()
	list := g.conf().ProviderList()
	active := map[string]int{}
	pending := map[string]int{} // launched, its provider not asked yet
	for _, in := range g.activeLocked() {
		active[in.prov]++
		if !in.asked {
			pending[in.prov]++
		}
	}
	slots := make([]slot, len(list))
	for i, gp := range list {
		s := slot{name: gp.Name, room: -1, skipped: now.Before(g.skips[gp.Name].until)}
		if r, ok := rooms[gp.Name]; ok && r.hosted && !r.unbounded {
			s.room = max(0, r.free-pending[gp.Name])
		}
		if gp.Max > 0 {
			left := max(0, gp.Max-active[gp.Name])
			if s.room < 0 || left < s.room {
				s.room = left
			}
		}
		slots[i] = s
	}
	return slots
}

// nextProviderLocked is the provider the next launch would use ("" when
// none may now). g.mu must be held.
func (g *Group) nextProviderLocked(rooms map[string]hostRoom) string {
	slots := g.slotsLocked(rooms)
	if i := pickProvider(slots); i >= 0 {
		return slots[i].name
	}
	return ""
}

// skipEndsLocked is when the first skipped provider may be tried again
// (zero when none is skipped). g.mu must be held.
func (g *Group) skipEndsLocked() time.Time {
	var first time.Time
	for _, s := range g.skips {
		if s.until.After(g.clk.Now()) && (first.IsZero() || s.until.Before(first)) {
			first = s.until
		}
	}
	return first
}

// providerFailed skips prov for its back-off after a failed start, in a
// group with several providers, and says so in the events. It reports
// whether it did (the failure is the provider's, not a crash loop's).
func (g *Group) providerFailed(ctx context.Context, prov string, err error) bool {
	list := g.conf().ProviderList()
	if len(list) < 2 {
		return false
	}
	g.mu.Lock()
	s := g.skips[prov]
	if g.clk.Now().Before(s.until) {
		// A start asked before the back-off began: the same refusal.
		g.mu.Unlock()
		return true
	}
	s.failed++
	d := skipFor(s.failed)
	s.until, s.reason = g.clk.Now().Add(d), err.Error()
	g.skips[prov] = s
	next := g.nextProviderLocked(nil)
	g.mu.Unlock()
	g.clk.AfterFunc(d, g.poke)
	then := "no other provider has room until it is tried again"
	if next != "" {
		then = "the next instances start on " + next
	}
	g.log.Warn("provider skipped after a failed start", "provider", prov, "for", d, "err", err)
	g.record(ctx, event.ProviderSkipped, prov, fmt.Sprintf("provider %s skipped for %s after a failed start (%d in a row): %v; %s", prov, d, s.failed, err, then))
	return true
}

// providerStarted ends prov's back-off: it accepted a start.
func (g *Group) providerStarted(prov string) {
	g.mu.Lock()
	delete(g.skips, prov)
	g.mu.Unlock()
}

// provOf is the provider an instance runs on.
func (g *Group) provOf(in *instance) provider.Provider { return g.provs[in.prov] }

// providerOf is the name of the provider a stored record names: an older
// shoal's record ("") was on the group's only provider, its first now.
func (g *Group) providerOf(rec provider.Record) string {
	if rec.Provider != "" {
		return rec.Provider
	}
	return g.conf().ProviderList()[0].Name
}

// rankOf is a provider's place in the group's list (0: first; past the
// end: gone from it).
func rankOf(list []config.GroupProvider, name string) int {
	for i, gp := range list {
		if gp.Name == name {
			return i
		}
	}
	return len(list)
}

// ProviderUsage is a group's use of one of its providers, for status.
type ProviderUsage struct {
	Name string `json:"name"`
	// Instances counts the group's active instances there; Max is the
	// entry's bound (0: its hosts' capacity, or none).
	Instances int `json:"instances"`
	Max       int `json:"max,omitempty"`
	// InstanceHoursToday are the hours its instances ran since midnight
	// (UTC), running ones included; CostToday is that at CostPerHour.
	InstanceHoursToday float64 `json:"instance_hours_today"`
	CostPerHour        float64 `json:"cost_per_hour,omitempty"`
	CostToday          float64 `json:"cost_today,omitempty"`
	// SkippedUntil is the end of its back-off after failed starts, with
	// the last failure (zero and "" when it is not skipped).
	SkippedUntil time.Time `json:"skipped_until,omitzero"`
	SkipReason   string    `json:"skip_reason,omitempty"`
	// StartDelay is its instances' measured start delay, in a group with
	// several providers (nil before one went into service there).
	StartDelay *StartDelay `json:"start_delay,omitempty"`
}

// recordOn is pi's record, naming the group's provider it runs on: a
// provider knows its instances, not the name its config entry gives it.
func recordOn(pi provider.Instance, prov string) provider.Record {
	rec := pi.Record()
	rec.Provider = prov
	return rec
}

// providerUsage is the group's use of each of its providers, from today's
// usage u, with each one's measured start delay in a group with several.
func (g *Group) providerUsage(ctx context.Context, u Usage) []ProviderUsage {
	list := g.conf().ProviderList()
	out := make([]ProviderUsage, len(list))
	delays := make([]*StartDelay, len(list))
	if len(list) > 1 {
		for i, gp := range list {
			sd, err := g.StartDelayOn(ctx, gp.Name)
			if err != nil {
				g.log.Warn("reading a provider's start delays failed", "provider", gp.Name, "err", err)
			}
			delays[i] = sd
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	active := map[string]int{}
	for _, in := range g.activeLocked() {
		active[in.prov]++
	}
	now := g.clk.Now()
	for i, gp := range list {
		h := u.ByProvider[gp.Name]
		p := ProviderUsage{Name: gp.Name, Instances: active[gp.Name], Max: gp.Max, CostPerHour: gp.CostPerHour,
			InstanceHoursToday: math.Round(h*100) / 100, CostToday: math.Round(h*gp.CostPerHour*100) / 100, StartDelay: delays[i]}
		if s := g.skips[gp.Name]; s.until.After(now) {
			p.SkippedUntil, p.SkipReason = s.until, s.reason
		}
		out[i] = p
	}
	return out
}
