// Package etcdstore keeps the shared state of an HA pair in etcd: the
// groups' desired sizes and cooldowns, the instance records, the jobs and
// the decisions, with the method set of *store.Store for that part, so that
// the consumers' small store interfaces take either.
//
// Every write is one transaction that compares the leader's fence
// (election.Fence.Cmp) first: a node that no longer leads, even one that has not
// noticed yet, changes nothing and gets ErrFenced. The one exception is
// InsertNodeEvent: what happened to one node (its HAProxy restarted, a
// host or certificate it watches) is recorded by that node, leader or not. Guard is that
// comparison alone: the groups pass it just before each start, stop and
// deletion they ask a provider for. Reads are not fenced: a standby reads
// the same state (and watches the instances to mirror them).
//
// Keys, under <prefix>state/, values JSON:
//
//	groups/<name>                 store.GroupState
//	instances/<name>              store.Instance
//	jobs/<id, 20 digits>          job.Job; jobseq holds the last id
//	decisions/<group>/<id, 20>    decision.Record; decisionseq the last id
//	lastdecision/<group>/<outcome>/<rule>   time of the newest such decision
//	usage/<group>/<end, Unix ns, 20 digits>/<name>   store.Usage of an ended instance
package etcdstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/ha/election"
	"github.com/shoal-lb/shoal/internal/job"
	"github.com/shoal-lb/shoal/internal/store"
)

// ErrFenced reports a write refused because this node does not hold the
// leader's fence (any more); it is store.ErrFenced, which the groups know.
var ErrFenced = store.ErrFenced

// Bounds: etcd keeps every value in memory and refuses transactions of more
// than 128 operations by default.
const (
	maxJobs      = 10000
	maxDecisions = 1000 // per group
	maxTxnOps    = 100
	// usageKept is how long an ended instance's usage is kept, as in
	// SQLite: today's instance-hours need a day of it.
	usageKept = 48 * time.Hour
	// casTries bounds the retries of a counter update that lost a race
	// (only a second writer with the same fence could cause one).
	casTries = 5
	// requestTimeout bounds each read and transaction, as etcdctl's
	// --command-timeout does: the client waits for a connection as long as
	// its context allows, and a job or a demotion waiting on one would
	// hang through a partition.
	requestTimeout = 5 * time.Second
)

// Store is the shared state in etcd. It is safe for concurrent use.
type Store struct {
	cli    *clientv3.Client
	prefix string // <cluster prefix>state/

	mu    sync.Mutex
	fence election.Fence
}

// New returns the store of the pair whose keys start with prefix (ending in
// a slash). Until SetFence, every write fails with ErrFenced.
func New(cli *clientv3.Client, prefix string) *Store {
	return &Store{cli: cli, prefix: prefix + "state/"}
}

// read is the client's Get, bounded by requestTimeout.
func (s *Store) read(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return s.cli.Get(ctx, key, opts...)
}

// SetFence makes f the fence of the writes from now on; the zero Fence
// refuses them all (a standby's, or a leader's after it lost its lease).
func (s *Store) SetFence(f election.Fence) {
	s.mu.Lock()
	s.fence = f
	s.mu.Unlock()
}

func (s *Store) currentFence() (election.Fence, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.fence.Valid() {
		return election.Fence{}, store.ErrNoFence
	}
	return s.fence, nil
}

// commit runs ops if the fence and the extra comparisons hold. It reports
// ok=false when only an extra comparison failed, and ErrFenced when the
// fence did.
func (s *Store) commit(ctx context.Context, cmps []clientv3.Cmp, ops ...clientv3.Op) (ok bool, err error) {
	f, err := s.currentFence()
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := s.cli.Txn(ctx).If(append([]clientv3.Cmp{f.Cmp()}, cmps...)...).Then(ops...).
		Else(clientv3.OpGet(f.Key, clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return false, err
	}
	if resp.Succeeded {
		return true, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 || kvs[0].CreateRevision != f.Rev {
		return false, ErrFenced
	}
	return false, nil
}

// Guard is the fenced transaction a provider action waits for (see
// group.stateStore): nil only if this node held the leader's fence when
// etcd answered, ErrFenced if it does not. A transaction of comparisons
// only is served as a linearizable read: nothing is written, and it holds
// the same fence every write compares.
func (s *Store) Guard(ctx context.Context) error {
	_, err := s.commit(ctx, nil)
	if err != nil && !errors.Is(err, ErrFenced) {
		return fmt.Errorf("check the fence: %w", err)
	}
	return err
}

func (s *Store) put(ctx context.Context, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = s.commit(ctx, nil, clientv3.OpPut(key, string(b)))
	return err
}

func (s *Store) get(ctx context.Context, key string, v any) (bool, error) {
	resp, err := s.read(ctx, key)
	if err != nil {
		return false, err
	}
	if len(resp.Kvs) == 0 {
		return false, nil
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, v); err != nil {
		return false, fmt.Errorf("decode %s: %w", key, err)
	}
	return true, nil
}

// GroupState returns the state of the named group; ok is false if none was stored.
func (s *Store) GroupState(ctx context.Context, name string) (g store.GroupState, ok bool, err error) {
	ok, err = s.get(ctx, s.prefix+"groups/"+name, &g)
	if err != nil {
		return store.GroupState{}, false, fmt.Errorf("read group state %q: %w", name, err)
	}
	return g, ok, nil
}

// PutGroupState creates or replaces the state of g.Name.
func (s *Store) PutGroupState(ctx context.Context, g store.GroupState) error {
	if err := s.put(ctx, s.prefix+"groups/"+g.Name, g); err != nil {
		return fmt.Errorf("write group state %q: %w", g.Name, err)
	}
	return nil
}

// PutInstance creates or replaces the instance named in.Name and sets its UpdatedAt to now.
func (s *Store) PutInstance(ctx context.Context, in store.Instance) error {
	in.UpdatedAt = time.Now().UTC()
	if err := s.put(ctx, s.prefix+"instances/"+in.Name, in); err != nil {
		return fmt.Errorf("write instance %q: %w", in.Name, err)
	}
	return nil
}

// DeleteInstance removes the named instance, keeping what it ran for (from
// its start until now) as its usage; removing a missing one is not an
// error.
func (s *Store) DeleteInstance(ctx context.Context, name string) error {
	key := s.prefix + "instances/" + name
	var in store.Instance
	found, err := s.get(ctx, key, &in)
	if err != nil {
		return fmt.Errorf("delete instance %q: %w", name, err)
	}
	ops := []clientv3.Op{clientv3.OpDelete(key)}
	if found && !in.StartedAt.IsZero() {
		u, err := s.usageOps(in.Group, store.Usage{Name: name, Started: in.StartedAt, Ended: time.Now().UTC(), Provider: in.Provider})
		if err != nil {
			return fmt.Errorf("delete instance %q: %w", name, err)
		}
		ops = append(ops, u...)
	}
	if _, err := s.commit(ctx, nil, ops...); err != nil {
		return fmt.Errorf("delete instance %q: %w", name, err)
	}
	return nil
}

// AddUsage records what an instance that was never stored ran for (a
// cloud server whose boot failed is billed all the same).
func (s *Store) AddUsage(ctx context.Context, group string, u store.Usage) error {
	ops, err := s.usageOps(group, u)
	if err == nil {
		_, err = s.commit(ctx, nil, ops...)
	}
	if err != nil {
		return fmt.Errorf("record usage of instance %q: %w", u.Name, err)
	}
	return nil
}

// usageOps put u under its end and prune what is older than usageKept.
func (s *Store) usageOps(group string, u store.Usage) ([]clientv3.Op, error) {
	b, err := json.Marshal(u)
	if err != nil {
		return nil, err
	}
	dir := s.prefix + "usage/" + group + "/"
	return []clientv3.Op{clientv3.OpPut(dir+id(u.Ended.UnixNano())+"/"+u.Name, string(b)),
		clientv3.OpDelete(dir, clientv3.WithRange(dir+id(u.Ended.Add(-usageKept).UnixNano())))}, nil
}

// Usage returns the usage of group's instances that ended after since
// (at most usageKept ago).
func (s *Store) Usage(ctx context.Context, group string, since time.Time) ([]store.Usage, error) {
	dir := s.prefix + "usage/" + group + "/"
	resp, err := s.read(ctx, dir+id(since.UnixNano()+1), clientv3.WithRange(clientv3.GetPrefixRangeEnd(dir)))
	if err != nil {
		return nil, fmt.Errorf("read usage of group %s: %w", group, err)
	}
	out := make([]store.Usage, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var u store.Usage
		if err := json.Unmarshal(kv.Value, &u); err != nil {
			return nil, fmt.Errorf("read usage of group %s: %s: %w", group, kv.Key, err)
		}
		out = append(out, u)
	}
	return out, nil
}

// Instances returns all stored instances ordered by group, then index.
func (s *Store) Instances(ctx context.Context) ([]store.Instance, error) {
	resp, err := s.read(ctx, s.prefix+"instances/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	return decodeInstances(resp)
}

func decodeInstances(resp *clientv3.GetResponse) ([]store.Instance, error) {
	out := make([]store.Instance, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var in store.Instance
		if err := json.Unmarshal(kv.Value, &in); err != nil {
			return nil, fmt.Errorf("list instances: %s: %w", kv.Key, err)
		}
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b store.Instance) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Index, b.Index), cmp.Compare(a.Name, b.Name))
	})
	return out, nil
}

// WatchInstances sends the full set of instance records now and after each
// change, until ctx ends (then it closes the channel). A receiver that falls
// behind gets the newest set.
func (s *Store) WatchInstances(ctx context.Context) <-chan []store.Instance {
	out := make(chan []store.Instance, 1)
	send := func(set []store.Instance) {
		select {
		case <-out:
		default:
		}
		out <- set
	}
	go func() {
		defer close(out)
		for delay := 100 * time.Millisecond; ctx.Err() == nil; delay = min(2*delay, 5*time.Second) {
			resp, err := s.read(ctx, s.prefix+"instances/", clientv3.WithPrefix())
			if err == nil {
				set, derr := decodeInstances(resp)
				if derr == nil {
					send(set)
					delay = 100 * time.Millisecond
					s.follow(ctx, resp.Header.Revision+1, send)
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(delay):
			}
		}
	}()
	return out
}

// follow re-reads the instances after each change from rev on, until the
// watch ends (ctx, or etcd compacted or lost it: the caller lists again).
func (s *Store) follow(ctx context.Context, rev int64, send func([]store.Instance)) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range s.cli.Watch(wctx, s.prefix+"instances/", clientv3.WithPrefix(), clientv3.WithRev(rev)) {
		if wr.Err() != nil {
			return
		}
		resp, err := s.read(ctx, s.prefix+"instances/", clientv3.WithPrefix())
		if err != nil {
			return
		}
		set, err := decodeInstances(resp)
		if err != nil {
			return
		}
		send(set)
	}
}

// id is a counter's value as a key's last part, sorting as numbers do.
func id(n int64) string { return fmt.Sprintf("%020d", n) }

// committer runs ops if cmps hold (and, for commit, the fence): ok=false
// when only cmps failed.
type committer func(ctx context.Context, cmps []clientv3.Cmp, ops ...clientv3.Op) (ok bool, err error)

// commitUnfenced is commit without the fence, for InsertNodeEvent.
func (s *Store) commitUnfenced(ctx context.Context, cmps []clientv3.Cmp, ops ...clientv3.Op) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// next reserves the next value of the counter at key, in one fenced
// transaction with the ops build makes for it.
func (s *Store) next(ctx context.Context, key string, build func(n int64) ([]clientv3.Op, error)) (int64, error) {
	return s.nextWith(ctx, s.commit, key, build)
}

// nextWith is next, committed by commit.
func (s *Store) nextWith(ctx context.Context, commit committer, key string, build func(n int64) ([]clientv3.Op, error)) (int64, error) {
	for range casTries {
		resp, err := s.read(ctx, key)
		if err != nil {
			return 0, err
		}
		var last, rev int64
		if len(resp.Kvs) > 0 {
			rev = resp.Kvs[0].ModRevision
			if last, err = strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64); err != nil {
				return 0, fmt.Errorf("%s: %w", key, err)
			}
		}
		n := last + 1
		ops, err := build(n)
		if err != nil {
			return 0, err
		}
		ops = append(ops, clientv3.OpPut(key, strconv.FormatInt(n, 10)))
		ok, err := commit(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}, ops...)
		if err != nil {
			return 0, err
		}
		if ok {
			return n, nil
		}
	}
	return 0, fmt.Errorf("%s: changed under %d tries", key, casTries)
}

// InsertJob stores j as a new job and sets j.ID. Ids are never reused. Only
// the newest 10,000 jobs are kept.
func (s *Store) InsertJob(ctx context.Context, j *job.Job) error {
	n, err := s.next(ctx, s.prefix+"jobseq", func(n int64) ([]clientv3.Op, error) {
		stored := *j
		stored.ID = strconv.FormatInt(n, 10)
		b, err := json.Marshal(stored)
		if err != nil {
			return nil, err
		}
		ops := []clientv3.Op{clientv3.OpPut(s.prefix+"jobs/"+id(n), string(b))}
		if n > maxJobs {
			ops = append(ops, clientv3.OpDelete(s.prefix+"jobs/", clientv3.WithRange(s.prefix+"jobs/"+id(n-maxJobs+1))))
		}
		return ops, nil
	})
	if err != nil {
		return fmt.Errorf("insert job: %w", err)
	}
	j.ID = strconv.FormatInt(n, 10)
	return nil
}

// jobKey is the key of the job with the decimal id, false for no job's.
func (s *Store) jobKey(jid string) (string, bool) {
	n, err := strconv.ParseInt(jid, 10, 64)
	if err != nil || n <= 0 {
		return "", false
	}
	return s.prefix + "jobs/" + id(n), true
}

// UpdateJob replaces the stored job j.ID with j, or returns store.ErrNotFound.
func (s *Store) UpdateJob(ctx context.Context, j job.Job) error {
	key, valid := s.jobKey(j.ID)
	if !valid {
		return fmt.Errorf("update job %q: %w", j.ID, store.ErrNotFound)
	}
	b, err := json.Marshal(j)
	if err != nil {
		return fmt.Errorf("update job %s: %w", j.ID, err)
	}
	ok, err := s.commit(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), ">", 0)}, clientv3.OpPut(key, string(b)))
	if err != nil {
		return fmt.Errorf("update job %s: %w", j.ID, err)
	}
	if !ok {
		return fmt.Errorf("update job %s: %w", j.ID, store.ErrNotFound)
	}
	return nil
}

// Job returns the job with the given id, or store.ErrNotFound.
func (s *Store) Job(ctx context.Context, jid string) (job.Job, error) {
	key, valid := s.jobKey(jid)
	if !valid {
		return job.Job{}, fmt.Errorf("read job %q: %w", jid, store.ErrNotFound)
	}
	var j job.Job
	ok, err := s.get(ctx, key, &j)
	if err != nil {
		return job.Job{}, fmt.Errorf("read job %s: %w", jid, err)
	}
	if !ok {
		return job.Job{}, fmt.Errorf("read job %s: %w", jid, store.ErrNotFound)
	}
	return j, nil
}

// Jobs returns up to limit jobs of group ("" for all groups), newest first.
// A limit of 0 or less means no limit.
func (s *Store) Jobs(ctx context.Context, group string, limit int) ([]job.Job, error) {
	var out []job.Job
	end := clientv3.GetPrefixRangeEnd(s.prefix + "jobs/")
	// Pages from the newest back, until limit of the group's are found.
	for {
		resp, err := s.read(ctx, s.prefix+"jobs/", clientv3.WithRange(end),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(500))
		if err != nil {
			return nil, fmt.Errorf("list jobs: %w", err)
		}
		for _, kv := range resp.Kvs {
			var j job.Job
			if err := json.Unmarshal(kv.Value, &j); err != nil {
				return nil, fmt.Errorf("list jobs: %s: %w", kv.Key, err)
			}
			if group != "" && j.Group != group {
				continue
			}
			out = append(out, j)
			if limit > 0 && len(out) == limit {
				return out, nil
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out, nil
		}
		end = string(resp.Kvs[len(resp.Kvs)-1].Key)
	}
}

// FailUnfinishedJobs marks every accepted or running job as failed with
// reason, finished at at, and returns them ordered by id: a new leader's
// record of the jobs its predecessor left.
func (s *Store) FailUnfinishedJobs(ctx context.Context, reason string, at time.Time) ([]job.Job, error) {
	all, err := s.Jobs(ctx, "", 0)
	if err != nil {
		return nil, fmt.Errorf("fail unfinished jobs: %w", err)
	}
	var failed []job.Job
	var ops []clientv3.Op
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		_, err := s.commit(ctx, nil, ops...)
		ops = ops[:0]
		return err
	}
	for _, j := range slices.Backward(all) {
		if j.State != job.Accepted && j.State != job.Running {
			continue
		}
		j.State, j.Reason = job.Failed, reason
		fin := at
		j.FinishedAt = &fin
		b, err := json.Marshal(j)
		if err != nil {
			return nil, fmt.Errorf("fail unfinished jobs: %w", err)
		}
		key, _ := s.jobKey(j.ID)
		ops = append(ops, clientv3.OpPut(key, string(b)))
		failed = append(failed, j)
		if len(ops) == maxTxnOps {
			if err := flush(); err != nil {
				return nil, fmt.Errorf("fail unfinished jobs: %w", err)
			}
		}
	}
	if err := flush(); err != nil {
		return nil, fmt.Errorf("fail unfinished jobs: %w", err)
	}
	return failed, nil
}

// InsertDecision stores d and sets d.ID. Only the newest maxDecisions of
// each group are kept.
func (s *Store) InsertDecision(ctx context.Context, d *decision.Record) error {
	return s.insertDecision(ctx, s.commit, d)
}

// InsertNodeEvent stores d, an event of this node's own (no group), as
// InsertDecision does but whether this node leads or not: both nodes'
// events are listed together, numbered by the same counter.
func (s *Store) InsertNodeEvent(ctx context.Context, d *decision.Record) error {
	if d.Group != "" {
		return fmt.Errorf("insert node event: group %q: a node's events belong to no group", d.Group)
	}
	return s.insertDecision(ctx, s.commitUnfenced, d)
}

func (s *Store) insertDecision(ctx context.Context, commit committer, d *decision.Record) error {
	dir := s.prefix + "decisions/" + d.Group + "/"
	n, err := s.nextWith(ctx, commit, s.prefix+"decisionseq", func(n int64) ([]clientv3.Op, error) {
		stored := *d
		stored.ID = n
		b, err := json.Marshal(stored)
		if err != nil {
			return nil, err
		}
		at, _ := d.Time.UTC().MarshalText()
		return []clientv3.Op{
			clientv3.OpPut(dir+id(n), string(b)),
			clientv3.OpPut(s.prefix+"lastdecision/"+d.Group+"/"+string(d.Outcome)+"/"+d.Rule, string(at)),
		}, nil
	})
	if err != nil {
		return fmt.Errorf("insert decision: %w", err)
	}
	d.ID = n
	if err := s.prune(ctx, commit, dir); err != nil {
		return fmt.Errorf("insert decision: prune old decisions: %w", err)
	}
	return nil
}

// prune deletes the oldest decisions under dir beyond maxDecisions, in
// batches of a tenth so that it runs seldom.
func (s *Store) prune(ctx context.Context, commit committer, dir string) error {
	resp, err := s.read(ctx, dir, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return err
	}
	over := resp.Count - maxDecisions
	if over < maxDecisions/10 {
		return nil
	}
	old, err := s.read(ctx, dir, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend), clientv3.WithLimit(over))
	if err != nil || len(old.Kvs) == 0 {
		return err
	}
	last := string(old.Kvs[len(old.Kvs)-1].Key)
	_, err = commit(ctx, nil, clientv3.OpDelete(dir, clientv3.WithRange(last+"\x00")))
	return err
}

// Decisions returns the decisions q selects, oldest first.
func (s *Store) Decisions(ctx context.Context, q store.DecisionQuery) ([]decision.Record, error) {
	dirs := []string{s.prefix + "decisions/"}
	if q.Group != "" {
		dirs = []string{s.prefix + "decisions/" + q.Group + "/"}
		if q.Ungrouped {
			// Host, HAProxy and certificate events are stored under
			// group "".
			dirs = append(dirs, s.prefix+"decisions//")
		}
	}
	var out []decision.Record
	for _, dir := range dirs {
		opts := []clientv3.OpOption{clientv3.WithPrefix()}
		from := dir
		if q.Group != "" && q.AfterID > 0 {
			from = dir + id(q.AfterID+1)
			opts = []clientv3.OpOption{clientv3.WithRange(clientv3.GetPrefixRangeEnd(dir))}
		}
		resp, err := s.read(ctx, from, opts...)
		if err != nil {
			return nil, fmt.Errorf("list decisions: %w", err)
		}
		for _, kv := range resp.Kvs {
			var d decision.Record
			if err := json.Unmarshal(kv.Value, &d); err != nil {
				return nil, fmt.Errorf("list decisions: %s: %w", kv.Key, err)
			}
			if d.ID <= q.AfterID || (!q.Since.IsZero() && d.Time.Before(q.Since)) {
				continue
			}
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b decision.Record) int { return cmp.Compare(a.ID, b.ID) })
	if q.Limit > 0 && len(out) > q.Limit {
		if q.AfterID > 0 {
			out = out[:q.Limit]
		} else {
			out = out[len(out)-q.Limit:]
		}
	}
	return out, nil
}

// LastDecisionTimes returns, for each rule of group, when its newest decision with the
// given outcome was made: the autoscaler's per-rule cooldowns start there.
func (s *Store) LastDecisionTimes(ctx context.Context, group string, outcome decision.Outcome) (map[string]time.Time, error) {
	dir := s.prefix + "lastdecision/" + group + "/" + string(outcome) + "/"
	resp, err := s.read(ctx, dir, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read last decisions of %s: %w", group, err)
	}
	out := map[string]time.Time{}
	for _, kv := range resp.Kvs {
		var t time.Time
		if err := t.UnmarshalText(kv.Value); err != nil {
			return nil, fmt.Errorf("read last decisions of %s: %s: %w", group, kv.Key, err)
		}
		out[string(kv.Key[len(dir):])] = t
	}
	return out, nil
}
