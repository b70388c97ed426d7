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
// 1,000 servers each answer is ~1,000 lines to parse: at 50 ms that parse
// was half of shoal's CPU at rest (pprof, 300 instances), so an answer
// serves a starting instance's poll (every 200 ms) once.
const StatsMaxAge = 200 * time.Millisecond

// serverStats caches one answer of every backend's servers. It has a lock
// of its own: a fetch is a Runtime API round trip that must not hold the
// Manager's mu.
type serverStats struct {
	mu    sync.Mutex
	at    time.Time               // of the last fetch; zero: none yet
	stats map[string][]ServerStat // by backend
	err   error
}

// backend returns backend's servers from an answer at most StatsMaxAge
// old, fetching a new one with fetch when it is older.
func (c *serverStats) backend(ctx context.Context, backend string, fetch func(ctx context.Context) ([]ServerStat, error)) ([]ServerStat, error) {
	c.mu.Lock()
	if c.at.IsZero() || time.Since(c.at) >= StatsMaxAge {
		var all []ServerStat
		all, c.err = fetch(ctx)
		c.at = time.Now()
		c.stats = map[string][]ServerStat{}
		for _, s := range all {
			c.stats[s.Backend] = append(c.stats[s.Backend], s)
		}
	}
	defer c.mu.Unlock()
	if c.err != nil {
		return nil, c.err
	}
	return slices.Clone(c.stats[backend]), nil // the caller's to change
}

// forget drops the cached answer: after a change to a server the next
// read asks HAProxy (what a caller changed, it reads back).
func (c *serverStats) forget() {
	c.mu.Lock()
	c.at = time.Time{}
	c.mu.Unlock()
}
