// Package group runs one server group: a reconciler that keeps the group's
// instances at its desired size, starts instances through a provider, puts them
// in HAProxy only once healthy, and drains them before they stop.
package group

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/event"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/store"
)

// State is where an instance is in its life; lifecycle draws how one
// state leads to the next.
type State string

// Instance states, in lifecycle order.
const (
	Starting  State = "starting"
	InService State = "in-service"
	// Unhealthy is an instance that was in service and that HAProxy has
	// marked DOWN; it is replaced if it stays down for replace_after.
	Unhealthy State = "unhealthy"
	Draining  State = "draining"
	Stopping  State = "stopping"
	Failed    State = "failed"
)

// States lists every instance state in lifecycle order, for validating user
// input such as `shoal instances --state`.
var States = []State{Starting, InService, Unhealthy, Drained, Standby, Draining, Stopping, Failed}

const (
	// stableService is how long an instance must have served for its
	// failure not to count towards crash-loop back-off.
	stableService = 30 * time.Second
	// failureWindow bounds how far back failures count towards crash-loop back-off.
	failureWindow = 5 * time.Minute
	maxBackoff    = time.Minute
	// maxFailures is how many recent failures are kept for status and jobs.
	maxFailures = 20
	// resyncEvery re-runs the reconciler even without events, as a safety net.
	resyncEvery = 2 * time.Second
	// healthPoll is how often a starting instance's check status is read.
	healthPoll = 200 * time.Millisecond
	// healthWatch is how often an instance in service has its status read.
	healthWatch = 500 * time.Millisecond
	// statsMaxAge is how long one answer of HAProxy's stats serves polls;
	// the answer itself is up to haproxy.StatsMaxAge old (one for all
	// groups), so the two add up to 250 ms.
	statsMaxAge = 50 * time.Millisecond
	// removeTimeout bounds taking a server out of HAProxy, removeRetry
	// spaces the attempts; HAProxy's own timeout server (30 s by default)
	// ends connections to a silent host.
	removeTimeout = time.Minute
	removeRetry   = time.Second
)

// Balancer is the part of HAProxy's manager a group drives.
type Balancer interface {
	AddServer(ctx context.Context, s haproxy.Server, ready bool) error
	MarkReady(backend, name string)
	Drain(ctx context.Context, backend, name string, timeout time.Duration) error
	Undrain(ctx context.Context, backend, name string) error
	SetWeight(ctx context.Context, backend, name string, weight int) error
	SetWeights(ctx context.Context, backend string, weights []haproxy.ServerWeight) error
	RemoveServer(ctx context.Context, backend, name string) error
	ShutdownSessions(ctx context.Context, backend, name string) error
	Stats(ctx context.Context, backend string) ([]haproxy.ServerStat, error)
}

// sharedStats is a Balancer whose stats can come from one answer shared by
// every group (haproxy.Manager): the health polls read through it, so that
// their cost does not grow with the number of groups.
type sharedStats interface {
	SharedStats(ctx context.Context, backend string) ([]haproxy.ServerStat, error)
}

// Failure is an instance that exited or never became healthy.
type Failure struct {
	Instance string    `json:"instance"`
	Reason   string    `json:"reason"`
	At       time.Time `json:"at"`
	// job is the instance's job tag (see instance.job).
	job uint64
	// version is the failed instance's template version: a deploy counts
	// the failures of the version it rolls out.
	version string
	// crash is a failure that counts towards crash-loop back-off: the
	// instance never served steadily (see stableService).
	crash bool
	// serving marks a job's failure whose instance still serves (its cloud
	// refuses to delete it, see stuck): the job failed, the instance did
	// not, so status shows it as retiring and waiting, not as a failure.
	serving bool
}

type instance struct {
	name  string
	index int
	// prov names the provider it runs on, one of the group's list.
	prov string
	// provFailed marks a start its provider refused in a group with
	// several: the provider is skipped, and the failure is no crash loop.
	provFailed bool
	// asked is set once its provider is asked to start it: from then on
	// a provider with hosts counts it on the host it placed it on.
	asked bool
	rec   provider.Record
	inst  provider.Instance // nil until the provider started it
	state State
	since time.Time
	// retire is closed to ask the instance to drain and stop (scale-in);
	// a scale-up that takes a waiting instance back replaces it (see
	// keepWaitingLocked). Read it under g.mu.
	retire   chan struct{}
	retiring bool
	// scaleIn: a scale-in chose it (not a replacement): its cloud server
	// may go back to the group's warm pool (provider.ForScaleIn).
	scaleIn bool
	// job tags the instance with the job whose size change started or retired
	// it (0: none): only failures of its own instances fail a job.
	job uint64
	// round is the reconciler's launch pass that started it (0: adopted
	// or taken back): a crash loop is reported once a round (see fail).
	round int
	// version is the template version the instance runs (or will run).
	version string
	// hash is the hash of the template it was started from
	// (config.Template.Hash): not the serving one's, and it has drifted.
	hash string
	// tmpl is what start runs: the serving template at launch, or the one a deploy rolls.
	tmpl config.Template
	// servingSince is when the instance first went into service (zero
	// before): how long it served tells an accident from a crash loop.
	servingSince time.Time
	// wait is a retiring instance's wait for its cloud to delete it: a
	// scale-up takes it back meanwhile rather than pay for a new server.
	wait cloudWait
	// marks are what an operator set on it (see dayops.go).
	marks marks
	// ejected is when an outlier's ejection ends (zero: not ejected; see
	// outliers.go) and ejections when it was ejected lately (the
	// detector's count toward replacement); both are in its record.
	// Read them under g.mu.
	ejected   time.Time
	ejections []time.Time
}

// stateStore is what a group keeps in the store: its own state and its
// instances' records. *store.Store is one.
//
// Guard is the fence of the provider's actions: every start, stop and
// deletion of an instance waits for it just before it asks the provider,
// and is not done unless it passed (see mayAct). A single node's store
// always passes; an HA node's passes only while etcd still has this node
// as the leader (a fenced transaction), so a deposed leader that has not
// noticed yet starts, stops and deletes nothing.
type stateStore interface {
	Guard(ctx context.Context) error
	GroupState(ctx context.Context, name string) (store.GroupState, bool, error)
	PutGroupState(ctx context.Context, g store.GroupState) error
	PutInstance(ctx context.Context, in store.Instance) error
	DeleteInstance(ctx context.Context, name string) error
	InsertDecision(ctx context.Context, d *decision.Record) error
	Usage(ctx context.Context, group string, since time.Time) ([]store.Usage, error)
	AddUsage(ctx context.Context, group string, u store.Usage) error
	AddStartDelay(ctx context.Context, group, provider string, at time.Time, d time.Duration) error
	StartDelays(ctx context.Context, group, provider string) ([]time.Duration, error)
}

// Group reconciles one configured group. It owns the instance set and the
// size (under mu) and composes the parts that own one concern each, each
// in its own file with its own tests:
//
//	deployState   deploystate.go  templates: configured, serving, a deploy's roll (under mu)
//	cloudWait     cloudwait.go    a retiring cloud instance's wait for its deletion, and
//	deleteRetry                   its retries' timing (the wait is the instance's, under mu)
//	statsCache    stats.go        HAProxy's stats answer shared by the health polls (own lock)
//	goneVersions  hosts.go        finished instances' versions, for Reclaim (under mu)
//	canaryRun     canary.go       a running canary: step, weights, figures (under mu);
//	latencyWindow                 its access-log latencies (own lock: the log's reader feeds it)
//	blueGreenRun  bluegreen.go    a blue/green deploy: phase, weights, figures (under mu)
//
// A part whose answers are decided together with the instance set has no
// lock of its own: a second lock would let a launch, a take-back or a
// Reclaim see the instances and the templates at different moments. Only
// a part that waits on I/O (statsCache) locks for itself. The lifecycle
// of an instance is drawn on lifecycle; the deploy process on Deploy.
type Group struct {
	// cfg is the configuration the group was created with; its Name never
	// changes. Everything else is read with conf(): a reload replaces it.
	cfg  config.Group
	live atomic.Pointer[config.Group]
	// keep, set before Run's context ends, leaves the instances running for
	// the next run of shoal to adopt.
	keep atomic.Bool
	// fenced is set once etcd refused the store's Guard (store.ErrFenced
	// but not ErrNoFence: a step-down that fails gives the fence back):
	// this node no longer leads, and the group acts on its provider no
	// more (no launch, no retirement, no stop); its instances are the new
	// leader's. A new term runs new Groups.
	fenced atomic.Bool
	// provs are the providers of the group's list, by name (see
	// providers.go); skips their back-offs (under mu).
	provs Providers
	skips map[string]skip
	lb    Balancer
	st    stateStore
	log   *slog.Logger
	clk   clock

	// stateMu serialises writes of the group's state to the store.
	stateMu sync.Mutex
	// mu guards the fields from here to runCtx, the instances (their
	// cloudWait too), dep and gone.
	mu      sync.Mutex
	desired int
	// removed is set when a config reload removes the group: it retires
	// every instance and takes no new size.
	removed bool
	upUntil time.Time
	dnUntil time.Time
	insts   map[string]*instance
	// changed is closed and replaced on every change, waking waiters.
	changed chan struct{}
	// churn counts launches and retirements; a job that saw none was a no-op.
	churn    int
	failures []Failure
	// replacing are the instances that failed in service, oldest first:
	// the next launches replace them (see launched).
	replacing  []string
	retired    []Retirement // the newest job's scale-in choices (see Retirements)
	nextLaunch time.Time
	// crashLoop is set by a crash (see fail), the latest at lastCrash,
	// and cleared when an instance first goes into service: meanwhile, for
	// failureWindow after the latest crash, the reconciler starts one
	// instance at a time, a probe, once each back-off ends, rather than
	// the whole shortfall (500 processes a minute for a group of 500
	// whose template cannot start).
	crashLoop bool
	lastCrash time.Time
	// round numbers the reconciler's launch passes; reported is the
	// newest round whose crash was reported (an event and a warning), and
	// quiet counts the crashes since left unreported, from quietSince: a
	// crash loop is reported once a back-off, not once an instance.
	round      int
	reported   int
	quiet      int
	quietSince time.Time
	restored   []*instance
	// jobSeq numbers the marks of jobs; the newest one owns the launches and
	// retirements its SetDesired made necessary (owedLaunch, owedRetire).
	jobSeq     uint64
	owedLaunch int
	owedRetire int

	// scaledIn is when SetDesired last lowered the desired size, resized
	// when it last changed it: what a host consolidation waits on.
	scaledIn, resized time.Time
	// lowered is the job whose size change last lowered the desired size
	// (see WaitConverged).
	lowered uint64

	// protectedNote is the protected instances a scale-in last stopped
	// at, so that it is logged once, not at every pass.
	protectedNote string

	// dep is the group's templates: configured, serving, and a deploy's
	// roll.
	dep deployState
	// gone is the versions of finished instances, for Reclaim.
	gone goneVersions
	// runCtx is Run's context while it runs (nil otherwise): what Reclaim
	// spawns a lifecycle with.
	runCtx context.Context

	// stats shares HAProxy's answers among the instances' health polls;
	// it has its own lock.
	stats *statsCache

	// ej judges outliers (outliers.go); it has its own lock.
	ej ejector

	// can is the canary deploy running (canary.go; nil when none), under
	// mu; canLat its latency window, fed by the access log without mu.
	can    *canaryRun
	canLat atomic.Pointer[latencyWindow]
	// bg is the blue/green deploy running, or the last one of this run
	// (bluegreen.go; nil when none), under mu; it shares canLat.
	bg *blueGreenRun

	wake chan struct{}
	wg   sync.WaitGroup
}

// New creates a group with its persisted state (desired size, cooldowns) or,
// for a group never seen before, min_size, and records that state.
func New(ctx context.Context, cfg config.Group, provs Providers, lb Balancer, st stateStore, log *slog.Logger) (*Group, error) {
	g, err := Open(ctx, cfg, provs, lb, st, log)
	if err != nil {
		return nil, err
	}
	if err := g.persistState(ctx); err != nil {
		return nil, err
	}
	return g, nil
}

// Open is New without the write: a reload builds the groups it adds before
// HAProxy takes the new config, and one that fails there must leave the
// store as it was. The state is recorded at its first change; until then
// the stored one stands, clamped into the configured range at every start.
func Open(ctx context.Context, cfg config.Group, provs Providers, lb Balancer, st stateStore, log *slog.Logger) (*Group, error) {
	return open(ctx, cfg, provs, lb, st, log, wallClock{})
}

// open is Open on clk: the reconciler's unit tests run it on a fake clock.
func open(ctx context.Context, cfg config.Group, provs Providers, lb Balancer, st stateStore, log *slog.Logger, clk clock) (*Group, error) {
	g := &Group{
		cfg: cfg, provs: provs, skips: map[string]skip{}, lb: lb, st: st, clk: clk,
		log:     log.With("group", cfg.Name),
		desired: cfg.MinSize,
		insts:   map[string]*instance{},
		changed: make(chan struct{}),
		wake:    make(chan struct{}, 1),
	}
	fetch := func(ctx context.Context) ([]haproxy.ServerStat, error) {
		if s, ok := g.lb.(sharedStats); ok {
			return s.SharedStats(ctx, cfg.Name) // one answer for every group's polls
		}
		return g.lb.Stats(ctx, cfg.Name)
	}
	g.stats = newStatsCache(fetch, clk, statsMaxAge)
	g.live.Store(&cfg)
	gs, ok, err := st.GroupState(ctx, cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("group %s: %w", cfg.Name, err)
	}
	var stored *store.GroupState
	if ok {
		g.desired = cfg.Range().Clamp(gs.Desired)
		if g.desired != gs.Desired {
			g.log.Warn("stored desired size is outside the configured range; clamped", "stored", gs.Desired, "desired", g.desired)
		}
		g.upUntil, g.dnUntil = gs.UpCooldownUntil, gs.DownCooldownUntil
		stored = &gs
	}
	g.dep = newDeployState(cfg.Name, cfg.Template, stored, g.log)
	if v := g.dep.configured(); v != "" {
		g.log.Info("the configured template is not the one in service; new instances start from the serving one until `shoal deploy` rolls it out",
			"serving", g.dep.version, "configured", v)
	}
	return g, nil
}

// Name returns the group's name.
func (g *Group) Name() string { return g.cfg.Name }

// DeleteTimeout is how long a retirement waits for the provider's API to
// accept a deletion before its job fails (0: the provider has no such API).
func (g *Group) DeleteTimeout() time.Duration {
	var out time.Duration
	for _, p := range g.provs {
		if d, ok := p.(provider.Deleter); ok {
			out = max(out, d.DeleteTimeout())
		}
	}
	return out
}

// Config returns the group's configuration.
func (g *Group) Config() config.Group { return g.conf() }

// Restore adopts instances recorded by an earlier run of shoal. It must be
// called before HAProxy starts (servers are only registered) and before Run.
// It returns the records it adopted.
func (g *Group) Restore(ctx context.Context, recs []store.Instance) []provider.Record {
	var kept []provider.Record
	for _, r := range recs {
		since := r.StateSince
		if since.IsZero() {
			since = g.clk.Now()
		}
		name := g.providerOf(r.Record)
		prov := g.provs[name]
		if prov == nil {
			// Its provider's own sweep stops it: it is not kept.
			g.log.Warn("recorded instance's provider is no longer the group's; it will be replaced", "instance", r.Name, "provider", name)
			g.deleteRecord(ctx, r.Name)
			continue
		}
		pi, err := prov.Adopt(ctx, r.Record, g.dep.tmpl)
		if err != nil {
			g.log.Warn("recorded instance is gone; it will be replaced", "instance", r.Name, "addr", r.Addr, "err", err)
			g.deleteRecord(ctx, r.Name)
			continue
		}
		in := &instance{name: r.Name, index: r.Index, prov: name, asked: true, rec: recordOn(pi, name), inst: pi, state: State(r.State), since: since, retire: make(chan struct{}),
			version: r.Version, tmpl: g.dep.tmpl, hash: r.Template, marks: marksOf(r.Marks)}
		in.ejected, in.ejections = ejectionOf(r.Marks)
		if in.state == InService || in.state == Unhealthy {
			in.servingSince = since
		}
		if in.version == "" {
			// Recorded before instances had versions: it runs what the
			// config said then, most likely the serving template.
			in.version = g.dep.version
		}
		if in.hash == "" && in.version == g.dep.version {
			// Recorded before instances had template hashes: its version
			// says it runs the serving template.
			in.hash = g.dep.tmpl.Hash(g.cfg.Name)
		}
		switch in.state {
		case InService, Unhealthy:
			// Its health watch finds out again whether HAProxy has it DOWN.
			in.state = InService
			_ = g.lb.AddServer(ctx, g.server(in), true)
			switch {
			case g.conf().Outliers == nil:
				// Outliers are off now: nothing would return it.
				in.ejected, in.ejections = time.Time{}, nil
				g.persist(ctx, in)
			case g.clk.Now().Before(in.ejected):
				// An outlier stays out until its ejection ends, which
				// the ejector sees at its first poll.
				_ = g.lb.Drain(ctx, g.cfg.Name, in.name, 0)
			}
		case Drained, Standby:
			// Out of rotation by an operator's act: it stays so, serving
			// and counted as it was (see dayops.go).
			_ = g.lb.AddServer(ctx, g.server(in), true)
			_ = g.lb.Drain(ctx, g.cfg.Name, in.name, 0)
		case Draining:
			// Registered and marked draining before HAProxy is synced, so an
			// adopted HAProxy keeps it draining (an unregistered server would
			// be removed at once, cutting its requests) and the drain resumes.
			_ = g.lb.AddServer(ctx, g.server(in), true)
			_ = g.lb.Drain(ctx, g.cfg.Name, in.name, 0)
			in.retiring = true
			close(in.retire)
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
		g.log.Info("instance adopted", "instance", in.name, "pid", in.pid(), "addr", in.rec.Addr, "state", in.state)
	}
	g.setWarmPool()
	return kept
}

// Run reconciles until ctx ends, then stops every instance of the group.
func (g *Group) Run(ctx context.Context) {
	g.mu.Lock()
	for _, in := range g.restored {
		g.spawn(ctx, in, in.state == Starting)
	}
	g.restored = nil
	g.runCtx = ctx
	g.startOutliersLocked()
	g.mu.Unlock()
	g.recoverDeploy(ctx)
	g.setWarmPool()

	resync, stop := g.clk.NewTicker(resyncEvery)
	defer stop()
	for {
		g.reconcile(ctx)
		select {
		case <-ctx.Done():
			g.mu.Lock()
			g.runCtx = nil // no Reclaim spawns from now on
			g.mu.Unlock()
			g.wg.Wait()
			g.emptyWarmPool()
			g.recordPoolLeft(ctx)
			return
		case <-g.wake:
		case <-resync:
			g.recordPoolLeft(ctx)
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
	if ctx.Err() != nil || g.fenced.Load() {
		return
	}
	g.mu.Lock()
	// A deploy's surge instances are wanted too.
	surplus := len(g.activeLocked()) > g.desired+g.dep.surge
	short := len(g.activeLocked()) < g.desired+g.dep.surge
	g.mu.Unlock()
	var (
		sessions map[string]int
		statErr  error
		hosts    map[string]hostLoad
		rooms    map[string]hostRoom
	)
	if surplus {
		sessions, statErr = g.busyness(ctx)
		hosts = g.hostLoads()
	}
	if short && len(g.conf().ProviderList()) > 1 {
		rooms = g.hostRooms()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	active := g.activeLocked()
	want := g.desired + g.dep.surge
	if len(active) <= want {
		g.protectedNote = "" // no scale-in stops at protected instances
	}
	if g.removed {
		g.retireHeldLocked()
	}
	switch {
	case len(active) < want:
		// A server still serving while its cloud refuses to delete it
		// costs nothing to keep, and is in service already.
		need := want - len(active)
		if need -= g.keepWaitingLocked(need); need == 0 {
			return
		}
		if wait := g.nextLaunch.Sub(g.clk.Now()); wait > 0 {
			g.clk.AfterFunc(wait, g.poke)
			return
		}
		if g.crashLoop && g.clk.Now().Sub(g.lastCrash) < failureWindow {
			// One probe at a time: its end (failure or service) pokes
			// the reconciler.
			if g.startingLocked() {
				return
			}
			need = 1
		}
		g.round++
		for range need {
			prov := g.nextProviderLocked(rooms)
			if prov == "" {
				// Every provider is full or skipped: try again when a
				// back-off ends (the resync finds room that frees up).
				if at := g.skipEndsLocked(); !at.IsZero() {
					g.clk.AfterFunc(at.Sub(g.clk.Now()), g.poke)
				}
				return
			}
			g.launchLocked(ctx, prov)
		}
	case len(active) > want:
		g.retireSurplusLocked(want, sessions, statErr, hosts)
	}
}

// activeLocked returns the instances that count towards the desired size.
// An unhealthy one still counts until it is replaced.
func (g *Group) activeLocked() []*instance {
	var active []*instance
	for _, in := range g.insts {
		if !in.retiring && (in.state == Starting || in.state == InService || in.state == Unhealthy || in.keepsPlace()) {
			active = append(active, in)
		}
	}
	return active
}

// startingLocked reports an instance on its way into service.
func (g *Group) startingLocked() bool {
	for _, in := range g.insts {
		if in.state == Starting && !in.retiring {
			return true
		}
	}
	return false
}

func (g *Group) launchLocked(ctx context.Context, prov string) {
	idx := 1
	for g.indexUsedLocked(idx) {
		idx++
	}
	tmpl, version := g.dep.launching(g.countVersionLocked(g.dep.target))
	in := &instance{
		name:    fmt.Sprintf("%s-%03d", g.cfg.Name, idx),
		index:   idx,
		prov:    prov,
		state:   Starting,
		since:   g.clk.Now(),
		retire:  make(chan struct{}),
		version: version,
		tmpl:    tmpl,
		hash:    tmpl.Hash(g.cfg.Name),
		round:   g.round,
	}
	if g.owedLaunch > 0 {
		in.job = g.jobSeq
		g.owedLaunch--
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

// lifecycle takes one instance from start (or adoption) to gone: start,
// then gate, then serve; retire or drop ends it. Its states (State), and
// what moves it from one to the next:
//
//	  launch: fewer active than desired (+ a deploy's surge),
//	  once the crash-loop back-off is over
//	     |
//	     v
//	+----------+ UP in HAProxy +------------+    DOWN     +-----------+
//	| starting |-------------->| in-service |------------>| unhealthy |
//	+----------+               +------------+<------------+-----------+
//	  |      |                   |        |       UP        |       |
//	  |      | retire            | exited | retire          | retire|
//	  |      | (scale-in,        |        v                 |       |
//	  |      |  deploy)          |  +----------+            |       |
//	  |      +-------------------|->| draining |<-----------+       |
//	  |                          |  +----------+                    |
//	  |                          |       | sessions 0, or           |
//	  |                          |       v drain_timeout            |
//	  |                          |  +----------+                    |
//	  |                          |  | stopping |--> gone: out of    |
//	  |                          |  +----------+    HAProxy, stopped |
//	  |                          |   (a cloud's: see deleteDrained)  |
//	  | start failed, exited,    |                                  | exited, or DOWN
//	  | not UP within grace,     |                                  | for replace_after
//	  | deploy's check failing   |                                  | (hung)
//	  v                          v                                  |
//	+--------+<-----------------------------------------------------+
//	| failed |--> gone (drop): out of HAProxy, stopped. The next launch
//	+--------+    backs off 1 s doubling to 60 s if it had not served
//	              steadily for 30 s (crash loop); else it starts at once.
//	              In a crash loop one instance at a time is launched (a
//	              probe) until one goes into service, and the loop is
//	              reported once a back-off, not once an instance.
//
// An operator's acts add the states drained and standby (see dayops.go).
// An unhealthy instance whose checks time out while it holds requests is
// hung: those requests are ended at once (see hung). Shutdown of shoal
// takes every state to stopping, or leaves it as it is for the next run to
// adopt (KeepInstances). Every arrow that starts, stops or deletes through
// the provider first passes the store's fence (mayAct): refused (an HA
// node that no longer leads), the arrow is not taken, nothing is started
// or stopped, and the instance stays as it is for the new leader.
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
	g.serve(ctx, in)
}

// serve watches an instance in service until it exits, is retired, or has
// been DOWN in HAProxy for replace_after, when it is replaced: a hung
// process (SIGSTOPped, deadlocked) does not exit by itself. The requests a
// hung instance holds are let go as soon as HAProxy has it DOWN (see hung).
func (g *Group) serve(ctx context.Context, in *instance) {
	tick, stop := g.clk.NewTicker(healthWatch)
	defer stop()
	var downSince time.Time
	for {
		select {
		case <-ctx.Done():
			g.shutdown(in)
			return
		case <-in.inst.Done():
			if g.heldExited(in) {
				return
			}
			g.drop(in, "exited: "+in.inst.ExitReason(), removeThenStop)
			return
		case <-g.retireCh(in):
			if g.retire(ctx, in) {
				continue // taken back: it serves on
			}
			return
		case <-tick:
			if g.isHeld(in) {
				// Out of rotation by an operator: its checks replace nothing.
				downSince = time.Time{}
				continue
			}
			st, ok := g.stats.server(ctx, in.name)
			switch {
			case !ok:
				// HAProxy is restarting or unreachable: no news.
			case st.Status.IsDown():
				if downSince.IsZero() {
					downSince = g.clk.Now()
					g.setStateIf(ctx, in, Unhealthy, func() bool { return in.state == InService })
				}
				if hung(st) {
					g.releaseHeld(ctx, in, st)
				}
				if d := g.clk.Now().Sub(downSince); d >= g.conf().ReplaceAfter {
					g.drop(in, fmt.Sprintf("health check failing for %s (replace_after %s, last check: %s); replaced",
						d.Round(time.Second), g.conf().ReplaceAfter, checkText(st)), stopThenRemove)
					return
				}
			case st.Status.IsUp() && !downSince.IsZero():
				downSince = time.Time{}
				g.setStateIf(ctx, in, InService, func() bool { return in.state == Unhealthy })
			}
		}
	}
}

// hung reports a server HAProxy has DOWN because its checks got no answer
// in time (a SIGSTOPped or deadlocked process), while it still holds
// requests: those would wait for replace_after and the process's stop, or
// for timeout server, although they can no longer be answered in time.
func hung(st haproxy.ServerStat) bool {
	return st.Sessions > 0 && st.CheckTimedOut()
}

// releaseHeld ends the requests a hung instance holds: HAProxy retries the
// idempotent ones on another instance, the others get 502 (never replayed).
// An instance that answers its checks badly is left alone: it is alive and
// may still finish what it holds.
func (g *Group) releaseHeld(ctx context.Context, in *instance, st haproxy.ServerStat) {
	if err := g.lb.ShutdownSessions(ctx, g.cfg.Name, in.name); err != nil {
		g.log.Warn("ending the requests of a hung instance failed", "instance", in.name, "err", err)
		return
	}
	g.log.Warn("instance hung: requests it held ended, idempotent ones retried elsewhere",
		"instance", in.name, "sessions", st.Sessions, "check", checkText(st))
}

func checkText(st haproxy.ServerStat) string {
	if st.CheckStatus == "" {
		return "none"
	}
	return st.CheckStatus
}

func (g *Group) start(ctx context.Context, in *instance) bool {
	c := g.conf()
	g.mu.Lock()
	plan, _ := c.PlanBySize(g.desired)
	g.mu.Unlock()
	if err := g.mayAct(ctx, "start of "+in.name); err != nil {
		g.drop(in, err.Error(), stopOnly) // nothing started: nothing to stop
		return false
	}
	g.mu.Lock()
	in.asked = true
	g.mu.Unlock()
	pi, err := g.provOf(in).Start(ctx, provider.Spec{Group: g.cfg.Name, Name: in.name, Index: in.index, Template: in.tmpl, Placement: c.Placement, Plan: plan.Name})
	if err != nil {
		var created *provider.CreatedError
		if errors.As(err, &created) {
			// Its server was billed while it booted.
			u := store.Usage{Name: in.name, Provider: in.prov, Started: created.Created, Ended: g.clk.Now()}
			if uerr := g.st.AddUsage(context.WithoutCancel(ctx), g.cfg.Name, u); uerr != nil {
				g.log.Warn("recording the usage of a failed start failed", "instance", in.name, "err", uerr)
			}
		}
		if ctx.Err() == nil && g.providerFailed(ctx, in.prov, err) {
			g.mu.Lock()
			in.provFailed = true
			g.mu.Unlock()
		}
		reason := "start failed: " + err.Error()
		if len(c.ProviderList()) > 1 {
			reason = fmt.Sprintf("start failed on provider %s: %v", in.prov, err)
		}
		g.drop(in, reason, stopOnly) // nothing started: nothing to stop
		return false
	}
	g.providerStarted(in.prov)
	g.mu.Lock()
	in.inst, in.rec = pi, recordOn(pi, in.prov)
	g.mu.Unlock()
	g.log.Info("instance started", "instance", in.name, "provider", in.prov, "pid", in.pid(), "addr", in.rec.Addr, "host", in.rec.Host, "version", in.version)
	g.persist(ctx, in)
	g.launched(ctx, in)
	g.recordPlacement(ctx, in, pi)
	return true
}

// gate adds the instance to HAProxy behind a health gate and waits until its
// checks pass. It reports whether the instance went into service; if not, it
// has already been cleaned up.
func (g *Group) gate(ctx context.Context, in *instance) bool {
	// An instance of a running pool on hosts passed its checks out of
	// rotation: it goes in service at once ("enable server" without
	// "health down"), HAProxy's checks watching it from then on.
	pc, ok := in.inst.(provider.Prechecked)
	ready := ok && pc.Prechecked()
	if err := g.lb.AddServer(ctx, g.server(in), ready); err != nil {
		g.drop(in, "adding to HAProxy failed: "+err.Error(), stopOnly)
		return false
	}
	if ready {
		g.mu.Lock()
		launched := in.since
		g.mu.Unlock()
		g.setState(ctx, in, InService)
		g.recordStartDelay(ctx, in, launched)
		return true
	}
	deadline, stopDeadline := g.clk.NewTimer(g.conf().Health.Grace)
	defer stopDeadline()
	tick, stopTick := g.clk.NewTicker(healthPoll)
	defer stopTick()
	last := "no check yet"
	g.mu.Lock()
	deployed := g.dep.rolls(in.version)
	g.mu.Unlock()
	var answered failStreak
	for {
		select {
		case <-ctx.Done():
			g.shutdown(in)
			return false
		case <-in.inst.Done():
			g.drop(in, "exited before passing its health check: "+in.inst.ExitReason(), removeThenStop)
			return false
		case <-g.retireCh(in):
			// Taken back after its cloud refused to delete it, it is in
			// service already.
			return g.retire(ctx, in)
		case <-deadline:
			g.drop(in, fmt.Sprintf("health check did not pass within %s (last check: %s)", g.conf().Health.Grace, last), removeThenStop)
			return false
		case <-tick:
			st, ok := g.stats.server(ctx, in.name)
			if !ok {
				continue
			}
			if st.CheckStatus != "" {
				last = healthCheckSummary(st)
			}
			// An instance of a deploy that answers its check with errors
			// fall times in a row fails now rather than after grace: the
			// new version is broken, not slow to start.
			if deployed && answered.observe(st, g.conf().Health, g.clk.Now()) {
				g.drop(in, fmt.Sprintf("failed health check %d times: %s", g.conf().Health.Fall, checkReason(st)), removeThenStop)
				return false
			}
			if st.Status.IsUp() {
				g.lb.MarkReady(g.cfg.Name, in.name)
				g.mu.Lock()
				launched := in.since // when it started starting
				g.mu.Unlock()
				g.setState(ctx, in, InService)
				g.recordStartDelay(ctx, in, launched)
				return true
			}
		}
	}
}

// recordStartDelay keeps how long the instance took from its launch to in
// service (a cloud's boot included): the policy lab simulates the group's
// scale-outs with their median (see StartDelay).
func (g *Group) recordStartDelay(ctx context.Context, in *instance, launched time.Time) {
	g.mu.Lock()
	now := in.since
	g.mu.Unlock()
	if err := g.st.AddStartDelay(context.WithoutCancel(ctx), g.cfg.Name, in.prov, now, now.Sub(launched)); err != nil {
		g.log.Warn("recording the start delay failed", "instance", in.name, "err", err)
	}
}

// retireCh is the instance's current retire channel.
func (g *Group) retireCh(in *instance) <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return in.retire
}

// retire drains the instance, removes it from HAProxy, then stops it. An
// instance adopted while draining gets what is left of drain_timeout; one
// adopted while stopping is not drained again. A cloud's instance is
// deleted before it leaves HAProxy (see deleteDrained). It reports whether
// the instance was taken back instead, and serves on (in service, in
// HAProxy's rotation).
func (g *Group) retire(ctx context.Context, in *instance) bool {
	g.mu.Lock()
	state, since := in.state, in.since
	g.mu.Unlock()
	timeout := g.conf().DrainTimeout
	switch state {
	case Draining:
		timeout = max(0, timeout-g.clk.Now().Sub(since))
		g.log.Info("drain resumed", "instance", in.name, "remaining", timeout.Round(time.Millisecond))
	case Stopping, Failed:
		timeout = -1
	default:
		// pre_stop runs while the instance still serves: it may deregister
		// it elsewhere or flush what it holds before the drain. An
		// instance that never entered rotation has nothing to hand over.
		if state != Starting {
			if err := in.inst.PreStop(ctx); err != nil {
				g.log.Warn("pre_stop hook failed; draining anyway", "instance", in.name, "err", err)
			}
		}
		g.setState(ctx, in, Draining)
	}
	if d, ok := g.provOf(in).(provider.Deleter); ok && timeout >= 0 {
		switch g.deleteDrained(ctx, in, d, timeout) {
		case deleted:
			g.setState(ctx, in, Stopping)
			g.drop(in, "", removeThenStop) // Stop only waits for the server to go
		case kept:
			return true
		}
		return false
	}
	if timeout >= 0 {
		err := g.lb.Drain(ctx, g.cfg.Name, in.name, timeout)
		if ctx.Err() != nil && g.keep.Load() {
			return false // recorded as draining: the next run of shoal resumes the drain
		}
		if err != nil {
			g.log.Warn("drain failed; removing anyway", "instance", in.name, "err", err)
		}
	}
	g.setState(ctx, in, Stopping)
	g.drop(in, "", removeThenStop)
	return false
}

// mayAct waits for the store's Guard before a provider action (what
// names it): nil if this node may act. etcd's refusal latches the group
// (see fenced); an error of etcd's (a partition) is retried every
// removeRetry until ctx ends: the action is done only after a check that
// passed.
func (g *Group) mayAct(ctx context.Context, what string) error {
	for {
		if g.fenced.Load() {
			return fmt.Errorf("%s not done: %w", what, store.ErrFenced)
		}
		err := g.st.Guard(ctx)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, store.ErrNoFence):
			return fmt.Errorf("%s not done: %w", what, err)
		case errors.Is(err, store.ErrFenced):
			if !g.fenced.Swap(true) {
				g.log.Warn("this node no longer leads: the group starts, stops and deletes nothing more, its instances are the new leader's", "refused", what)
			}
			return fmt.Errorf("%s not done: %w", what, err)
		}
		g.log.Warn("the fence could not be checked; retrying", "action", what, "err", err)
		t, stop := g.clk.NewTimer(removeRetry)
		select {
		case <-t:
		case <-ctx.Done():
			stop()
			return fmt.Errorf("%s not done: the fence could not be checked: %w", what, err)
		}
	}
}

// shutdown stops the instance when shoal itself stops. HAProxy is already
// stopped by then, so there is nothing to drain. After KeepInstances it
// leaves the instance running and recorded for the next run to adopt.
func (g *Group) shutdown(in *instance) {
	if g.keep.Load() {
		return
	}
	g.setState(context.Background(), in, Stopping)
	g.drop(in, "", stopOnly)
}

// takeOut is the order in which drop takes an instance out of HAProxy and
// stops its process.
type takeOut int

const (
	// removeThenStop: no new request reaches the process while it stops.
	removeThenStop takeOut = iota
	// stopThenRemove, for a hung instance: the streams it holds end with
	// its process instead of holding up the removal.
	stopThenRemove
	// stopOnly: the instance never made it into HAProxy, or HAProxy has
	// already stopped.
	stopOnly
)

// drop is how every instance ends: reason, if any, is recorded as its
// failure (see fail), it leaves HAProxy and its process is stopped (in the
// order out says; there is nothing to stop if it never started), and it is
// forgotten. A stop the fence refuses (see mayAct) is not done: the
// instance is left as it is, running and recorded, for the new leader,
// and the job that retired it fails with why.
func (g *Group) drop(in *instance, reason string, out takeOut) {
	if reason != "" {
		g.fail(in, reason)
	}
	if in.inst != nil {
		// A fresh context, as the stop's own: the check must finish while
		// shoal shuts down. Bounded: a node that cannot reach etcd for
		// removeTimeout has lost its lease (at most a minute) anyway.
		ctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
		err := g.mayAct(ctx, "stop of "+in.name)
		cancel()
		if err != nil {
			if reason == "" {
				g.stuck(in, err.Error())
			}
			return
		}
		switch out {
		case removeThenStop:
			g.removeFromLB(in)
			g.stopProcess(in) // what it forked dies with it
		case stopThenRemove:
			g.stopProcess(in)
			g.removeFromLB(in)
		case stopOnly:
			g.stopProcess(in)
		}
	}
	g.forget(in)
}

func (g *Group) removeFromLB(in *instance) {
	// A fresh context: removal must finish even while shoal shuts down, or
	// HAProxy would keep a server that no longer exists.
	ctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
	defer cancel()
	// HAProxy refuses to delete a server while connections to it are
	// attached, which to a host that went silent (its link down) lasts
	// until they time out: the removal is retried, and the instance keeps
	// its name meanwhile, so no replacement gets a second server of it.
	for {
		err := g.lb.RemoveServer(ctx, g.cfg.Name, in.name)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			g.log.Error("removing server from HAProxy failed", "instance", in.name, "err", err)
			return
		}
		g.log.Warn("removing server from HAProxy failed; retrying", "instance", in.name, "err", err)
		t, stop := g.clk.NewTimer(removeRetry)
		select {
		case <-t:
			stop()
		case <-ctx.Done():
			stop()
			g.log.Error("removing server from HAProxy failed", "instance", in.name, "err", err)
			return
		}
	}
}

func (g *Group) stopProcess(in *instance) {
	// A cloud's server may take minutes to shut down: its Stop waits for
	// that up to delete_timeout.
	ctx, cancel := context.WithTimeout(context.Background(), max(g.conf().Template.StopTimeout+10*time.Second, g.DeleteTimeout()))
	defer cancel()
	g.mu.Lock()
	if in.scaleIn {
		// A running pool on hosts may take its process back
		// (warm_pool.reuse_on_scale_in).
		ctx = provider.ForScaleIn(ctx)
	}
	g.mu.Unlock()
	if err := in.inst.Stop(ctx); err != nil {
		g.log.Error("stopping instance failed", "instance", in.name, "pid", in.pid(), "err", err)
		g.record(ctx, event.InstanceTerminateFailed, in.name, fmt.Sprintf("stopping %s failed: %v", in.name, err))
		return
	}
	what := in.name + " terminated"
	if c, ok := in.inst.(provider.CloudServer); ok {
		// Which server went, and how: a graceful shutdown and a power-off
		// look the same once done.
		what += ": server " + c.CloudID() + " deleted"
		if m := c.ShutdownMode(); m != "" {
			what += " (shutdown: " + m + ")"
		}
	}
	g.log.Info("instance stopped", "instance", in.name, "pid", in.pid(), "what", what)
	g.record(ctx, event.InstanceTerminated, in.name, what)
}

// fail records a failure for status, jobs and crash-loop back-off. A
// crash is reported (an event, a warning) only if no other crash of its
// launch pass was: a pass of 500 instances whose template cannot start is
// one report, and the back-off's probes one each; the crashes left
// unreported are counted in the next report.
func (g *Group) fail(in *instance, reason string) {
	lost := g.hostDown(in)
	g.mu.Lock()
	now := g.clk.Now()
	// An instance that served steadily and then died (killed), or whose
	// host is down, is an accident: its replacement starts at once.
	// Failures of instances that never got that far are a crash loop and
	// back off.
	crash := !lost && !in.provFailed && (in.servingSince.IsZero() || now.Sub(in.servingSince) < stableService)
	served := !in.servingSince.IsZero()
	in.state, in.since = Failed, now
	g.failures = append(g.failures, Failure{Instance: in.name, Reason: reason, At: now, job: in.job, version: in.version, crash: crash})
	if len(g.failures) > maxFailures {
		g.failures = g.failures[len(g.failures)-maxFailures:]
	}
	recent := 0
	for _, f := range g.failures {
		if f.crash && now.Sub(f.At) < failureWindow {
			recent++
		}
	}
	backoff := time.Duration(0)
	if recent > 0 {
		backoff = min(time.Second<<(recent-1), maxBackoff)
	}
	g.nextLaunch = now.Add(backoff)
	report, told := true, reason
	if crash {
		g.crashLoop, g.lastCrash = true, now
		switch {
		case in.round > 0 && in.round <= g.reported:
			report = false
			if g.quiet == 0 {
				g.quietSince = now
			}
			g.quiet++
		default:
			g.reported = max(g.reported, in.round)
			if g.quiet > 0 {
				told += fmt.Sprintf(" (and %d more instances since %s, not reported one by one: a crash loop is reported once a back-off)",
					g.quiet, g.quietSince.UTC().Format(time.RFC3339))
				g.quiet = 0
			}
		}
	}
	g.notifyLocked()
	g.mu.Unlock()
	if report {
		g.log.Warn("instance failed", "instance", in.name, "reason", told, "recent_failures", recent, "next_start_after", backoff)
	} else {
		g.log.Debug("instance failed (a crash of a launch pass already reported)", "instance", in.name, "reason", reason)
	}
	g.failed(in, served, told, report)
	// Its replacement need not wait until it is stopped and removed.
	g.poke()
}

// forget drops a finished instance and lets the reconciler react.
func (g *Group) forget(in *instance) {
	g.mu.Lock()
	delete(g.insts, in.name)
	g.gone.remember(in.rec.ID, in.version)
	g.notifyLocked()
	g.mu.Unlock()
	g.deleteRecord(context.Background(), in.name)
	g.poke()
}

func (g *Group) setState(ctx context.Context, in *instance, s State) {
	g.setStateIf(ctx, in, s, nil)
}

// setStateIf is setState if ok (nil: always), asked under g.mu, holds; it
// reports whether it did.
func (g *Group) setStateIf(ctx context.Context, in *instance, s State, ok func() bool) bool {
	g.mu.Lock()
	if ok != nil && !ok() {
		g.mu.Unlock()
		return false
	}
	in.state, in.since = s, g.clk.Now()
	ended := false
	if s == InService && in.servingSince.IsZero() {
		in.servingSince = in.since
		// The template starts: the rest of the shortfall may launch.
		ended, g.crashLoop = g.crashLoop, false
	}
	g.notifyLocked()
	quiet := g.quiet
	if ended {
		g.quiet = 0
	}
	g.mu.Unlock()
	if ended {
		g.log.Info("crash loop over: an instance went into service; the rest launch", "instance", in.name, "unreported_failures", quiet)
		g.poke()
	}
	g.log.Info("instance "+string(s), "instance", in.name, "addr", in.rec.Addr)
	g.persist(context.WithoutCancel(ctx), in)
	return true
}

func (g *Group) persist(ctx context.Context, in *instance) {
	g.mu.Lock()
	// Before its start the instance has no record from the provider yet.
	row := store.Instance{Record: in.rec, State: string(in.state), StateSince: in.since, Version: in.version, Template: in.hash,
		Marks: slices.Sorted(slices.Values(append(in.marks.words(), ejectionWords(in.ejected, in.ejections)...)))}
	row.Group, row.Name, row.Index = g.cfg.Name, in.name, in.index
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
	conf := g.conf()
	s := haproxy.Server{Backend: g.cfg.Name, Name: in.name, Addr: in.rec.Addr}.WithGroup(conf)
	s.Weight = g.deployWeight(in)
	return s
}

// pid is the instance's process, 0 before it has one.
func (in *instance) pid() int {
	if in.inst == nil {
		return 0
	}
	return in.inst.PID()
}
