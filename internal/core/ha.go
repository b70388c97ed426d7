package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/event"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/ha"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/job"
	"github.com/shoal-lb/shoal/internal/jobrun"
	"github.com/shoal-lb/shoal/internal/keepalived"
	"github.com/shoal-lb/shoal/internal/store"
	"github.com/shoal-lb/shoal/internal/store/etcdstore"
)

// sharedStore is the state the groups, the jobs and the policies keep:
// *store.Store on a single node, haStore on a node of an HA pair.
type sharedStore interface {
	GroupState(ctx context.Context, name string) (store.GroupState, bool, error)
	PutGroupState(ctx context.Context, g store.GroupState) error
	PutInstance(ctx context.Context, in store.Instance) error
	DeleteInstance(ctx context.Context, name string) error
	Instances(ctx context.Context) ([]store.Instance, error)
	InsertJob(ctx context.Context, j *job.Job) error
	UpdateJob(ctx context.Context, j job.Job) error
	Job(ctx context.Context, id string) (job.Job, error)
	Jobs(ctx context.Context, group string, limit int) ([]job.Job, error)
	FailUnfinishedJobs(ctx context.Context, reason string, at time.Time) ([]job.Job, error)
	InsertDecision(ctx context.Context, d *decision.Record) error
	Decisions(ctx context.Context, q store.DecisionQuery) ([]decision.Record, error)
	LastDecisionTimes(ctx context.Context, group string, outcome decision.Outcome) (map[string]time.Time, error)
	Usage(ctx context.Context, group string, since time.Time) ([]store.Usage, error)
	AddUsage(ctx context.Context, group, name string, started, ended time.Time) error
	AddStartDelay(ctx context.Context, group string, at time.Time, d time.Duration) error
	StartDelays(ctx context.Context, group string) ([]time.Duration, error)
	Guard(ctx context.Context) error
}

// eventRecorder records an event: the node's SQLite store on a single
// node, nodeEvents on a node of an HA pair.
type eventRecorder interface {
	InsertDecision(ctx context.Context, d *decision.Record) error
}

// nodeEvents records an HA node's own events (its HAProxy restarted, a host
// or certificate it watches, its DNS listeners) in etcd, whether the node
// leads or not, so that `shoal events` and the dashboard on either node
// list both nodes' events; each names its node. The local SQLite copy
// queues the notification, as haStore.InsertDecision's does.
type nodeEvents struct {
	s    *haStore
	node string
}

// nodeEventTimeout bounds the etcd part of recording a node's event: the
// callers (HAProxy's supervisor, after a restart) wait for it, and a node
// cut from etcd still has its local copy and notification.
const nodeEventTimeout = 2 * time.Second

func (e nodeEvents) InsertDecision(ctx context.Context, d *decision.Record) error {
	d.Reason = "node " + e.node + ": " + d.Reason
	ectx, cancel := context.WithTimeout(ctx, nodeEventTimeout)
	err := e.s.shared.InsertNodeEvent(ectx, d)
	cancel()
	if err != nil {
		err = fmt.Errorf("record in etcd: %w", err)
	}
	local := *d
	if lerr := e.s.Store.InsertDecision(ctx, &local); lerr != nil {
		err = errors.Join(err, fmt.Errorf("local copy: %w", lerr))
	}
	return err
}

// haStore is an HA node's store: the pair's shared state in etcd (fenced
// writes: group states, instances and their usage, jobs, decisions), the
// rest (notification queue, start delays) in the node's SQLite, which also
// queues the notifications of what etcd records.
type haStore struct {
	*store.Store
	shared *etcdstore.Store
	log    *slog.Logger
}

func (s *haStore) GroupState(ctx context.Context, name string) (store.GroupState, bool, error) {
	return s.shared.GroupState(ctx, name)
}

func (s *haStore) PutGroupState(ctx context.Context, g store.GroupState) error {
	return s.shared.PutGroupState(ctx, g)
}

func (s *haStore) PutInstance(ctx context.Context, in store.Instance) error {
	return s.shared.PutInstance(ctx, in)
}

func (s *haStore) DeleteInstance(ctx context.Context, name string) error {
	return s.shared.DeleteInstance(ctx, name)
}

// Guard is etcd's fence check: a provider action of the leader's waits
// for it (the SQLite's own Guard, a single node's, always passes).
func (s *haStore) Guard(ctx context.Context) error { return s.shared.Guard(ctx) }

func (s *haStore) Instances(ctx context.Context) ([]store.Instance, error) {
	return s.shared.Instances(ctx)
}

func (s *haStore) Usage(ctx context.Context, group string, since time.Time) ([]store.Usage, error) {
	return s.shared.Usage(ctx, group, since)
}

func (s *haStore) AddUsage(ctx context.Context, group, name string, started, ended time.Time) error {
	return s.shared.AddUsage(ctx, group, name, started, ended)
}

func (s *haStore) InsertJob(ctx context.Context, j *job.Job) error {
	if err := s.shared.InsertJob(ctx, j); err != nil {
		return err
	}
	s.notify(ctx, "", *j)
	return nil
}

func (s *haStore) UpdateJob(ctx context.Context, j job.Job) error {
	var was job.State
	if old, err := s.shared.Job(ctx, j.ID); err == nil {
		was = old.State
	}
	if err := s.shared.UpdateJob(ctx, j); err != nil {
		return err
	}
	s.notify(ctx, was, j)
	return nil
}

// notify queues a job's event locally, as the SQLite store does in the
// job's transaction: etcd has the job, a lost notification is logged.
func (s *haStore) notify(ctx context.Context, was job.State, j job.Job) {
	if ev, ok := event.FromJob(was, j); ok {
		if err := s.Store.Notify(ctx, ev); err != nil {
			s.log.Warn("queueing a job's notification failed", "job", j.ID, "err", err)
		}
	}
}

func (s *haStore) Job(ctx context.Context, id string) (job.Job, error) { return s.shared.Job(ctx, id) }

func (s *haStore) Jobs(ctx context.Context, group string, limit int) ([]job.Job, error) {
	return s.shared.Jobs(ctx, group, limit)
}

func (s *haStore) FailUnfinishedJobs(ctx context.Context, reason string, at time.Time) ([]job.Job, error) {
	return s.shared.FailUnfinishedJobs(ctx, reason, at)
}

// InsertDecision records d in etcd (fenced), then in the local SQLite,
// which queues its notification; d keeps etcd's id.
func (s *haStore) InsertDecision(ctx context.Context, d *decision.Record) error {
	if err := s.shared.InsertDecision(ctx, d); err != nil {
		return err
	}
	local := *d
	if err := s.Store.InsertDecision(ctx, &local); err != nil {
		return fmt.Errorf("local copy of decision %d: %w", d.ID, err)
	}
	return nil
}

func (s *haStore) Decisions(ctx context.Context, q store.DecisionQuery) ([]decision.Record, error) {
	return s.shared.Decisions(ctx, q)
}

func (s *haStore) LastDecisionTimes(ctx context.Context, group string, outcome decision.Outcome) (map[string]time.Time, error) {
	return s.shared.LastDecisionTimes(ctx, group, outcome)
}

// errLostLeadership ends the jobs of a node that stopped leading.
var errLostLeadership = errors.New("this node lost the HA leadership")

// haNode runs an HA node's roles (see package ha): a standby mirrors the
// shared instance records into its HAProxy and runs no group; on takeover
// the node restores the groups from the shared records (adopting their
// instances), fails the jobs its predecessor left, and runs reconcilers,
// policies and the waker (through the registry); on losing leadership it
// stops them all, leaving the instances running for the new leader.
//
//	           Roles: leader                    Roles: not leader
//	standby ──────────────────────► leading ──────────────────────► standby
//	mirror runs                     fence set, restore, jobs      fence cleared first,
//	                                failed, groups run            policies, jobs, groups stop
type haNode struct {
	node   *ha.Node
	shared *etcdstore.Store
	st     *haStore
	c      *core
	reg    *registry
	jm     *jobrun.Manager
	policy func(*group.Group) func(context.Context)
	log    *slog.Logger
	// From the config, which a reload cannot change for an HA node.
	api   string
	vip   *config.HAVIP
	lease time.Duration
	// ka, when set, runs keepalived for the VIP: its state (MASTER, BACKUP,
	// FAULT) is published with the node's info, and a step-down waits for
	// the address to leave.
	ka *keepalived.Supervisor

	mu     sync.Mutex
	role   ha.Role
	last   string // the last leader seen, for the takeover's reason
	synced bool   // the mirror's last pass added every server
	count  int    // servers the mirror keeps in HAProxy
}

// start runs the node's election and its roles; the returned func stops
// leading first (so that nothing acts once another node may lead), then
// the election, which resigns. It may be called more than once.
func (h *haNode) start() func() {
	roleCtx, stopRoles := context.WithCancel(context.Background())
	nodeCtx, stopNode := context.WithCancel(context.Background())
	roles, elect := make(chan struct{}), make(chan struct{})
	go func() { defer close(elect); h.node.Run(nodeCtx) }()
	go func() { defer close(roles); h.run(roleCtx) }()
	return func() {
		stopRoles()
		<-roles
		stopNode()
		<-elect
	}
}

// run follows the node's roles until ctx ends; it returns having stopped
// what leading started.
func (h *haNode) run(ctx context.Context) {
	var (
		leading    bool
		fence      ha.Fence
		stopMirror = h.startMirror()
	)
	defer func() {
		stopMirror()
		if leading {
			h.demote()
		}
	}()
	// The node's info is republished every lease: keepalived's state
	// changes without telling.
	tick := time.NewTicker(h.lease)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			h.mu.Lock()
			synced, count := h.synced, h.count
			h.mu.Unlock()
			if leading {
				synced, count = true, h.servers()
			}
			h.publish(ctx, synced, count)
		case r := <-h.node.Roles():
			h.mu.Lock()
			h.role = r
			if !r.Leader && r.LeaderName != "" {
				h.last = r.LeaderName
			}
			h.mu.Unlock()
			switch {
			case r.Leader && leading && r.Fence == fence:
			case r.Leader:
				if leading {
					h.demote() // a new term without a loss seen between
				}
				stopMirror()
				stopMirror = func() {}
				leading, fence = true, r.Fence
				if err := h.promote(ctx, r); err != nil {
					h.log.Error("taking over failed; stepping down", "err", err)
					h.demote()
					leading, fence = false, ha.Fence{}
					stopMirror = h.startMirror()
					_ = h.node.StepDown(ctx)
				}
			case leading:
				h.demote()
				leading, fence = false, ha.Fence{}
				stopMirror = h.startMirror()
			}
		}
	}
}

// promote takes over: the fence first, then the groups from the shared
// records, then the jobs left unfinished, then the groups run.
func (h *haNode) promote(ctx context.Context, r ha.Role) error {
	h.shared.SetFence(r.Fence)
	h.c.reloadMu.Lock()
	defer h.c.reloadMu.Unlock()
	h.mu.Lock()
	prev := h.last
	h.mu.Unlock()
	if prev == "" || prev == r.LeaderName {
		prev = "none"
	}
	reason := fmt.Sprintf("leader changed: %s → %s", prev, r.LeaderName)
	h.log.Info("taking over as the HA leader", "previous", prev, "fence_rev", r.Fence.Rev)
	// restore adopts exactly the instances the shared records name and
	// stops only strays of those groups' providers: a node whose local
	// state is empty adopts the fleet, it does not stop it.
	groups, err := restore(ctx, h.c.cfg, h.st, h.c.lb, h.c.provs, h.c.log)
	if err != nil {
		return fmt.Errorf("restore the groups from etcd: %w", err)
	}
	h.reg.lead(groups, nil)
	if err := h.jm.FailUnfinished(ctx, reason); err != nil {
		return err
	}
	h.reg.start(h.policy)
	d := event.Record("", event.LeaderChanged, time.Now(), r.LeaderName, reason)
	if err := h.st.InsertDecision(ctx, &d); err != nil {
		h.log.Warn("recording the leader change failed", "err", err)
	}
	h.publish(ctx, true, h.servers())
	return nil
}

// servers counts the leader's instances, each a server of its HAProxy.
func (h *haNode) servers() int {
	n := 0
	for _, g := range h.reg.All() {
		n += len(g.Targets())
	}
	return n
}

// demote stops what leading runs, leaving the instances serving. The fence
// goes first: nothing this node still does can write.
func (h *haNode) demote() {
	h.shared.SetFence(ha.Fence{})
	h.reg.stopPolicies()
	h.jm.Interrupt(errLostLeadership)
	h.reg.follow()
	h.log.Warn("no longer the HA leader: groups, policies and jobs stopped, instances left serving")
}

// startMirror keeps HAProxy's servers in step with the shared instance
// records until the returned func is called.
func (h *haNode) startMirror() func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.mirror(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// mirrored is a server the mirror put into HAProxy.
type mirrored struct{ backend, name, addr string }

// mirror adds the instances in service or draining (each gated by its own
// checks here) and removes the others, after each change in etcd. The node
// counts as synced once its HAProxy has them all and its own checks have
// every instance in service on the leader UP: a server added here starts
// DOWN, and a VIP that moved to a node whose servers were still DOWN would
// queue its requests until they came up. Until synced it rechecks every
// second, reading what HAProxy serves again and applying the newest set to
// it: what HAProxy has, not what this node believes it added, is the truth
// (the groups of a node that just stopped leading may name instances that
// never made it into HAProxy).
func (h *haNode) mirror(ctx context.Context) {
	sets := h.shared.WatchInstances(ctx)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var (
		last      []store.Instance // the newest set, applied again until synced
		seen      bool
		applied   bool // whether the last apply went into HAProxy whole
		inService map[mirrored]bool
		synced    bool
	)
	for {
		select {
		case <-ctx.Done():
			return
		case set, ok := <-sets:
			if !ok {
				return
			}
			last, seen = set, true
		case <-tick.C:
			if synced || !seen {
				continue
			}
		}
		// One read of HAProxy per pass: a server apply adds starts DOWN,
		// so what was UP before it is what counts.
		known, up, err := h.served(ctx)
		if err != nil {
			h.log.Warn("mirror: reading HAProxy's servers failed", "err", err)
			applied = false
		} else {
			applied, inService = h.apply(ctx, last, known)
		}
		if ctx.Err() != nil {
			return
		}
		synced = applied && allIn(inService, up)
		h.publish(ctx, synced, len(known))
	}
}

// served lists the servers of the groups' backends in HAProxy, and those
// of them that are UP.
func (h *haNode) served(ctx context.Context) (known, up map[mirrored]bool, err error) {
	h.c.reloadMu.Lock()
	cfg := h.c.cfg
	h.c.reloadMu.Unlock()
	known, up = map[mirrored]bool{}, map[mirrored]bool{}
	for _, g := range cfg.Groups {
		stats, err := h.c.lb.Stats(ctx, g.Name)
		if err != nil {
			return nil, nil, err
		}
		for _, st := range stats {
			if st.Type != haproxy.TypeServer {
				continue
			}
			k := mirrored{g.Name, st.Name, st.Addr}
			known[k] = true
			if st.Status.IsUp() {
				up[k] = true
			}
		}
	}
	return known, up, nil
}

// apply makes HAProxy serve what set says and reports whether every change
// was made, and which servers are in service on the leader.
func (h *haNode) apply(ctx context.Context, set []store.Instance, known map[mirrored]bool) (bool, map[mirrored]bool) {
	h.c.reloadMu.Lock()
	cfg := h.c.cfg
	h.c.reloadMu.Unlock()
	groups := map[string]config.Group{}
	for _, g := range cfg.Groups {
		groups[g.Name] = g
	}
	want := map[mirrored]haproxy.Server{}
	inService := map[mirrored]bool{}
	for _, in := range set {
		gc, ok := groups[in.Group]
		if !ok || in.Addr == "" || (in.State != string(group.InService) && in.State != string(group.Draining) && in.State != string(group.Unhealthy)) {
			continue
		}
		k := mirrored{in.Group, in.Name, in.Addr}
		want[k] = haproxy.Server{Backend: in.Group, Name: in.Name, Addr: in.Addr, Health: gc.Health, Proto: gc.Proto}
		if in.State == string(group.InService) {
			inService[k] = true
		}
	}
	applied := true
	for k := range known {
		if _, ok := want[k]; ok {
			continue
		}
		if err := h.c.lb.RemoveServer(ctx, k.backend, k.name); err != nil {
			applied = false
			h.log.Warn("mirror: removing a server failed", "group", k.backend, "instance", k.name, "err", err)
			continue
		}
		delete(known, k)
	}
	for k, s := range want {
		if known[k] {
			continue
		}
		if err := h.c.lb.AddServer(ctx, s, false); err != nil {
			applied = false
			h.log.Warn("mirror: adding a server failed", "group", k.backend, "instance", k.name, "err", err)
			continue
		}
		known[k] = true
	}
	return applied, inService
}

// allIn reports whether every key of want is in have.
func allIn(want, have map[mirrored]bool) bool {
	for k := range want {
		if !have[k] {
			return false
		}
	}
	return true
}

// publish tells the pair this node's HAProxy sync state.
func (h *haNode) publish(ctx context.Context, synced bool, servers int) {
	h.mu.Lock()
	h.synced, h.count = synced, servers
	h.mu.Unlock()
	info := ha.NodeInfo{API: h.api, HAProxySynced: synced, Servers: servers}
	if h.ka != nil {
		info.VIP = h.ka.State()
	}
	if err := h.node.Publish(ctx, info); err != nil {
		h.log.Warn("publishing this node's state failed", "err", err)
	}
}

// Leader reports the leader's name and whether this node is it.
func (h *haNode) Leader() (string, bool) {
	r := h.node.Role()
	return r.LeaderName, r.Leader && !h.reg.Standby()
}

// Status is GET /v1/ha.
func (h *haNode) Status(ctx context.Context) (api.HAStatus, error) {
	// Without etcd the node still answers what it knows: keepalived's
	// health check reads this, and etcd being away must not take the
	// address from a node whose HAProxy serves.
	st, err := h.node.Status(ctx)
	etcdErr := ""
	if err != nil {
		st, etcdErr = h.node.Local(), err.Error()
	}
	out := api.HAStatus{Node: st.Node, Leader: st.Leader, Role: "standby", LeaseTTL: st.LeaseTTL.Seconds(), Nodes: st.Nodes, EtcdError: etcdErr}
	if _, leading := h.Leader(); leading {
		out.Role = "leader"
	}
	if !st.LeaderSince.IsZero() {
		t := st.LeaderSince
		out.LeaderSince = &t
	}
	hctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = h.c.lb.Runtime(hctx, "show info", "")
	cancel()
	out.HAProxyRunning = err == nil
	if v := h.vip; v != nil {
		out.VIP = &api.HAVIP{Address: v.Address}
		for _, n := range st.Nodes {
			if n.Name == st.Node {
				out.VIP.State = n.VIP
			}
		}
	}
	return out, nil
}

// vipLeaveMax bounds how long a step-down without a handover (the VIP was
// not on this node) waits for the address to leave it.
const vipLeaveMax = 15 * time.Second

// leaderRise is how long the new leader's keepalived takes to add the
// leader's weight (its leader check runs every second and rises on one
// pass): until then a yielded node of higher base priority would take the
// VIP back.
const leaderRise = 2 * time.Second

// StepDown is POST /v1/ha/step-down: it hands the VIP over, drained (see
// keepalived.Handover: new connections held, each connection closed after
// its answer, the address moved once nothing is in flight), then the
// leadership, and returns the new leader ("" when none took over within
// two leases) and when the VIP left this node. From then the node may be
// taken down without cutting a client off.
//
//	standby ready? ──► hold SYNs, close after answer ──► quiet ──► yield:
//	VIP left ──► one advert (the standby takes it) ──► fence cleared,
//	resign ──► new leader ──► leaderRise ──► unyield
func (h *haNode) StepDown(ctx context.Context) (api.StepDownResponse, error) {
	start := time.Now()
	r := h.node.Role()
	if !r.Leader {
		return api.StepDownResponse{}, api.ErrNotLeader
	}
	if err := h.standbyReady(ctx); err != nil {
		return api.StepDownResponse{}, err
	}
	var resp api.StepDownResponse
	yielded := false
	if h.ka != nil && h.ka.State() == "MASTER" {
		// No reload while HAProxy drains: a new worker would keep
		// connections alive.
		h.c.reloadMu.Lock()
		res, err := h.ka.Handover(ctx, h.c.lb)
		h.c.reloadMu.Unlock()
		if err != nil {
			return resp, fmt.Errorf("hand the VIP over: %w", err)
		}
		yielded = true
		resp.VIPMoved, resp.VIPMovedAfter = true, res.Left.Seconds()
		lg := h.log.Info
		if !res.Quiet {
			lg = h.log.Warn
		}
		lg("step-down: the VIP left this node", "drained", res.Drained.Round(time.Millisecond), "quiet", res.Quiet, "after", res.Left.Round(time.Millisecond))
		// The standby takes the address its skew time (under one advert)
		// after our priority-0 advert. Resigning sooner would let its
		// leader check pass within that time, and a change of priority
		// restarts a backup's master-down timer: the address would be no
		// one's for three adverts, and the SYNs held through the move
		// would wait for their second retransmission (seen in about one
		// step-down in four).
		select {
		case <-ctx.Done():
			return resp, ctx.Err()
		case <-time.After(h.vip.Advert):
		}
	}
	defer func() {
		if yielded {
			if err := h.ka.Unyield(); err != nil {
				h.log.Error("step-down: letting keepalived hold the VIP again failed", "err", err)
			}
		}
	}()
	// Nothing this node still does writes once the other may lead: the
	// fence goes before the election key.
	h.shared.SetFence(ha.Fence{})
	if err := h.node.StepDown(ctx); err != nil {
		if now := h.node.Role(); now.Leader && now.Fence == r.Fence {
			h.shared.SetFence(r.Fence)
		}
		if errors.Is(err, ha.ErrNotLeader) {
			return resp, api.ErrNotLeader
		}
		return resp, err
	}
	if err := poll(ctx, start.Add(2*h.lease), func() bool {
		if r := h.node.Role(); r.LeaderName != "" && r.LeaderName != h.node.Name() {
			resp.Leader = r.LeaderName
			return true
		}
		return false
	}); err != nil || h.ka == nil {
		return resp, err
	}
	if yielded {
		if resp.Leader != "" {
			select {
			case <-ctx.Done():
				return resp, ctx.Err()
			case <-time.After(leaderRise):
			}
		}
		return resp, nil
	}
	err := poll(ctx, start.Add(vipLeaveMax), func() bool { return h.ka.State() != "MASTER" })
	if resp.VIPMoved = h.ka.State() != "MASTER"; resp.VIPMoved {
		resp.VIPMovedAfter = time.Since(start).Seconds()
		h.log.Info("step-down: the VIP left this node", "after", time.Since(start).Round(time.Millisecond))
	} else {
		h.log.Warn("step-down: the VIP is still on this node", "after", time.Since(start).Round(time.Millisecond))
	}
	return resp, err
}

// standbyReady returns api.ErrNoStandby, saying why, unless another node
// published within two leases that its HAProxy is synced: a handover to a
// node whose servers are still DOWN would queue every request it takes.
func (h *haNode) standbyReady(ctx context.Context) error {
	st, err := h.node.Status(ctx)
	if err != nil {
		return fmt.Errorf("read the pair from etcd: %w", err)
	}
	var why []string
	for _, n := range st.Nodes {
		switch {
		case n.Name == h.node.Name():
		case time.Since(n.UpdatedAt) > 2*h.lease:
			why = append(why, fmt.Sprintf("%s last reported %s ago", n.Name, time.Since(n.UpdatedAt).Round(time.Second)))
		case !n.HAProxySynced:
			why = append(why, fmt.Sprintf("%s's HAProxy does not have every instance UP yet", n.Name))
		case h.ka != nil && n.VIP != "BACKUP":
			// A yield to a node that cannot hold the VIP would leave it
			// to no one.
			why = append(why, fmt.Sprintf("%s's keepalived is %q, not BACKUP", n.Name, n.VIP))
		default:
			return nil
		}
	}
	if len(why) == 0 {
		why = append(why, "no other node is registered")
	}
	return fmt.Errorf("%w: %s", api.ErrNoStandby, strings.Join(why, "; "))
}

// poll checks done every 50 ms until it holds or deadline passes (nil
// either way), or ctx ends.
func poll(ctx context.Context, deadline time.Time, done func() bool) error {
	for !done() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// startKeepalived runs keepalived for the pair's virtual IP, its track
// scripts this binary's `shoal ha check` against this core's socket: a
// node whose core or HAProxy does not answer gives the address up, and the
// leader's check raises its priority so that the address follows it.
func startKeepalived(ctx context.Context, cfg *config.Config, log *slog.Logger) (*keepalived.Supervisor, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("keepalived: the track scripts need shoal's own path: %w", err)
	}
	check := []string{self, "ha", "check", "--socket", cfg.Admin.Socket}
	return keepalived.Start(ctx, keepalived.Options{
		VIP:         *cfg.HA.VIP,
		Priority:    cfg.HA.Priority,
		Node:        cfg.HA.Node,
		Dir:         filepath.Join(cfg.StateDir, "keepalived"),
		Check:       check,
		LeaderCheck: append(slices.Clip(check), "--leader"),
		Log:         log,
	})
}

func stopKeepalived(sup *keepalived.Supervisor, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sup.Stop(ctx); err != nil {
		log.Warn("stopping keepalived failed", "err", err)
	}
}
