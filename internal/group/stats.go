package group

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/haproxy"
)

// statsCache owns one backend's answer of HAProxy's stats, shared by every
// poller of the group: each instance's lifecycle reads its server's status
// every healthPoll or healthWatch, and n instances would otherwise ask
// HAProxy n times per poll. An answer, an error included, serves every read
// within maxAge of it.
//
// It has a lock of its own, not the group's mu: a fetch is a Runtime API
// round trip, which must not hold up the reconciler or the API's reads.
type statsCache struct {
	fetch  func(ctx context.Context) ([]haproxy.ServerStat, error)
	clk    clock
	maxAge time.Duration

	mu    sync.Mutex
	stats []haproxy.ServerStat
	err   error
	at    time.Time // of the last fetch; zero: none yet
}

// newStatsCache caches fetch's answers for maxAge of clk.
func newStatsCache(fetch func(ctx context.Context) ([]haproxy.ServerStat, error), clk clock, maxAge time.Duration) *statsCache {
	return &statsCache{fetch: fetch, clk: clk, maxAge: maxAge}
}

// server returns the named server's stats, fetched anew if the cached
// answer is maxAge old; ok is false when HAProxy gave no answer or has no
// such server.
func (c *statsCache) server(ctx context.Context, name string) (haproxy.ServerStat, bool) {
	stats, err := c.read(ctx)
	if err != nil {
		return haproxy.ServerStat{}, false
	}
	for _, s := range stats {
		if s.Name == name {
			return s, true
		}
	}
	return haproxy.ServerStat{}, false
}

// read returns the cached answer, fetched anew if it is maxAge old; the
// caller must not change it.
func (c *statsCache) read(ctx context.Context) ([]haproxy.ServerStat, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.clk.Now(); c.at.IsZero() || now.Sub(c.at) >= c.maxAge {
		// Aged from the ask, not the answer: an answer that took a while
		// is no fresher for it (and a clock read after it could be past the
		// next poll's tick, which then took the old answer).
		c.stats, c.err = c.fetch(ctx)
		c.at = now
	}
	return c.stats, c.err
}

// all returns every server of the backend as the cache has them: the
// caller's to change.
func (c *statsCache) all(ctx context.Context) ([]haproxy.ServerStat, error) {
	stats, err := c.read(ctx)
	return slices.Clone(stats), err
}
