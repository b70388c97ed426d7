package group

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/canary"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/event"
	"github.com/shoal-lb/shoal/internal/haproxy"
)

// A blue/green deploy (deploy.strategy blue_green) starts a whole second
// set (green) of the new version T beside the serving one (blue, S), out
// of rotation (HAProxy weight 0) while each passes its health gate; with
// an analysis, green then gets weight % of the requests while canary's
// analysis compares it with blue; then every request moves to green on one
// Runtime API line (green's weights raised before blue's are set to 0, so
// no request finds no server), and blue keeps running, out of rotation but
// checked, for keep_old, when `shoal deploy rollback` switches back at
// once. After keep_old T is stored as the serving template, then blue is
// drained and stopped. Its phases are canary.Next's (drawn in
// canary/bluegreen.go); what each transition does here:
//
//	starting green --(every green instance in service)--> analysing | switched
//	   launches start T until the set is whole (dep.canary), surge = size
//	analysing:   weights give green weight % (canary.Weights); the window
//	             starts; canary.Judge every interval
//	switched:    one line: green 100, blue 0; keep_old starts
//	done:        T stored as serving FIRST, then blue retired and the roll
//	             ended under one lock (the reconciler never sees a surplus
//	             it could take from green)
//	rolled back: blue 100 before green 0 (one line), then green retired and
//	             the roll ended under one lock
//
// A restart of shoal (or its kill -9) mid-deploy rolls it back when the
// group runs again (recoverDeploy): blue, still the stored serving
// version, is given its weight back first, then green is drained and
// stopped. Blue is kept whole until T is stored as serving, so a switch
// back is always possible; a restart after that finishes the deploy
// instead (the leftover blue instances are retired).

// ErrNoBlueGreen is a blue/green command for a group that runs none.
var ErrNoBlueGreen = errors.New("no blue/green deploy is running")

// ErrUnsupportedAct is a deploy command the running deploy has no use for.
var ErrUnsupportedAct = errors.New("not a command of this deploy")

// BlueGreenRollback is `shoal deploy rollback`: back to blue at once.
const BlueGreenRollback = canary.CmdRollback

// BlueGreenActions lists a blue/green deploy's commands.
var BlueGreenActions = []string{canary.CmdRollback, canary.CmdAbort, canary.CmdPromote}

// DeployActions lists every deploy command, for the API's and CLI's checks.
var DeployActions = append(slices.Clone(CanaryActions), BlueGreenRollback)

// blueGreenRun is a blue/green deploy (g.bg, under g.mu): the running one,
// or the last one, ended, for status.
type blueGreenRun struct {
	version, blue string
	cfg           config.BlueGreen
	phase         canary.Phase
	// want is the green set's size: the group's size at the start.
	want int
	// wg and wb are the weights green's and blue's servers should have
	// now (haproxy.WeightOff: out of rotation); applied what HAProxy was
	// last told, per server.
	wg, wb  int
	applied map[string]int
	// an is the analysis before the switch, canary's: a one-step canary
	// at cfg.Weight; after the switch it only counts both sets' figures.
	an *canaryRun
	// switched is when every request moved to green, keepUntil when blue
	// is stopped; reason why the run reached its phase.
	switched, keepUntil time.Time
	reason              string
	cmd                 chan canaryCmd
	done                chan struct{}
	// acks are the commands taken and not yet applied (the run's own
	// goroutine's): closed once their effect is in HAProxy.
	acks []chan struct{}
}

// ackCommands tells the operators' commands taken so far that they are
// applied.
func (r *blueGreenRun) ackCommands() {
	for _, a := range r.acks {
		close(a)
	}
	r.acks = nil
}

// BlueGreenStatus is a blue/green deploy as the API and `shoal deploy
// status` show it: a JSON contract.
type BlueGreenStatus struct {
	Version string `json:"version"`
	Blue    string `json:"blue"`
	// Phase is canary.Phase: starting green, analysing, switched, done,
	// rolled back.
	Phase   string `json:"phase"`
	Running bool   `json:"running"`
	// Reason is why it moved to its phase (why it rolled back, say).
	Reason  string        `json:"reason,omitempty"`
	KeepOld time.Duration `json:"keep_old"`
	// KeepUntil is when blue is stopped, once switched.
	KeepUntil      *time.Time `json:"keep_until,omitempty"`
	SwitchedAt     *time.Time `json:"switched_at,omitempty"`
	GreenWant      int        `json:"green_want"`
	GreenInstances int        `json:"green_instances"`
	BlueInstances  int        `json:"blue_instances"`
	// GreenWeight and BlueWeight are HAProxy's weights (0: out of
	// rotation).
	GreenWeight int           `json:"green_weight"`
	BlueWeight  int           `json:"blue_weight"`
	Green       VersionFigure `json:"green"`
	BlueFigures VersionFigure `json:"blue_figures"`
	// AnalysisWeight is green's share while analysed (0: no analysis).
	AnalysisWeight   float64       `json:"analysis_weight,omitempty"`
	Analysis         string        `json:"analysis,omitempty"`
	AnalysisVerdict  string        `json:"analysis_verdict,omitempty"`
	AnalysisInterval time.Duration `json:"analysis_interval,omitempty"`
}

// BlueGreenStatus returns the running blue/green deploy, or the last one
// of this run of shoal.
func (g *Group) BlueGreenStatus() (BlueGreenStatus, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.bg
	if r == nil {
		return BlueGreenStatus{}, false
	}
	s := BlueGreenStatus{Version: r.version, Blue: r.blue, Phase: string(r.phase), Running: !r.phase.Ended(), Reason: r.reason,
		KeepOld: r.cfg.KeepOld, GreenWant: r.want, GreenWeight: max(r.wg, 0), BlueWeight: max(r.wb, 0),
		Green: figureOf(r.an.can), BlueFigures: figureOf(r.an.stab), Analysis: bgWords(r.an.last.Reason)}
	if !r.switched.IsZero() {
		sw, ku := r.switched, r.keepUntil
		s.SwitchedAt, s.KeepUntil = &sw, &ku
	}
	if r.cfg.Analysis != nil {
		s.AnalysisWeight, s.AnalysisInterval = r.cfg.Weight, r.cfg.Analysis.Interval
		if !r.an.judged.IsZero() && r.an.cfg.Analysis != nil {
			s.AnalysisVerdict = r.an.last.Verdict.String()
		}
	}
	s.GreenInstances, s.BlueInstances = g.servingCountsLocked(r.version)
	return s, true
}

// bgWords words the analysis' figures (canary.Judge's) for blue/green.
var bgWords = strings.NewReplacer("canary ", "green ", "stable ", "blue ").Replace

// BlueGreenCommand hands the running blue/green deploy an operator's
// command (rollback, abort, promote); ErrNoBlueGreen when none runs.
func (g *Group) BlueGreenCommand(action string) error {
	if !slices.Contains(BlueGreenActions, action) {
		return fmt.Errorf("group %s: %q is %w: a blue/green deploy takes %v", g.cfg.Name, action, ErrUnsupportedAct, BlueGreenActions)
	}
	g.mu.Lock()
	r := g.bg
	g.mu.Unlock()
	if r == nil || r.phase.Ended() {
		return fmt.Errorf("group %s: %w", g.cfg.Name, ErrNoBlueGreen)
	}
	// Returned once applied, as a canary's: `shoal deploy rollback`
	// returns with blue taking every request (it returned when the command
	// was taken, and under load HAProxy still had blue at weight 0).
	switch err := handCommand(r.cmd, r.done, action); {
	case errors.Is(err, errRunEnded):
		return fmt.Errorf("group %s: %w (it has ended)", g.cfg.Name, ErrNoBlueGreen)
	case err != nil:
		return fmt.Errorf("group %s: the blue/green deploy %w", g.cfg.Name, err)
	}
	return nil
}

// blueGreenWeightLocked is the weight a server of in gets while a
// blue/green deploy runs (0: HAProxy's default, outside one).
func (g *Group) blueGreenWeightLocked(in *instance) int {
	r := g.bg
	if r == nil || r.phase.Ended() {
		return 0
	}
	if in.version == r.version {
		return r.wg
	}
	return r.wb
}

// setBlueGreenWeightsLocked sets the weights green's and blue's servers
// should have in r's phase.
func (g *Group) setBlueGreenWeightsLocked(r *blueGreenRun) {
	switch r.phase {
	case canary.StartingGreen:
		r.wg, r.wb = haproxy.WeightOff, defaultWeight
	case canary.Analysing:
		green, blue := g.servingCountsLocked(r.version)
		r.wg, r.wb = canary.Weights(green, blue, r.cfg.Weight)
	case canary.Switched, canary.Done:
		r.wg, r.wb = defaultWeight, haproxy.WeightOff
	case canary.RolledBack:
		r.wg, r.wb = haproxy.WeightOff, defaultWeight
	}
}

// applyBlueGreenWeights tells HAProxy, on one Runtime API line, the
// weights of every server in service that differ from what it was last
// told: raises first, so that the backend always has a server in rotation.
func (g *Group) applyBlueGreenWeights(ctx context.Context, r *blueGreenRun) error {
	g.mu.Lock()
	g.setBlueGreenWeightsLocked(r)
	var up, down []haproxy.ServerWeight
	green := map[string]bool{}
	for _, in := range g.insts {
		if in.version == r.version {
			green[in.name] = true
		}
		if in.retiring || (in.state != InService && in.state != Unhealthy) {
			continue
		}
		w := r.wb
		if in.version == r.version {
			w = r.wg
		}
		if a, ok := r.applied[in.name]; ok && a == w {
			continue
		}
		if w == haproxy.WeightOff {
			down = append(down, haproxy.ServerWeight{Name: in.name, Weight: w})
		} else {
			up = append(up, haproxy.ServerWeight{Name: in.name, Weight: w})
		}
	}
	g.mu.Unlock()
	if lat := g.canLat.Load(); lat != nil {
		lat.setCanaries(green)
	}
	byName := func(a, b haproxy.ServerWeight) int { return strings.Compare(a.Name, b.Name) }
	slices.SortFunc(up, byName)
	slices.SortFunc(down, byName)
	sets := append(up, down...)
	if len(sets) == 0 {
		return nil
	}
	if err := g.lb.SetWeights(context.WithoutCancel(ctx), g.cfg.Name, sets); err != nil {
		return fmt.Errorf("setting the blue/green weights: %w", err)
	}
	g.mu.Lock()
	for _, s := range sets {
		r.applied[s.Name] = s.Weight
	}
	g.mu.Unlock()
	return nil
}

// blueGreenPhase runs a blue/green deploy of target (version) beside the
// serving version blue until it is done (nil) or rolled back (the error
// says why).
func (g *Group) blueGreenPhase(ctx context.Context, target config.Template, version, blue string, started time.Time, progress DeployProgress) error {
	c := *g.conf().Deploy.BlueGreen
	threshold := g.conf().Deploy.FailureThreshold
	// Without an analysis, the run only counts both sets' figures.
	an := &canaryRun{version: version, stable: blue, cfg: config.Canary{Steps: []config.CanaryStep{{Weight: 100}}}, applied: map[string]int{}}
	if c.Analysis != nil {
		an.cfg = config.Canary{Steps: []config.CanaryStep{{Weight: c.Weight}}, Analysis: c.Analysis}
	}
	r := &blueGreenRun{version: version, blue: blue, cfg: c, phase: canary.StartingGreen, an: an, applied: map[string]int{},
		cmd: make(chan canaryCmd), done: make(chan struct{})}
	g.mu.Lock()
	r.want = g.desired
	g.dep.begin(version, target)
	g.dep.canary, g.dep.surge = r.want, r.want
	g.setBlueGreenWeightsLocked(r)
	g.bg = r
	g.notifyLocked()
	g.mu.Unlock()
	lat := &latencyWindow{}
	g.canLat.Store(lat)
	defer g.canLat.Store(nil)
	defer close(r.done)
	defer r.ackCommands()
	g.poke()
	msg := fmt.Sprintf("starting green: %d instance(s) of %s beside blue's of %s, out of rotation until the switch", r.want, version, blue)
	progress(msg)
	g.record(ctx, event.BlueGreenStarted, version, "blue/green "+version+" "+msg)

	tick, stop := g.clk.NewTicker(deployPoll)
	defer stop()
	wentDown := map[string]bool{}
	var pending string
	var interrupted error
	for {
		if g.isRemoved() && interrupted == nil {
			interrupted = fmt.Errorf("group %s: %w", g.cfg.Name, ErrRemoved)
		}
		o := canary.Observation{Want: r.want, Analysis: c.Analysis != nil, Command: pending, Interrupted: interrupted != nil}
		pending = ""
		o.Failure = strings.TrimPrefix(g.canaryHealthFailure(version, started, threshold, wentDown), "health: ")
		now := g.clk.Now()
		if err := g.applyBlueGreenWeights(ctx, r); err != nil {
			g.log.Warn("blue/green weights", "err", err)
		}
		g.mu.Lock()
		phase := r.phase
		o.Green, _ = g.servingCountsLocked(version)
		o.KeepPassed = phase == canary.Switched && !now.Before(r.keepUntil)
		g.mu.Unlock()
		if phase == canary.Analysing || phase == canary.Switched {
			g.analyse(ctx, an, lat, now)
			g.mu.Lock()
			o.Verdict = an.last.Verdict
			g.mu.Unlock()
		}
		next, why := canary.Next(phase, o)
		if next != phase {
			switch next {
			case canary.Analysing:
				g.enterAnalysing(ctx, r, lat, progress)
			case canary.Switched:
				if err := g.switchToGreen(ctx, r, lat, why, progress); err != nil {
					next, why = canary.RolledBack, err.Error()
				}
			case canary.Done:
				return g.finishBlueGreen(ctx, r, target, why, progress)
			}
			if next == canary.RolledBack {
				if interrupted != nil {
					why = fmt.Sprintf("interrupted (%v)", interrupted)
				} else if why == "analysis failed" {
					g.mu.Lock()
					why = "analysis: " + bgWords(an.last.Reason)
					g.mu.Unlock()
				}
				return g.rollBackBlueGreen(ctx, r, phase, why, interrupted, progress)
			}
		}
		r.ackCommands() // their transitions, if any, are made
		g.mu.Lock()
		ch := g.changed
		g.mu.Unlock()
		select {
		case <-ctx.Done():
			interrupted = context.Cause(ctx)
		case cmd := <-r.cmd:
			pending = cmd.action
			r.acks = append(r.acks, cmd.applied)
			g.log.Info("blue/green command", "version", version, "command", cmd.action)
		case <-ch:
		case <-tick:
		}
	}
}

func (g *Group) isRemoved() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.removed
}

// enterAnalysing gives green its share and starts the analysis' window.
func (g *Group) enterAnalysing(ctx context.Context, r *blueGreenRun, lat *latencyWindow, progress DeployProgress) {
	g.setBGPhase(r, canary.Analysing, "every green instance in service")
	if err := g.applyBlueGreenWeights(ctx, r); err != nil {
		g.log.Warn("blue/green weights", "err", err)
	}
	g.startWindow(ctx, r.an, lat)
	g.mu.Lock()
	green, blue := g.servingCountsLocked(r.version)
	msg := fmt.Sprintf("analysing green at %g%% of the requests (%d green at weight %d, %d blue at weight %d: %.1f%%)",
		r.cfg.Weight, green, r.wg, blue, r.wb, 100*canary.Share(green, blue, r.wg, r.wb))
	g.mu.Unlock()
	progress(msg)
	g.record(ctx, event.BlueGreenAnalysing, r.version, "blue/green "+r.version+" "+msg)
}

// switchToGreen moves every request to green at once and starts keep_old.
func (g *Group) switchToGreen(ctx context.Context, r *blueGreenRun, lat *latencyWindow, why string, progress DeployProgress) error {
	g.mu.Lock()
	figures := bgWords(r.an.last.Reason)
	g.mu.Unlock()
	g.setBGPhase(r, canary.Switched, why)
	if err := g.applyBlueGreenWeights(ctx, r); err != nil {
		return err
	}
	g.startWindow(ctx, r.an, lat)
	g.mu.Lock()
	now := g.clk.Now()
	r.switched, r.keepUntil = now, now.Add(r.cfg.KeepOld)
	// From here the figures are counted, not judged: blue gets no request.
	r.an.cfg.Analysis = nil
	green, blue := g.servingCountsLocked(r.version)
	msg := fmt.Sprintf("switched (%s): every request to green's %d instance(s) of %s; blue's %d of %s out of rotation, kept until %s (keep_old %s)",
		why, green, r.version, blue, r.blue, r.keepUntil.UTC().Format(time.RFC3339), r.cfg.KeepOld)
	g.mu.Unlock()
	if figures != "" {
		msg += "; analysis: " + figures
	}
	progress(msg)
	g.record(ctx, event.BlueGreenSwitched, r.version, "blue/green "+r.version+" "+msg)
	return nil
}

func (g *Group) setBGPhase(r *blueGreenRun, p canary.Phase, why string) {
	g.mu.Lock()
	r.phase, r.reason = p, why
	g.setBlueGreenWeightsLocked(r)
	g.notifyLocked()
	g.mu.Unlock()
}

// finishBlueGreen makes green's version the serving one, then stops blue.
func (g *Group) finishBlueGreen(ctx context.Context, r *blueGreenRun, target config.Template, why string, progress DeployProgress) error {
	wctx := context.WithoutCancel(ctx)
	// Stored first: a restart from here on finishes rather than switching
	// back to a blue that is on its way out.
	serr := g.setServing(wctx, target, r.version)
	g.mu.Lock()
	figures := bgWords(r.an.last.Reason)
	var retired []string
	for _, in := range g.insts {
		if in.version != r.version && !in.retiring {
			g.retireLocked(in, "blue/green: keep_old over")
			retired = append(retired, in.name)
		}
	}
	g.dep.end()
	g.mu.Unlock()
	g.setBGPhase(r, canary.Done, why)
	g.poke()
	r.ackCommands()
	slices.Sort(retired)
	msg := fmt.Sprintf("done (%s): %s serves; blue's %s drained and stopped", why, r.version, strings.Join(retired, ", "))
	if figures != "" {
		msg += "; since the switch: " + figures
	}
	progress(msg)
	g.record(wctx, event.BlueGreenDone, r.version, "blue/green "+r.version+" "+msg)
	g.waitGone(ctx, r.blue)
	if serr != nil {
		return fmt.Errorf("blue/green deploy of %s done, but recording it as the serving version failed: %w", r.version, serr)
	}
	return nil
}

// rollBackBlueGreen puts blue back in rotation, then retires green.
func (g *Group) rollBackBlueGreen(runCtx context.Context, r *blueGreenRun, from canary.Phase, why string, interrupted error, progress DeployProgress) error {
	// The switch back and the records are done even when the deploy's
	// context has ended; waiting for green to go is not.
	ctx := context.WithoutCancel(runCtx)
	g.mu.Lock()
	figures := bgWords(r.an.last.Reason)
	g.mu.Unlock()
	g.setBGPhase(r, canary.RolledBack, why)
	if err := g.applyBlueGreenWeights(ctx, r); err != nil {
		// Green goes anyway: its drain takes it out of rotation, and blue's
		// weight is in the registry for HAProxy's next sync.
		g.log.Error("switching back to blue failed", "err", err)
	}
	g.mu.Lock()
	var retired []string
	for _, in := range g.insts {
		if in.version == r.version && !in.retiring {
			g.retireLocked(in, "blue/green rollback")
			retired = append(retired, in.name)
		}
	}
	g.dep.end()
	g.notifyLocked()
	g.mu.Unlock()
	g.poke()
	r.ackCommands() // blue serves; green's drain goes on
	slices.Sort(retired)
	msg := fmt.Sprintf("rolled back while %s: %s; blue (%s) serves every request, green's %s drained and stopped", from, why, r.blue, strings.Join(retired, ", "))
	if figures != "" && !strings.Contains(why, figures) {
		msg += "; figures: " + figures
	}
	g.log.Warn("blue/green rolled back", "version", r.version, "reason", why, "retired", retired)
	progress(msg)
	g.record(ctx, event.BlueGreenRolledBack, r.version, "blue/green "+r.version+" "+msg)
	g.waitGone(runCtx, r.version)
	if interrupted != nil {
		return fmt.Errorf("blue/green deploy of %s interrupted (%w); rolled back, the serving version %s serves", r.version, interrupted, r.blue)
	}
	return fmt.Errorf("%w: %s", ErrRolledBack, why)
}

// blueGreenTimeout is how long a blue/green deploy may take beyond a
// rolling deploy: green's starts, the analysis, and keep_old.
func blueGreenTimeout(c config.Group) time.Duration {
	if c.Deploy.Strategy != config.StrategyBlueGreen || c.Deploy.BlueGreen == nil {
		return 0
	}
	d := c.Deploy.BlueGreen.KeepOld + c.Health.Grace + time.Minute
	if a := c.Deploy.BlueGreen.Analysis; a != nil {
		d += 10*a.Interval + 5*time.Minute
	}
	return d
}
