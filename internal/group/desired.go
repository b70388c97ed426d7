package group

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/store"
)

// ErrNotConverged wraps the failure that kept a group from its desired size.
var ErrNotConverged = errors.New("group did not reach its desired size")

// ErrProtected is a scale-in that stopped at protected instances.
var ErrProtected = errors.New("scale-in stopped at protected instances")

// ErrRemoved is a size change or deploy of a group a config reload removed.
var ErrRemoved = errors.New("removed by a config reload")

// Desired returns the size the group is reconciling towards.
func (g *Group) Desired() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.desired
}

// Cooldowns returns until when scale-up and scale-down are held back.
func (g *Group) Cooldowns() (up, down time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.upUntil, g.dnUntil
}

// SetDesired records a new desired size and wakes the reconciler. The size
// is written to the store before it takes effect, so that what a restart
// finds is never behind what ran; if the write fails nothing changes. The
// launches or retirements the new size calls for belong to the job of the
// newest Mark; the instances a smaller size retires are chosen before
// SetDesired returns (see Retirements).
func (g *Group) SetDesired(ctx context.Context, n int) error {
	c := g.conf()
	if refusal := c.Range().Refusal(c.Name, n); refusal != "" {
		return errors.New(refusal)
	}
	g.stateMu.Lock()
	defer g.stateMu.Unlock()
	g.mu.Lock()
	gs := g.stateLocked()
	g.mu.Unlock()
	gs.Desired = n
	if err := g.putState(ctx, gs); err != nil {
		return err
	}
	var (
		sessions map[string]int
		statErr  error
		hosts    map[string]hostLoad
	)
	g.mu.Lock()
	shrinks := len(g.activeLocked()) > n+g.dep.surge
	g.mu.Unlock()
	if shrinks {
		sessions, statErr = g.busyness(ctx)
		hosts = g.hostLoads()
	}
	g.mu.Lock()
	if g.removed {
		g.mu.Unlock()
		return fmt.Errorf("group %s: %w", g.cfg.Name, ErrRemoved)
	}
	if n != g.desired {
		g.resized = g.clk.Now()
		if n < g.desired {
			g.scaledIn, g.lowered = g.resized, g.jobSeq
		}
	}
	g.desired = n
	// A deploy's surge is wanted beside the size (a canary's instances,
	// when a scaling job runs beside it).
	active := len(g.activeLocked()) - g.dep.surge
	g.owedLaunch, g.owedRetire = max(0, n-active), max(0, active-n)
	// The instances a smaller size retires are chosen now, so that the job
	// can say which and why (Retirements); the reconciler starts the rest.
	if active > n {
		g.retireSurplusLocked(n+g.dep.surge, sessions, statErr, hosts)
	}
	g.notifyLocked()
	g.mu.Unlock()
	g.poke()
	return nil
}

// Retirement is an instance a scale-in chose, and why.
type Retirement struct {
	Instance string
	Reason   string
	// job is the job whose size change retired it (0: none).
	job uint64
}

// Retirements returns the instances the size change of m's job retired, in
// the order they were chosen.
func (g *Group) Retirements(m Mark) []Retirement {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []Retirement
	for _, r := range g.retired {
		if r.job == m.job {
			out = append(out, r)
		}
	}
	return out
}

// busyness returns each server's current sessions (HAProxy's scur) when the
// group retires its least busy instance; nil, nil otherwise.
func (g *Group) busyness(ctx context.Context) (map[string]int, error) {
	if g.conf().ScaleIn != config.ScaleInLeastBusy {
		return nil, nil
	}
	stats, err := g.lb.Stats(ctx, g.cfg.Name)
	if err != nil {
		return nil, err
	}
	sessions := make(map[string]int, len(stats))
	for _, st := range stats {
		sessions[st.Name] = st.Sessions
	}
	return sessions, nil
}

// retireSurplusLocked retires the active instances beyond want, in the order
// of scaleInOrder taken from the most loaded host first (byHost; hosts is
// nil for a provider with one), and records each choice. g.mu must be held.
func (g *Group) retireSurplusLocked(want int, sessions map[string]int, statErr error, hosts map[string]hostLoad) {
	active := g.activeLocked()
	if g.can != nil {
		// A canary's instances are what it is judged on, and the surge
		// keeps them: a scale-in during a canary retires stable ones.
		stable := slices.DeleteFunc(slices.Clone(active), g.canaryInstanceLocked)
		want -= len(active) - len(stable)
		active = stable
	}
	if len(active) <= want {
		g.protectedNote = ""
		return
	}
	policy := g.conf().ScaleIn
	if policy == config.ScaleInLeastBusy && sessions == nil {
		// Without HAProxy's counts (it is restarting) the newest goes.
		g.log.Warn("scale_in least_busy: no session counts from HAProxy; retiring the newest", "err", statErr)
		policy = config.ScaleInNewest
	}
	list := g.conf().ProviderList()
	order := byZone(byHost(scaleInOrder(active, policy, sessions), hosts, g.conf().Template.CPUs), g.zoneOf)
	if len(list) > 1 {
		order = byProvider(order, func(prov string) int { return rankOf(list, prov) })
	}
	picks, passed := unprotected(order, len(active)-want)
	if g.removed {
		// A group a reload removed retires every instance, protected or not.
		picks, passed = order[:len(active)-want], nil
	}
	if short := len(active) - want - len(picks); short > 0 {
		if note := strings.Join(passed, ","); note != g.protectedNote {
			g.protectedNote = note
			g.log.Warn("scale-in stopped at protected instances", "protected", passed, "short", short, "desired", g.desired)
		}
	} else {
		g.protectedNote = ""
	}
	for _, p := range picks {
		in := p.in
		in.retiring, in.scaleIn = true, true
		close(in.retire)
		r := Retirement{Instance: in.name, Reason: p.why}
		if policy != g.conf().ScaleIn {
			r.Reason += " (least_busy had no session counts from HAProxy)"
		}
		if g.owedRetire > 0 {
			in.job, r.job = g.jobSeq, g.jobSeq
			g.owedRetire--
			// A job reads its retirements as soon as SetDesired returns:
			// only the newest job's are kept.
			g.retired = slices.DeleteFunc(g.retired, func(o Retirement) bool { return o.job != g.jobSeq })
			g.retired = append(g.retired, r)
		}
		g.churn++
		g.log.Info("instance retiring", "instance", in.name, "state", in.state, "desired", g.desired, "why", r.Reason)
	}
	g.notifyLocked()
}

// pick is an instance in scale-in order with the reason for its place.
type pick struct {
	in  *instance
	why string
}

// scaleInOrder returns active in the order scale-in retires them. Those that
// serve nobody go first: starting ones, then unhealthy ones (DOWN in
// HAProxy), each newest first. Then those in service by policy: the newest
// (latest start), the oldest, or the least busy (fewest sessions, the newest
// of those tied). Indexes are reused, so the start time decides, not the
// name; the index only breaks ties of equal start times.
func scaleInOrder(active []*instance, policy string, sessions map[string]int) []pick {
	tier := map[State]int{Starting: 0, Unhealthy: 1, InService: 2}
	newer := func(a, b *instance) int {
		if c := started(b).Compare(started(a)); c != 0 {
			return c
		}
		return b.index - a.index
	}
	sorted := slices.Clone(active)
	slices.SortFunc(sorted, func(a, b *instance) int {
		if ta, tb := tier[a.state], tier[b.state]; ta != tb {
			return ta - tb
		}
		if a.state == InService {
			switch policy {
			case config.ScaleInOldest:
				return -newer(a, b)
			case config.ScaleInLeastBusy:
				if c := sessions[a.name] - sessions[b.name]; c != 0 {
					return c
				}
			}
		}
		return newer(a, b)
	})
	out := make([]pick, len(sorted))
	for i, in := range sorted {
		at := started(in).UTC().Format(time.RFC3339)
		why := ""
		switch {
		case in.state == Starting:
			why = "still starting: serves nobody yet"
		case in.state == Unhealthy:
			why = "unhealthy: DOWN in HAProxy, serves nobody"
		case policy == config.ScaleInOldest:
			why = "scale_in oldest: in service, started first (" + at + ")"
		case policy == config.ScaleInLeastBusy:
			why = fmt.Sprintf("scale_in least_busy: in service, %d sessions%s, started %s", sessions[in.name], otherSessions(sorted[i+1:], sessions), at)
		default:
			why = "scale_in newest: in service, started last (" + at + ")"
		}
		out[i] = pick{in, why}
	}
	return out
}

// otherSessions lists the sessions of the in-service instances ranked after
// one, for least_busy's reason: " (web-001 has 4, web-003 has 7)".
func otherSessions(rest []*instance, sessions map[string]int) string {
	var parts []string
	for _, in := range rest {
		if in.state == InService {
			parts = append(parts, fmt.Sprintf("%s has %d", in.name, sessions[in.name]))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// started is when the instance's process started, or, before it has one,
// when it was created.
func started(in *instance) time.Time {
	if !in.rec.StartedAt.IsZero() {
		return in.rec.StartedAt
	}
	return in.since
}

// StartCooldowns holds back the next scale-up until now+up and the next
// scale-down until now+down.
func (g *Group) StartCooldowns(ctx context.Context, now time.Time) error {
	return g.setCooldowns(ctx, now, true, true)
}

// StartCooldown holds back the next change in one direction: scale-up (up)
// or scale-down. A failed job starts the cooldown of its direction only.
func (g *Group) StartCooldown(ctx context.Context, now time.Time, up bool) error {
	return g.setCooldowns(ctx, now, up, !up)
}

func (g *Group) setCooldowns(ctx context.Context, now time.Time, up, down bool) error {
	g.stateMu.Lock()
	defer g.stateMu.Unlock()
	g.mu.Lock()
	gs := g.stateLocked()
	g.mu.Unlock()
	if up {
		gs.UpCooldownUntil = now.Add(g.conf().Cooldown.Up)
	}
	if down {
		gs.DownCooldownUntil = now.Add(g.conf().Cooldown.Down)
	}
	if err := g.putState(ctx, gs); err != nil {
		return err
	}
	g.mu.Lock()
	g.upUntil, g.dnUntil = gs.UpCooldownUntil, gs.DownCooldownUntil
	g.mu.Unlock()
	return nil
}

func (g *Group) persistState(ctx context.Context) error {
	g.stateMu.Lock()
	defer g.stateMu.Unlock()
	g.mu.Lock()
	gs := g.stateLocked()
	g.mu.Unlock()
	return g.putState(ctx, gs)
}

func (g *Group) stateLocked() store.GroupState {
	gs := store.GroupState{Name: g.cfg.Name, Desired: g.desired, UpCooldownUntil: g.upUntil, DownCooldownUntil: g.dnUntil}
	gs.ServingTemplate, gs.TemplateVars = g.dep.stored(g.removed)
	return gs
}

func (g *Group) putState(ctx context.Context, gs store.GroupState) error {
	if err := g.st.PutGroupState(ctx, gs); err != nil {
		return fmt.Errorf("group %s: record state: %w", g.cfg.Name, err)
	}
	return nil
}

// Mark is a point in the group's history that WaitConverged measures from,
// and the job that the next SetDesired's launches and retirements belong to.
type Mark struct {
	job       uint64
	churn     int
	converged bool
}

// Mark returns the group's current point in history for a new job; call it
// before the job's SetDesired. One job at a time may use a group.
func (g *Group) Mark() Mark {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.jobSeq++
	g.owedLaunch, g.owedRetire = 0, 0
	return Mark{job: g.jobSeq, churn: g.churn, converged: g.convergedLocked()}
}

// WaitConverged waits until every wanted instance is in service and nothing
// else is left. It fails with ErrNotConverged if an instance that m's job
// started or retired fails; other instances failing meanwhile are replaced
// by the reconciler and only delay convergence. A job that lowered the
// size is done once nothing starts or retires, short of it or not: the
// launches left are owed to the sizes asked before (a scale-in from 6 to 5,
// with 4 in service and every provider skipped after refusals, waited for
// the skip's end, and every decision of the policy with it). noop reports
// that the group was already converged at m and nothing changed. A reload
// removing the group fails it with ErrRemoved.
func (g *Group) WaitConverged(ctx context.Context, m Mark) (noop bool, err error) {
	for {
		g.mu.Lock()
		var failed []string
		for _, f := range g.failures {
			if f.job == m.job {
				failed = append(failed, f.Instance+": "+f.Reason)
			}
		}
		conv := g.convergedLocked() || (g.lowered == m.job && g.shortLocked())
		stopped := g.protectedStopLocked()
		churn, ch := g.churn, g.changed
		// A removed group converges on no instance: not the size asked for.
		removed := g.removed
		g.mu.Unlock()
		if removed {
			return false, fmt.Errorf("%w: group %s: %w", ErrNotConverged, g.cfg.Name, ErrRemoved)
		}
		if len(failed) > 0 {
			return false, fmt.Errorf("%w: %s", ErrNotConverged, strings.Join(failed, "; "))
		}
		if stopped != nil {
			return false, stopped
		}
		if conv {
			return m.converged && churn == m.churn, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false, fmt.Errorf("%w: %w%s", ErrNotConverged, context.Cause(ctx), g.waitingNote())
		}
	}
}

// convergedLocked reports every wanted instance in service, and nothing
// else left but instances an operator holds (see settledLocked).
func (g *Group) convergedLocked() bool {
	settled, blocked := g.settledLocked()
	return settled && len(blocked) == 0
}

// Status is a group's state as the API shows it.
type Status struct {
	Name         string           `json:"name"`
	Plan         string           `json:"plan"`
	Desired      int              `json:"desired"`
	MinSize      int              `json:"min_size"`
	MaxSize      int              `json:"max_size"`
	InService    int              `json:"in_service"`
	UpCooldown   *time.Time       `json:"up_cooldown_until,omitempty"`
	DownCooldown *time.Time       `json:"down_cooldown_until,omitempty"`
	Instances    []InstanceStatus `json:"instances"`
	LastFailures []Failure        `json:"recent_failures,omitempty"`
	HAProxyError string           `json:"haproxy_error,omitempty"`
	// Version is the serving version: what the instances in service run
	// and replacements start from. Configured, when it differs, is the
	// version the configuration describes (a reload changed the template),
	// which `shoal deploy` rolls out. Deploying is the version a running
	// deploy rolls out (or back to).
	Version    string `json:"version"`
	Configured string `json:"configured,omitempty"`
	// Template is the serving template's hash (config.Template.Hash): an
	// instance started from another one is Drifted.
	Template  string `json:"template"`
	Deploying string `json:"deploying,omitempty"`
	// InstanceHoursToday is what the group's instances ran since local
	// midnight: what a cloud bills.
	InstanceHoursToday float64 `json:"instance_hours_today"`
	// Providers are the group's providers in its order: its instances on
	// each, their instance-hours and cost today; CostToday adds them up.
	Providers []ProviderUsage `json:"providers"`
	CostToday float64         `json:"cost_today,omitempty"`
	// StartDelay is how long the group's newest instances took from
	// their start to in service (nil before one did).
	StartDelay *StartDelay `json:"start_delay,omitempty"`
	// Queue is HAProxy's queue for the group (nil when HAProxy cannot
	// say).
	Queue *Queue `json:"queue,omitempty"`
	// WarmPool is the servers of the group's warm pool (warm_pool): out
	// of rotation, not counted in its size.
	WarmPool []provider.WarmServer `json:"warm_pool,omitempty"`
}

// StartDelay is a group's measured time from an instance's start to in
// service: the median of its newest Samples, what `shoal policy
// simulate` takes as its start delay. In a group across providers it is
// the delay of the provider the next instance comes from (Provider).
type StartDelay struct {
	Median   time.Duration `json:"median_ns"`
	Samples  int           `json:"samples"`
	Provider string        `json:"provider,omitempty"`
}

// MeasuredStartDelay returns the group's measured start delay, nil when
// no instance of it has gone into service yet: in a group across
// providers, that of the provider the next instance would come from (a
// second on a host, minutes in a cloud), nil when none may start now or
// that provider has started none yet.
func (g *Group) MeasuredStartDelay(ctx context.Context) (*StartDelay, error) {
	prov := g.NextProvider()
	if prov == "" {
		return nil, nil
	}
	return g.StartDelayOn(ctx, prov)
}

// NextProvider names the provider the group's next instance would start
// on, "" when none may now (every one full or skipped).
func (g *Group) NextProvider() string {
	var rooms map[string]hostRoom
	if len(g.conf().ProviderList()) > 1 {
		rooms = g.hostRooms()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.nextProviderLocked(rooms)
}

// StartDelayOn is the group's measured start delay on provider prov (nil
// before an instance of it went into service there). A group on one
// provider counts every sample, those recorded before samples named
// their provider too.
func (g *Group) StartDelayOn(ctx context.Context, prov string) (*StartDelay, error) {
	query := prov
	if len(g.conf().ProviderList()) == 1 {
		query = ""
	}
	ds, err := g.st.StartDelays(ctx, g.cfg.Name, query)
	if err != nil || len(ds) == 0 {
		return nil, err
	}
	slices.Sort(ds)
	m := ds[len(ds)/2]
	if len(ds)%2 == 0 {
		m = (ds[len(ds)/2-1] + m) / 2
	}
	return &StartDelay{Median: m, Samples: len(ds), Provider: prov}, nil
}

// InstanceStatus is one instance as the API shows it.
type InstanceStatus struct {
	Name string `json:"name"`
	// Provider names the provider of the group's list it runs on.
	Provider string `json:"provider"`
	// CloudID is the cloud's ID of a cloud instance's server (a Sakura
	// Cloud server ID, an EC2 instance ID), what its console shows.
	CloudID  string         `json:"cloud_id,omitempty"`
	Addr     string         `json:"addr"`
	State    State          `json:"state"`
	Health   haproxy.Status `json:"health"`
	Check    string         `json:"check,omitempty"`
	Sessions int            `json:"sessions"`
	Requests int64          `json:"requests"`
	// ServerAborts counts the responses the instance cut short after they
	// had begun (HAProxy's srv_abrt): the requests its death can fail,
	// since no retry can replay a response half sent.
	ServerAborts int64     `json:"server_aborts"`
	PID          int       `json:"pid"`
	StartedAt    time.Time `json:"started_at"`
	// Since is when it entered State: how long a starting instance has
	// been booting (a cloud server takes minutes), for instance.
	Since   time.Time `json:"since"`
	Version string    `json:"version"`
	// Template is the hash of the template the instance was started from;
	// Drifted, when it is not the serving one (update.mode says whether
	// the group replaces it proactively or at its next replacement).
	Template string `json:"template,omitempty"`
	Drifted  bool   `json:"drifted,omitempty"`
	// Protected is an instance never chosen for scale-in (shoal instances protect).
	Protected bool `json:"protected,omitempty"`
	// EjectedUntil is set while the instance is out of rotation as an
	// outlier (group outliers): when it goes back.
	EjectedUntil *time.Time `json:"ejected_until,omitempty"`
	// Waiting says why a retiring instance is still in service: its
	// cloud refuses to delete it ("waiting for the cloud API: ...").
	Waiting string `json:"waiting,omitempty"`

	// The last check's HTTP status and duration, HAProxy's description of
	// Check and what the check saw; LastChange is when HAProxy last saw the
	// instance go up or down.
	CheckCode       int        `json:"check_code,omitempty"`
	CheckDurationMS int64      `json:"check_duration_ms,omitempty"`
	CheckDesc       string     `json:"check_desc,omitempty"`
	CheckReason     string     `json:"check_reason,omitempty"`
	LastChange      *time.Time `json:"last_change,omitempty"`
}

// Status reports the group with live health and sessions from HAProxy, as
// its health polls read them (at most statsMaxAge and
// haproxy.StatsMaxAge old; a change shoal made is read back afresh).
func (g *Group) Status(ctx context.Context) Status {
	stats, statErr := g.stats.all(ctx)
	now := g.clk.Now()
	c := g.conf()
	g.mu.Lock()
	s := Status{Name: g.cfg.Name, Desired: g.desired, MinSize: c.MinSize, MaxSize: c.MaxSize, Instances: []InstanceStatus{},
		Version: g.dep.version, Configured: g.dep.configured(), Deploying: g.dep.target, Template: g.dep.tmpl.Hash(g.cfg.Name)}
	if p, ok := c.PlanBySize(g.desired); ok {
		s.Plan = p.Name
	}
	if g.upUntil.After(now) {
		s.UpCooldown = &g.upUntil
	}
	if g.dnUntil.After(now) {
		s.DownCooldown = &g.dnUntil
	}
	retiring := map[string]bool{}
	for _, in := range g.insts {
		is := InstanceStatus{Name: in.name, Provider: in.prov, Addr: in.rec.Addr, State: in.state, PID: in.pid(), StartedAt: in.rec.StartedAt,
			Since: in.since, Version: in.version, Waiting: in.wait.why, Template: in.hash, Drifted: in.hash != "" && in.hash != s.Template, Protected: in.marks.protected}
		if !in.ejected.IsZero() {
			until := in.ejected
			is.EjectedUntil = &until
		}
		if c, ok := in.inst.(provider.CloudServer); ok {
			is.CloudID = c.CloudID()
		}
		s.Instances = append(s.Instances, is)
		retiring[in.name] = in.retiring
	}
	for _, f := range g.failures {
		// A retiring instance its cloud refuses to delete failed its job
		// only: it serves, and shows as waiting (InstanceStatus.Waiting).
		if now.Sub(f.At) < failureWindow && !f.serving {
			s.LastFailures = append(s.LastFailures, f)
		}
	}
	g.mu.Unlock()
	slices.SortFunc(s.Instances, func(a, b InstanceStatus) int { return strings.Compare(a.Name, b.Name) })
	if statErr != nil {
		s.HAProxyError = statErr.Error()
	} else {
		s.Queue = g.queue(ctx, stats)
	}
	for i := range s.Instances {
		in := &s.Instances[i]
		in.Health = "-"
		for _, st := range stats {
			if st.Name == in.Name {
				in.Health, in.Check, in.Sessions, in.Requests, in.ServerAborts = st.Status, st.CheckStatus, st.Sessions, st.Total, st.ServerAborts
				in.CheckCode, in.CheckDurationMS = st.CheckCode, st.CheckDuration.Milliseconds()
				in.CheckDesc, in.CheckReason = st.CheckDesc, st.CheckInfo
				// lastchg counts whole seconds: never report a change before the start.
				changed := now.Add(-st.LastChange).Truncate(time.Second)
				if changed.Before(in.StartedAt) {
					changed = in.StartedAt
				}
				in.LastChange = &changed
			}
		}
		// The health watch notices a DOWN server only at its next poll; what
		// HAProxy says now wins, so status never calls a DOWN server in service.
		if in.State == InService && in.Health.IsDown() {
			in.State = Unhealthy
		}
		if in.State == InService && !retiring[in.Name] {
			s.InService++
		}
	}
	s.WarmPool = g.warmPool()
	if sd, err := g.MeasuredStartDelay(ctx); err == nil {
		s.StartDelay = sd
	} else {
		g.log.Warn("reading the group's start delays failed", "err", err)
	}
	y, m, d := now.Date()
	if u, err := g.UsageSince(ctx, time.Date(y, m, d, 0, 0, 0, 0, now.Location())); err == nil {
		s.InstanceHoursToday = math.Round(u.InstanceHours*100) / 100
		s.Providers = g.providerUsage(ctx, u)
		for _, p := range s.Providers {
			s.CostToday += p.CostToday
		}
	} else {
		g.log.Warn("reading the group's usage failed", "err", err)
	}
	return s
}

// Serving reports whether HAProxy sends the instance new requests: in
// service and UP, not on its way down. Clients of the API (shoal-bench)
// ask this rather than read HAProxy's status words themselves.
func (in InstanceStatus) Serving() bool {
	return in.State == InService && in.Health.IsUp() && !in.Health.GoingDown()
}
