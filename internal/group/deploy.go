package group

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/provider"
)

// deployPoll is how often a deploy re-plans without a change event, so that
// min_ready periods end on time.
const deployPoll = 200 * time.Millisecond

// ErrRolledBack wraps the reason a deploy was rolled back.
var ErrRolledBack = errors.New("rolled back")

// Template returns the serving template: what the instances in service run
// and what new instances start from outside a deploy.
func (g *Group) Template() config.Template {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dep.tmpl
}

// Version returns the version of the serving template.
func (g *Group) Version() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dep.version
}

// setTemplate replaces the group's configured template (Update, for a
// config reload): it changes what the next deploy rolls out, never the
// serving template (see deployState). The caller records the group's
// state.
func (g *Group) setTemplate(t config.Template) {
	g.mu.Lock()
	was := g.dep.nextVersion
	g.dep.setBase(t)
	now, serving := g.dep.nextVersion, g.dep.version
	g.mu.Unlock()
	if now != was {
		g.log.Info("template changed; `shoal deploy` rolls it out, new instances start from the serving version until then",
			"configured", now, "was", was, "serving", serving)
	}
}

// setServing makes t, which a deploy has just put on every instance, the
// serving template (see deployState.serve), and records it.
func (g *Group) setServing(ctx context.Context, t config.Template, version string) error {
	g.mu.Lock()
	g.dep.serve(t, version)
	g.mu.Unlock()
	g.setWarmPool()
	return g.persistState(ctx)
}

// DeployTarget returns the template a deploy with these variable overrides
// would roll out: the configured template with the variables of the last
// deploy, then set. An unknown variable is a *config.UnknownVarError.
func (g *Group) DeployTarget(set map[string]string) (config.Template, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dep.targetWith(set)
}

// DeployProgress is called with each step of a deploy, for logs and jobs.
type DeployProgress func(msg string)

// Deploy rolls target out to the group: it keeps up to max_surge instances
// of target starting beyond the desired size, retires an instance of
// another version each time one of target has been in service for
// min_ready, and never lets fewer than desired − max_unavailable instances
// serve. One deploy or job at a time may use a group.
//
// The serving template S is what the instances in service run and what
// replacements and scale-ups start from; a reload changes only the
// configured template, which the next deploy rolls out. S changes only when
// a deploy succeeds; every other way out fails the job with a reason:
//
//	serving S --Deploy(T)--> rolling out T --every instance on T, ready--> serving T
//	   ^                      |         |                                  (stored)
//	   |        interrupted   |         | failure_threshold failures of T
//	   +--- (timeout, stop) --+         v
//	   |                          rolling back to S --failure_threshold----+
//	   |                                |               failures of S      |
//	   |                                | every instance on S, ready       v
//	   +--------------------------------+                     rollback failed:
//	                                                          S still starts,
//	                                                          with back-off
//
// While a roll runs, launches start the version it rolls; otherwise S.
// With deploy.strategy canary, T first runs beside S on a share of the
// requests (canaryPhase, drawn in canary.go); only once promoted is it
// rolled out as above, and a canary that fails is rolled back there. With
// blue_green, a whole set of T starts beside S and takes every request at
// once (blueGreenPhase, bluegreen.go); no roll follows.
//
// A failed deploy returns an error wrapping ErrRolledBack with the first
// failure, and the rollback's own if it could not finish; an interrupted
// one (ctx ended, or a reload removed the group: ErrRemoved) says so.
func (g *Group) Deploy(ctx context.Context, target config.Template, progress DeployProgress) error {
	version := target.Version(g.cfg.Name)
	threshold := g.conf().Deploy.FailureThreshold
	g.mu.Lock()
	serving, servingVersion := g.dep.tmpl, g.dep.version
	g.mu.Unlock()
	// A container image is pulled on every host of every provider first: a
	// deploy whose image cannot be had fails here, before it touches an
	// instance.
	for _, gp := range g.conf().ProviderList() {
		p, ok := g.provs[gp.Name].(provider.Preparer)
		if !ok {
			continue
		}
		progress(fmt.Sprintf("preparing version %s on provider %s's hosts", version, gp.Name))
		if err := p.Prepare(ctx, target); err != nil {
			return fmt.Errorf("deploy of %s: preparing provider %s's hosts failed; no instance was touched: %w", version, gp.Name, err)
		}
	}
	progress(fmt.Sprintf("deploying version %s (serving %s)", version, servingVersion))
	started := g.clk.Now()
	if g.conf().Deploy.Strategy == config.StrategyBlueGreen && version != servingVersion {
		// A whole second set, switched to at once (bluegreen.go).
		return g.blueGreenPhase(ctx, target, version, servingVersion, started, progress)
	}
	if g.conf().Deploy.Strategy == config.StrategyCanary && version != servingVersion {
		// A canary first (canary.go); promoted, it is replaced as below.
		promoted, err := g.canaryPhase(ctx, target, version, servingVersion, started, progress)
		if !promoted {
			return err
		}
		// Whatever the roll's end, every server ends at the same weight.
		defer g.resetWeights(context.WithoutCancel(ctx), func(*instance) bool { return true })
	}

	failure, err := g.roll(ctx, target, version, started, threshold, progress)
	if err == nil && failure == "" {
		if err := g.setServing(context.WithoutCancel(ctx), target, version); err != nil {
			return fmt.Errorf("deploy of %s done, but recording it as the serving version failed: %w", version, err)
		}
		progress(fmt.Sprintf("version %s in service on every instance", version))
		return nil
	}

	// The roll has ended, so new instances start from the serving template
	// again. Instances of the new version that serve nobody go at once; the
	// others are replaced as gently as they came.
	g.mu.Lock()
	for _, in := range g.activeLocked() {
		if in.version == version && version != servingVersion && in.state != InService {
			g.retireLocked(in, "rollback")
		}
	}
	g.notifyLocked()
	g.mu.Unlock()
	g.poke()
	switch {
	case err != nil:
		// Interrupted (shutdown or timeout): nothing else moves.
		return fmt.Errorf("deploy of %s interrupted (%w); new instances start from the serving version %s", version, err, servingVersion)
	case version == servingVersion:
		return fmt.Errorf("deploy of %s, the serving version, failed: %s", version, failure)
	}
	progress(fmt.Sprintf("rolling back to %s: %s", servingVersion, failure))
	rfailure, rerr := g.roll(ctx, serving, servingVersion, g.clk.Now(), threshold, progress)
	switch {
	case rerr != nil:
		return fmt.Errorf("%w: %s; the rollback to %s did not finish: %w", ErrRolledBack, failure, servingVersion, rerr)
	case rfailure != "":
		return fmt.Errorf("%w: %s; the rollback to %s failed: %s (new instances go on starting from it, with back-off)", ErrRolledBack, failure, servingVersion, rfailure)
	}
	return fmt.Errorf("%w: %s", ErrRolledBack, failure)
}

// roll replaces every active instance whose version is not version with
// instances started from tmpl, step by step (see planDeploy). It returns
// the first failure once threshold instances of version have failed since
// started, or ctx's error.
func (g *Group) roll(ctx context.Context, tmpl config.Template, version string, started time.Time, threshold int, progress DeployProgress) (failure string, err error) {
	dep := g.conf().Deploy
	g.mu.Lock()
	g.dep.begin(version, tmpl)
	g.mu.Unlock()
	defer g.endDeploy()
	// wentDown remembers new instances already counted as failed after
	// they went DOWN in service.
	wentDown := map[string]bool{}
	tick, stop := g.clk.NewTicker(deployPoll)
	defer stop()
	lastNote := ""
	for {
		g.mu.Lock()
		// A removed group retires every instance: with none left the
		// roll would look done, although it put its version nowhere.
		if g.removed {
			g.mu.Unlock()
			return "", fmt.Errorf("group %s: %w", g.cfg.Name, ErrRemoved)
		}
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
			case in.state == InService && g.clk.Now().Sub(in.since) >= dep.MinReady:
				view.NewReady++
			}
		}
		if len(fails) >= threshold {
			g.mu.Unlock()
			return fails[0], nil
		}
		step := planDeploy(view)
		g.dep.surge = step.Surge
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
			// Done once the instances it retired are gone too, as
			// operators read it: a status read after the job shows only
			// the new version (the last drain outlived the job before).
			g.waitLeft(ctx, func(in *instance) bool { return in.version != version })
			return "", nil
		}
		select {
		case <-ctx.Done():
			return "", context.Cause(ctx)
		case <-ch:
		case <-tick:
		}
	}
}

func (g *Group) endDeploy() {
	g.mu.Lock()
	g.dep.end()
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
// inter, fastinter and downinter, plus one poll of the stats and the
// most their answer may have aged (the group's cache and the Manager's).
type failStreak struct {
	since time.Time
}

func (f *failStreak) observe(st haproxy.ServerStat, h config.Health, now time.Time) bool {
	if !st.AnsweredBadly() {
		f.since = time.Time{}
		return false
	}
	if f.since.IsZero() {
		f.since = now
	}
	inter := max(h.Interval, h.FastInter, h.DownInter)
	return now.Sub(f.since) >= time.Duration(h.Fall-1)*(inter+h.Timeout)+statsMaxAge+haproxy.StatsMaxAge+healthPoll
}

// checkReason says what a failed check saw: "HTTP 500" for a bad status,
// else HAProxy's summary.
func checkReason(st haproxy.ServerStat) string {
	if code := st.RefusedStatus(); code != 0 {
		return fmt.Sprintf("HTTP %d", code)
	}
	return healthCheckSummary(st)
}
