package ha

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/event"
	"github.com/shoal-lb/shoal/internal/job"
	"github.com/shoal-lb/shoal/internal/store"
	"github.com/shoal-lb/shoal/internal/store/etcdstore"
)

// Store is an HA node's store: the pair's shared state in etcd (fenced
// writes: group states, instances and their usage, jobs, decisions), the
// rest (notification queue, start delays) in the node's SQLite, which also
// queues the notifications of what etcd records. It has the method set of
// *store.Store that the groups, the jobs and the policies use.
type Store struct {
	*store.Store
	shared *etcdstore.Store
	log    *slog.Logger
}

func (s *Store) GroupState(ctx context.Context, name string) (store.GroupState, bool, error) {
	return s.shared.GroupState(ctx, name)
}

func (s *Store) PutGroupState(ctx context.Context, g store.GroupState) error {
	return s.shared.PutGroupState(ctx, g)
}

func (s *Store) PutInstance(ctx context.Context, in store.Instance) error {
	return s.shared.PutInstance(ctx, in)
}

func (s *Store) DeleteInstance(ctx context.Context, name string) error {
	return s.shared.DeleteInstance(ctx, name)
}

// Guard is etcd's fence check: a provider action of the leader's waits
// for it (the SQLite's own Guard, a single node's, always passes).
func (s *Store) Guard(ctx context.Context) error { return s.shared.Guard(ctx) }

func (s *Store) Instances(ctx context.Context) ([]store.Instance, error) {
	return s.shared.Instances(ctx)
}

func (s *Store) Usage(ctx context.Context, group string, since time.Time) ([]store.Usage, error) {
	return s.shared.Usage(ctx, group, since)
}

func (s *Store) AddUsage(ctx context.Context, group string, u store.Usage) error {
	return s.shared.AddUsage(ctx, group, u)
}

func (s *Store) InsertJob(ctx context.Context, j *job.Job) error {
	if err := s.shared.InsertJob(ctx, j); err != nil {
		return err
	}
	s.notify(ctx, "", *j)
	return nil
}

func (s *Store) UpdateJob(ctx context.Context, j job.Job) error {
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
func (s *Store) notify(ctx context.Context, was job.State, j job.Job) {
	if ev, ok := event.FromJob(was, j); ok {
		if err := s.Store.Notify(ctx, ev); err != nil {
			s.log.Warn("queueing a job's notification failed", "job", j.ID, "err", err)
		}
	}
}

func (s *Store) Job(ctx context.Context, id string) (job.Job, error) { return s.shared.Job(ctx, id) }

func (s *Store) Jobs(ctx context.Context, group string, limit int) ([]job.Job, error) {
	return s.shared.Jobs(ctx, group, limit)
}

func (s *Store) FailUnfinishedJobs(ctx context.Context, reason string, at time.Time) ([]job.Job, error) {
	return s.shared.FailUnfinishedJobs(ctx, reason, at)
}

// InsertDecision records d in etcd (fenced), then in the local SQLite,
// which queues its notification; d keeps etcd's id.
func (s *Store) InsertDecision(ctx context.Context, d *decision.Record) error {
	if err := s.shared.InsertDecision(ctx, d); err != nil {
		return err
	}
	local := *d
	if err := s.Store.InsertDecision(ctx, &local); err != nil {
		return fmt.Errorf("local copy of decision %d: %w", d.ID, err)
	}
	return nil
}

func (s *Store) Decisions(ctx context.Context, q store.DecisionQuery) ([]decision.Record, error) {
	return s.shared.Decisions(ctx, q)
}

func (s *Store) LastDecisionTimes(ctx context.Context, group string, outcome decision.Outcome) (map[string]time.Time, error) {
	return s.shared.LastDecisionTimes(ctx, group, outcome)
}

// NodeEvents records an HA node's own events (its HAProxy restarted, a host
// or certificate it watches, its DNS listeners) in etcd, whether the node
// leads or not, so that `shoal events` and the dashboard on either node
// list both nodes' events; each names its node. The local SQLite copy
// queues the notification, as Store.InsertDecision's does.
type NodeEvents struct {
	s    *Store
	node string
}

// nodeEventTimeout bounds the etcd part of recording a node's event: the
// callers (HAProxy's supervisor, after a restart) wait for it, and a node
// cut from etcd still has its local copy and notification.
const nodeEventTimeout = 2 * time.Second

func (e NodeEvents) InsertDecision(ctx context.Context, d *decision.Record) error {
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

func (s *Store) CordonHost(ctx context.Context, h store.CordonedHost) (bool, error) {
	return s.shared.CordonHost(ctx, h)
}

func (s *Store) UncordonHost(ctx context.Context, provider, host string) (bool, error) {
	return s.shared.UncordonHost(ctx, provider, host)
}

func (s *Store) SetHostDraining(ctx context.Context, provider, host string, draining bool) (bool, error) {
	return s.shared.SetHostDraining(ctx, provider, host, draining)
}

func (s *Store) CordonedHosts(ctx context.Context) ([]store.CordonedHost, error) {
	return s.shared.CordonedHosts(ctx)
}
