package group

import (
	"fmt"

	"github.com/shoal-lb/shoal/internal/provider"
)

// zoneOf is the zone in's provider places it in ("" when the provider has
// no zones). It only reads the provider's newest listing.
func (g *Group) zoneOf(in *instance) string {
	if z, ok := g.provOf(in).(provider.Zoner); ok {
		return z.Zone(in.rec)
	}
	return ""
}

// byZone reorders picks, a scale-in order, so that those in service come
// from the zone with the most of the group's instances first: each pick
// takes the first instance, in the order given, of the zone that then has
// the most, so a scale-in leaves the group spread as evenly as it can.
// Those that serve nobody keep their place at the front; without zones
// (none known) the order is left as it is.
func byZone(picks []pick, zone func(*instance) string) []pick {
	zones := make([]string, len(picks))
	count := map[string]int{}
	for i, p := range picks {
		if zones[i] = zone(p.in); zones[i] != "" {
			count[zones[i]]++
		}
	}
	if len(count) < 2 {
		return picks
	}
	out := make([]pick, 0, len(picks))
	var rest []int
	for i, p := range picks {
		if p.in.state == InService {
			rest = append(rest, i)
		} else {
			out = append(out, p)
			if zones[i] != "" {
				count[zones[i]]--
			}
		}
	}
	for len(rest) > 0 {
		best := 0
		for j, i := range rest {
			// Strictly more wins; a tie keeps the order given.
			if count[zones[i]] > count[zones[rest[best]]] {
				best = j
			}
		}
		i := rest[best]
		rest = append(rest[:best], rest[best+1:]...)
		p := picks[i]
		if z := zones[i]; z != "" {
			p.why = fmt.Sprintf("zone %s has the most of the group (%d); %s", z, count[z], p.why)
			count[z]--
		}
		out = append(out, p)
	}
	return out
}
