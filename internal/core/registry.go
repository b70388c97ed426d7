package core

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/metrics"
)

// registry is the one set of running groups: each group with its reconciler
// and its policy runner. Jobs, the API, the Prometheus exposition, the
// metrics collector and the waker read the groups
// from it; only a reload's commit step (apply) and shutdown change it.
//
// A member's life:
//
//	               start                        apply: removed
//	restored ─────────────► running ─────────────────────────► retiring ──► gone
//	(nothing runs)          reconciler and       readers stop     the caller drains
//	                        policy runner go     seeing it; its   it, then stops its
//	apply: added ─────────►  │     ▲             policy stops     reconciler
//	                         └─────┘ apply: changed (new config, policy restarts)
//
// Readers take mu briefly and never wait for a goroutine. apply, start and
// the stop methods hold loops while they start and stop goroutines, and mu
// only to change the set: a policy runner being stopped may still be looking
// a group up.
type registry struct {
	// loops makes apply, start and the stops one at a time; it guards
	// every member's run and policy and the policy func.
	loops sync.Mutex
	// policy returns what runs a group's autoscale policy, or nil for a
	// group without one; set by start.
	policy func(*group.Group) func(context.Context)
	// replacer, when set, is what the groups' recycling loops replace
	// instances through (group.Recycle); nil: no group recycles (this
	// build has no instance replacement; see core.replacer).
	replacer group.Replacer
	// consolidate, when set, returns a group's host consolidation loop
	// (consolidator.loop).
	consolidate func(*group.Group) func(context.Context)

	// standby, on an HA node that does not lead, runs no group: the
	// groups are there for the API to read; see ha.Node.
	standby atomic.Bool

	mu      sync.RWMutex
	members map[string]*member
	names   []string // sorted
}

// member is a group and the goroutines that run it.
type member struct {
	g *group.Group
	// run is the reconciler; nil until started.
	run *loop
	// policy is the policy runner; nil for a group without a policy.
	policy *loop
	// recycle is the group's recycling loop (group.Recycle); nil without
	// a replacer. It stops with the policies: no voluntary replacement
	// starts once the groups are being stopped or handed over.
	recycle *loop
	// consolidate is the group's host consolidation loop; nil without a
	// consolidator. It stops with the policies, as recycle does.
	consolidate *loop
}

// loop is a goroutine that runs until it is stopped.
type loop struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// goLoop runs f until the loop is stopped. Loops outlive Serve's context:
// reconcilers stop only after HAProxy is down (or detached), so no request
// reaches a stopped instance.
func goLoop(f func(context.Context)) *loop {
	ctx, cancel := context.WithCancel(context.Background())
	l := &loop{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		f(ctx)
	}()
	return l
}

// stop ends the loop and waits for it; a nil loop is stopped.
func (l *loop) stop() {
	if l == nil {
		return
	}
	l.cancel()
	<-l.done
}

// newRegistry holds groups; nothing runs until start.
func newRegistry(groups []*group.Group) *registry {
	r := &registry{members: make(map[string]*member, len(groups))}
	for _, g := range groups {
		r.members[g.Name()] = &member{g: g}
	}
	r.names = slices.Sorted(maps.Keys(r.members))
	return r
}

// Group returns a running group by name.
func (r *registry) Group(name string) (*group.Group, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	m, ok := r.members[name]
	if !ok {
		return nil, false
	}
	return m.g, true
}

// Names returns the running groups' names, sorted.
func (r *registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Clone(r.names)
}

// All returns the running groups, sorted by name.
func (r *registry) All() []*group.Group {
	ms := r.snapshot()
	out := make([]*group.Group, len(ms))
	for i, m := range ms {
		out[i] = m.g
	}
	return out
}

// Targets lists every running group's instances for the metrics collector.
func (r *registry) Targets() []metrics.Target {
	var out []metrics.Target
	for _, g := range r.All() {
		out = append(out, g.Targets()...)
	}
	return out
}

// start runs every group's reconciler and, where policy returns one, its
// policy runner; groups apply adds later are run the same way.
func (r *registry) start(policy func(*group.Group) func(context.Context)) {
	r.loops.Lock()
	defer r.loops.Unlock()
	r.policy = policy
	for _, m := range r.snapshot() {
		r.runLocked(m)
	}
}

// lead replaces the groups with groups, which a new HA leader restored from
// the shared state, and runs them as start does. Nothing may run.
func (r *registry) lead(groups []*group.Group, policy func(*group.Group) func(context.Context)) {
	r.loops.Lock()
	defer r.loops.Unlock()
	r.mu.Lock()
	r.members = make(map[string]*member, len(groups))
	for _, g := range groups {
		r.members[g.Name()] = &member{g: g}
	}
	r.names = slices.Sorted(maps.Keys(r.members))
	r.mu.Unlock()
	r.standby.Store(false)
	r.policy = policy
	for _, m := range r.snapshot() {
		r.runLocked(m)
	}
}

// follow stops everything the groups run, leaving their instances running
// for the new leader, and runs no group until lead.
func (r *registry) follow() {
	r.standby.Store(true) // before the stops: a reload starts nothing now
	r.stopPolicies()
	r.stopReconcilers(true)
}

// Standby reports whether this HA node runs no group (it does not lead).
func (r *registry) Standby() bool { return r.standby.Load() }

// change is what a reload does to the running groups, found before anything
// changes (see core.prepare).
type change struct {
	changed []groupChange
	removed []*group.Group
	added   []*group.Group
}

// groupChange is a running group and its reloaded config.
type groupChange struct {
	g   *group.Group
	cfg config.Group
}

// apply makes ch the running set in one step, as a reload's commit: readers
// see the removed groups leave and the added ones arrive together. Changed
// groups take their new config and their policy runner restarts with it;
// removed groups' policies stop (their reconcilers keep running: the caller
// retires them and stops each run); added groups start. It cannot fail.
func (r *registry) apply(ctx context.Context, ch change) (removed []*member) {
	r.loops.Lock()
	defer r.loops.Unlock()
	added := make([]*member, len(ch.added))
	changed := make([]*member, len(ch.changed))
	r.mu.Lock()
	for i, c := range ch.changed {
		changed[i] = r.members[c.g.Name()]
	}
	for _, g := range ch.removed {
		if m, ok := r.members[g.Name()]; ok {
			removed = append(removed, m)
			delete(r.members, g.Name())
		}
	}
	for i, g := range ch.added {
		added[i] = &member{g: g}
		r.members[g.Name()] = added[i]
	}
	r.names = slices.Sorted(maps.Keys(r.members))
	r.mu.Unlock()

	for _, m := range removed {
		stopAll([]*loop{m.policy, m.recycle, m.consolidate})
		m.policy, m.recycle, m.consolidate = nil, nil, nil
	}
	for i, m := range changed {
		// The old policy stops before the bounds change under it.
		m.policy.stop()
		m.policy = nil
		m.g.Update(ctx, ch.changed[i].cfg)
		r.runLocked(m)
	}
	for _, m := range added {
		r.runLocked(m)
	}
	return removed
}

// runLocked starts what of m is not running: its reconciler and its policy
// runner (once start has given the policy func). r.loops must be held.
func (r *registry) runLocked(m *member) {
	if r.standby.Load() {
		return
	}
	if m.run == nil {
		m.run = goLoop(m.g.Run)
	}
	if m.policy == nil && r.policy != nil {
		if f := r.policy(m.g); f != nil {
			m.policy = goLoop(f)
		}
	}
	if m.recycle == nil && r.replacer != nil {
		g, rep := m.g, r.replacer
		m.recycle = goLoop(func(ctx context.Context) { g.Recycle(ctx, rep) })
	}
	if m.consolidate == nil && r.consolidate != nil {
		m.consolidate = goLoop(r.consolidate(m.g))
	}
}

// stopPolicies stops every policy runner and waits for them: no policy
// submits a job after it returns.
func (r *registry) stopPolicies() {
	r.loops.Lock()
	defer r.loops.Unlock()
	r.policy = nil
	var ls []*loop
	for _, m := range r.snapshot() {
		ls = append(ls, m.policy, m.recycle, m.consolidate)
		m.policy, m.recycle, m.consolidate = nil, nil, nil
	}
	stopAll(ls)
}

// stopReconcilers ends every reconciler; with keep, their instances are
// left running for the next run of shoal to adopt.
func (r *registry) stopReconcilers(keep bool) {
	r.loops.Lock()
	defer r.loops.Unlock()
	var ls []*loop
	for _, m := range r.snapshot() {
		if keep {
			m.g.KeepInstances()
		}
		ls = append(ls, m.run)
		m.run = nil
	}
	stopAll(ls)
}

// stopAll ends loops (nil ones are stopped) together, then waits for them.
func stopAll(ls []*loop) {
	for _, l := range ls {
		if l != nil {
			l.cancel()
		}
	}
	for _, l := range ls {
		l.stop()
	}
}

// snapshot returns the members, sorted by name.
func (r *registry) snapshot() []*member {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*member, len(r.names))
	for i, name := range r.names {
		out[i] = r.members[name]
	}
	return out
}
