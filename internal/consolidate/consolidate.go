// Package consolidate decides which host a pack-placed group's
// consolidation empties, the way Karpenter's consolidation deletes a node
// whose pods fit on the others: when every instance on a part-used host
// could move to the other hosts in use, within their capacity, in at most
// max_moves moves per group, and none of them may not move (protected,
// held, another group's that does not consolidate), the host is emptied
// and can be powered off or returned. It is pure: the hosts, their
// instances and capacity in, one host's moves (or why none) out; the
// caller moves them, launch before terminate, within the groups'
// disruption budgets.
//
// A destination is a host already in use: moving onto an empty host would
// free one host by taking another. Among the hosts that can be emptied,
// the one with the fewest moves goes first (the least disruption), then
// the least used, then by name; one at a time, each decision made on what
// the last left.
package consolidate

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Instance is one instance on a host.
type Instance struct {
	Name  string
	Group string
	// CPUs is what it counts against a host's capacity.cores.
	CPUs float64
	// Pinned says why it may not move ("protected", "on standby", "group
	// db does not consolidate"); "" when it may.
	Pinned string
}

// Host is one host of a provider, with every instance on it (of any group).
type Host struct {
	Name string
	// Closed says why no new instance may be placed there (cordoned, down,
	// held off); "" when one may. A closed host is neither emptied nor a
	// destination.
	Closed string
	Labels map[string]string
	// CapInstances and CapCores are its capacity, 0 where unbounded.
	CapInstances int
	CapCores     float64
	Instances    []Instance
}

// Group is what a consolidating group allows.
type Group struct {
	// MaxMoves is the most of its instances one host's emptying may move.
	MaxMoves int
	// Labels are its placement.labels: a destination carries them all.
	Labels map[string]string
}

// Move is one instance to move and the host pack placement would put its
// replacement on.
type Move struct {
	Instance Instance
	To       string
}

// Plan empties Host by Moves.
type Plan struct {
	Host  string
	Moves []Move
}

// Skip is a part-used host that is not emptied, and why.
type Skip struct {
	Host   string
	Reason string
}

// Decision is Decide's answer: Plan is nil when no host can be emptied;
// Skipped says why of each part-used host not planned.
type Decision struct {
	Plan    *Plan
	Skipped []Skip
}

// load is a host's use as the moves fill it.
type load struct {
	h         *Host
	instances int
	cores     float64
}

// used is the share of its capacity in use, the larger of instances and
// cores (0 when unbounded): pack placement's order.
func (l load) used() float64 {
	f := 0.0
	if n := l.h.CapInstances; n > 0 {
		f = float64(l.instances) / float64(n)
	}
	if n := l.h.CapCores; n > 0 {
		f = max(f, l.cores/n)
	}
	return f
}

func (l load) fits(cpus float64) bool {
	if n := l.h.CapInstances; n > 0 && l.instances+1 > n {
		return false
	}
	if n := l.h.CapCores; n > 0 && l.cores+cpus > n+1e-9 {
		return false
	}
	return true
}

func newLoad(h *Host) load {
	l := load{h: h, instances: len(h.Instances)}
	for _, in := range h.Instances {
		l.cores += in.CPUs
	}
	return l
}

// Decide chooses the host to empty among hosts, for the consolidating
// groups (an instance of a group not in groups is pinned).
func Decide(hosts []Host, groups map[string]Group) Decision {
	var d Decision
	var inUse []*Host
	for i := range hosts {
		if len(hosts[i].Instances) > 0 {
			inUse = append(inUse, &hosts[i])
		}
	}
	type option struct {
		plan Plan
		used float64
	}
	var opts []option
	for _, h := range inUse {
		moves, why := plan(h, inUse, groups)
		if why != "" {
			d.Skipped = append(d.Skipped, Skip{Host: h.Name, Reason: why})
			continue
		}
		opts = append(opts, option{plan: Plan{Host: h.Name, Moves: moves}, used: newLoad(h).used()})
	}
	if len(opts) == 0 {
		return d
	}
	best := slices.MinFunc(opts, func(a, b option) int {
		return cmp.Or(cmp.Compare(len(a.plan.Moves), len(b.plan.Moves)), cmp.Compare(a.used, b.used), cmp.Compare(a.plan.Host, b.plan.Host))
	})
	d.Plan = &best.plan
	return d
}

// plan returns the moves that empty h onto the other hosts in use, or why
// it cannot be emptied.
func plan(h *Host, inUse []*Host, groups map[string]Group) ([]Move, string) {
	if h.Closed != "" {
		return nil, "host is " + h.Closed
	}
	counts := map[string]int{}
	for _, in := range h.Instances {
		if in.Pinned != "" {
			return nil, fmt.Sprintf("%s may not move: %s", in.Name, in.Pinned)
		}
		if _, ok := groups[in.Group]; !ok {
			return nil, fmt.Sprintf("%s may not move: group %s does not consolidate", in.Name, in.Group)
		}
		counts[in.Group]++
	}
	for _, g := range slices.Sorted(maps.Keys(counts)) {
		if n, limit := counts[g], groups[g].MaxMoves; n > limit {
			return nil, fmt.Sprintf("emptying it takes %d moves of group %s, more than its max_moves %d", n, g, limit)
		}
	}
	var dests []load
	for _, o := range inUse {
		if o != h && o.Closed == "" {
			dests = append(dests, newLoad(o))
		}
	}
	if len(dests) == 0 {
		return nil, "no other host in use can take its instances (emptying it onto an empty host frees none)"
	}
	// The largest first, as a bin packer does: small ones fill the gaps.
	ins := slices.Clone(h.Instances)
	slices.SortStableFunc(ins, func(a, b Instance) int {
		return cmp.Or(cmp.Compare(b.CPUs, a.CPUs), cmp.Compare(a.Name, b.Name))
	})
	moves := make([]Move, 0, len(ins))
	for _, in := range ins {
		best, labelled := -1, false
		for i, l := range dests {
			if !hasLabels(l.h.Labels, groups[in.Group].Labels) {
				continue
			}
			labelled = true
			if !l.fits(in.CPUs) {
				continue
			}
			if best < 0 || packsBefore(l, dests[best]) {
				best = i
			}
		}
		if !labelled {
			return nil, fmt.Sprintf("no other host in use carries group %s's placement labels", in.Group)
		}
		if best < 0 {
			return nil, fmt.Sprintf("no room for %s (group %s) on the other hosts in use: %s", in.Name, in.Group, room(dests))
		}
		dests[best].instances++
		dests[best].cores += in.CPUs
		moves = append(moves, Move{Instance: in, To: dests[best].h.Name})
	}
	return moves, ""
}

// packsBefore orders destinations as pack placement does: the most used
// first, then the one with more instances, then by name.
func packsBefore(a, b load) bool {
	if a.used() != b.used() {
		return a.used() > b.used()
	}
	if a.instances != b.instances {
		return a.instances > b.instances
	}
	return a.h.Name < b.h.Name
}

// room words the destinations' use after the moves planned so far:
// "b 4/4 instances, c 2/2 cores".
func room(dests []load) string {
	var parts []string
	for _, l := range dests {
		var s []string
		if n := l.h.CapInstances; n > 0 {
			s = append(s, fmt.Sprintf("%d/%d instances", l.instances, n))
		}
		if n := l.h.CapCores; n > 0 {
			s = append(s, fmt.Sprintf("%g/%g cores", l.cores, n))
		}
		if len(s) == 0 {
			s = append(s, "unbounded")
		}
		parts = append(parts, l.h.Name+" "+strings.Join(s, ", "))
	}
	return strings.Join(parts, "; ")
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
