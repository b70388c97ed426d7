package config

import "time"

// Limits caps how many requests each instance of a group serves at once;
// the rest wait in HAProxy's queue for the group.
type Limits struct {
	// MaxConn is HAProxy's maxconn of each instance: requests beyond it wait
	// in the group's queue, never on an overloaded instance.
	MaxConn int `yaml:"max_conn" required:"true"`
	// QueueTimeout is how long a request may wait in the queue before it is
	// answered 503 (HAProxy's timeout queue for the group's backend). At
	// least the health check interval; left out, 5s or that interval if longer.
	QueueTimeout time.Duration `yaml:"queue_timeout"`
}

// defaultLimits holds the defaults of limits' keys.
var defaultLimits = Limits{QueueTimeout: 5 * time.Second}

// maxMaxConn is HAProxy's ceiling for a server's maxconn (a 32-bit counter);
// far more than any instance serves.
const maxMaxConn = 1 << 20

// maxSlowStart bounds slow_start: a ramp longer than an hour is a typo.
const maxSlowStart = time.Hour

// limits decodes a group's limits and slow_start; health must be decoded
// already (queue_timeout is checked against its interval).
func (d *decoder) limits(f *fields, g *Group) {
	g.SlowStart = d.within(f, "slow_start", 0, 0, maxSlowStart)

	n := f.get("limits")
	if n == nil {
		return
	}
	path := f.field("limits")
	s := section[Limits](d, n, path)
	if s.node == nil {
		return
	}
	l := defaultLimits
	// Left out, the queue waits at least one check interval too.
	l.QueueTimeout = max(l.QueueTimeout, g.Health.Interval)
	ok := true
	if v, vn := s.integer("max_conn", 0); vn != nil {
		if v < 1 || v > maxMaxConn {
			d.errorf(vn, s.field("max_conn"), "must be from 1 to %d (requests each instance serves at once), got %d", maxMaxConn, v)
			ok = false
		}
		l.MaxConn = v
	} else {
		ok = false // reported by section (required) or integer
	}
	if v, vn := s.duration("queue_timeout", l.QueueTimeout); vn != nil {
		switch {
		case v < g.Health.Interval:
			d.errorf(vn, s.field("queue_timeout"), "must be at least the health check interval (%s), got %s: a queued request would time out before a new instance could pass a check", g.Health.Interval, v)
			ok = false
		case v > maxTimeout:
			d.errorf(vn, s.field("queue_timeout"), "must be at most %s, got %s", maxTimeout, v)
			ok = false
		}
		l.QueueTimeout = v
	}
	if ok {
		g.Limits = &l
	}
}
