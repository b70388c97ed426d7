package config

import (
	"time"

	"gopkg.in/yaml.v3"
)

// ScaleToZero lets a group with min_size 0 sleep at no instance: HAProxy
// holds the requests that arrive meanwhile and shoal starts an instance for
// them (see core's waker); after IdleAfter without a request it goes back to 0.
type ScaleToZero struct {
	// IdleAfter is how long the group goes without a request before it is
	// scaled to 0.
	IdleAfter time.Duration `yaml:"idle_after"`
	// MaxQueue is how many requests HAProxy holds while no instance is in
	// service; more get 503 at once. Each waits at most haproxy.timeouts.queue.
	MaxQueue int `yaml:"max_queue"`
	// WakingPage answers a browser's request (Accept has text/html) while
	// the group has no instance with a small page that reloads itself
	// every second (503, Retry-After: 1) instead of holding it; other
	// clients are held as without it. Each reload is a request, which
	// keeps the group waking.
	WakingPage bool `yaml:"waking_page"`
}

// defaultScaleToZero applies when the scale_to_zero section is there.
var defaultScaleToZero = ScaleToZero{IdleAfter: DefaultIdleAfter, MaxQueue: DefaultMaxQueue}

// Scale-to-zero defaults and bounds.
const (
	DefaultIdleAfter = 10 * time.Minute
	DefaultMaxQueue  = 1000
	maxMaxQueue      = 1_000_000
)

// WakeSize is the size a sleeping group wakes to (see Range.WakeSize).
func (g Group) WakeSize() int { return g.Range().WakeSize() }

// PolicyGroup is the group as its autoscale policy sees it: one that scales
// to zero is never below 1 for the policy, since only idle_after scales it
// to 0.
func (g Group) PolicyGroup() Group {
	if g.ScaleToZero != nil {
		g.MinSize = max(g.MinSize, 1)
	}
	return g
}

// scaleToZero decodes a group's scale_to_zero and checks it against the
// rest of the group: it needs min_size 0, and a group with min_size 0 and a
// policy needs it, since at 0 instances a policy has no metric to act on.
// Its checks against other sections are checkScaleToZero's.
func (d *decoder) scaleToZero(f *fields, g *Group, minOK bool) (*ScaleToZero, *fields) {
	key := "scale_to_zero"
	n := f.get(key)
	if n == nil {
		if minOK && g.MinSize == 0 && g.Autoscale != nil {
			d.errorf(f.get("min_size"), f.field("min_size"),
				"0 with an autoscale policy needs scale_to_zero (e.g. scale_to_zero: {idle_after: 10m}): at 0 instances the policy's metrics have no value, so nothing would ever start an instance and every request would get 503; set min_size to at least 1, or add scale_to_zero so that requests wake the group")
		}
		return nil, nil
	}
	z := section[ScaleToZero](d, n, f.field(key))
	if z.node == nil {
		return nil, nil
	}
	s := new(defaultScaleToZero)
	s.IdleAfter = d.within(z, "idle_after", s.IdleAfter, time.Second, maxCooldown)
	if v, vn := z.integer("max_queue", s.MaxQueue); vn != nil {
		if v < 1 || v > maxMaxQueue {
			d.errorf(vn, z.field("max_queue"), "must be from 1 to %d, got %d", maxMaxQueue, v)
		} else {
			s.MaxQueue = v
		}
	}
	s.WakingPage, _ = z.boolean("waking_page", false)
	if minOK && g.MinSize != 0 {
		d.errorf(n, f.field(key), "needs min_size: 0 (the group sleeps at no instance), got min_size %d", g.MinSize)
	}
	return s, z
}

// checkScaleToZero checks a group's scale_to_zero (n, its keys z) against
// the sections that bound it: the hold (haproxy's queue timeout) must
// outlast a metrics interval, and both the hold and idle_after must outlast
// a cold start (health.grace, the group's or its provider's).
func (d *decoder) checkScaleToZero(g *Group, n *yaml.Node, z *fields, queue, interval time.Duration) {
	grace := g.Health.Grace
	if grace > 0 && queue > 0 && queue < grace {
		d.errorf(n, z.path, "haproxy.timeouts.queue (%s) is shorter than health.grace (%s): the requests held while an instance starts would get 503 before it may be in service; raise timeouts.queue to at least %s or lower grace",
			queue, grace, grace)
	}
	// The waker sees held requests only at a metrics sample: one held just
	// after a sample waits a whole interval before its wake is even asked.
	if queue > 0 && interval > 0 && queue <= interval {
		d.errorf(n, z.path, "haproxy.timeouts.queue (%s) is not longer than metrics.interval (%s): a request held just after a sample would get 503 before the next sample wakes the group; raise timeouts.queue above %s (it must also cover an instance's start) or shorten the interval",
			queue, interval, interval)
	}
	if at := z.get("idle_after"); grace > 0 && g.ScaleToZero.IdleAfter < grace {
		if at == nil {
			at = n
		}
		d.errorf(at, z.field("idle_after"), "must be at least health.grace (%s), got %s: a group that sleeps sooner than an instance may take to start spends its time starting", grace, g.ScaleToZero.IdleAfter)
	}
}
