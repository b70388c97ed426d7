package core

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/jobrun"
	"github.com/shoal-lb/shoal/internal/metrics"
	"github.com/shoal-lb/shoal/internal/policy"
)

// Rules and sources of the waker's decisions and jobs, as `shoal events`
// and `shoal jobs` show them.
const (
	ruleWake               = "wake"
	ruleIdle               = "idle_after"
	codeWake decision.Code = "wake"
	codeIdle decision.Code = "idle"
	// Like the policy's jobs, sources are decision.SourcePrefix and the
	// rule, which is how the store reads a recorded request back.
	sourceWake   = decision.SourcePrefix + ruleWake
	sourceIdle   = decision.SourcePrefix + ruleIdle
	idleRetryMin = 10 * time.Second
)

// waker runs the groups that scale to zero (config.ScaleToZero). After each
// metrics sample it reads every such group's backend: requests HAProxy holds
// for it (sessions, queue) or serves (requests/s).
//
//	         a request held or served, no job running
//	asleep ──────────────────────────────────────────► waking
//	(size 0)        job "wake" 0 → WakeSize,             │
//	   ▲            no cooldown: requests wait            │ job done: the
//	   │                                                  ▼ policy takes over
//	   └──────── job "size 0" (cooldowns apply) ◄──── awake
//	             no request for idle_after
//
// The policy never scales such a group to 0 and does not run while it sleeps
// (see runPolicy). Idleness is measured from the first sample the waker
// sees: a restart of shoal postpones a sleep by up to idle_after, never
// brings it forward.
type waker struct {
	jm  *jobrun.Manager
	reg *registry
	col *metrics.Collector
	st  policy.DecisionStore
	log *slog.Logger
	// observe, when set, counts decisions (shoal_policy_decisions_total).
	observe policy.Observer
	ticks   chan time.Time

	// Owned by run's goroutine.
	groups map[string]*sleepState
}

// sleepState is what the waker remembers of one group.
type sleepState struct {
	lastActive time.Time
	// asleepSince is the first sample that saw the group at 0 with no job
	// running; zero while it is awake.
	asleepSince time.Time
	// idleUntil holds back a refused scale to zero (cooldown) until then.
	idleUntil time.Time
}

// newWaker returns a waker; its collector and store are set before run.
func newWaker(jm *jobrun.Manager, reg *registry, log *slog.Logger) *waker {
	return &waker{jm: jm, reg: reg, log: log, ticks: make(chan time.Time, 1), groups: map[string]*sleepState{}}
}

// sampled is the collector's AfterSample: it hands the tick on without
// waiting, dropping it if the previous one is still being handled.
func (w *waker) sampled(now time.Time) {
	select {
	case w.ticks <- now:
	default:
	}
}

// run handles ticks until ctx ends.
func (w *waker) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-w.ticks:
			if w.reg.Standby() {
				continue // the HA leader wakes the groups
			}
			for _, g := range w.reg.All() {
				w.step(ctx, g, now)
			}
		}
	}
}

// step looks at one group after the sample taken at now.
func (w *waker) step(ctx context.Context, g *group.Group, now time.Time) {
	c := g.Config()
	if c.ScaleToZero == nil {
		delete(w.groups, c.Name)
		return
	}
	s := w.groups[c.Name]
	if s == nil {
		s = &sleepState{lastActive: now}
		w.groups[c.Name] = s
	}
	desired := g.Desired()
	running := w.jm.Running(c.Name) != ""
	// Requests served before the group went to sleep are no reason to wake
	// it: while it sleeps, only what arrived since counts — held requests
	// at once, a rate once a whole interval lies after the first sample
	// that saw it asleep.
	rates := true
	switch {
	case desired > 0 || running:
		s.asleepSince = time.Time{}
	case s.asleepSince.IsZero():
		s.asleepSince, rates = now, false
	}
	vals, active := w.activity(c.Name, now, rates)
	if active {
		s.lastActive = now
	}
	if running {
		return // the next sample decides again once it has ended
	}
	switch {
	case desired == 0 && active:
		// The wake and a sleep after it may both end before the next
		// sample: the group is then asleep anew, and what it served is
		// no reason to wake it again.
		s.asleepSince = time.Time{}
		w.submit(ctx, decision.Record{Group: c.Name, Time: now, Rule: ruleWake, Code: codeWake, Values: vals,
			Current: 0, Recommendation: c.WakeSize(),
			Reason: fmt.Sprintf("requests arrived while asleep (%s); waking to %d", describeActivity(c.Name, vals), c.WakeSize())},
			jobrun.Request{Group: c.Name, Kind: jobrun.Wake, Source: sourceWake})
	case desired > 0 && c.MinSize == 0 && now.Sub(s.lastActive) >= c.ScaleToZero.IdleAfter && !now.Before(s.idleUntil):
		d := decision.Record{Group: c.Name, Time: now, Rule: ruleIdle, Code: codeIdle, Values: vals, Current: desired, Recommendation: 0,
			Reason: fmt.Sprintf("no request for %s (idle_after %s); scaling to 0", now.Sub(s.lastActive).Round(time.Second), c.ScaleToZero.IdleAfter)}
		if job, ok := w.submit(ctx, d, jobrun.Request{Group: c.Name, Kind: jobrun.Size, Size: 0, Source: sourceIdle}); !ok {
			// Refused, most likely by the scale-down cooldown: ask again
			// when it ends, not at every sample.
			s.idleUntil = now.Add(idleRetryMin)
			if _, down := g.Cooldowns(); down.After(s.idleUntil) {
				s.idleUntil = down
			}
			w.log.Info("scale to zero held back", "group", c.Name, "reason", job.Reason, "retry_at", s.idleUntil)
		}
	}
}

// activity reads the group's newest sample: requests held (HAProxy's
// backend sessions and queue) or, with rates, served. A missing sample is
// no activity.
func (w *waker) activity(name string, now time.Time, rates bool) (map[string]float64, bool) {
	vals := map[string]float64{}
	active := false
	metricsRead := []string{"sessions", "queue"}
	if rates {
		metricsRead = append(metricsRead, "requests_per_second")
	}
	for _, m := range metricsRead {
		path := metrics.Path(name, m)
		// This sample's value only: an older one may count what the
		// group served before it slept.
		pts := w.col.Points(path, now, now)
		if len(pts) == 0 || !pts[len(pts)-1].T.Equal(now) {
			continue
		}
		v := pts[len(pts)-1].V
		vals[path] = v
		active = active || v > 0
	}
	return vals, active
}

// submit files req and records d with its outcome; ok is false when the job
// was not accepted.
func (w *waker) submit(ctx context.Context, d decision.Record, req jobrun.Request) (jobrun.Job, bool) {
	d.Request = &decision.Request{Kind: req.Kind, Size: req.Size, Source: req.Source}
	d.Sources = []string{d.Rule}
	job, err := w.jm.Submit(ctx, req)
	switch {
	case err != nil:
		d.Outcome, d.Reason = decision.Error, d.Reason+"; submitting the job failed: "+err.Error()
	case job.State == jobrun.Ignored:
		d.Outcome, d.Reason = decision.Ignored, d.Reason+"; job ignored: "+job.Reason
	default:
		d.Outcome = decision.Accepted
	}
	d.JobID = job.ID
	if err := w.st.InsertDecision(context.WithoutCancel(ctx), &d); err != nil {
		w.log.Error("recording decision failed", "group", d.Group, "err", err)
	}
	if w.observe != nil {
		w.observe.ObserveDecision(d.Group, d.Outcome)
	}
	w.log.Info("autoscale decision", "group", d.Group, "rule", d.Rule, "outcome", d.Outcome, "code", d.Code,
		"current", d.Current, "recommendation", d.Recommendation, "reason", d.Reason, "job", d.JobID)
	return job, err == nil && job.State != jobrun.Ignored
}

// describeActivity says what a sample saw of a sleeping group.
func describeActivity(group string, vals map[string]float64) string {
	held := vals[metrics.Path(group, "sessions")] + vals[metrics.Path(group, "queue")]
	out := fmt.Sprintf("%.4g held", held)
	if rps, ok := vals[metrics.Path(group, "requests_per_second")]; ok {
		out += fmt.Sprintf(", %.4g requests/s", rps)
	}
	return out
}
