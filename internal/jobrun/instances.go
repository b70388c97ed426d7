package jobrun

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/job"
)

// Day-two acts' kinds (see package job).
const (
	Drain, Undrain, Replace, Protect, Unprotect, Standby, Resume = job.Drain, job.Undrain, job.Replace, job.Protect, job.Unprotect, job.Standby, job.Resume
)

// InstanceRequest asks for a day-two act on named instances of one group.
type InstanceRequest struct {
	Kind      Kind
	Instances []string
	Options   group.ActOptions
	Source    string
}

// ErrUnknownInstance is a request naming an instance no group has.
var ErrUnknownInstance = errors.New("unknown instance")

// maxInstances bounds the names one request may give.
const maxInstances = 100

// SubmitInstances turns a day-two act into a job of its kind. Like a
// scaling job it takes the group's lock (an act while another job runs is
// ignored, and jobs submitted while it runs are). An act the group cannot
// do now (already drained, below min_size, ...) is recorded ignored with
// the reason; a request that can never succeed (an unknown kind or
// instance, instances of several groups, a flag the kind does not take)
// is an *InputError and records no job.
func (m *Manager) SubmitInstances(ctx context.Context, req InstanceRequest) (Job, error) {
	g, err := m.checkInstances(req)
	if err != nil {
		return Job{}, err
	}
	g, source, err := m.checkRequest(g.Name(), req.Source)
	if err != nil {
		return Job{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	size := g.Desired()
	j := Job{Group: g.Name(), Source: source, Kind: req.Kind, From: size, Target: size, CreatedAt: now,
		Instances: slices.Clone(req.Instances)}
	reason := ""
	if running := m.holderLocked(j.Group); running != "" {
		reason = fmt.Sprintf("another job (%s) is running for group %s", running, j.Group)
	} else {
		reason = g.ActRefusal(req.Kind, req.Instances, req.Options)
	}
	if reason != "" {
		j.State, j.Reason, j.FinishedAt = Ignored, reason, &now
		if err := m.st.InsertJob(ctx, &j); err != nil {
			return Job{}, fmt.Errorf("record job: %w", err)
		}
		m.logJob(j)
		return j, nil
	}
	return m.accept(ctx, g, j, func(g *group.Group, j Job) { m.runInstances(g, j, req.Options) })
}

// checkInstances finds the one group the request's instances belong to
// and checks the request's shape.
func (m *Manager) checkInstances(req InstanceRequest) (*group.Group, error) {
	invalid := func(format string, a ...any) error {
		return &InputError{Err: ErrInvalid, Msg: fmt.Sprintf(format, a...)}
	}
	if !req.Kind.OnInstances() {
		valid := make([]string, len(job.InstanceKinds))
		for i, k := range job.InstanceKinds {
			valid[i] = string(k)
		}
		return nil, &InputError{Err: ErrInvalid, Valid: valid, Msg: fmt.Sprintf("unknown act %q (acts: %s)", req.Kind, strings.Join(valid, ", "))}
	}
	switch o := req.Options; {
	case len(req.Instances) == 0:
		return nil, invalid("%s: name at least one instance", req.Kind)
	case len(req.Instances) > maxInstances:
		return nil, invalid("%s: at most %d instances at once, got %d", req.Kind, maxInstances, len(req.Instances))
	case o.NoReplace && req.Kind != Drain:
		return nil, invalid("no_replace is an option of drain only")
	case o.Decrement && req.Kind != Standby:
		return nil, invalid("decrement is an option of standby only")
	case o.TerminateFirst && req.Kind != Replace && req.Kind != Drain && req.Kind != Standby:
		return nil, invalid("terminate_first is an option of replace, drain and standby only")
	case o.TerminateFirst && (o.NoReplace || o.Decrement):
		return nil, invalid("terminate_first orders a replacement: not with no_replace or decrement")
	}
	var found *group.Group
	for _, name := range req.Instances {
		var g *group.Group
		for _, gn := range m.groups.Names() {
			if c, ok := m.groups.Group(gn); ok && c.HasInstance(name) {
				g = c
				break
			}
		}
		switch {
		case g == nil:
			var known []string
			for _, gn := range m.groups.Names() {
				if c, ok := m.groups.Group(gn); ok {
					known = append(known, c.InstanceNames()...)
				}
			}
			return nil, &InputError{Err: ErrUnknownInstance, Valid: known, Msg: fmt.Sprintf("unknown instance %q", truncateName(name))}
		case found != nil && g != found:
			return nil, invalid("%s names instances of groups %s and %s: one group a job", req.Kind, found.Name(), g.Name())
		}
		found = g
	}
	return found, nil
}

// truncateName keeps an echoed name short.
func truncateName(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// runInstances runs an accepted day-two act. Its time is the scaling
// job's bound once for each instance it acts on.
func (m *Manager) runInstances(g *group.Group, j Job, o group.ActOptions) {
	timeout := m.timeout(g) * time.Duration(max(1, len(j.Instances)))
	ctx, cancel := context.WithTimeoutCause(m.jobsCtx(), timeout, errors.New("job timed out"))
	defer cancel()
	rec := context.WithoutCancel(ctx)

	mark := g.Mark()
	now := time.Now()
	j.State, j.StartedAt = Running, &now
	m.update(rec, j)

	note, err := g.Act(ctx, mark, j.Kind, j.Instances, o, func(msg string) {
		m.log.Info(string(j.Kind), "job", j.ID, "group", j.Group, "instances", j.Instances, "step", msg)
	})
	// An undrain or resume makes a surplus the scale-in retires: say which.
	if r := g.Retirements(mark); len(r) > 0 {
		m.scaleInEvent(rec, j, g.Config().ScaleIn, r)
	}
	finished := time.Now()
	j.FinishedAt, j.Note, j.Target = &finished, note, g.Desired()
	if err != nil {
		j.State, j.Reason = Failed, err.Error()
	} else {
		j.State = Done
	}
	m.update(rec, j)
}
