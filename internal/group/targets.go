package group

import (
	"slices"
	"strings"

	"github.com/shoal-lb/shoal/internal/metrics"
	"github.com/shoal-lb/shoal/internal/provider"
)

// Targets lists the group's instances for the metrics collector: each one's
// process group, allotted cores, state and, once it has a process, its
// server in HAProxy. An instance in service since a restart of shoal keeps
// the time it entered service, so its warmup is not served twice. The cores
// are those of the config in force: template.cpus only tells shoal what every
// instance is allotted, so a reload that changes it applies to running
// instances too, as a restart would.
func (g *Group) Targets() []metrics.Target {
	cores := g.conf().Template.CPUs
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]metrics.Target, 0, len(g.insts))
	for _, in := range g.insts {
		t := metrics.Target{
			Group:   g.cfg.Name,
			Name:    in.name,
			Cores:   cores,
			State:   string(in.state),
			Backend: g.cfg.Name,
		}
		if in.retiring && in.state == InService {
			t.State = string(Draining)
		}
		if in.inst != nil {
			// Every local instance is its own process group, led by its
			// first process; a remote one's provider samples it.
			if s, ok := in.inst.(provider.Sampler); ok {
				t.Sampler = s
			} else {
				t.PGID = in.inst.PID()
			}
			t.Server = in.name
		}
		if in.state == InService && !in.retiring {
			t.InService, t.ReadySince = true, in.since
		}
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b metrics.Target) int { return strings.Compare(a.Name, b.Name) })
	return out
}
