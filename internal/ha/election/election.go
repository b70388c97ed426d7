// Package election makes a shoal node one member of an HA pair (or more): the
// nodes elect a leader through etcd (clientv3/concurrency), and only the
// leader acts on the groups (package ha runs those roles). Each node holds an
// etcd session, a lease of cfg.Lease that its client keeps alive; its
// registration (<prefix>nodes/<name>) and, when it leads, its election key
// (<prefix>leader/<lease>) live on that lease, so a node that dies or is cut
// off from etcd drops out within one lease.
//
// A node's role:
//
//	    Open
//	      |
//	      v
//	+-----------+  campaign   +-----------+  elected   +--------+
//	| follower  |------------>| candidate |----------->| leader |
//	+-----------+             +-----------+            +--------+
//	  ^   ^   ^  step-down hold    |                     |   |  |
//	  |   |   +--------------------(-------- StepDown ---+   |  |
//	  |   |     (2 x lease, then   |                         |  |
//	  |   |      campaign again)   | session lost            |  |
//	  |   |                        v                         |  |
//	  |   |                   +--------+  session lost       |  |
//	  |   +-- new session ----|  lost  |<--------------------+  |
//	  |                       +--------+                        |
//	  +---------------- ctx ends: resign ------------------------+
//
// A follower and a candidate both watch the leader (Role.LeaderName); only
// the entry into leader yields Role{Leader: true}. "lost" is the session's
// lease expired, or (for a leader) not renewed for the lease less a margin,
// so that a leader cut off from etcd stops before etcd expires its key:
// Roles yields Leader:false at once, before a new session is made, so
// leader-only work stops first.
//
// Fencing: a leader's Fence is its election key and that key's create
// revision. Every shared write is one etcd transaction that compares the
// fence (Fence.Cmp); once the lease has expired the key is gone (or is
// another node's), so a deposed leader that still believes it leads, cut off
// by a partition, cannot change anything.
package election

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/shoal-lb/shoal/internal/config"
)

// ErrNotLeader is StepDown's answer on a node that does not lead.
var ErrNotLeader = errors.New("this node is not the leader")

// Role is a node's part in the pair, as Roles reports it.
type Role struct {
	Leader bool
	// Fence is set when Leader: every shared write compares it.
	Fence Fence
	// LeaderName is the leader's node name, "" while none is known.
	LeaderName string
	// Since is when this role began.
	Since time.Time
}

// Fence is a leader's election key and the key's create revision: while
// both hold, the leader's session is alive and no one else leads.
type Fence struct {
	Key string
	Rev int64
}

// Cmp is the comparison every fenced transaction makes.
func (f Fence) Cmp() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(f.Key), "=", f.Rev)
}

// Valid reports whether f is a leader's fence (the zero Fence is none).
func (f Fence) Valid() bool { return f.Key != "" && f.Rev > 0 }

// NodeInfo is what a node publishes about itself, on its lease.
type NodeInfo struct {
	Name     string `json:"name"`
	Priority int    `json:"priority"`
	// API is the admin API's TCP address, "" when it listens on the
	// socket only.
	API string `json:"api"`
	// VIP is keepalived's state: MASTER, BACKUP, FAULT, or "" without one.
	VIP string `json:"vip"`
	// HAProxySynced reports that the node's HAProxy has the servers the
	// shared instance records say, and its own checks have those in service
	// UP (so it can take the VIP); Servers is how many it has.
	HAProxySynced bool      `json:"haproxy_synced"`
	Servers       int       `json:"servers"`
	UpdatedAt     time.Time `json:"updated_at"`
}

// Status is the pair as one node sees it.
type Status struct {
	// Node is this node's name; Leader the leader's, "" when none.
	Node   string `json:"node"`
	Leader string `json:"leader"`
	// IsLeader is this node's own view (its Role).
	IsLeader bool `json:"is_leader"`
	// LeaderSince is when this node saw the current leader take over (the
	// leader's last keep-alive is not observable).
	LeaderSince time.Time `json:"leader_since"`
	// LeaseTTL is how long this node's session lease has left now.
	LeaseTTL time.Duration `json:"lease_ttl"`
	Lease    time.Duration `json:"lease"`
	// Nodes are the live nodes, by name.
	Nodes []NodeInfo `json:"nodes"`
}

// Node is this shoal node's membership of the HA pair.
type Node struct {
	cfg    config.HA
	log    *slog.Logger
	cli    *clientv3.Client
	prefix string
	roles  chan Role
	stepc  chan chan error
	// ctx bounds the sessions' keep-alives; Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	// campaigns are the election campaigns under way, which Close waits
	// for: a campaign whose context ends deletes its key with the client's
	// context, so while etcd is away it returns only once the client
	// closes, and a term does not wait for it.
	campaigns sync.WaitGroup

	mu          sync.Mutex
	sess        *concurrency.Session
	info        NodeInfo
	role        Role
	leader      string
	leaderSince time.Time
}

// Open connects to etcd, starts a session and registers this node. It fails
// within cfg.Etcd.DialTimeout when etcd cannot be reached, and refuses to
// start while a live node has this node's name or priority.
func Open(ctx context.Context, cfg config.HA, log *slog.Logger) (*Node, error) {
	cc := clientv3.Config{
		Endpoints:   cfg.Etcd.Endpoints,
		DialTimeout: cfg.Etcd.DialTimeout,
		Username:    cfg.Etcd.Username,
		// A lost member must not hang a request past the lease.
		DialKeepAliveTime:    cfg.Lease,
		DialKeepAliveTimeout: cfg.Lease,
		Logger:               zap.NewNop(),
	}
	if cfg.Etcd.PasswordFile != "" {
		pw, err := os.ReadFile(cfg.Etcd.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("read ha.etcd.password_file: %w", err)
		}
		cc.Password = strings.TrimRight(string(pw), "\r\n")
	}
	if cfg.Etcd.CAFile != "" || cfg.Etcd.CertFile != "" {
		info := transport.TLSInfo{TrustedCAFile: cfg.Etcd.CAFile, CertFile: cfg.Etcd.CertFile, KeyFile: cfg.Etcd.KeyFile}
		tc, err := info.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("ha.etcd TLS: %w", err)
		}
		tc.MinVersion = tls.VersionTLS12
		cc.TLS = tc
	}
	where := strings.Join(cfg.Etcd.Endpoints, ", ")
	cli, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("etcd unreachable at %s: %w", where, err)
	}
	n := &Node{
		cfg: cfg, log: log, cli: cli, prefix: cfg.EtcdPrefix(),
		roles: make(chan Role, 1), stepc: make(chan chan error),
		info: NodeInfo{Name: cfg.Node, Priority: cfg.Priority},
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	// clientv3.New does not wait for a connection: a read does, bounded
	// by the dial timeout.
	pctx, cancel := context.WithTimeout(ctx, cfg.Etcd.DialTimeout)
	_, err = cli.Get(pctx, n.prefix+"nodes/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	cancel()
	if err != nil {
		n.cancel()
		cli.Close()
		return nil, fmt.Errorf("etcd unreachable at %s: %w", where, err)
	}
	if err := n.register(ctx); err != nil {
		n.cancel()
		cli.Close()
		return nil, err
	}
	return n, nil
}

// register starts a session and puts this node's info on it, refusing a
// live namesake or a live node of the same priority. A namesake may be this
// node's previous process, killed less than a lease ago: its key expires
// with its lease, so register waits that long before it refuses.
func (n *Node) register(ctx context.Context) error {
	deadline := time.Now().Add(n.cfg.Lease + time.Second)
	for {
		err := n.conflict(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	sess, err := n.newSession(ctx)
	if err != nil {
		return fmt.Errorf("etcd session at %s: %w", strings.Join(n.cfg.Etcd.Endpoints, ", "), err)
	}
	n.mu.Lock()
	info := n.info
	n.mu.Unlock()
	info.UpdatedAt = time.Now()
	b, _ := json.Marshal(info)
	key := n.prefix + "nodes/" + n.cfg.Node
	prio := n.prefix + "priorities/" + strconv.Itoa(n.cfg.Priority)
	// The name and the priority are claimed in one transaction, so two nodes
	// starting at once cannot both have either (conflict's read above only
	// names the usual case early).
	tctx, cancel := context.WithTimeout(ctx, n.cfg.Etcd.DialTimeout)
	resp, err := n.cli.Txn(tctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0), clientv3.Compare(clientv3.CreateRevision(prio), "=", 0)).
		Then(clientv3.OpPut(key, string(b), clientv3.WithLease(sess.Lease())), clientv3.OpPut(prio, n.cfg.Node, clientv3.WithLease(sess.Lease()))).
		Else(clientv3.OpGet(prio)).Commit()
	cancel()
	if err == nil && !resp.Succeeded {
		err = fmt.Errorf("a live node named %q is registered in etcd cluster %q: another shoal with ha.node %s runs", n.cfg.Node, n.cfg.Cluster, n.cfg.Node)
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			err = fmt.Errorf("live node %s has priority %d too: ha.priority must differ between nodes", kvs[0].Value, n.cfg.Priority)
		}
	}
	if err != nil {
		sess.Close()
		return fmt.Errorf("register node %s: %w", n.cfg.Node, err)
	}
	n.mu.Lock()
	n.sess = sess
	n.mu.Unlock()
	return nil
}

// newSession grants a lease of cfg.Lease (waiting at most the dial timeout
// or until ctx ends) and keeps it alive until the node closes or etcd stops
// answering for the lease.
func (n *Node) newSession(ctx context.Context) (*concurrency.Session, error) {
	gctx, cancel := context.WithTimeout(ctx, n.cfg.Etcd.DialTimeout)
	defer cancel()
	l, err := n.cli.Grant(gctx, int64(n.cfg.Lease/time.Second))
	if err != nil {
		return nil, fmt.Errorf("grant a lease: %w", err)
	}
	return concurrency.NewSession(n.cli, concurrency.WithTTL(int(n.cfg.Lease/time.Second)), concurrency.WithLease(l.ID), concurrency.WithContext(n.ctx))
}

// conflict reports a live node with this node's name or priority.
func (n *Node) conflict(ctx context.Context) error {
	nodes, err := n.nodes(ctx)
	if err != nil {
		return err
	}
	for _, o := range nodes {
		switch {
		case o.Name == n.cfg.Node:
			return fmt.Errorf("a live node named %q is registered in etcd cluster %q: another shoal with ha.node %s runs", o.Name, n.cfg.Cluster, o.Name)
		case o.Priority == n.cfg.Priority:
			return fmt.Errorf("live node %s has priority %d too: ha.priority must differ between nodes", o.Name, o.Priority)
		}
	}
	return nil
}

// nodes reads every live node's info.
func (n *Node) nodes(ctx context.Context) ([]NodeInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Etcd.DialTimeout)
	defer cancel()
	resp, err := n.cli.Get(ctx, n.prefix+"nodes/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read the nodes from etcd: %w", err)
	}
	var out []NodeInfo
	for _, kv := range resp.Kvs {
		var info NodeInfo
		if json.Unmarshal(kv.Value, &info) != nil {
			continue // not a node's: ignored, as a stranger's key
		}
		out = append(out, info)
	}
	return out, nil
}

// Client is the node's etcd client, for the shared store.
func (n *Node) Client() *clientv3.Client { return n.cli }

// Prefix is the pair's key prefix, ending in a slash.
func (n *Node) Prefix() string { return n.prefix }

// Name is this node's name.
func (n *Node) Name() string { return n.cfg.Node }

// Roles yields each change of this node's role; a receiver that falls behind
// gets the latest. A Leader role with a Fence other than the last one seen is
// a new term, even without a Leader:false between.
func (n *Node) Roles() <-chan Role { return n.roles }

// Role is this node's current role.
func (n *Node) Role() Role {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.role
}

// setRole records r and offers it on Roles, replacing one not yet taken
// (Run is the only sender).
func (n *Node) setRole(r Role) {
	n.mu.Lock()
	same := n.role.Leader == r.Leader && n.role.Fence == r.Fence && n.role.LeaderName == r.LeaderName
	if same {
		n.mu.Unlock()
		return
	}
	n.role = r
	n.mu.Unlock()
	select {
	case <-n.roles:
	default:
	}
	n.roles <- r
}

// Run campaigns until ctx ends, making a new session whenever the current
// one is lost. On return this node does not lead, and has resigned.
func (n *Node) Run(ctx context.Context) {
	var hold time.Time // no campaign before this: a step-down lets another win
	for ctx.Err() == nil {
		sess := n.session(ctx)
		if sess == nil {
			return
		}
		hold = n.term(ctx, sess, hold)
	}
}

// session returns the live session, or makes one (retrying while etcd is
// unreachable); nil when ctx ends.
func (n *Node) session(ctx context.Context) *concurrency.Session {
	n.mu.Lock()
	sess := n.sess
	n.mu.Unlock()
	if sess != nil {
		select {
		case <-sess.Done():
		default:
			return sess
		}
	}
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, n.cfg.Lease) {
		s, err := n.newSession(ctx)
		if err == nil {
			n.mu.Lock()
			n.sess = s
			n.mu.Unlock()
			if err := n.Publish(ctx, NodeInfo{}); err != nil {
				n.log.Warn("ha: register node on the new session", "err", err)
			}
			n.log.Info("ha: new etcd session", "lease", fmt.Sprintf("%x", s.Lease()))
			return s
		}
		if ctx.Err() != nil {
			return nil
		}
		n.log.Warn("ha: etcd session", "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
	}
}

// term is one session's life: watch the leader, campaign (after hold),
// lead until the session is lost, ctx ends or StepDown. It returns the hold
// for the next term.
func (n *Node) term(ctx context.Context, sess *concurrency.Session, hold time.Time) time.Time {
	// The term's goroutines end with tctx: cancel runs before the wait
	// (defers run last first), whichever way the term ends.
	var wg sync.WaitGroup
	defer wg.Wait()
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lost := func() bool {
		select {
		case <-sess.Done():
			return true
		default:
			return false
		}
	}
	// The session's end cancels the term: a campaign in progress returns.
	wg.Go(func() {
		select {
		case <-sess.Done():
			cancel()
		case <-tctx.Done():
		}
	})
	el := concurrency.NewElection(sess, n.prefix+"leader")
	wg.Go(func() { n.observe(tctx, el) })

	for wait := time.Until(hold); wait > 0; wait = time.Until(hold) {
		select {
		case <-tctx.Done():
			n.lose(lost())
			return hold
		case reply := <-n.stepc:
			reply <- ErrNotLeader
		case <-time.After(wait):
		}
	}
	campaign := make(chan error, 1)
	n.campaigns.Go(func() { campaign <- el.Campaign(tctx, n.cfg.Node) })
	var err error
candidate:
	for {
		select {
		case reply := <-n.stepc:
			reply <- ErrNotLeader
		case err = <-campaign:
			break candidate
		case <-tctx.Done():
			// The session is lost or ctx ended: the campaign's key goes
			// with the lease, or when Close revokes it.
			err = tctx.Err()
			break candidate
		}
	}
	if err != nil {
		n.lose(lost())
		if !lost() && ctx.Err() == nil {
			n.log.Warn("ha: campaign", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
		return hold
	}
	fence := Fence{Key: el.Key(), Rev: el.Rev()}
	n.mu.Lock()
	n.leader, n.leaderSince = n.cfg.Node, time.Now()
	n.mu.Unlock()
	n.log.Info("ha: leader", "node", n.cfg.Node, "fence", fence.Key, "rev", fence.Rev)
	n.setRole(Role{Leader: true, Fence: fence, LeaderName: n.cfg.Node, Since: time.Now()})
	wg.Go(func() { n.watchdog(tctx, sess) })
	for {
		select {
		case <-tctx.Done():
			n.lose(lost())
			if !lost() {
				// ctx ended: hand over now rather than after the lease.
				rctx, rcancel := context.WithTimeout(context.Background(), n.cfg.Etcd.DialTimeout)
				_ = el.Resign(rctx)
				rcancel()
			}
			return hold
		case reply := <-n.stepc:
			// Leader:false first: leader-only work stops before the key
			// goes and another node may act.
			n.setRole(Role{LeaderName: "", Since: time.Now()})
			rctx, rcancel := context.WithTimeout(ctx, n.cfg.Etcd.DialTimeout)
			err := el.Resign(rctx)
			rcancel()
			if err != nil {
				// The key would stay with the live session, and no other
				// node could lead (this one campaigns again after its
				// hold): let the session's lease lapse, which takes the
				// key with it within the lease. Run makes a new session.
				n.log.Warn("ha: resign failed; letting the session's lease lapse", "err", err)
				sess.Orphan()
			}
			n.log.Info("ha: stepped down", "hold", 2*n.cfg.Lease)
			reply <- nil
			return time.Now().Add(2 * n.cfg.Lease)
		}
	}
}

// watchdog ends the session (as lost) once its lease has not been renewed
// for the lease less a margin: etcd expires it about then, and the client's
// own check of its keep-alives runs only once a second, so without this a
// deposed leader cut off from etcd could act a second past its lease.
func (n *Node) watchdog(ctx context.Context, sess *concurrency.Session) {
	renewed, err := n.cli.KeepAlive(ctx, sess.Lease())
	if err != nil {
		return // the session's own keep-alive reports the loss
	}
	margin := min(n.cfg.Lease/4, time.Second)
	last := time.Now()
	check := time.NewTicker(50 * time.Millisecond)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-renewed:
			if !ok {
				return
			}
			last = time.Now()
		case now := <-check.C:
			if now.Sub(last) > n.cfg.Lease-margin {
				n.log.Warn("ha: lease not renewed in time; giving up the leadership", "last_renewal", now.Sub(last).Round(time.Millisecond))
				// Orphan, not Close: a revoke could not reach etcd either.
				sess.Orphan()
				return
			}
		}
	}
}

// lose reports that this node does not lead; sessionLost logs why.
func (n *Node) lose(sessionLost bool) {
	n.mu.Lock()
	was := n.role.Leader
	name := n.leader // another node's, when observe has seen it take over
	if name == n.cfg.Node {
		name = ""
	}
	n.mu.Unlock()
	n.setRole(Role{LeaderName: name, Since: time.Now()})
	if was && sessionLost {
		n.log.Warn("ha: lost leadership: etcd session expired (lease not renewed in time)")
	}
}

// observe follows the leader key, so that a follower's Role names the
// leader and Status knows since when it leads.
func (n *Node) observe(ctx context.Context, el *concurrency.Election) {
	for resp := range el.Observe(ctx) {
		if len(resp.Kvs) == 0 {
			continue
		}
		name := string(resp.Kvs[0].Value)
		n.mu.Lock()
		if name != n.leader {
			n.leader, n.leaderSince = name, time.Now()
		}
		follow := !n.role.Leader && name != n.cfg.Node && n.role.LeaderName != name
		n.mu.Unlock()
		if follow {
			n.setRole(Role{LeaderName: name, Since: time.Now()})
		}
	}
}

// StepDown resigns this node's leadership; it does not campaign again for
// twice the lease, so that another node wins. ErrNotLeader when it does
// not lead.
func (n *Node) StepDown(ctx context.Context) error {
	if !n.Role().Leader {
		return ErrNotLeader
	}
	reply := make(chan error, 1)
	select {
	case n.stepc <- reply:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Publish stores this node's info under its lease; Name and Priority are
// the node's own. The zero NodeInfo republishes the last one.
func (n *Node) Publish(ctx context.Context, info NodeInfo) error {
	n.mu.Lock()
	if info != (NodeInfo{}) {
		n.info = info
	}
	n.info.Name, n.info.Priority = n.cfg.Node, n.cfg.Priority
	n.info.UpdatedAt = time.Now()
	info, sess := n.info, n.sess
	n.mu.Unlock()
	if sess == nil {
		return errors.New("no etcd session")
	}
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Etcd.DialTimeout)
	defer cancel()
	if _, err := n.cli.Put(ctx, n.prefix+"nodes/"+n.cfg.Node, string(b), clientv3.WithLease(sess.Lease())); err != nil {
		return fmt.Errorf("publish node %s: %w", n.cfg.Node, err)
	}
	return nil
}

// Status reads the pair's state from etcd.
func (n *Node) Status(ctx context.Context) (Status, error) {
	// Bounded below the track scripts' 1 s: a node cut from etcd still
	// answers what it knows itself (Local) at once.
	ctx, cancel := context.WithTimeout(ctx, min(n.cfg.Etcd.DialTimeout, 500*time.Millisecond))
	defer cancel()
	nodes, err := n.nodes(ctx)
	if err != nil {
		return Status{}, err
	}
	slices.SortFunc(nodes, func(a, b NodeInfo) int { return strings.Compare(a.Name, b.Name) })
	st := Status{Node: n.cfg.Node, Lease: n.cfg.Lease, Nodes: nodes}
	// The leader is the election key with the lowest create revision.
	resp, err := n.cli.Get(ctx, n.prefix+"leader/", clientv3.WithFirstCreate()...)
	if err != nil {
		return Status{}, fmt.Errorf("read the leader from etcd: %w", err)
	}
	if len(resp.Kvs) > 0 {
		st.Leader = string(resp.Kvs[0].Value)
	}
	n.mu.Lock()
	st.IsLeader = n.role.Leader
	if st.Leader != "" && st.Leader == n.leader {
		st.LeaderSince = n.leaderSince
	}
	sess := n.sess
	n.mu.Unlock()
	if sess != nil {
		if ttl, err := n.cli.TimeToLive(ctx, sess.Lease()); err == nil && ttl.TTL > 0 {
			st.LeaseTTL = time.Duration(ttl.TTL) * time.Second
		}
	}
	return st, nil
}

// Local is what this node knows without etcd: its name, its own role and
// the leader it last saw (none while it does not lead and etcd does not
// answer: it cannot tell).
func (n *Node) Local() Status {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := Status{Node: n.cfg.Node, Lease: n.cfg.Lease, IsLeader: n.role.Leader}
	if n.role.Leader {
		st.Leader, st.LeaderSince = n.cfg.Node, n.leaderSince
	}
	return st
}

// Close ends the session (its keys go at once, not after the lease) and the
// client. Call it after Run has returned.
func (n *Node) Close() {
	n.mu.Lock()
	sess := n.sess
	n.sess = nil
	n.mu.Unlock()
	if sess != nil {
		_ = sess.Close()
	}
	n.cancel()
	n.cli.Close()
	n.campaigns.Wait()
}
