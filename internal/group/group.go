// Package group runs one server group: a reconciler that keeps the group's
// instances at its desired size, starts instances through a provider, puts them
// in HAProxy only once healthy, and drains them before they stop.
package group

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/store"
)

// State is where an instance is in its life.
type State string

// Instance states, in lifecycle order.
const (
	Starting  State = "starting"
	InService State = "in-service"
	Draining  State = "draining"
	Stopping  State = "stopping"
	Failed    State = "failed"
)

const (
	// failureWindow bounds how far back failures count towards crash-loop back-off.
	failureWindow = 5 * time.Minute
	maxBackoff    = time.Minute
	// maxFailures is how many recent failures are kept for status and jobs.
	maxFailures = 20
	// resyncEvery re-runs the reconciler even without events, as a safety net.
	resyncEvery = 2 * time.Second
	// healthPoll is how often a starting instance's check status is read.
	healthPoll = 200 * time.Millisecond
)

// Balancer is the part of HAProxy's manager a group drives.
type Balancer interface {
	AddServer(ctx context.Context, s haproxy.Server, ready bool) error
	MarkReady(backend, name string)
	Drain(ctx context.Context, backend, name string, timeout time.Duration) error
	RemoveServer(ctx context.Context, backend, name string) error
	Stats(ctx context.Context, backend string) ([]haproxy.ServerStat, error)
}

// Failure is an instance that exited or never became healthy.
type Failure struct {
	Instance string    `json:"instance"`
	Reason   string    `json:"reason"`
	At       time.Time `json:"at"`
}

type instance struct {
	name  string
	index int
	rec   provider.Record
	inst  provider.Instance // nil until the provider started it
	state State
	since time.Time
	// retire is closed to ask the instance to drain and stop (scale-in).
	retire   chan struct{}
	retiring bool
}

// Group reconciles one configured group.
type Group struct {
	cfg  config.Group
	prov provider.Provider
	lb   Balancer
	st   *store.Store
	log  *slog.Logger

	mu      sync.Mutex
	desired int
	upUntil time.Time
	dnUntil time.Time
	insts   map[string]*instance
	// changed is closed and replaced on every change, waking waiters.
	changed chan struct{}
	// churn counts launches and retirements; a job that saw none was a no-op.
	churn      int
	failures   []Failure
	nextLaunch time.Time
	restored   []*instance

	wake chan struct{}
	wg   sync.WaitGroup
}

// New creates a group with its persisted state (desired size, cooldowns) or,
// for a group never seen before, min_size.
func New(ctx context.Context, cfg config.Group, prov provider.Provider, lb Balancer, st *store.Store, log *slog.Logger) (*Group, error) {
	g := &Group{
		cfg: cfg, prov: prov, lb: lb, st: st,
		log:     log.With("group", cfg.Name),
		desired: cfg.MinSize,
		insts:   map[string]*instance{},
		changed: make(chan struct{}),
		wake:    make(chan struct{}, 1),
	}
	gs, ok, err := st.GroupState(ctx, cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("group %s: %w", cfg.Name, err)
	}
	if ok {
		g.desired = min(max(gs.Desired, cfg.MinSize), cfg.MaxSize)
		if g.desired != gs.Desired {
			g.log.Warn("stored desired size is outside the configured range; clamped", "stored", gs.Desired, "desired", g.desired)
		}
		g.upUntil, g.dnUntil = gs.UpCooldownUntil, gs.DownCooldownUntil
	}
	if err := g.persistState(ctx); err != nil {
		return nil, err
	}
	return g, nil
}

// Name returns the group's name.
func (g *Group) Name() string { return g.cfg.Name }

// Config returns the group's configuration.
func (g *Group) Config() config.Group { return g.cfg }

// Restore adopts instances recorded by an earlier run of shoal. It must be
// called before HAProxy starts (servers are only registered) and before Run.
// It returns the records it adopted.
func (g *Group) Restore(ctx context.Context, recs []store.Instance) []provider.Record {
	var kept []provider.Record
	for _, r := range recs {
		rec := provider.Record{Group: r.Group, Name: r.Name, Index: r.Index, Host: r.Host, Port: r.Port, PID: r.PID, PIDStart: r.PIDStart, StartedAt: r.StartedAt}
		pi, err := g.prov.Adopt(ctx, rec, g.cfg.Template)
		if err != nil {
			g.log.Warn("recorded instance is gone; it will be replaced", "instance", r.Name, "pid", r.PID, "err", err)
			g.deleteRecord(ctx, r.Name)
			continue
		}
		in := &instance{name: r.Name, index: r.Index, rec: pi.Record(), inst: pi, state: State(r.State), since: time.Now(), retire: make(chan struct{})}
		switch in.state {
		case InService:
			_ = g.lb.AddServer(ctx, g.server(in), true)
		case Starting:
			// Re-gated by its lifecycle in Run.
		default:
			// It was on its way out; finish that.
			in.retiring = true
			close(in.retire)
		}
		g.insts[in.name] = in
		g.restored = append(g.restored, in)
		kept = append(kept, in.rec)
		g.log.Info("instance adopted", "instance", in.name, "pid", in.rec.PID, "addr", addr(in.rec), "state", in.state)
	}
	return kept
}

// Run reconciles until ctx ends, then stops every instance of the group.
func (g *Group) Run(ctx context.Context) {
	g.mu.Lock()
	for _, in := range g.restored {
		g.spawn(ctx, in, in.state == Starting)
	}
	g.restored = nil
	g.mu.Unlock()

	t := time.NewTicker(resyncEvery)
	defer t.Stop()
	for {
		g.reconcile(ctx)
		select {
		case <-ctx.Done():
			g.wg.Wait()
			return
		case <-g.wake:
		case <-t.C:
		}
	}
}

func (g *Group) poke() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// notifyLocked wakes everyone waiting for a change. g.mu must be held.
func (g *Group) notifyLocked() {
	close(g.changed)
	g.changed = make(chan struct{})
}

func (g *Group) reconcile(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var active []*instance
	for _, in := range g.insts {
		if !in.retiring && (in.state == Starting || in.state == InService) {
			active = append(active, in)
		}
	}
	switch {
	case len(active) < g.desired:
		if wait := time.Until(g.nextLaunch); wait > 0 {
			time.AfterFunc(wait, g.poke)
			return
		}
		for range g.desired - len(active) {
			g.launchLocked(ctx)
		}
	case len(active) > g.desired:
		// Retire instances that serve nobody yet first, then the newest.
		slices.SortFunc(active, func(a, b *instance) int {
			if (a.state == Starting) != (b.state == Starting) {
				if a.state == Starting {
					return -1
				}
				return 1
			}
			return b.index - a.index
		})
		for _, in := range active[:len(active)-g.desired] {
			in.retiring = true
			close(in.retire)
			g.churn++
			g.log.Info("instance retiring", "instance", in.name, "state", in.state, "desired", g.desired)
		}
		g.notifyLocked()
	}
}

func (g *Group) launchLocked(ctx context.Context) {
	idx := 1
	for g.indexUsedLocked(idx) {
		idx++
	}
	in := &instance{
		name:   fmt.Sprintf("%s-%03d", g.cfg.Name, idx),
		index:  idx,
		state:  Starting,
		since:  time.Now(),
		retire: make(chan struct{}),
	}
	g.insts[in.name] = in
	g.churn++
	g.notifyLocked()
	g.spawn(ctx, in, true)
}

func (g *Group) indexUsedLocked(idx int) bool {
	for _, in := range g.insts {
		if in.index == idx {
			return true
		}
	}
	return false
}

// spawn runs an instance's lifecycle in a goroutine owned by the group.
func (g *Group) spawn(ctx context.Context, in *instance, gate bool) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		g.lifecycle(ctx, in, gate)
	}()
}

// lifecycle takes one instance from start (or adoption) to gone.
func (g *Group) lifecycle(ctx context.Context, in *instance, gate bool) {
	if in.inst == nil {
		if !g.start(ctx, in) {
			return
		}
	}
	if gate {
		if !g.gate(ctx, in) {
			return
		}
	}
	select {
	case <-ctx.Done():
		g.shutdown(in)
	case <-in.inst.Done():
		g.fail(in, "exited: "+in.inst.ExitReason())
		g.removeFromLB(in)
		g.forget(in)
	case <-in.retire:
		g.retire(ctx, in)
	}
}

func (g *Group) start(ctx context.Context, in *instance) bool {
	pi, err := g.prov.Start(ctx, provider.Spec{Group: g.cfg.Name, Name: in.name, Index: in.index, Template: g.cfg.Template})
	if err != nil {
		g.fail(in, "start failed: "+err.Error())
		g.forget(in)
		return false
	}
	g.mu.Lock()
	in.inst, in.rec = pi, pi.Record()
	g.mu.Unlock()
	g.log.Info("instance started", "instance", in.name, "pid", in.rec.PID, "addr", addr(in.rec))
	g.persist(ctx, in)
	return true
}

// gate adds the instance to HAProxy behind a health gate and waits until its
// checks pass. It reports whether the instance went into service; if not, it
// has already been cleaned up.
func (g *Group) gate(ctx context.Context, in *instance) bool {
	if err := g.lb.AddServer(ctx, g.server(in), false); err != nil {
		g.fail(in, "adding to HAProxy failed: "+err.Error())
		g.stopProcess(in)
		g.forget(in)
		return false
	}
	deadline := time.NewTimer(g.cfg.Health.Grace)
	defer deadline.Stop()
	tick := time.NewTicker(healthPoll)
	defer tick.Stop()
	last := "no check yet"
	for {
		select {
		case <-ctx.Done():
			g.shutdown(in)
			return false
		case <-in.inst.Done():
			g.fail(in, "exited before passing its health check: "+in.inst.ExitReason())
			g.removeFromLB(in)
			g.forget(in)
			return false
		case <-in.retire:
			g.retire(ctx, in)
			return false
		case <-deadline.C:
			g.fail(in, fmt.Sprintf("health check did not pass within %s (last check: %s)", g.cfg.Health.Grace, last))
			g.removeFromLB(in)
			g.stopProcess(in)
			g.forget(in)
			return false
		case <-tick.C:
			st, ok := g.serverStat(ctx, in.name)
			if !ok {
				continue
			}
			if st.CheckStatus != "" {
				last = checkSummary(st)
			}
			if isUp(st.Status) {
				g.lb.MarkReady(g.cfg.Name, in.name)
				g.setState(ctx, in, InService)
				return true
			}
		}
	}
}

// retire drains the instance, removes it from HAProxy, then stops it.
func (g *Group) retire(ctx context.Context, in *instance) {
	g.setState(ctx, in, Draining)
	if err := g.lb.Drain(ctx, g.cfg.Name, in.name, g.cfg.DrainTimeout); err != nil {
		g.log.Warn("drain failed; removing anyway", "instance", in.name, "err", err)
	}
	g.setState(ctx, in, Stopping)
	g.removeFromLB(in)
	g.stopProcess(in)
	g.forget(in)
}

// shutdown stops the instance when shoal itself stops. HAProxy is already
// stopped by then, so there is nothing to drain.
func (g *Group) shutdown(in *instance) {
	g.setState(context.Background(), in, Stopping)
	g.stopProcess(in)
	g.forget(in)
}

func (g *Group) removeFromLB(in *instance) {
	// A fresh context: removal must finish even while shoal shuts down, or
	// HAProxy would keep a server that no longer exists.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := g.lb.RemoveServer(ctx, g.cfg.Name, in.name); err != nil {
		g.log.Error("removing server from HAProxy failed", "instance", in.name, "err", err)
	}
}

func (g *Group) stopProcess(in *instance) {
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.Template.StopTimeout+10*time.Second)
	defer cancel()
	if err := in.inst.Stop(ctx); err != nil {
		g.log.Error("stopping instance failed", "instance", in.name, "pid", in.rec.PID, "err", err)
		return
	}
	g.log.Info("instance stopped", "instance", in.name, "pid", in.rec.PID)
}

// fail records a failure for status, jobs and crash-loop back-off.
func (g *Group) fail(in *instance, reason string) {
	g.mu.Lock()
	now := time.Now()
	in.state, in.since = Failed, now
	g.failures = append(g.failures, Failure{Instance: in.name, Reason: reason, At: now})
	if len(g.failures) > maxFailures {
		g.failures = g.failures[len(g.failures)-maxFailures:]
	}
	recent := 0
	for _, f := range g.failures {
		if now.Sub(f.At) < failureWindow {
			recent++
		}
	}
	backoff := min(time.Second<<(recent-1), maxBackoff)
	g.nextLaunch = now.Add(backoff)
	g.notifyLocked()
	g.mu.Unlock()
	g.log.Warn("instance failed", "instance", in.name, "reason", reason, "recent_failures", recent, "next_start_after", backoff)
}

// forget drops a finished instance and lets the reconciler react.
func (g *Group) forget(in *instance) {
	g.mu.Lock()
	delete(g.insts, in.name)
	g.notifyLocked()
	g.mu.Unlock()
	g.deleteRecord(context.Background(), in.name)
	g.poke()
}

func (g *Group) setState(ctx context.Context, in *instance, s State) {
	g.mu.Lock()
	in.state, in.since = s, time.Now()
	g.notifyLocked()
	g.mu.Unlock()
	g.log.Info("instance "+string(s), "instance", in.name, "addr", addr(in.rec))
	g.persist(context.WithoutCancel(ctx), in)
}

func (g *Group) persist(ctx context.Context, in *instance) {
	g.mu.Lock()
	row := store.Instance{Group: g.cfg.Name, Name: in.name, Index: in.index, Host: in.rec.Host, Port: in.rec.Port,
		PID: in.rec.PID, PIDStart: in.rec.PIDStart, StartedAt: in.rec.StartedAt, State: string(in.state)}
	g.mu.Unlock()
	if err := g.st.PutInstance(ctx, row); err != nil {
		g.log.Error("recording instance failed", "instance", in.name, "err", err)
	}
}

func (g *Group) deleteRecord(ctx context.Context, name string) {
	if err := g.st.DeleteInstance(ctx, name); err != nil {
		g.log.Error("deleting instance record failed", "instance", name, "err", err)
	}
}

func (g *Group) server(in *instance) haproxy.Server {
	return haproxy.Server{Backend: g.cfg.Name, Name: in.name, Host: in.rec.Host, Port: in.rec.Port, Health: g.cfg.Health}
}

func (g *Group) serverStat(ctx context.Context, name string) (haproxy.ServerStat, bool) {
	stats, err := g.lb.Stats(ctx, g.cfg.Name)
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

// isUp reads HAProxy's status column: "UP", or "UP 1/3" while going down.
func isUp(status string) bool {
	return status == "UP" || (len(status) > 3 && status[:3] == "UP ")
}

func addr(r provider.Record) string {
	if r.Port == 0 {
		return ""
	}
	return net.JoinHostPort(r.Host, strconv.Itoa(r.Port))
}
