package group

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/store"
)

// The fakes below stand in for the clock, the provider, HAProxy and the
// store in the reconciler's unit tests; the end-to-end tests run the real
// ones.

// fakeClock is a clock that moves only when a test advances it.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*fakeWaiter
}

// fakeWaiter is a timer, a ticker (every > 0) or an AfterFunc (f != nil).
type fakeWaiter struct {
	at      time.Time
	every   time.Duration
	ch      chan time.Time
	f       func()
	stopped bool
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) add(d, every time.Duration, f func()) *fakeWaiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &fakeWaiter{at: c.now.Add(d), every: every, ch: make(chan time.Time, 1), f: f}
	c.waiters = append(c.waiters, w)
	return w
}

func (c *fakeClock) stop(w *fakeWaiter) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	was := !w.stopped
	w.stopped = true
	c.waiters = slices.DeleteFunc(c.waiters, func(x *fakeWaiter) bool { return x == w })
	return was
}

func (c *fakeClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	w := c.add(d, 0, nil)
	return w.ch, func() bool { return c.stop(w) }
}

func (c *fakeClock) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	w := c.add(d, d, nil)
	return w.ch, func() { c.stop(w) }
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) { c.add(d, 0, f) }

// Advance moves the clock forward by d, firing what falls due on the way in
// time order. Like time.Ticker, a ticker whose last tick nobody has taken
// drops the next.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	end := c.now.Add(d)
	for {
		var next *fakeWaiter
		for _, w := range c.waiters {
			if !w.at.After(end) && (next == nil || w.at.Before(next.at)) {
				next = w
			}
		}
		if next == nil {
			break
		}
		c.now = next.at
		switch {
		case next.f != nil:
			go next.f()
		default:
			select {
			case next.ch <- c.now:
			default:
			}
		}
		if next.every > 0 {
			next.at = next.at.Add(next.every)
		} else {
			next.stopped = true
			c.waiters = slices.DeleteFunc(c.waiters, func(x *fakeWaiter) bool { return x == next })
		}
	}
	c.now = end
}

// awaitWaiters waits until n timers, tickers or AfterFuncs wait on the
// clock for at: the goroutines that set them up have got that far, so
// advancing to at reaches them.
func (c *fakeClock) awaitWaiters(t *testing.T, at time.Time, n int, what string) {
	t.Helper()
	c.await(t, at, n, what, func(*fakeWaiter) bool { return true })
}

// awaitAfterFunc waits until an AfterFunc is due at at, such as the
// reconciler's wake-up at the end of a back-off.
func (c *fakeClock) awaitAfterFunc(t *testing.T, at time.Time, what string) {
	t.Helper()
	c.await(t, at, 1, what, func(w *fakeWaiter) bool { return w.f != nil })
}

func (c *fakeClock) await(t *testing.T, at time.Time, n int, what string, kind func(*fakeWaiter) bool) {
	t.Helper()
	waitFor(t, what+" waiting for "+at.Format(time.TimeOnly+".000"), func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		found := 0
		for _, w := range c.waiters {
			if w.at.Equal(at) && kind(w) {
				found++
			}
		}
		return found >= n
	})
}

// waitFor waits until cond holds. The bound is real time: everything
// reacts within microseconds, the bound only ends a test that went wrong.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// events is the order in which the fakes were called, as "verb name".
type events struct {
	mu  sync.Mutex
	all []string
}

func (e *events) add(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, fmt.Sprintf(format, args...))
}

// of returns the events about one instance, with its name left out.
func (e *events) of(name string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, s := range e.all {
		if i := strings.LastIndexByte(s, ' '); i >= 0 && s[i+1:] == name {
			out = append(out, s[:i])
		}
	}
	return out
}

// fakeInstance is a process that runs until it is stopped or told to exit.
type fakeInstance struct {
	rec  provider.Record
	pid  int
	ev   *events
	once sync.Once
	done chan struct{}
	mu   sync.Mutex
	why  string
}

func (i *fakeInstance) Record() provider.Record { return i.rec }
func (i *fakeInstance) PID() int                { return i.pid }
func (i *fakeInstance) Done() <-chan struct{}   { return i.done }

func (i *fakeInstance) ExitReason() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.why
}

// exit ends the process by itself, as a crash or a kill would.
func (i *fakeInstance) exit(why string) {
	i.once.Do(func() {
		i.mu.Lock()
		i.why = why
		i.mu.Unlock()
		close(i.done)
	})
}

func (i *fakeInstance) Stop(context.Context) error {
	i.ev.add("stop %s", i.rec.Name)
	i.exit("signal: terminated")
	return nil
}

func (i *fakeInstance) PreStop(context.Context) error {
	i.ev.add("pre_stop %s", i.rec.Name)
	return nil
}

// fakeProvider starts fakeInstances, recording when.
type fakeProvider struct {
	clk *fakeClock
	ev  *events
	// onStart, if set, sees every instance as it starts; fail makes starts fail.
	onStart func(*fakeInstance)
	fail    error

	mu     sync.Mutex
	starts []time.Time
	names  []string // of each start
	insts  map[string]*fakeInstance
}

func (p *fakeProvider) Start(_ context.Context, spec provider.Spec) (provider.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.starts = append(p.starts, p.clk.Now())
	p.names = append(p.names, spec.Name)
	p.ev.add("start %s", spec.Name)
	if p.fail != nil {
		return nil, p.fail
	}
	pid := 1000 + len(p.starts)
	in := p.newInstance(provider.Record{Group: spec.Group, Name: spec.Name, Index: spec.Index, ID: strconv.Itoa(pid),
		Addr: "127.0.0.1:" + strconv.Itoa(20000+spec.Index), Host: "127.0.0.1", StartedAt: p.clk.Now()})
	in.pid = pid
	if p.onStart != nil {
		p.onStart(in)
	}
	return in, nil
}

func (p *fakeProvider) newInstance(rec provider.Record) *fakeInstance {
	in := &fakeInstance{rec: rec, ev: p.ev, done: make(chan struct{})}
	p.insts[rec.Name] = in
	return in
}

func (p *fakeProvider) Adopt(_ context.Context, rec provider.Record, _ config.Template) (provider.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.newInstance(rec), nil
}

func (p *fakeProvider) StopStrays(context.Context, []provider.Record) ([]provider.Record, error) {
	return nil, nil
}

// instance returns the newest instance started under name.
func (p *fakeProvider) instance(name string) *fakeInstance {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.insts[name]
}

func (p *fakeProvider) startTimes() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.starts)
}

// startNames returns the name of each start, in order.
func (p *fakeProvider) startNames() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.names)
}

// fakeCloud is a fakeProvider whose instances are deleted through an API
// (a provider.Deleter) that refuses while down is set, and does not answer
// at all (Reachable) while unreachable is set.
type fakeCloud struct {
	*fakeProvider
	mu          sync.Mutex
	down        error
	unreachable error
	// hold, if set, holds every Delete call until it is closed: a call
	// out while the test acts.
	hold chan struct{}
}

func (c *fakeCloud) Delete(_ context.Context, in provider.Instance) error {
	c.mu.Lock()
	hold := c.hold
	c.mu.Unlock()
	if hold != nil {
		c.ev.add("delete held %s", in.Record().Name)
		<-hold
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down != nil {
		c.ev.add("delete refused %s", in.Record().Name)
		return c.down
	}
	c.ev.add("delete %s", in.Record().Name)
	return nil
}

func (c *fakeCloud) DeleteTimeout() time.Duration { return 5 * time.Second }

func (c *fakeCloud) Reachable(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.unreachable
}

func (c *fakeCloud) setUnreachable(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unreachable = err
}

func (c *fakeCloud) setHold(hold chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hold = hold
}

func (c *fakeCloud) setDown(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = err
}

// fakeBalancer is HAProxy as the group sees it: servers whose status and
// last check the test sets.
type fakeBalancer struct {
	ev *events
	// drained, if set, is what Drain waits for before it returns, as the
	// real one waits for sessions to end or the timeout; drain closes it.
	drained   chan struct{}
	drainOnce sync.Once
	// freeDrains is how many drains return at once before drained holds
	// the rest (guarded by mu).
	freeDrains int

	mu      sync.Mutex
	servers map[string]haproxy.ServerStat
	drains  map[string]time.Duration
	// added is each server's weight when it was added (a deploy's).
	added map[string]int
	polls int // calls of Stats
	// refuse is how many more RemoveServer calls fail, as HAProxy's while
	// connections are attached.
	refuse int
}

func (b *fakeBalancer) AddServer(_ context.Context, s haproxy.Server, ready bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	// A server added behind the gate is forced down until its checks pass.
	st := haproxy.ServerStat{Name: s.Name, Status: "DOWN"}
	if ready {
		st.Status = "UP"
	}
	b.servers[s.Name] = st
	if b.added == nil {
		b.added = map[string]int{}
	}
	b.added[s.Name] = s.Weight
	b.ev.add("add %s", s.Name)
	return nil
}

func (b *fakeBalancer) MarkReady(_, name string) { b.ev.add("ready %s", name) }

func (b *fakeBalancer) Drain(ctx context.Context, _, name string, timeout time.Duration) error {
	b.mu.Lock()
	b.drains[name] = timeout
	free := b.freeDrains > 0
	if free {
		b.freeDrains--
	}
	b.mu.Unlock()
	b.ev.add("drain %s", name)
	if b.drained != nil && !free {
		select {
		case <-b.drained:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (b *fakeBalancer) Undrain(_ context.Context, _, name string) error {
	b.ev.add("undrain %s", name)
	return nil
}

// ShutdownSessions ends the requests a server holds.
func (b *fakeBalancer) ShutdownSessions(_ context.Context, _, name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.servers[name]
	st.Sessions = 0
	b.servers[name] = st
	b.ev.add("shutdown_sessions %s", name)
	return nil
}

func (b *fakeBalancer) RemoveServer(_ context.Context, _, name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.refuse > 0 {
		b.refuse--
		b.ev.add("remove refused %s", name)
		return fmt.Errorf("del server web/%s: Server still has connections attached to it, cannot remove it.", name)
	}
	delete(b.servers, name)
	b.ev.add("remove %s", name)
	return nil
}

func (b *fakeBalancer) Stats(context.Context, string) ([]haproxy.ServerStat, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []haproxy.ServerStat
	for _, s := range b.servers {
		out = append(out, s)
	}
	b.polls++
	return out, nil
}

// set makes HAProxy report a server with status and the last check's status.
func (b *fakeBalancer) set(name string, status haproxy.Status, check string) {
	b.setStat(haproxy.ServerStat{Name: name, Status: status, CheckStatus: check})
}

// setStat makes HAProxy report st for the server st.Name.
func (b *fakeBalancer) setStat(st haproxy.ServerStat) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.servers[st.Name] = st
}

// drain ends every drain, now and from now on.
func (b *fakeBalancer) drain() {
	if b.drained != nil {
		b.drainOnce.Do(func() { close(b.drained) })
	}
}

func (b *fakeBalancer) pollCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.polls
}

func (b *fakeBalancer) drainTimeout(name string) (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.drains[name]
	return d, ok
}

// fakeStore keeps a group's state and instance records in memory.
type fakeStore struct {
	mu    sync.Mutex
	state map[string]store.GroupState
	insts map[string]store.Instance
	// decisions are the placements and events recorded.
	decisions []decision.Record
	// usage is what Usage answers from (tests set it; AddUsage adds).
	usage []store.Usage
	// startDelays are the start delays recorded.
	delayProvs  []string
	startDelays []time.Duration
	// guard is what Guard answers (nil: this node leads).
	guard error
}

func (s *fakeStore) Guard(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.guard
}

func (s *fakeStore) Usage(_ context.Context, _ string, since time.Time) ([]store.Usage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.Usage
	for _, u := range s.usage {
		if u.Ended.After(since) {
			out = append(out, u)
		}
	}
	return out, nil
}

func (s *fakeStore) AddUsage(_ context.Context, _ string, u store.Usage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.usage = append(s.usage, u)
	return nil
}

func (s *fakeStore) AddStartDelay(_ context.Context, _, prov string, _ time.Time, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startDelays = append(s.startDelays, d)
	s.delayProvs = append(s.delayProvs, prov)
	return nil
}

func (s *fakeStore) StartDelays(_ context.Context, _, prov string) ([]time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []time.Duration
	for i, d := range s.startDelays {
		if prov == "" || s.delayProvs[i] == prov {
			out = append(out, d)
		}
	}
	return out, nil
}

func (s *fakeStore) GroupState(_ context.Context, name string) (store.GroupState, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	gs, ok := s.state[name]
	return gs, ok, nil
}

func (s *fakeStore) PutGroupState(_ context.Context, g store.GroupState) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state[g.Name] = g
	return nil
}

func (s *fakeStore) PutInstance(_ context.Context, in store.Instance) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.insts[in.Name] = in
	return nil
}

func (s *fakeStore) DeleteInstance(_ context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.insts, name)
	return nil
}

func (s *fakeStore) InsertDecision(_ context.Context, d *decision.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.decisions = append(s.decisions, *d)
	return nil
}

func (s *fakeStore) record(name string) (store.Instance, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.insts[name]
	return in, ok
}

func (b *fakeBalancer) SetWeight(_ context.Context, _, name string, weight int) error {
	b.ev.add("weight %s %d", name, weight)
	return nil
}

// SetWeights records one line of weights, as HAProxy gets it.
func (b *fakeBalancer) SetWeights(_ context.Context, _ string, ws []haproxy.ServerWeight) error {
	var parts []string
	for _, w := range ws {
		parts = append(parts, fmt.Sprintf("%s %d", w.Name, w.Weight))
	}
	b.ev.add("weights %s", strings.Join(parts, ", "))
	return nil
}
