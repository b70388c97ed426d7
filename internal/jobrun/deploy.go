package jobrun

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/group"
)

// DeployRequest asks for a rolling deploy of a group's template, with
// template variables overridden by Set.
type DeployRequest struct {
	Group  string
	Set    map[string]string
	Source string
}

// ErrUnknownVar is an override of a variable the template does not declare.
var ErrUnknownVar = errors.New("unknown template variable")

// SubmitDeploy turns a deploy request into a job of kind deploy. Like a
// scaling job it takes the group's lock (a deploy while another job runs is
// ignored, and jobs submitted while it runs are), so policies wait for it.
// An unknown variable is an *InputError listing the declared ones; no job
// is recorded for it.
func (m *Manager) SubmitDeploy(ctx context.Context, req DeployRequest) (Job, error) {
	g, source, err := m.checkRequest(req.Group, req.Source)
	if err != nil {
		return Job{}, err
	}
	req.Source = source
	target, err := g.DeployTarget(req.Set)
	var unknown *config.UnknownVarError
	switch {
	case errors.As(err, &unknown):
		return Job{}, &InputError{Err: ErrUnknownVar, Valid: unknown.Known, Msg: fmt.Sprintf("group %s: %v", req.Group, err)}
	case err != nil:
		return Job{}, &InputError{Err: ErrInvalid, Msg: fmt.Sprintf("group %s: %v", req.Group, err)}
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	size := g.Desired()
	j := Job{Group: req.Group, Source: req.Source, Kind: Deploy, From: size, Target: size,
		CreatedAt: now, Version: target.Version(req.Group)}
	if running := m.holderLocked(req.Group); running != "" {
		j.State, j.Reason, j.FinishedAt = Ignored, fmt.Sprintf("another job (%s) is running for group %s", running, req.Group), &now
		if err := m.st.InsertJob(ctx, &j); err != nil {
			return Job{}, fmt.Errorf("record job: %w", err)
		}
		m.logJob(j)
		m.deployEvent(ctx, j)
		return j, nil
	}
	return m.accept(ctx, g, j, func(g *group.Group, j Job) { m.runDeploy(g, j, target) })
}

// deployTimeout allows every instance its health grace, min_ready, a drain,
// a stop and its hooks, twice over (a rollback takes as long), plus a
// minute.
func deployTimeout(g *group.Group) time.Duration {
	c := g.Config()
	per := c.Health.Grace + c.Deploy.MinReady + c.DrainTimeout + c.Template.StopTimeout
	for _, h := range []*config.Hook{c.Template.PreStart, c.Template.PreStop} {
		if h != nil {
			per += h.Timeout
		}
	}
	steps := max(1, (g.Desired()+c.Deploy.MaxSurge-1)/max(1, c.Deploy.MaxSurge))
	return 2*time.Duration(steps+1)*per + time.Minute + g.StrategyTimeout()
}

func (m *Manager) runDeploy(g *group.Group, j Job, target config.Template) {
	ctx, cancel := context.WithTimeoutCause(m.jobsCtx(), m.deployTimeout(g), errors.New("deploy timed out"))
	defer cancel()
	rec := context.WithoutCancel(ctx)
	started := time.Now()
	j.State, j.StartedAt = Running, &started
	m.update(rec, j)
	m.deployEvent(rec, j)

	noop := g.Version() == j.Version
	err := g.Deploy(ctx, target, func(msg string) {
		m.log.Info("deploy", "job", j.ID, "group", j.Group, "version", j.Version, "step", msg)
	})
	finished := time.Now()
	j.FinishedAt = &finished
	if err != nil {
		j.State, j.Reason = Failed, err.Error()
	} else {
		j.State, j.Noop = Done, noop
	}
	m.update(rec, j)
	m.deployEvent(rec, j)
}

// deployEvent marks a deploy's start and end, or its refusal, in the
// group's event log (decision.Deploy); the job's state is the code.
func (m *Manager) deployEvent(ctx context.Context, j Job) {
	reason := fmt.Sprintf("deploy of version %s (job %s) %s", j.Version, j.ID, j.State)
	if j.Reason != "" {
		reason += ": " + j.Reason
	}
	d := decision.Record{Group: j.Group, Time: time.Now(), Rule: string(decision.Deploy), Sources: []string{j.Source},
		Current: j.From, Recommendation: j.Target, Request: &decision.Request{Kind: Deploy},
		Outcome: decision.Deploy, Code: decision.Code(j.State), Reason: reason, JobID: j.ID}
	if err := m.st.InsertDecision(ctx, &d); err != nil {
		m.log.Error("recording deploy event failed", "job", j.ID, "err", err)
	}
}
