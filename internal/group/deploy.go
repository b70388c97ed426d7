package group

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy"
)

// deployPoll is how often a deploy re-plans without a change event, so that
// min_ready periods end on time.
const deployPoll = 200 * time.Millisecond

// ErrRolledBack wraps the reason a deploy was rolled back.
var ErrRolledBack = errors.New("rolled back")

// Template returns the template in force: what new instances start from.
func (g *Group) Template() config.Template {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.tmpl
}

// Version returns the version of the template in force.
func (g *Group) Version() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.version
}

// setTemplate replaces the group's configured template (Update, for a
// config reload). The variables set by the last deploy stay set where the
// new template still declares them. Instances already running keep their
// version; new ones (replacements, scale-ups) start from the new template,
// and `shoal deploy` rolls it out to the rest. While a deploy runs, the
// template it rolls out (or back to) stays in force and t is what the next
// deploy starts from. The caller records the group's state.
func (g *Group) setTemplate(t config.Template) {
	g.mu.Lock()
	if g.deploying {
		g.base = t
		g.mu.Unlock()
		g.log.Info("template changed during a deploy; the next deploy rolls it out")
		return
	}
	old := g.version
	g.setBaseLocked(t)
	now := g.version
	g.mu.Unlock()
	if now != old {
		g.log.Info("template changed; new instances start from it and a deploy rolls it out", "version", now, "was", old)
	}
}

// setBaseLocked makes t the configured template and recomputes the one in
// force. Deployed variables t no longer declares are dropped.
func (g *Group) setBaseLocked(t config.Template) {
	g.base = t
	keep := map[string]string{}
	for k, v := range g.vars {
		if _, ok := t.Vars[k]; ok {
			keep[k] = v
		} else {
			g.log.Warn("deployed template variable is no longer declared; dropped", "var", k)
		}
	}
	tmpl, err := t.WithVars(g.cfg.Name, keep)
	if err != nil {
		g.log.Warn("deployed template variables no longer apply; using the configured template", "err", err)
		tmpl, keep = t, nil
	}
	if len(keep) == 0 {
		keep = nil
	}
	g.tmpl, g.vars, g.version = tmpl, keep, tmpl.Version(g.cfg.Name)
}

// DeployTarget returns the template a deploy with these variable overrides
// would roll out: the configured template with the variables of the last
// deploy, then set. An unknown variable is a *config.UnknownVarError.
func (g *Group) DeployTarget(set map[string]string) (config.Template, error) {
	g.mu.Lock()
	base, vars := g.base, maps.Clone(g.vars)
	g.mu.Unlock()
	if vars == nil {
		vars = map[string]string{}
	}
	maps.Copy(vars, set)
	return base.WithVars(g.cfg.Name, vars)
}

func (g *Group) decodeVars(s string) map[string]string {
	if s == "" {
		return nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		g.log.Warn("stored template variables are unreadable; ignored", "err", err)
		return nil
	}
	return m
}

func encodeVars(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	b, _ := json.Marshal(m) // a map of strings always encodes
	return string(b)
}

// DeployProgress is called with each step of a deploy, for logs and jobs.
type DeployProgress func(msg string)

// Deploy rolls target out to the group: it keeps up to max_surge instances
// of target starting beyond the desired size, retires an instance of
// another version each time one of target has been in service for
// min_ready, and never lets fewer than desired − max_unavailable instances
// serve. Once failure_threshold instances of target have failed it rolls
// back the same way (the previous template is in force again, the new
// instances are replaced) and returns an error wrapping ErrRolledBack with
// the first failure. One deploy or job at a time may use a group.
func (g *Group) Deploy(ctx context.Context, target config.Template, progress DeployProgress) error {
	version := target.Version(g.cfg.Name)
	g.mu.Lock()
	prev, prevVersion := g.tmpl, g.version
	g.tmpl, g.version, g.deploying = target, version, true
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.deploying = false
		g.mu.Unlock()
	}()
	progress(fmt.Sprintf("deploying version %s (was %s)", version, prevVersion))
	started := time.Now()

	failure, err := g.roll(ctx, version, started, g.conf().Deploy.FailureThreshold, progress)
	if err == nil && failure == "" {
		g.mu.Lock()
		g.vars = target.Overrides()
		if len(g.vars) == 0 {
			g.vars = nil
		}
		g.mu.Unlock()
		if err := g.persistState(context.WithoutCancel(ctx)); err != nil {
			return fmt.Errorf("deploy of %s done, but recording its variables failed: %w", version, err)
		}
		progress(fmt.Sprintf("version %s in service on every instance", version))
		return nil
	}

	// Roll back: the previous template is in force again; instances of the
	// new version that serve nobody go at once, the others are replaced
	// as gently as they came.
	g.mu.Lock()
	g.tmpl, g.version = prev, prevVersion
	for _, in := range g.activeLocked() {
		if in.version == version && in.state != InService {
			g.retireLocked(in, "rollback")
		}
	}
	g.notifyLocked()
	g.mu.Unlock()
	g.poke()
	if err != nil {
		// Interrupted (shutdown or timeout): the previous template is in
		// force for what the reconciler starts next; nothing else moves.
		g.endDeploy()
		return fmt.Errorf("deploy of %s interrupted (%w); the previous template (%s) is back in force", version, err, prevVersion)
	}
	progress(fmt.Sprintf("rolling back to %s: %s", prevVersion, failure))
	if _, rerr := g.roll(ctx, prevVersion, time.Now(), 0, progress); rerr != nil {
		g.endDeploy()
		return fmt.Errorf("%w: %s; the rollback to %s did not finish: %w", ErrRolledBack, failure, prevVersion, rerr)
	}
	return fmt.Errorf("%w: %s", ErrRolledBack, failure)
}

// roll replaces every active instance whose version is not version, step by
// step (see planDeploy). It returns the first failure once threshold
// instances of version have failed since started (threshold 0: never), or
// ctx's error.
func (g *Group) roll(ctx context.Context, version string, started time.Time, threshold int, progress DeployProgress) (failure string, err error) {
	dep := g.conf().Deploy
	g.mu.Lock()
	g.deployTarget = version
	g.mu.Unlock()
	defer g.endDeploy()
	// wentDown remembers new instances already counted as failed after
	// they went DOWN in service.
	wentDown := map[string]bool{}
	tick := time.NewTicker(deployPoll)
	defer tick.Stop()
	lastNote := ""
	for {
		g.mu.Lock()
		var fails []string
		for _, f := range g.failures {
			if f.version == version && !f.At.Before(started) {
				fails = append(fails, f.Instance+" "+f.Reason)
			}
		}
		view := deployView{Desired: g.desired, MaxSurge: dep.MaxSurge, MaxUnavailable: dep.MaxUnavailable}
		byName := map[string]*instance{}
		for _, in := range g.activeLocked() {
			byName[in.name] = in
			if in.version != version {
				view.Old = append(view.Old, oldInstance{Name: in.name, Serving: in.state == InService})
				continue
			}
			view.NewActive++
			switch {
			case in.state == Unhealthy && !wentDown[in.name]:
				wentDown[in.name] = true
				fails = append(fails, in.name+" went DOWN after entering service")
			case in.state == InService && time.Since(in.since) >= dep.MinReady:
				view.NewReady++
			}
		}
		if threshold > 0 && len(fails) >= threshold {
			g.mu.Unlock()
			return fails[0], nil
		}
		step := planDeploy(view)
		g.surge = step.Surge
		for _, name := range step.Retire {
			g.retireLocked(byName[name], "deploy")
		}
		if len(step.Retire) > 0 {
			g.notifyLocked()
		}
		ch := g.changed
		g.mu.Unlock()
		g.poke()
		note := fmt.Sprintf("%d/%d on %s in service, %d other", view.NewReady, view.Desired, version, len(view.Old)-len(step.Retire))
		if len(step.Retire) > 0 {
			note += "; retiring " + strings.Join(step.Retire, ", ")
		}
		if note != lastNote {
			progress(note)
			lastNote = note
		}
		if step.Done {
			return "", nil
		}
		select {
		case <-ctx.Done():
			return "", context.Cause(ctx)
		case <-ch:
		case <-tick.C:
		}
	}
}

func (g *Group) endDeploy() {
	g.mu.Lock()
	g.surge, g.deployTarget = 0, ""
	g.notifyLocked()
	g.mu.Unlock()
	g.poke()
}

// retireLocked asks an instance to drain and stop. g.mu must be held.
func (g *Group) retireLocked(in *instance, why string) {
	if in == nil || in.retiring {
		return
	}
	in.retiring = true
	close(in.retire)
	g.churn++
	g.log.Info("instance retiring", "instance", in.name, "state", in.state, "version", in.version, "for", why)
}

// deployView is what a deploy step is planned from: the active instances
// of other versions and counts of the new version's.
type deployView struct {
	Desired        int
	MaxSurge       int
	MaxUnavailable int
	Old            []oldInstance
	// NewActive counts instances of the new version starting or serving;
	// NewReady those in service for min_ready.
	NewActive int
	NewReady  int
}

type oldInstance struct {
	Name    string
	Serving bool
}

// deployStep is what to do now: how many instances beyond desired to keep
// (the reconciler starts them from the new template) and which old ones to
// retire; Done when only ready instances of the new version are left.
type deployStep struct {
	Surge  int
	Retire []string
	Done   bool
}

// planDeploy decides one step of a rolling deploy. Old instances that serve
// nobody may go at once; serving ones only while at least desired −
// max_unavailable instances (serving old ones and ready new ones) stay. The
// surge shrinks with the old instances left, so the last retirement does
// not start an instance too many.
func planDeploy(v deployView) deployStep {
	if len(v.Old) == 0 {
		return deployStep{Done: v.NewReady >= v.Desired && v.NewActive == v.NewReady}
	}
	var step deployStep
	serving := 0
	for _, o := range v.Old {
		if !o.Serving {
			step.Retire = append(step.Retire, o.Name)
		} else {
			serving++
		}
	}
	spare := serving + v.NewReady - (v.Desired - v.MaxUnavailable)
	for _, o := range v.Old {
		if spare <= 0 {
			break
		}
		if o.Serving {
			step.Retire = append(step.Retire, o.Name)
			spare--
		}
	}
	slices.Sort(step.Retire)
	step.Surge = min(v.MaxSurge, len(v.Old)-len(step.Retire))
	return step
}

// failStreak tells when a starting instance has answered its health check
// with an error fall times in a row. Connection failures do not count: the
// process may still be starting, which grace covers. HAProxy's stats give
// the last check only, and its status stays until the next check ends, so
// the streak is measured in time: the fall-th check ends at most
// (fall − 1) × (interval + timeout) after the first, with the longest of
// inter, fastinter and downinter, plus one poll of the stats.
type failStreak struct {
	since time.Time
}

func (f *failStreak) observe(st haproxy.ServerStat, h config.Health, now time.Time) bool {
	if !answeredBadly(st.CheckStatus) {
		f.since = time.Time{}
		return false
	}
	if f.since.IsZero() {
		f.since = now
	}
	inter := max(h.Interval, h.FastInter, h.DownInter)
	return now.Sub(f.since) >= time.Duration(h.Fall-1)*(inter+h.Timeout)+statsMaxAge+healthPoll
}

// answeredBadly is true for HAProxy check results where the instance
// answered, but wrongly: a bad HTTP status, content or TCP answer, or a
// response too slow.
func answeredBadly(checkStatus string) bool {
	s := strings.TrimPrefix(checkStatus, "* ")
	return s == "L7STS" || s == "L7RSP" || s == "L7TOUT" || s == "L6RSP"
}

// checkReason says what a failed check saw: "HTTP 500" for a bad status,
// else HAProxy's summary.
func checkReason(st haproxy.ServerStat) string {
	if strings.TrimPrefix(st.CheckStatus, "* ") == "L7STS" && st.CheckCode != 0 {
		return fmt.Sprintf("HTTP %d", st.CheckCode)
	}
	return checkSummary(st)
}
