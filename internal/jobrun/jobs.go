// Package jobrun runs jobs: it turns scaling requests into jobs, resolves the
// target size on a group's plan ladder, refuses requests during cooldowns or
// while another job runs for the group, runs accepted jobs to completion and
// records every state. What a job is (its record, states and kinds) is package
// job, below the store that keeps it.
package jobrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/job"
	"github.com/shoal-lb/shoal/internal/store"
)

// A job's shape, its states and kinds live in package job, below the store
// that keeps them; they are re-exported here for the manager's users.
type (
	// Job is a scaling job as the store keeps it and the API and CLI show it.
	Job = job.Job
	// State is a job's state: accepted → running → done | failed, or ignored.
	State = job.State
	// Kind is what a request asks for.
	Kind = job.Kind
)

// Job states and request kinds (see package job).
const (
	Accepted, Running, Done, Failed, Ignored = job.Accepted, job.Running, job.Done, job.Failed, job.Ignored
	Up, Down, Plan, Size, Keep, Deploy, Wake = job.Up, job.Down, job.Plan, job.Size, job.Keep, job.Deploy, job.Wake
)

// Request asks for a scaling job. Up or Down with a Plan jump to that plan but
// never against their direction (an Up to a smaller plan is ignored), which is
// how sacloud/autoscaler's clients use them.
type Request struct {
	Group  string
	Kind   Kind
	Plan   string
	Size   int
	Source string
}

// Input errors: the request itself is wrong, not the moment.
var (
	ErrUnknownGroup = errors.New("unknown group")
	ErrUnknownPlan  = errors.New("unknown plan")
	ErrInvalid      = errors.New("invalid request")
	ErrNotFound     = errors.New("job not found")
)

// InputError is a request that can never succeed as written; Valid lists the
// names that would have been accepted.
type InputError struct {
	Err   error
	Msg   string
	Valid []string
}

func (e *InputError) Error() string { return e.Msg }
func (e *InputError) Unwrap() error { return e.Err }

// stateStore is where a Manager records jobs and the decisions they end
// with. *store.Store is one.
type stateStore interface {
	InsertJob(ctx context.Context, j *Job) error
	UpdateJob(ctx context.Context, j Job) error
	Job(ctx context.Context, id string) (Job, error)
	Jobs(ctx context.Context, group string, limit int) ([]Job, error)
	FailUnfinishedJobs(ctx context.Context, reason string, at time.Time) ([]Job, error)
	InsertDecision(ctx context.Context, d *decision.Record) error
}

// Groups finds the groups jobs act on. core's registry implements it; a
// config reload changes what it holds.
type Groups interface {
	// Group returns a running group by name.
	Group(name string) (*group.Group, bool)
	// Names returns the running groups' names, sorted.
	Names() []string
}

// Manager runs jobs for the groups it is given.
type Manager struct {
	groups Groups
	st     stateStore
	log    *slog.Logger
	// timeout bounds a running job so a group that never converges fails it;
	// deployTimeout bounds a deploy.
	timeout       func(*group.Group) time.Duration
	deployTimeout func(*group.Group) time.Duration

	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	running map[string]string // group → running job id
	// beside is a scaling job running beside a canary deploy (the
	// group's running job): group → its id.
	beside map[string]string
	ended  map[string]chan struct{} // job id → closed when it ends

	// observe, when set, sees every job as it enters a state (metrics).
	observe func(Job)
}

// MaxSource bounds the free-text source every job records and logs.
const MaxSource = 128

// ErrShuttingDown is the cause given to jobs interrupted by shutdown.
var ErrShuttingDown = errors.New("shoal is shutting down")

// NewManager returns a manager for groups. Jobs left unfinished by an earlier
// run of shoal are marked failed.
func NewManager(ctx context.Context, groups Groups, st stateStore, log *slog.Logger) (*Manager, error) {
	m := NewStandbyManager(groups, st, log)
	if err := m.FailUnfinished(ctx, "shoal restarted while the job was running"); err != nil {
		return nil, err
	}
	return m, nil
}

// NewStandbyManager returns a manager that fails nothing yet: an HA node's,
// which records jobs in the shared store only while it leads. On each
// takeover it calls FailUnfinished, on each loss of leadership Interrupt.
func NewStandbyManager(groups Groups, st stateStore, log *slog.Logger) *Manager {
	m := &Manager{
		groups:        groups,
		st:            st,
		log:           log,
		running:       map[string]string{},
		beside:        map[string]string{},
		ended:         map[string]chan struct{}{},
		timeout:       defaultTimeout,
		deployTimeout: deployTimeout,
	}
	m.ctx, m.cancel = context.WithCancelCause(context.Background())
	return m
}

// FailUnfinished marks the jobs that no one runs any more (left by an
// earlier run, or by the HA leader before this one) failed with reason.
func (m *Manager) FailUnfinished(ctx context.Context, reason string) error {
	at := time.Now()
	failed, err := m.st.FailUnfinishedJobs(ctx, reason, at)
	if err != nil {
		return fmt.Errorf("jobs: %w", err)
	}
	for _, j := range failed {
		m.log.Warn("job failed", "job", j.ID, "group", j.Group, "reason", j.Reason)
		// Like any failed job, it holds back its direction: its desired size
		// was recorded before it took effect, so it stands.
		if g, ok := m.groups.Group(j.Group); ok && j.Target != j.From {
			if err := g.StartCooldown(ctx, at, j.Target > j.From); err != nil {
				return fmt.Errorf("jobs: %w", err)
			}
		}
	}
	return nil
}

// Interrupt ends the running jobs with cause and waits for them; jobs
// submitted afterwards run. An HA node that loses leadership calls it.
func (m *Manager) Interrupt(cause error) {
	m.mu.Lock()
	cancel := m.cancel
	m.mu.Unlock()
	cancel(cause)
	m.wg.Wait()
	m.mu.Lock()
	m.ctx, m.cancel = context.WithCancelCause(context.Background())
	m.mu.Unlock()
}

// jobsCtx is the context the jobs started now run under.
func (m *Manager) jobsCtx() context.Context {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ctx
}

// defaultTimeout allows every instance of a step its health grace and drain,
// twice over, plus stop time, and a cloud's delete_timeout: a scale-in the
// cloud refuses fails with the cloud's answer, not a timeout.
func defaultTimeout(g *group.Group) time.Duration {
	c := g.Config()
	return 2*(c.Health.Grace+c.DrainTimeout+c.Template.StopTimeout) + g.DeleteTimeout() + 30*time.Second
}

// Observe makes f see every job as it enters a state. It must be called
// before the first Submit; f must not block.
func (m *Manager) Observe(f func(Job)) { m.observe = f }

// Close interrupts running jobs (they fail with ErrShuttingDown) and waits for them.
func (m *Manager) Close() {
	m.mu.Lock()
	cancel := m.cancel
	m.mu.Unlock()
	cancel(ErrShuttingDown)
	m.wg.Wait()
}

// checkRequest finds the group a request names and checks its free-text
// source ("default" when empty): the input errors every kind of job shares.
func (m *Manager) checkRequest(groupName, source string) (*group.Group, string, error) {
	g, ok := m.groups.Group(groupName)
	if !ok {
		names := m.groups.Names()
		return nil, "", &InputError{Err: ErrUnknownGroup, Valid: names,
			Msg: fmt.Sprintf("unknown group %q (groups: %s)", groupName, strings.Join(names, ", "))}
	}
	if source == "" {
		source = "default"
	}
	if len(source) > MaxSource || strings.ContainsFunc(source, unicode.IsControl) {
		return nil, "", &InputError{Err: ErrInvalid, Msg: fmt.Sprintf("source must be at most %d bytes of printable text", MaxSource)}
	}
	return g, source, nil
}

// Submit turns a request into a job. The job is returned in state accepted or
// ignored. An *InputError is returned for an unknown group (no job) and for an
// unknown plan or a size outside the group's range (with the ignored job).
func (m *Manager) Submit(ctx context.Context, req Request) (Job, error) {
	g, source, err := m.checkRequest(req.Group, req.Source)
	if err != nil {
		return Job{}, err
	}
	req.Source = source
	m.mu.Lock()
	defer m.mu.Unlock()
	if req.Kind == Deploy {
		return Job{}, &InputError{Err: ErrInvalid, Msg: "a deploy is submitted with SubmitDeploy"}
	}

	now := time.Now()
	from := g.Desired()
	j := Job{Group: req.Group, Source: req.Source, Kind: req.Kind, Plan: req.Plan, From: from, Target: from, CreatedAt: now}
	target, reason, inputErr := resolve(g, req, from)
	// A canary's steps take scaling requests: the stable instances scale
	// while the weights keep the canary's share (group/canary.go).
	beside := req.Kind != Wake && m.takesBesideLocked(g, req.Group)
	holder := m.holderLocked(req.Group)
	if beside {
		holder = ""
	}
	switch {
	case inputErr != nil:
		reason = inputErr.Msg
	case holder != "":
		reason = fmt.Sprintf("another job (%s) is running for group %s", holder, req.Group)
	case reason == "":
		j.Target = target
		if beside {
			reason = g.CanaryScaleRefusal(target)
		}
		if reason == "" && req.Kind != Wake {
			reason = cooldownReason(g, from, target, now)
		}
		if reason == "" {
			reason = g.BudgetRefusal(ctx, target)
		}
	}
	if reason != "" {
		j.State, j.Reason, j.FinishedAt = Ignored, reason, &now
		if err := m.st.InsertJob(ctx, &j); err != nil {
			return Job{}, fmt.Errorf("record job: %w", err)
		}
		m.logJob(j)
		if inputErr != nil {
			return j, inputErr
		}
		return j, nil
	}

	if beside {
		return m.acceptIn(ctx, g, j, m.run, m.beside)
	}
	return m.accept(ctx, g, j, m.run)
}

// takesBesideLocked reports whether g's running job is a canary in its
// steps with no scaling job beside it yet: one may run. m.mu must be held.
func (m *Manager) takesBesideLocked(g *group.Group, group string) bool {
	return m.running[group] != "" && m.beside[group] == "" && g.CanaryTakesScaling()
}

// holderLocked is the job that holds group: a scaling job beside a
// canary (what another scaling request waits for), else the running one
// ("" when none). m.mu must be held.
func (m *Manager) holderLocked(group string) string {
	if id := m.beside[group]; id != "" {
		return id
	}
	return m.running[group]
}

// accept records j as accepted, takes the group's lock for it and runs it.
// m.mu must be held.
func (m *Manager) accept(ctx context.Context, g *group.Group, j Job, run func(*group.Group, Job)) (Job, error) {
	return m.acceptIn(ctx, g, j, run, m.running)
}

// acceptIn is accept with the lock held in slot: m.running, or m.beside
// for a scaling job beside a canary.
func (m *Manager) acceptIn(ctx context.Context, g *group.Group, j Job, run func(*group.Group, Job), slot map[string]string) (Job, error) {
	j.State = Accepted
	if err := m.st.InsertJob(ctx, &j); err != nil {
		return Job{}, fmt.Errorf("record job: %w", err)
	}
	m.logJob(j)
	slot[j.Group] = j.ID
	m.ended[j.ID] = make(chan struct{})
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer m.release(j)
		run(g, j)
	}()
	return j, nil
}

// release ends a job's hold on its group and wakes its waiters.
func (m *Manager) release(j Job) {
	m.mu.Lock()
	for _, slot := range []map[string]string{m.running, m.beside} {
		if slot[j.Group] == j.ID {
			delete(slot, j.Group)
		}
	}
	close(m.ended[j.ID])
	delete(m.ended, j.ID)
	m.mu.Unlock()
}

// Target returns the size req would move g to from its desired size now, or
// the size it keeps when the request would not move it (at the top of the
// ladder, say). An *InputError is a request that can never succeed.
func Target(g *group.Group, req Request) (int, error) {
	from := g.Desired()
	target, reason, inputErr := resolve(g, req, from)
	switch {
	case inputErr != nil:
		return 0, inputErr
	case reason != "":
		return from, nil
	}
	return target, nil
}

// resolve finds the target size for req, or why it cannot move (reason), or
// why it can never be satisfied (input error).
func resolve(g *group.Group, req Request, from int) (target int, reason string, inputErr *InputError) {
	c := g.Config()
	switch req.Kind {
	case Keep:
		return from, "", nil
	case Wake:
		if from > 0 {
			return 0, fmt.Sprintf("the group is awake (size %d): only a group at 0 is woken", from), nil
		}
		return c.WakeSize(), "", nil
	case Up, Down:
		if req.Plan == "" {
			break
		}
		p, err := planByName(c, req.Plan)
		if err != nil {
			return 0, "", err
		}
		if req.Kind == Up && p.Size < from {
			return 0, fmt.Sprintf("plan %s (%d) is smaller than the current size %d: an up request never scales down", p.Name, p.Size, from), nil
		}
		if req.Kind == Down && p.Size > from {
			return 0, fmt.Sprintf("plan %s (%d) is larger than the current size %d: a down request never scales up", p.Name, p.Size, from), nil
		}
		return p.Size, "", nil
	}
	switch req.Kind {
	case Plan:
		p, err := planByName(c, req.Plan)
		if err != nil {
			return 0, "", err
		}
		return p.Size, "", nil
	case Size:
		if refusal := c.Range().Refusal(c.Name, req.Size); refusal != "" {
			return 0, "", &InputError{Err: ErrInvalid, Msg: refusal}
		}
		return req.Size, "", nil
	case Up, Down:
		dir := config.Up
		if req.Kind == Down {
			dir = config.Down
		}
		to, refusal := c.Range().Step(from, dir)
		if refusal != "" {
			return 0, refusal, nil
		}
		return to, "", nil
	}
	return 0, "", &InputError{Err: ErrInvalid, Msg: fmt.Sprintf("unknown request kind %q", req.Kind)}
}

func planByName(c config.Group, name string) (config.Plan, *InputError) {
	r := c.Range()
	if p, ok := r.PlanByName(name); ok {
		return p, nil
	}
	return config.Plan{}, &InputError{Err: ErrUnknownPlan, Valid: r.PlanNames(), Msg: fmt.Sprintf("unknown plan %q for group %s (%s)", name, c.Name, r.ValidPlans())}
}

func cooldownReason(g *group.Group, from, target int, now time.Time) string {
	up, down := g.Cooldowns()
	switch {
	case target > from && now.Before(up):
		return fmt.Sprintf("scale-up cooldown runs until %s (%s left)", up.Format(time.RFC3339), up.Sub(now).Round(time.Second))
	case target < from && now.Before(down):
		return fmt.Sprintf("scale-down cooldown runs until %s (%s left)", down.Format(time.RFC3339), down.Sub(now).Round(time.Second))
	}
	return ""
}

func (m *Manager) run(g *group.Group, j Job) {
	ctx, cancel := context.WithTimeoutCause(m.jobsCtx(), m.timeout(g), errors.New("job timed out"))
	defer cancel()
	// Records must be written even when the job is interrupted.
	rec := context.WithoutCancel(ctx)

	mark := g.Mark()
	now := time.Now()
	j.State, j.StartedAt = Running, &now
	m.update(rec, j)

	err := g.SetDesired(rec, j.Target)
	noop := false
	if err == nil {
		if r := g.Retirements(mark); len(r) > 0 {
			m.scaleInEvent(rec, j, g.Config().ScaleIn, r)
		}
		noop, err = g.WaitConverged(ctx, mark)
	}
	finished := time.Now()
	j.FinishedAt = &finished
	if err != nil {
		// The desired size stays where SetDesired left it: the target if it
		// was recorded, else where it was. The reason says which.
		j.State, j.Reason = Failed, fmt.Sprintf("%v (desired size stays %d)", err, g.Desired())
		// A failure must not be a fast path around the cooldown: without it,
		// every further alert would raise a broken group by another step.
		if j.Target != j.From {
			if err := g.StartCooldown(rec, finished, j.Target > j.From); err != nil {
				m.log.Error("recording cooldown failed", "group", j.Group, "err", err)
			}
		}
	} else {
		j.State, j.Noop = Done, noop
		if j.Target != j.From {
			if err := g.StartCooldowns(rec, finished); err != nil {
				m.log.Error("recording cooldown failed", "group", j.Group, "err", err)
			}
		}
	}
	m.update(rec, j)
}

func (m *Manager) scaleInEvent(ctx context.Context, j Job, policy string, retired []group.Retirement) {
	var picks []string
	for _, r := range retired {
		picks = append(picks, r.Instance+": "+r.Reason)
	}
	reason := fmt.Sprintf("job %s retires %s", j.ID, strings.Join(picks, "; "))
	// The rule is the outcome: no rule of the policy decided it.
	d := decision.Record{Group: j.Group, Time: time.Now(), Rule: string(decision.ScaleIn), Sources: []string{j.Source},
		Current: j.From, Recommendation: j.Target, Request: &decision.Request{Kind: j.Kind, Plan: j.Plan},
		Outcome: decision.ScaleIn, Code: decision.Code(policy), Reason: reason, JobID: j.ID}
	if err := m.st.InsertDecision(ctx, &d); err != nil {
		m.log.Error("recording scale-in event failed", "job", j.ID, "err", err)
	}
}

func (m *Manager) update(ctx context.Context, j Job) {
	if err := m.st.UpdateJob(ctx, j); err != nil {
		m.log.Error("recording job failed", "job", j.ID, "err", err)
	}
	m.logJob(j)
}

func (m *Manager) logJob(j Job) {
	attrs := []any{"job", j.ID, "group", j.Group, "kind", j.Kind, "source", j.Source, "from", j.From, "target", j.Target}
	if j.Version != "" {
		attrs = append(attrs, "version", j.Version)
	}
	if j.Plan != "" {
		attrs = append(attrs, "plan", j.Plan)
	}
	if len(j.Instances) > 0 {
		attrs = append(attrs, "instances", j.Instances)
	}
	if j.Note != "" {
		attrs = append(attrs, "note", j.Note)
	}
	if j.Noop {
		attrs = append(attrs, "noop", true)
	}
	if j.Reason != "" {
		attrs = append(attrs, "reason", j.Reason)
	}
	level := slog.LevelInfo
	if j.State == Failed {
		level = slog.LevelWarn
	}
	m.log.Log(context.Background(), level, "job "+string(j.State), attrs...)
	if m.observe != nil {
		m.observe(j)
	}
}

// Get returns a job by id.
func (m *Manager) Get(ctx context.Context, id string) (Job, error) {
	if n, err := strconv.ParseInt(id, 10, 64); err != nil || n <= 0 {
		return Job{}, fmt.Errorf("%w: %q is not a job id", ErrNotFound, id)
	}
	j, err := m.st.Job(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return Job{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return Job{}, err
	}
	return j, nil
}

// List returns the newest jobs, for one group or all ("").
func (m *Manager) List(ctx context.Context, groupName string, limit int) ([]Job, error) {
	out, err := m.st.Jobs(ctx, groupName, limit)
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = []Job{}
	}
	return out, nil
}

// Wait returns the job once it has ended, or its current state when ctx ends first.
func (m *Manager) Wait(ctx context.Context, id string) (Job, error) {
	m.mu.Lock()
	ch := m.ended[id]
	m.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
	return m.Get(context.WithoutCancel(ctx), id)
}
