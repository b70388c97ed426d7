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

// queue reads the group's queue from HAProxy, with servers (the backend's
// servers' lines, read already); nil when HAProxy cannot say.
func (g *Group) queue(ctx context.Context, servers []haproxy.ServerStat) *Queue {
	bs, ok := g.lb.(backendStater)
	if !ok {
		return nil
	}
	b, err := bs.BackendStat(ctx, g.cfg.Name)
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
