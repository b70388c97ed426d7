package core

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
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
	// waker wakes and puts to sleep the groups that scale to zero.
	waker *waker
	log   *slog.Logger

	// Collection (collector, log feed, sampler) and the runners stop apart:
	// the runners before the job manager closes, collection after it.
	stopCollect context.CancelFunc
	collectWG   sync.WaitGroup

	// What runners need; set by start.
	st  *store.Store
	jm  *jobs.Manager
	met *promexp.Metrics

	mu      sync.Mutex
	runners map[string]*policyRun // by group; a reload restarts a changed group's
}

// policyRun is one group's policy runner goroutine.
type policyRun struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// openAutoscaler opens the metrics history; nothing runs until start. The
// collector samples the groups jm has at each tick, so groups a reload adds
// or removes are followed (see syncRunners).
func openAutoscaler(cfg *config.Config, groups []*group.Group, lb *haproxy.Manager, jm *jobs.Manager, log *slog.Logger) (*autoscaler, error) {
	names := make([]string, len(groups))
	for i, g := range groups {
		names[i] = g.Name()
	}
	alog := log.With("component", "metrics")
	wk := newWaker(jm, log.With("component", "scale_to_zero"))
	col, err := metrics.Open(metrics.Options{
		Metrics: cfg.Metrics,
		Groups:  names,
		Source: metrics.SourceFunc(func() []metrics.Target {
			var out []metrics.Target
			for _, name := range jm.GroupNames() {
				if g, ok := jm.Group(name); ok {
					out = append(out, g.Targets()...)
				}
			}
			return out
		}),
		HAProxy:     lb.Client(),
		DB:          filepath.Join(cfg.StateDir, metrics.DBName),
		Log:         alog,
		AfterSample: wk.sampled,
	})
	if err != nil {
		return nil, err
	}
	wk.col = col
	return &autoscaler{col: col, sampler: newSampler(cfg, jm.GroupNames, lb.Client(), col, alog), waker: wk, log: log, jm: jm, runners: map[string]*policyRun{}}, nil
}

// start runs the collector, feeds it the access log (reader may be nil when
// the log is off) and starts a runner for every group with a policy.
func (a *autoscaler) start(st *store.Store, reader *accesslog.Reader, met *promexp.Metrics) {
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
	a.st, a.met = st, met
	a.waker.st = st
	if met != nil {
		a.waker.observe = met
	}
	a.collectWG.Add(1)
	go func() {
		defer a.collectWG.Done()
		a.waker.run(cctx)
	}()
	if met != nil {
		met.SetInstanceSource(instanceUsage{a.col})
	}
	a.syncRunners(nil)
}

// syncRunners makes the runners match the job manager's groups: it stops the
// runners of groups that are gone or named in changed (a reload gave them a
// new config), and starts one for every group with a policy that has none.
func (a *autoscaler) syncRunners(changed []string) {
	names := a.jm.GroupNames()
	a.col.SetGroups(names)
	a.mu.Lock()
	defer a.mu.Unlock()
	for name, r := range a.runners {
		if _, ok := a.jm.Group(name); ok && !slices.Contains(changed, name) {
			continue
		}
		r.cancel()
		<-r.done
		delete(a.runners, name)
	}
	for _, name := range names {
		g, ok := a.jm.Group(name)
		if !ok || a.runners[name] != nil || g.Config().Autoscale == nil {
			continue
		}
		a.runners[name] = a.runPolicy(g)
	}
}

func (a *autoscaler) runPolicy(g *group.Group) *policyRun {
	gc := g.Config().PolicyGroup()
	r := &policy.Runner{
		Group:   gc,
		Metrics: a.col.ForGroup(gc.Name),
		Jobs:    a.jm,
		State: func() policy.State {
			up, down := g.Cooldowns()
			return policy.State{Desired: g.Desired(), UpCooldownUntil: up, DownCooldownUntil: down, RunningJob: a.jm.Running(gc.Name)}
		},
		Store: a.st,
		Log:   a.log.With("component", "policy"),
	}
	if a.met != nil {
		r.Observe = a.met
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr := &policyRun{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(pr.done)
		if err := r.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			a.log.Error("autoscaler stopped", "group", gc.Name, "err", err)
		}
	}()
	return pr
}

// stopRunners stops every policy runner and waits for them: no job is
// submitted after it returns.
func (a *autoscaler) stopRunners() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for name, r := range a.runners {
		r.cancel()
		<-r.done
		delete(a.runners, name)
	}
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
	return api.WithAutoscaling(api.Autoscaling{Metrics: a.col, Store: st, MetricsInterval: cfg.Metrics.Interval, MetricsRing: cfg.Metrics.Ring})
}

// instanceUsage exposes the collector's per-instance CPU and memory to
// Prometheus scrapes.
type instanceUsage struct{ col *metrics.Collector }

func (u instanceUsage) InstanceUsage(context.Context) []promexp.InstanceUsage {
	src := u.col.Usage()
	out := make([]promexp.InstanceUsage, len(src))
	for i, s := range src {
		out[i] = promexp.InstanceUsage{Group: s.Group, Instance: s.Instance, CPUSeconds: s.CPUSeconds, RSSBytes: float64(s.RSSBytes)}
	}
	return out
}
