package core

import (
	"context"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/job"
	"github.com/shoal-lb/shoal/internal/store"
)

// sharedStore is the state the groups, the jobs and the policies keep:
// *store.Store on a single node, *ha.Store on a node of an HA pair.
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
	AddUsage(ctx context.Context, group string, u store.Usage) error
	AddStartDelay(ctx context.Context, group, provider string, at time.Time, d time.Duration) error
	StartDelays(ctx context.Context, group, provider string) ([]time.Duration, error)
	Guard(ctx context.Context) error
	CordonHost(ctx context.Context, h store.CordonedHost) (bool, error)
	UncordonHost(ctx context.Context, provider, host string) (bool, error)
	SetHostDraining(ctx context.Context, provider, host string, draining bool) (bool, error)
	CordonedHosts(ctx context.Context) ([]store.CordonedHost, error)
}

// eventRecorder records an event: the node's SQLite store on a single
// node, ha.NodeEvents on a node of an HA pair.
type eventRecorder interface {
	InsertDecision(ctx context.Context, d *decision.Record) error
}

// haCore is what an HA node (package ha) drives: the groups, which run only
// while it leads, under the reload lock.
type haCore struct{ s *serving }

func (h haCore) Lock()                  { h.s.c.reloadMu.Lock() }
func (h haCore) Unlock()                { h.s.c.reloadMu.Unlock() }
func (h haCore) Config() *config.Config { return h.s.c.cfg }

// Lead restores the groups from the shared records and runs their
// reconcilers; restore adopts exactly the instances the records name and
// stops only strays of those groups' providers.
func (h haCore) Lead(ctx context.Context) error {
	c := h.s.c
	// The pair's cordons may have changed while the other node led.
	if err := c.provs.cordons.load(ctx, h.s.shared); err != nil {
		return err
	}
	groups, err := restore(ctx, c.cfg, h.s.shared, c.lb, c.provs, c.log)
	if err != nil {
		return err
	}
	h.s.reg.lead(groups, nil)
	return nil
}

// RunPolicies runs the groups' policies (their recycling runs since Lead)
// and resumes the host drains the previous leader left, once the jobs it
// left unfinished are failed: their replace jobs are this leader's.
func (h haCore) RunPolicies() {
	h.s.reg.start(h.s.auto.policy)
	h.s.c.resumeDrains(h.s.srvCtx)
}

// StopPolicies stops the policies and recycling, and ends the host drains
// (still recorded as running, for the next leader) before the jobs are
// interrupted.
func (h haCore) StopPolicies() {
	h.s.c.drains.interrupt(errNotLeading)
	h.s.reg.stopPolicies()
}
func (h haCore) Follow()       { h.s.reg.follow() }
func (h haCore) Standby() bool { return h.s.reg.Standby() }

func (h haCore) Servers() int {
	n := 0
	for _, g := range h.s.reg.All() {
		n += len(g.Targets())
	}
	return n
}
