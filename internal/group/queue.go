package group

import (
	"context"

	"github.com/shoal-lb/shoal/internal/haproxy"
)

// Queue is the group's HAProxy queue: requests waiting for an instance under
// its limits.max_conn, now (Current, qcur of the backend and its servers),
// at most since HAProxy's last reload (Max, qmax), and how long the last
// 1024 requests waited on average (TimeMS, qtime).
type Queue struct {
	Current int   `json:"current"`
	Max     int   `json:"max"`
	TimeMS  int64 `json:"time_ms"`
	// MaxConn is the group's limits.max_conn (0: none): without it nothing
	// queues.
	MaxConn int `json:"max_conn"`
}

// backendStater reads a backend's own line of "show stat"; HAProxy's
// manager is one (tests' fake balancers need not be).
type backendStater interface {
	BackendStat(ctx context.Context, backend string) (haproxy.ServerStat, error)
}

// sharedBackendStater reads it from the answer the health polls share
// (haproxy.Manager.SharedBackendStat): `shoal status` of 50 groups asks
// HAProxy once, not 100 times.
type sharedBackendStater interface {
	SharedBackendStat(ctx context.Context, backend string) (haproxy.ServerStat, error)
}

// queue reads the group's queue from HAProxy, with servers (the backend's
// servers' lines, read already); nil when HAProxy cannot say.
func (g *Group) queue(ctx context.Context, servers []haproxy.ServerStat) *Queue {
	var b haproxy.ServerStat
	var err error
	switch lb := g.lb.(type) {
	case sharedBackendStater:
		b, err = lb.SharedBackendStat(ctx, g.cfg.Name)
	case backendStater:
		b, err = lb.BackendStat(ctx, g.cfg.Name)
	default:
		return nil
	}
	if err != nil {
		return nil // Status reports HAProxy's error from the servers' read
	}
	q := &Queue{Current: b.Queue, Max: b.MaxQueue, TimeMS: b.QueueTime.Milliseconds()}
	// A request bound to one server (a sticky cookie) waits in that
	// server's queue.
	for _, s := range servers {
		q.Current += s.Queue
	}
	if l := g.conf().Limits; l != nil {
		q.MaxConn = l.MaxConn
	}
	return q
}
