package group

import (
	"context"
	"fmt"

	"github.com/shoal-lb/shoal/internal/event"
)

// record writes what happened to subject into the group's event log, where
// `shoal events`, the dashboard and the notifications read it.
func (g *Group) record(ctx context.Context, t event.Type, subject, reason string) {
	g.mu.Lock()
	d := event.Record(g.cfg.Name, t, g.clk.Now(), subject, reason)
	d.Current, d.Recommendation = len(g.activeLocked()), g.desired
	g.mu.Unlock()
	if err := g.st.InsertDecision(context.WithoutCancel(ctx), &d); err != nil {
		g.log.Warn("recording an event failed", "event", t, "subject", subject, "err", err)
	}
}

// launched records an instance's launch and, when it replaces one that
// failed in service, the replacement.
func (g *Group) launched(ctx context.Context, in *instance) {
	g.mu.Lock()
	rec, version := in.rec, in.version
	var old string
	if len(g.replacing) > 0 {
		old, g.replacing = g.replacing[0], g.replacing[1:]
	}
	g.mu.Unlock()
	where := rec.Addr
	if rec.Host != "" && rec.Host != rec.Addr {
		where = fmt.Sprintf("%s on %s", rec.Addr, rec.Host)
	}
	g.record(ctx, event.InstanceLaunched, in.name, fmt.Sprintf("%s launched at %s (version %s)", in.name, where, version))
	if old != "" {
		// The replacement often reuses the failed instance's name.
		g.record(ctx, event.InstanceReplaced, old, fmt.Sprintf("%s, failed in service, replaced by %s launched at %s", old, in.name, where))
	}
}

// failed records an instance's failure: one that never served failed to
// launch; one that served is unhealthy, and replaced by the next launch.
// Unless report is set (see fail) no event is recorded.
func (g *Group) failed(in *instance, served bool, reason string, report bool) {
	if !served {
		if report {
			g.record(context.Background(), event.InstanceLaunchFailed, in.name, fmt.Sprintf("%s failed to launch: %s", in.name, reason))
		}
		return
	}
	g.mu.Lock()
	g.replacing = append(g.replacing, in.name)
	if len(g.replacing) > maxFailures {
		g.replacing = g.replacing[len(g.replacing)-maxFailures:]
	}
	g.mu.Unlock()
	if report {
		g.record(context.Background(), event.InstanceUnhealthy, in.name, fmt.Sprintf("%s failed in service: %s", in.name, reason))
	}
}
