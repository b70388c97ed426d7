// Package ha is an HA node of shoal: one member of a pair (or more) that
// share their groups' state in etcd, of which only the leader acts on the
// groups. It is the one home of the pair's behaviour:
//
//   - election (package election): the leader, and the fence every shared
//     write compares;
//   - Store: which store a node routes to, the shared state in etcd
//     (store/etcdstore) or the node's own SQLite;
//   - Node: the roles, a standby's mirror of the shared instance records
//     into its HAProxy, the takeover (promote) and the loss of leadership
//     (demote), and the drained step-down;
//   - keepalived (package keepalived): the virtual IP that follows the
//     leader, and the handover's drain.
//
// Package core runs a node through a few setup steps (Join, StartVIP,
// Start) and gives it what it acts on as a Core.
package ha

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/event"
	"github.com/shoal-lb/shoal/internal/ha/election"
	"github.com/shoal-lb/shoal/internal/ha/keepalived"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/jobrun"
	"github.com/shoal-lb/shoal/internal/store"
	"github.com/shoal-lb/shoal/internal/store/etcdstore"
)

// Core is the part of `shoal serve` a node drives (package core implements
// it): the groups, which run only while the node leads.
type Core interface {
	// Lock and Unlock are the core's reload lock: a takeover holds it
	// throughout, the mirror while it reads the config, a handover while
	// HAProxy drains (a reload's new worker would keep connections alive).
	sync.Locker
	// Config is the config in force; it is read under the lock.
	Config() *config.Config
	// Lead builds the groups from the shared records, adopting exactly the
	// instances they name and stopping only strays of those groups'
	// providers (a node whose local state is empty adopts the fleet, it
	// does not stop it), and runs their reconcilers; under the lock.
	Lead(ctx context.Context) error
	// RunPolicies runs the groups' policies (and the waker).
	RunPolicies()
	// StopPolicies stops them and waits: no policy submits a job after.
	StopPolicies()
	// Follow stops everything the groups run, leaving their instances
	// serving for the next leader; nothing runs until Lead.
	Follow()
	// Standby reports whether the groups run nothing (not since Lead).
	Standby() bool
	// Servers counts the running groups' instances, each a server of
	// HAProxy.
	Servers() int
}

// errLostLeadership ends the jobs of a node that stopped leading.
var errLostLeadership = errors.New("this node lost the HA leadership")

// Node runs an HA node's roles: a standby mirrors the shared instance
// records into its HAProxy and runs no group; on takeover the node restores
// the groups from the shared records (adopting their instances), fails the
// jobs its predecessor left, and runs reconcilers, policies and the waker;
// on losing leadership it stops them all, leaving the instances running for
// the new leader. The roles follow the election's (election.Role):
//
//	      Start
//	        |
//	        v
//	+----------------+  Role{Leader}: promote     +----------------+
//	|    standby     |  fence set, groups         |    leading     |
//	| mirror: its    |  restored, jobs left       | groups,        |
//	| HAProxy has    |  unfinished failed,        | policies and   |
//	| etcd's         |  policies run              | jobs run       |
//	| instances      |--------------------------->|                |--+
//	|                |<---------------------------|                |  | a new term
//	+----------------+  Role{not Leader}: demote  +----------------+  | (another
//	    ^               fence cleared first;        |    ^            | fence):
//	    |               policies, jobs,             |    +------------+ demote,
//	    |               reconcilers stop;           |        promote again
//	    |               instances serve on          |
//	    +--- promote failed: demote, resign --------+
//
// Each node publishes, every lease and after each mirror pass, whether its
// HAProxy has every shared instance in service UP ("synced"): a step-down
// hands over only to a synced standby. StepDown (stepdown.go) hands the VIP
// over, drained, before resigning. Start's stop demotes first, then the
// election resigns.
type Node struct {
	el     *election.Node
	st     *Store
	shared *etcdstore.Store
	log    *slog.Logger // component=ha
	// base is the core's logger, which keepalived's supervisor names
	// itself in.
	base *slog.Logger
	// From the config, which a reload cannot change for an HA node.
	cfg   *config.Config
	vip   *config.HAVIP
	lease time.Duration
	// ka, when set (StartVIP), runs keepalived for the VIP: its state
	// (MASTER, BACKUP, FAULT) is published with the node's info, and a
	// step-down waits for the address to leave.
	ka *keepalived.Supervisor
	// Set by Start.
	core Core
	lb   *haproxy.Manager
	jm   *jobrun.Manager

	mu     sync.Mutex
	role   election.Role
	last   string // the last leader seen, for the takeover's reason
	synced bool   // the mirror's last pass added every server
	count  int    // servers the mirror keeps in HAProxy
}

// Join joins this node to the pair before anything acts: it opens the
// election (registering the node in etcd) and routes the groups' state to
// the pair's, in etcd, beside local. Close leaves.
func Join(ctx context.Context, cfg *config.Config, local *store.Store, base *slog.Logger) (*Node, error) {
	log := base.With("component", "ha")
	el, err := election.Open(ctx, *cfg.HA, log)
	if err != nil {
		return nil, err
	}
	shared := etcdstore.New(el.Client(), el.Prefix())
	return &Node{
		el: el, shared: shared, log: log, base: base,
		st:  &Store{Store: local, shared: shared, log: log},
		cfg: cfg, vip: cfg.HA.VIP, lease: cfg.HA.Lease,
	}, nil
}

// Close closes the node's etcd client, after Start's stop.
func (h *Node) Close() { h.el.Close() }

// Store is the store the groups, the jobs and the policies use.
func (h *Node) Store() *Store { return h.st }

// Events records what happens to this node (HAProxy, hosts, certificates,
// DNS) where every node of the pair lists it.
func (h *Node) Events() NodeEvents { return NodeEvents{s: h.st, node: h.cfg.HA.Node} }

// Start runs the node's election and its roles over c, with lb its HAProxy
// and jm its jobs; the returned func stops leading first (so that nothing
// acts once another node may lead), then the election, which resigns. It
// runs without c's lock: a takeover in progress takes it. Start is called
// once; its stop may be called more than once.
func (h *Node) Start(c Core, lb *haproxy.Manager, jm *jobrun.Manager) func() {
	h.core, h.lb, h.jm = c, lb, jm
	roleCtx, stopRoles := context.WithCancel(context.Background())
	nodeCtx, stopNode := context.WithCancel(context.Background())
	roles, elect := make(chan struct{}), make(chan struct{})
	go func() { defer close(elect); h.el.Run(nodeCtx) }()
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
func (h *Node) run(ctx context.Context) {
	var (
		leading    bool
		fence      election.Fence
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
				synced, count = true, h.core.Servers()
			}
			h.publish(ctx, synced, count)
		case r := <-h.el.Roles():
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
					leading, fence = false, election.Fence{}
					stopMirror = h.startMirror()
					_ = h.el.StepDown(ctx)
				}
			case leading:
				h.demote()
				leading, fence = false, election.Fence{}
				stopMirror = h.startMirror()
			}
		}
	}
}

// promote takes over: the fence first, then the groups from the shared
// records, then the jobs left unfinished, then the groups run.
func (h *Node) promote(ctx context.Context, r election.Role) error {
	h.shared.SetFence(r.Fence)
	h.core.Lock()
	defer h.core.Unlock()
	h.mu.Lock()
	prev := h.last
	h.mu.Unlock()
	if prev == "" || prev == r.LeaderName {
		prev = "none"
	}
	reason := fmt.Sprintf("leader changed: %s → %s", prev, r.LeaderName)
	h.log.Info("taking over as the HA leader", "previous", prev, "fence_rev", r.Fence.Rev)
	if err := h.core.Lead(ctx); err != nil {
		return fmt.Errorf("restore the groups from etcd: %w", err)
	}
	if err := h.jm.FailUnfinished(ctx, reason); err != nil {
		return err
	}
	h.core.RunPolicies()
	d := event.Record("", event.LeaderChanged, time.Now(), r.LeaderName, reason)
	if err := h.st.InsertDecision(ctx, &d); err != nil {
		h.log.Warn("recording the leader change failed", "err", err)
	}
	h.publish(ctx, true, h.core.Servers())
	return nil
}

// demote stops what leading runs, leaving the instances serving. The fence
// goes first: nothing this node still does can write.
func (h *Node) demote() {
	h.shared.SetFence(election.Fence{})
	h.core.StopPolicies()
	h.jm.Interrupt(errLostLeadership)
	h.core.Follow()
	h.log.Warn("no longer the HA leader: groups, policies and jobs stopped, instances left serving")
}

// publish tells the pair this node's HAProxy sync state.
func (h *Node) publish(ctx context.Context, synced bool, servers int) {
	h.mu.Lock()
	h.synced, h.count = synced, servers
	h.mu.Unlock()
	info := election.NodeInfo{API: h.cfg.Admin.Listen, HAProxySynced: synced, Servers: servers}
	if h.ka != nil {
		info.VIP = h.ka.State()
	}
	if err := h.el.Publish(ctx, info); err != nil {
		h.log.Warn("publishing this node's state failed", "err", err)
	}
}

// Leader reports the leader's name and whether this node is it.
func (h *Node) Leader() (string, bool) {
	r := h.el.Role()
	return r.LeaderName, r.Leader && !h.core.Standby()
}

// Status is GET /v1/ha.
func (h *Node) Status(ctx context.Context) (api.HAStatus, error) {
	// Without etcd the node still answers what it knows: keepalived's
	// health check reads this, and etcd being away must not take the
	// address from a node whose HAProxy serves.
	st, err := h.el.Status(ctx)
	etcdErr := ""
	if err != nil {
		st, etcdErr = h.el.Local(), err.Error()
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
	_, err = h.lb.Runtime(hctx, "show info", "")
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
