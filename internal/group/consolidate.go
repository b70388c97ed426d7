package group

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// HostedInstance is one of a group's instances on a host, as a host
// consolidation reads it: Pinned says why it may not move ("" when it
// may).
type HostedInstance struct {
	Name, Host string
	CPUs       float64
	Pinned     string
}

// ConsolidationView is what a host consolidation (core's, over
// consolidate.Decide) reads of a group.
type ConsolidationView struct {
	// ScaledIn is when the desired size last went down in this run of
	// shoal (zero: never), Resized when it last changed.
	ScaledIn, Resized time.Time
	// Unsettled says why the group is not at rest ("" when it is): every
	// place filled by an instance in service, none starting or leaving.
	Unsettled string
	// Instances are those with a host, by name.
	Instances []HostedInstance
}

// Consolidation returns the group's view for a host consolidation.
func (g *Group) Consolidation() ConsolidationView {
	cpus := g.conf().Template.CPUs
	g.mu.Lock()
	defer g.mu.Unlock()
	v := ConsolidationView{ScaledIn: g.scaledIn, Resized: g.resized}
	inService := 0
	for _, in := range g.insts {
		pinned := ""
		switch {
		case in.retiring || in.state == Draining || in.state == Stopping || in.state == Failed:
			pinned = "on its way out"
			v.Unsettled = fmt.Sprintf("%s is on its way out", in.name)
		case in.marks.protected:
			pinned = "protected"
		case in.state != InService:
			pinned = string(in.state)
		}
		if in.state == InService && !in.retiring {
			inService++
		}
		if in.state == Starting {
			v.Unsettled = fmt.Sprintf("%s is starting", in.name)
		}
		if in.rec.Host != "" {
			v.Instances = append(v.Instances, HostedInstance{Name: in.name, Host: in.rec.Host, CPUs: cpus, Pinned: pinned})
		}
	}
	switch {
	case g.removed:
		v.Unsettled = "the group is being removed"
	case v.Unsettled == "" && inService < g.desired:
		v.Unsettled = fmt.Sprintf("%d of %d in service", inService, g.desired)
	case v.Unsettled == "" && len(g.activeLocked()) != g.desired:
		v.Unsettled = fmt.Sprintf("%d instances for a desired size of %d", len(g.activeLocked()), g.desired)
	}
	slices.SortFunc(v.Instances, func(a, b HostedInstance) int { return strings.Compare(a.Name, b.Name) })
	return v
}
