package core

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/accesslog"
	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/jobrun"
	"github.com/shoal-lb/shoal/internal/metrics"
	"github.com/shoal-lb/shoal/internal/policy"
	"github.com/shoal-lb/shoal/internal/promexp"
	"github.com/shoal-lb/shoal/internal/source"
)

// logFeedBuffer is how many access-log entries may wait for the collector;
// more are dropped (and counted by the reader) rather than slowing it down.
const logFeedBuffer = 4096

// autoscaler owns what makes shoal scale by itself: the metrics collector,
// the access-log feed into its latency percentiles, the waker, and what runs a group's autoscale policy (policy; the
// registry of groups runs one per group that has a policy).
type autoscaler struct {
	col *metrics.Collector
	// sources reads metrics.sources beside the collector, never in its way.
	sources *source.Set
	// waker wakes and puts to sleep the groups that scale to zero.
	waker *waker
	log   *slog.Logger

	// Collection (collector, log feed) stops after the job manager
	// closes; the policy runners (in the registry) before it.
	stopCollect context.CancelFunc
	collectWG   sync.WaitGroup

	// What runners need; set by start.
	st  policy.DecisionStore
	jm  *jobrun.Manager
	met *promexp.Metrics
}

// openAutoscaler opens the metrics history; nothing runs until start. The
// collector and the waker read the registry's groups at each
// tick, so they follow the groups a reload adds or removes.
func openAutoscaler(cfg *config.Config, groups *registry, lb *haproxy.Manager, jm *jobrun.Manager, log *slog.Logger) (*autoscaler, error) {
	alog := log.With("component", "metrics")
	wk := newWaker(jm, groups, log.With("component", "scale_to_zero"))
	col, err := metrics.Open(metrics.Options{
		Metrics:     cfg.Metrics,
		Source:      groups,
		HAProxy:     lb.Client(),
		DB:          filepath.Join(cfg.StateDir, metrics.DBName),
		Log:         alog,
		AfterSample: wk.sampled,
	})
	if err != nil {
		return nil, err
	}
	wk.col = col
	srcs := source.NewSet(cfg.Metrics, sourceInstances(groups), log.With("component", "sources"))
	for _, g := range cfg.Groups {
		srcs.KeepAtLeast(policy.SourceHistory(g))
	}
	return &autoscaler{col: col, sources: srcs, waker: wk, log: log, jm: jm}, nil
}

// start runs the collector and feeds it the access log (reader may be nil
// when the log is off), each entry also to also (the groups' outlier
// detectors); policy works from then on.
func (a *autoscaler) start(st policy.DecisionStore, reader *accesslog.Reader, met *promexp.Metrics, also func(accesslog.Entry)) {
	cctx, cancel := context.WithCancel(context.Background())
	a.stopCollect = cancel
	a.collectWG.Add(1)
	go func() {
		defer a.collectWG.Done()
		a.col.Run(cctx)
	}()
	a.collectWG.Add(1)
	go func() {
		defer a.collectWG.Done()
		a.sources.Run(cctx)
	}()
	if reader != nil {
		entries, unsubscribe := reader.Subscribe(logFeedBuffer)
		context.AfterFunc(cctx, unsubscribe)
		a.collectWG.Add(1)
		go func() {
			defer a.collectWG.Done()
			for e := range entries {
				a.col.ObserveLatency(e.Backend, e.Ta, e.Tr, e.SampleRate)
				also(e)
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
		met.SetInstanceSource(a.col)
		met.Registry().MustRegister(sourceReads{a.sources})
	}
}

// policy returns what runs g's autoscale policy with the config it has now,
// or nil when it has none: the registry runs it until g's config changes.
func (a *autoscaler) policy(g *group.Group) func(context.Context) {
	if g.Config().Autoscale == nil {
		return nil
	}
	gc := g.Config().PolicyGroup()
	r := &policy.Runner{
		Group:   gc,
		Metrics: a.sources.ForGroup(gc.Name, a.col.ForGroup(gc.Name)),
		Jobs:    a.jm,
		State:   policyState(g, gc, a.jm, a.log),
		Store:   a.st,
		Log:     a.log.With("component", "policy"),
	}
	if a.met != nil {
		r.Observe = a.met
	}
	return func(ctx context.Context) {
		if err := r.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			a.log.Error("autoscaler stopped", "group", gc.Name, "err", err)
		}
	}
}

// policyState is what gc's policy sees of g at each evaluation; with
// start_delay: auto, the median of g's measured start delays, which the
// target's look-ahead uses.
func policyState(g *group.Group, gc config.Group, jm *jobrun.Manager, log *slog.Logger) func() policy.State {
	delay := startDelays{g: g, log: log}
	auto := gc.Autoscale.Target != nil && gc.Autoscale.Target.StartDelay.Auto
	return func() policy.State {
		up, down := g.Cooldowns()
		s := policy.State{Desired: g.Desired(), UpCooldownUntil: up, DownCooldownUntil: down, RunningJob: jm.Blocking(gc.Name)}
		if auto {
			s.StartDelay = delay.get(time.Now())
		}
		return s
	}
}

// close stops collection, writes what the history has not written yet and
// closes it.
func (a *autoscaler) close() {
	if a.stopCollect != nil {
		a.stopCollect()
	}
	a.collectWG.Wait()
	if err := a.col.Close(); err != nil {
		a.log.Error("closing metrics history failed", "err", err)
	}
}

// apiOption serves the autoscaler's metrics, events and policy tests.
func (a *autoscaler) apiOption(st policy.DecisionStore, cfg *config.Config) api.Option {
	return api.WithAutoscaling(api.Autoscaling{Metrics: a.col, Sources: a.sources, Store: st, MetricsInterval: cfg.Metrics.Interval, MetricsRing: cfg.Metrics.Ring, MetricsKept: cfg.Metrics.Retention.Kept()})
}

// startDelays is a group's measured start delay for its policy: that of
// the provider its next instance comes from (a group across providers
// fills them in order), each provider's read from the store at most once
// a minute: it changes only when an instance starts, and the policy
// evaluates every second.
type startDelays struct {
	g     *group.Group
	log   *slog.Logger
	cache map[string]measured
	// last is the delay given last, kept while no provider may start.
	last time.Duration
}

// measured is one provider's delay and when it was read.
type measured struct {
	at time.Time
	d  time.Duration
}

func (s *startDelays) get(now time.Time) time.Duration {
	prov := s.g.NextProvider()
	if prov == "" {
		return s.last
	}
	if s.cache == nil {
		s.cache = map[string]measured{}
	}
	m, ok := s.cache[prov]
	if ok && now.Sub(m.at) < time.Minute {
		s.last = m.d
		return m.d
	}
	m.at = now
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sd, err := s.g.StartDelayOn(ctx, prov)
	switch {
	case err != nil:
		s.log.Warn("reading the group's start delays failed; the target keeps the last one", "group", s.g.Name(), "provider", prov, "err", err)
	case sd != nil:
		m.d = sd.Median
	}
	s.cache[prov] = m
	s.last = m.d
	return m.d
}

// sourceInstances lists the groups' instances for the sources' per-instance
// readings, matched by name or address.
func sourceInstances(groups *registry) func() []source.Instance {
	return func() []source.Instance {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var out []source.Instance
		for _, g := range groups.All() {
			for _, in := range g.Status(ctx).Instances {
				out = append(out, source.Instance{Group: g.Name(), Name: in.Name, Addr: in.Addr, InService: in.State == group.InService})
			}
		}
		return out
	}
}
