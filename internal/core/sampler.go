package core

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/metrics"
)

// resetEvery is how many ticks pass before every rate is set again, changed
// or not: a reload or restart of HAProxy empties its map (back to logging
// every request).
const resetEvery = 5

// sampler adapts each group's access-log sample rate to its request rate
// (metrics.SampleRate: logging stays near 4 % of the requests at high
// rates) and remembers the rates so the latency percentiles are weighted
// by them. A nil sampler (access_log.sample fixed or off) does nothing.
type sampler struct {
	groups   func() []string // the groups now (a reload adds and removes)
	haproxy  *haproxy.Client
	col      *metrics.Collector
	interval time.Duration
	log      *slog.Logger

	mu    sync.Mutex
	rates map[string]int // the rate last set, by group
}

func newSampler(cfg *config.Config, groups func() []string, c *haproxy.Client, col *metrics.Collector, log *slog.Logger) *sampler {
	if !cfg.AccessLog.Adaptive || cfg.AccessLog.Sample == 0 {
		return nil
	}
	return &sampler{groups: groups, haproxy: c, col: col, interval: cfg.Metrics.Interval, log: log, rates: make(map[string]int)}
}

// rateFor returns the rate group's requests are logged at; def when the
// rate is fixed.
func (s *sampler) rateFor(group string, def int) int {
	if s == nil {
		return def
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.rates[group]; ok {
		return n
	}
	return 1
}

// run sets the rates every interval until ctx ends.
func (s *sampler) run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for tick := 0; ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.step(ctx, tick%resetEvery == 0)
	}
}

func (s *sampler) step(ctx context.Context, all bool) {
	for _, g := range s.groups() {
		rps, ok := s.col.RequestRate(g)
		if !ok {
			continue
		}
		n := metrics.SampleRate(rps)
		s.mu.Lock()
		old, had := s.rates[g]
		s.mu.Unlock()
		if had && n == old && !all {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, max(s.interval, time.Second))
		err := s.haproxy.SetSampleRate(cctx, g, n)
		cancel()
		if err != nil {
			// HAProxy may be restarting; the next tick tries again.
			s.log.Debug("set access log sample rate", "group", g, "rate", n, "err", err)
			continue
		}
		if n != old {
			s.log.Debug("access log sample rate", "group", g, "rate", n, "requests_per_second", rps)
		}
		s.mu.Lock()
		s.rates[g] = n
		s.mu.Unlock()
	}
}
