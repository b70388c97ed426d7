package policy

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/jobrun"
	"github.com/shoal-lb/shoal/internal/metrics"
	"github.com/shoal-lb/shoal/internal/store"
)

// Submitter files jobs: jobrun.Manager, so that the policy's requests go
// through the same path, checks and records as the CLI's and gRPC's.
type Submitter interface {
	Submit(ctx context.Context, req jobrun.Request) (jobrun.Job, error)
}

// Runner evaluates one group's policy every interval, submits what it
// decides and records each decision.
type Runner struct {
	Group   config.Group
	Metrics Metrics
	Jobs    Submitter
	// State returns the group's desired size, cooldowns and running job;
	// the Runner fills in RuleJobs itself.
	State func() State
	Store DecisionStore
	Log   *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Observe, if set, is told of every recorded decision and how long each
	// evaluation took (for shoal's Prometheus metrics).
	Observe Observer
}

// DecisionStore is where a Runner records its decisions and, when it
// starts, reads back the last ones. *store.Store is one.
type DecisionStore interface {
	InsertDecision(ctx context.Context, d *decision.Record) error
	Decisions(ctx context.Context, q store.DecisionQuery) ([]decision.Record, error)
	LastDecisionTimes(ctx context.Context, group string, outcome decision.Outcome) (map[string]time.Time, error)
}

// Observer counts what a Runner does.
type Observer interface {
	ObserveDecision(group string, outcome decision.Outcome)
	ObserveEvaluation(group string, d time.Duration)
}

// Run evaluates until ctx ends. It returns an error only if it cannot start:
// a failure to record a decision is logged and the loop goes on.
func (r *Runner) Run(ctx context.Context) error {
	l, err := r.start(ctx)
	if err != nil {
		return err
	}
	now := r.Now
	if now == nil {
		now = time.Now
	}
	tick := time.NewTicker(r.Group.Autoscale.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		l.step(ctx, now())
	}
}

// loop is a running Runner's memory between evaluations; everything in it
// is recovered from the store at start.
type loop struct {
	r *Runner
	// ruleJobs is when each rule last had a job accepted.
	ruleJobs map[string]time.Time
	dedup    Dedup
	// A request the job manager refused is not repeated at every tick: the
	// manager would record an ignored job each time.
	refused      *decision.Request
	refusedUntil time.Time
	refusedWhy   string
	backoff      time.Duration
	predictor    Predictor
}

func (r *Runner) start(ctx context.Context) (*loop, error) {
	if r.Group.Autoscale == nil {
		return nil, fmt.Errorf("policy: group %s has no autoscale policy", r.Group.Name)
	}
	// A rule's cooldown runs from its last accepted job, even one accepted
	// before a restart.
	ruleJobs, err := r.Store.LastDecisionTimes(ctx, r.Group.Name, decision.Accepted)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	l := &loop{r: r, ruleJobs: ruleJobs, backoff: max(10*r.Group.Autoscale.Interval, 10*time.Second)}
	last, err := r.Store.Decisions(ctx, store.DecisionQuery{Group: r.Group.Name, Limit: 1})
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if len(last) == 1 {
		l.dedup.Repeat(last[0])
	}
	return l, nil
}

// step evaluates at now, submits what the evaluation asks for, and records
// the decision.
func (l *loop) step(ctx context.Context, now time.Time) {
	r := l.r
	s := r.State()
	if asleep(r.Group, s) {
		return
	}
	s.RuleJobs = maps.Clone(l.ruleJobs)
	began := time.Now()
	s.Prediction = l.predictor.At(r.Group, r.Metrics, now)
	d, record := Evaluate(r.Group, r.Metrics, s, now)
	if r.Observe != nil {
		r.Observe.ObserveEvaluation(r.Group.Name, time.Since(began))
	}
	switch {
	case d.Request == nil:
	case l.refused != nil && *l.refused == *d.Request && d.Time.Before(l.refusedUntil):
		d.Outcome, d.Code, d.Request = decision.Nothing, CodeRefused, nil
		d.Reason += fmt.Sprintf("; the same request was refused (%s), retried after %s", l.refusedWhy, l.refusedUntil.UTC().Format(time.RFC3339))
	default:
		req := *d.Request
		job, err := r.Jobs.Submit(ctx, submission(d))
		l.refused = nil
		switch {
		case err != nil:
			d.Outcome, d.Reason = decision.Error, d.Reason+"; submitting the job failed: "+err.Error()
			d.JobID = job.ID
			l.refused, l.refusedUntil, l.refusedWhy = &req, d.Time.Add(l.backoff), err.Error()
		case job.State == jobrun.Ignored:
			d.Outcome, d.Reason, d.JobID = decision.Ignored, d.Reason+"; job ignored: "+job.Reason, job.ID
			l.refused, l.refusedUntil, l.refusedWhy = &req, d.Time.Add(l.backoff), job.Reason
		default:
			d.Outcome, d.JobID = decision.Accepted, job.ID
			l.ruleJobs[d.Rule] = d.Time
		}
	}
	if record && !l.dedup.Repeat(d) {
		r.record(ctx, d)
	}
}

func (r *Runner) record(ctx context.Context, d decision.Record) {
	if err := r.Store.InsertDecision(context.WithoutCancel(ctx), &d); err != nil {
		r.Log.Error("recording decision failed", "group", d.Group, "err", err)
	}
	attrs := []any{"group", d.Group, "rule", d.Rule, "outcome", d.Outcome, "code", d.Code,
		"current", d.Current, "recommendation", d.Recommendation, "reason", d.Reason}
	if d.JobID != "" {
		attrs = append(attrs, "job", d.JobID)
	}
	r.Log.Info("autoscale decision", attrs...)
	if r.Observe != nil {
		r.Observe.ObserveDecision(d.Group, d.Outcome)
	}
}

// submission is the job request d asks the job manager for; d.Request
// must not be nil.
func submission(d decision.Record) jobrun.Request {
	r := d.Request
	return jobrun.Request{Group: d.Group, Kind: r.Kind, Plan: r.Plan, Size: r.Size, Source: r.Source}
}

// asleep reports a group that scales to zero sleeping at 0: with no
// instance there is no metric to read, so its policy does nothing; requests
// wake it (core's waker) and the policy takes over once it is awake.
func asleep(g config.Group, s State) bool { return s.Desired == 0 && g.ScaleToZero != nil }

// Dedup keeps a run of identical "nothing" decisions (the same rule held back
// for the same reason, second after second) to its first one. A decision
// held back by another job than the last one's is not a repeat: a deploy
// that follows a scale job holds the policy back too, and says so.
type Dedup struct{ last string }

// Repeat reports whether d repeats the previous decision; decisions that
// request a job never do.
func (dd *Dedup) Repeat(d decision.Record) bool {
	if d.Outcome != decision.Nothing {
		dd.last = ""
		return false
	}
	key := fmt.Sprintf("%s|%s|%d|%d|%s", d.Rule, d.Code, d.Current, d.Recommendation, d.JobID)
	if key == dd.last {
		return true
	}
	dd.last = key
	return false
}

// Replay evaluates g's policy over [from, to] at every interval, as the live
// Runner would have, and returns the decisions it would have recorded without
// doing anything. The group's size at each moment is the recorded "size"
// series (min_size before it starts); its cooldowns start when that size
// changes, and when a replayed decision would have requested a job.
//
// History is read from h once per metric, not at every step (see
// heldHistory). Replay stops with ctx's error when ctx ends; the caller
// bounds the number of steps.
func Replay(ctx context.Context, g config.Group, h Metrics, from, to time.Time) ([]decision.Record, error) {
	if g.Autoscale == nil {
		return nil, nil
	}
	iv := g.Autoscale.Interval
	held := newHeldHistory(h, to)
	held.now = from
	sizes := held.Points("size", from.Add(-time.Hour), to)
	var (
		out    []decision.Record
		dedup  Dedup
		s      = State{Desired: g.MinSize, RuleJobs: map[string]time.Time{}}
		pred   Predictor
		prev   = -1
		cooled = func(t time.Time) {
			s.UpCooldownUntil, s.DownCooldownUntil = t.Add(g.Cooldown.Up), t.Add(g.Cooldown.Down)
		}
	)
	// A change shortly before from still holds its cooldowns.
	for _, p := range sizes {
		if p.T.After(from) {
			break
		}
		if n := int(p.V); n != prev {
			if prev >= 0 {
				cooled(p.T)
			}
			prev = n
		}
	}
	for now := from; !now.After(to); now = now.Add(iv) {
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("policy: replay stopped at %s of [%s, %s]: %w",
				now.UTC().Format(time.RFC3339), from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339), err)
		}
		held.now = now
		if p, ok := at(sizes, now); ok {
			if n := int(p.V); n != prev {
				if prev >= 0 {
					cooled(p.T)
				}
				prev = n
			}
			s.Desired = prev
		}
		if asleep(g, s) {
			continue
		}
		s.Prediction = pred.At(g, held, now)
		d, record := Evaluate(g, held, s, now)
		if d.Request != nil {
			s.RuleJobs[d.Rule] = now
			cooled(now)
		}
		if record && !dedup.Repeat(d) {
			out = append(out, d)
		}
	}
	return out, nil
}

// ReplayCost is what a replay costs: Steps evaluations (window ÷ interval),
// each scanning up to Samples samples of the windows the policy reads back
// (each rule's for or over, the target's stabilization window and period), the
// longest of which is Window.
type ReplayCost struct {
	Steps, Samples int64
	Window         time.Duration
}

// Total is the samples a replay scans in all.
func (c ReplayCost) Total() int64 { return c.Steps * c.Samples }

// CostOf estimates a replay of a over window on a history sampled every
// interval for ring, then at the 10 s roll-ups.
func CostOf(a *config.Autoscale, window, interval, ring time.Duration) ReplayCost {
	if interval <= 0 {
		interval = config.DefaultMetrics.Interval
	}
	c := ReplayCost{Steps: int64(window / a.Interval)}
	scans := func(w time.Duration) {
		c.Window = max(c.Window, w)
		c.Samples += int64(min(w, ring)/interval) + int64(max(w-ring, 0)/metrics.RollupStep)
	}
	for _, r := range a.Rules {
		scans(r.Window())
	}
	if t := a.Target; t != nil {
		scans(t.ScaleInStabilization)
		scans(t.Period)
	}
	c.Samples = max(c.Samples, 1)
	return c
}
