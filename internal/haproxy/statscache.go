package haproxy

import (
	"context"
	"slices"
	"sync"
	"time"
)

// StatsMaxAge is how old an answer of Manager.SharedStats may be: every group's
// health polls read their servers through it, and with one `show stat` per
// backend per poll the cost grew with the groups (at 15 groups of 20
// instances, 38 % of shoal's CPU at rest was their `show stat`s). One
// answer for every backend's servers, shared by all groups, costs at most
// 1/StatsMaxAge `show stat`s a second however many groups there are. At
// 1,000 servers each answer is ~1,000 lines to parse, half of shoal's CPU
// at rest at 50 ms (pprof, 300 instances); 200 ms halves that. (A size
// rule that never decided on a loaded machine at 200 ms was the policy's
// window of one interval, not this age: see policy.inEffect.)
const StatsMaxAge = 200 * time.Millisecond

// serverStats caches one answer of every backend's servers. It has a lock
// of its own: a fetch is a Runtime API round trip that must not hold the
// Manager's mu.
type serverStats struct {
	mu       sync.Mutex
	at       time.Time               // of the last fetch; zero: none yet
	stats    map[string][]ServerStat // servers by backend
	backends map[string]ServerStat   // each backend's own line
	err      error
}

// read fills the cache from an answer at most StatsMaxAge old, fetching
// (every backend's line and its servers') when it is older. The caller
// holds mu.
func (c *serverStats) read(ctx context.Context, fetch func(ctx context.Context) ([]ServerStat, error)) error {
	if c.at.IsZero() || time.Since(c.at) >= StatsMaxAge {
		var all []ServerStat
		all, c.err = fetch(ctx)
		c.at = time.Now()
		c.stats = map[string][]ServerStat{}
		c.backends = map[string]ServerStat{}
		for _, s := range all {
			switch s.Type {
			case TypeServer:
				c.stats[s.Backend] = append(c.stats[s.Backend], s)
			case TypeBackend:
				c.backends[s.Backend] = s
			}
		}
	}
	return c.err
}

// backend returns backend's servers from an answer at most StatsMaxAge old.
func (c *serverStats) backend(ctx context.Context, backend string, fetch func(ctx context.Context) ([]ServerStat, error)) ([]ServerStat, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.read(ctx, fetch); err != nil {
		return nil, err
	}
	return slices.Clone(c.stats[backend]), nil // the caller's to change
}

// backendLine returns backend's own line from an answer at most
// StatsMaxAge old.
func (c *serverStats) backendLine(ctx context.Context, backend string, fetch func(ctx context.Context) ([]ServerStat, error)) (ServerStat, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.read(ctx, fetch); err != nil {
		return ServerStat{}, false, err
	}
	s, ok := c.backends[backend]
	return s, ok, nil
}

// forget drops the cached answer: after a change to a server the next
// read asks HAProxy (what a caller changed, it reads back).
func (c *serverStats) forget() {
	c.mu.Lock()
	c.at = time.Time{}
	c.mu.Unlock()
}
