package core

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"

	"github.com/shoal-lb/shoal/internal/accesslog"
	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/jobs"
	"github.com/shoal-lb/shoal/internal/metrics"
	"github.com/shoal-lb/shoal/internal/policy"
	"github.com/shoal-lb/shoal/internal/promexp"
	"github.com/shoal-lb/shoal/internal/store"
)

// logFeedBuffer is how many access-log entries may wait for the collector;
// more are dropped (and counted by the reader) rather than slowing it down.
const logFeedBuffer = 4096

// autoscaler owns what makes shoal scale by itself: the metrics collector,
// the access-log feed into its latency percentiles, the adaptive sampling of
// that log and one policy runner per group with an autoscale policy.
type autoscaler struct {
	col     *metrics.Collector
	sampler *sampler
	log     *slog.Logger

	// Collection (collector, log feed, sampler) and the runners stop apart:
	// the runners before the job manager closes, collection after it.
	stopCollect, stopRun context.CancelFunc
	collectWG, runWG     sync.WaitGroup
}

// openAutoscaler opens the metrics history; nothing runs until start.
func openAutoscaler(cfg *config.Config, groups []*group.Group, lb *haproxy.Manager, log *slog.Logger) (*autoscaler, error) {
	names := make([]string, len(groups))
	for i, g := range groups {
		names[i] = g.Name()
	}
	alog := log.With("component", "metrics")
	col, err := metrics.Open(metrics.Options{
		Metrics: cfg.Metrics,
		Groups:  names,
		Source: metrics.SourceFunc(func() []metrics.Target {
			var out []metrics.Target
			for _, g := range groups {
				out = append(out, g.Targets()...)
			}
			return out
		}),
		HAProxy: lb.Client(),
		DB:      filepath.Join(cfg.StateDir, metrics.DBName),
		Log:     alog,
	})
	if err != nil {
		return nil, err
	}
	return &autoscaler{col: col, sampler: newSampler(cfg, names, lb.Client(), col, alog), log: log}, nil
}

// start runs the collector, feeds it the access log (reader may be nil when
// the log is off) and starts a runner for every group with a policy.
func (a *autoscaler) start(st *store.Store, jm *jobs.Manager, groups []*group.Group, reader *accesslog.Reader, met *promexp.Metrics) {
	cctx, cancel := context.WithCancel(context.Background())
	a.stopCollect = cancel
	a.collectWG.Add(1)
	go func() {
		defer a.collectWG.Done()
		a.col.Run(cctx)
	}()
	if a.sampler != nil {
		a.collectWG.Add(1)
		go func() {
			defer a.collectWG.Done()
			a.sampler.run(cctx)
		}()
	}
	if reader != nil {
		entries, unsubscribe := reader.Subscribe(logFeedBuffer)
		context.AfterFunc(cctx, unsubscribe)
		a.collectWG.Add(1)
		go func() {
			defer a.collectWG.Done()
			for e := range entries {
				a.col.ObserveLatency(e.Backend, e.Ta, e.Tr, a.sampler.rateFor(e.Backend, e.SampleRate))
			}
		}()
	}

	rctx, stop := context.WithCancel(context.Background())
	a.stopRun = stop
	for _, g := range groups {
		gc := g.Config()
		if gc.Autoscale == nil {
			continue
		}
		r := &policy.Runner{
			Group:   gc,
			Metrics: a.col.ForGroup(gc.Name),
			Jobs:    jm,
			State: func() policy.State {
				up, down := g.Cooldowns()
				return policy.State{Desired: g.Desired(), UpCooldownUntil: up, DownCooldownUntil: down, RunningJob: jm.Running(gc.Name)}
			},
			Store: st,
			Log:   a.log.With("component", "policy"),
		}
		if met != nil {
			r.Observe = met
		}
		a.runWG.Add(1)
		go func() {
			defer a.runWG.Done()
			if err := r.Run(rctx); err != nil && !errors.Is(err, context.Canceled) {
				a.log.Error("autoscaler stopped", "group", gc.Name, "err", err)
			}
		}()
	}
}

// stopRunners stops every policy runner and waits for them: no job is
// submitted after it returns.
func (a *autoscaler) stopRunners() {
	if a.stopRun != nil {
		a.stopRun()
	}
	a.runWG.Wait()
}

// close stops collection, writes what the history has not written yet and
// closes it.
func (a *autoscaler) close() {
	a.stopRunners()
	if a.stopCollect != nil {
		a.stopCollect()
	}
	a.collectWG.Wait()
	if err := a.col.Close(); err != nil {
		a.log.Error("closing metrics history failed", "err", err)
	}
}

// apiOption serves the autoscaler's metrics, events and policy tests.
func (a *autoscaler) apiOption(st *store.Store, cfg *config.Config) api.Option {
	return api.WithAutoscaling(api.Autoscaling{Metrics: a.col, Store: st, MetricsInterval: cfg.Metrics.Interval})
}
