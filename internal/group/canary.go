package group

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/canary"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/event"
)

// A canary deploy (deploy.strategy canary) runs the new version T beside
// the serving one S, step by step on a share of the requests that HAProxy's
// weights give it whatever the instance counts (canary.Weights), while the
// analysis compares the two over each step (canary.Judge). Its states, and
// what moves it from one to the next:
//
//	          Deploy(T)
//	              |
//	              v
//	   +---------------------+  step i's canary instances in service:
//	   | starting step i:    |  weights set, the step's clock and
//	   | canary instances    |  window start
//	   | launched from T     |-----------------+
//	   +---------------------+                 v
//	      ^          |             +-----------------------+  pause   +--------+
//	      | next     |             | running step i: every |--------->| paused |
//	      | step     |             | interval the analysis |<---------|        |
//	      |          |             | judges the window     |  resume  +--------+
//	      +----------|-------------+-----------------------+             |
//	  for passed     |                 |  last step's for passed,         |
//	  (pause: true:  |                 |  or promote (any state)          |
//	  paused first)  |                 v                                  |
//	                 |         +-----------+  rolling deploy of T:        |
//	                 |         | promoting |  stable instances replaced,  |
//	                 |         +-----------+  then T serves (stored)      |
//	                 |                                                    |
//	                 | a health failure of T, the analysis failing,       |
//	                 v abort, the job's timeout, shoal's restart          |
//	         +-------------+ <--------------------------------------------+
//	         | rolled back |  weights back to the stable set, canary
//	         +-------------+  instances drained and stopped; S serves
//
// A step with an analysis ends once its for has passed and its last
// judgement passed: never on a canary that got fewer than min_requests.
//
// A restart of shoal (or its kill -9) mid-canary rolls the canary back
// when the group runs again (recoverDeploy), and so does an HA failover:
// the new leader's groups run from the shared records as after a restart.
// The analysis's window and the operator's pauses are gone with the
// process, and a canary judged on half a window is not judged. Run
// `shoal deploy` again to start over.
//
// While the steps run, a scaling job may run beside the deploy's (jobrun):
// the desired size is the stable version's, the canary's instances run
// beside it (its surge). A scale-out adds stable instances, and canary
// ones in proportion in a step by instance count (canary.StepInstances);
// the weights keep the step's share whatever the counts. A scale-in
// retires stable instances only (retireSurplusLocked), never the last
// one below a step of 100 % (CanaryScaleRefusal).

// ErrNoCanary is a canary command for a group that runs no canary.
var ErrNoCanary = errors.New("no canary deploy is running")

// Canary phases, as status shows them.
const (
	CanaryStarting  = "starting"
	CanaryRunning   = "running"
	CanaryPaused    = "paused"
	CanaryPromoting = "promoting"
)

// Canary commands (`shoal deploy pause|resume|promote|abort`).
const (
	CanaryPause   = "pause"
	CanaryResume  = "resume"
	CanaryPromote = "promote"
	CanaryAbort   = "abort"
)

// CanaryActions lists the commands, for the API's and CLI's checks.
var CanaryActions = []string{CanaryPause, CanaryResume, CanaryPromote, CanaryAbort}

// maxLatencyWindow bounds one version's latency samples in a window.
const maxLatencyWindow = 50_000

// canaryRun is a running canary deploy (g.can, under g.mu).
type canaryRun struct {
	version, stable string
	cfg             config.Canary
	step            int
	phase           string
	// userPaused is an operator's pause (pause/resume); stepPaused one a
	// step's pause: true asked for, which only resume or promote ends.
	userPaused bool
	elapsed    time.Duration // of the step's for, paused time left out
	// wc and ws are the weights of canary and stable servers now; applied
	// what HAProxy was last told, per server.
	wc, ws  int
	applied map[string]int
	// base is each server's counters at the step's start.
	base      map[string][2]int64
	can, stab canary.Figures
	last      canary.Result
	judged    time.Time
	// cmd takes an operator's commands while the steps run; done is
	// closed when they end, so that a command sent then is told so.
	cmd  chan canaryCmd
	done chan struct{}
}

// latencyWindow holds the access log's sampled latencies of both versions
// since the step began; the log's reader feeds it (ObserveLatency).
type latencyWindow struct {
	mu          sync.Mutex
	canaries    map[string]bool
	can, stable []time.Duration
}

func (w *latencyWindow) observe(server string, took time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.canaries[server] {
		if len(w.can) < maxLatencyWindow {
			w.can = append(w.can, took)
		}
	} else if len(w.stable) < maxLatencyWindow {
		w.stable = append(w.stable, took)
	}
}

func (w *latencyWindow) setCanaries(names map[string]bool) {
	w.mu.Lock()
	w.canaries = names
	w.mu.Unlock()
}

func (w *latencyWindow) take() (can, stable []time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Duration(nil), w.can...), append([]time.Duration(nil), w.stable...)
}

// CanaryStatus is a running canary as the API and `shoal deploy status`
// show it: a JSON contract.
type CanaryStatus struct {
	Version string `json:"version"`
	Stable  string `json:"stable"`
	Phase   string `json:"phase"`
	// Step is 1-based, of Steps; Weight the step's share of the requests
	// in percent. Instances, for a step by instance count, is the
	// canary's share of the group's size that step runs (its Weight is
	// then the share its instances in service get).
	Step      int     `json:"step"`
	Steps     int     `json:"steps"`
	Weight    float64 `json:"weight"`
	Instances float64 `json:"instances,omitempty"`
	// TimeLeft is what is left of the step's for (0 once passed).
	TimeLeft         time.Duration `json:"time_left"`
	CanaryInstances  int           `json:"canary_instances"`
	StableInstances  int           `json:"stable_instances"`
	CanaryWeight     int           `json:"canary_weight"`
	StableWeight     int           `json:"stable_weight"`
	Canary           VersionFigure `json:"canary"`
	StableFigures    VersionFigure `json:"stable_figures"`
	Analysis         string        `json:"analysis,omitempty"`
	AnalysisVerdict  string        `json:"analysis_verdict,omitempty"`
	AnalysisInterval time.Duration `json:"analysis_interval,omitempty"`
}

// VersionFigure is one version's answers over the step so far.
type VersionFigure struct {
	Requests  int64   `json:"requests"`
	Errors    int64   `json:"errors"`
	ErrorRate float64 `json:"error_rate"`
	// P99 is 0 with fewer than 100 sampled requests.
	P99     time.Duration `json:"p99"`
	Samples int           `json:"samples"`
}

func figureOf(f canary.Figures) VersionFigure {
	p, _ := f.P99()
	return VersionFigure{Requests: f.Requests, Errors: f.Errors, ErrorRate: f.ErrorRate(), P99: p, Samples: len(f.Latencies)}
}

// CanaryStatus returns the running canary, if one runs.
func (g *Group) CanaryStatus() (CanaryStatus, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.can
	if r == nil {
		return CanaryStatus{}, false
	}
	st := r.cfg.Steps[r.step]
	s := CanaryStatus{Version: r.version, Stable: r.stable, Phase: r.phase, Step: r.step + 1, Steps: len(r.cfg.Steps),
		Weight: st.Weight, Instances: st.Instances, TimeLeft: max(0, st.For-r.elapsed), CanaryWeight: r.wc, StableWeight: r.ws,
		Canary: figureOf(r.can), StableFigures: figureOf(r.stab), Analysis: r.last.Reason}
	if r.cfg.Analysis != nil {
		s.AnalysisInterval = r.cfg.Analysis.Interval
		if !r.judged.IsZero() {
			s.AnalysisVerdict = r.last.Verdict.String()
		}
	}
	s.CanaryInstances, s.StableInstances = g.servingCountsLocked(r.version)
	if st.ByInstances() {
		s.Weight = math.Round(1000*canary.Share(s.CanaryInstances, s.StableInstances, r.wc, r.ws)) / 10
	}
	return s, true
}

// CanaryCommand hands a running canary an operator's command (one of
// CanaryActions); ErrNoCanary when none runs.
func (g *Group) CanaryCommand(action string) error {
	if action == BlueGreenRollback {
		action = CanaryAbort // a canary's rollback is its abort
	}
	if !slices.Contains(CanaryActions, action) {
		return fmt.Errorf("group %s: unknown canary command %q (valid: %v)", g.cfg.Name, action, CanaryActions)
	}
	g.mu.Lock()
	r := g.can
	g.mu.Unlock()
	if r == nil {
		return fmt.Errorf("group %s: %w", g.cfg.Name, ErrNoCanary)
	}
	// Returned once applied, so that a status read next shows it (a pause
	// returned when taken, and the status printed with it said running).
	switch err := handCommand(r.cmd, r.done, action); {
	case errors.Is(err, errRunEnded):
		return fmt.Errorf("group %s: %w (its steps have ended)", g.cfg.Name, ErrNoCanary)
	case err != nil:
		return fmt.Errorf("group %s: the canary %w", g.cfg.Name, err)
	}
	return nil
}

// errRunEnded says a deploy's run ended before it took a command.
var errRunEnded = errors.New("the run has ended")

// handCommand hands action to a canary's or a blue/green deploy's loop
// and returns once the loop has applied it or the run has ended (a
// promote, an abort or a rollback ends it): errRunEnded when it ended
// before taking it, an error when either wait passes 5 s.
func handCommand(cmd chan<- canaryCmd, done <-chan struct{}, action string) error {
	c := canaryCmd{action: action, applied: make(chan struct{})}
	timeout := time.After(5 * time.Second)
	select {
	case cmd <- c:
	case <-done:
		return errRunEnded
	case <-timeout:
		return fmt.Errorf("did not take the command %s in time", action)
	}
	select {
	case <-c.applied:
	case <-done:
	case <-timeout:
		return fmt.Errorf("took the command %s but did not apply it in time", action)
	}
	return nil
}

// canaryCmd is an operator's command to a canary's steps; applied closes
// once it is in effect.
type canaryCmd struct {
	action  string
	applied chan struct{}
}

// CanaryTakesScaling reports whether a canary runs its steps: a scaling
// job may then run beside the deploy's job (jobrun), adding or retiring
// stable instances while the weights keep the canary's share. Once
// promoted, the rolling deploy holds the group as any deploy does.
func (g *Group) CanaryTakesScaling() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.can != nil && g.can.phase != CanaryPromoting
}

// CanaryScaleRefusal is why a size of n cannot be had while a canary runs
// ("" when it can, or no canary runs): the canary's instances run beside
// the desired size, which is the stable version's, and a step below 100 %
// needs a stable instance to send the rest of the requests to.
func (g *Group) CanaryScaleRefusal(n int) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.can == nil || n >= 1 || g.can.cfg.Steps[g.can.step].Share() >= 100 {
		return ""
	}
	return fmt.Sprintf("a canary of %s runs at step %d/%d: a scale-in keeps at least 1 stable instance beside it (size %d asked); abort or promote the canary first",
		g.can.version, g.can.step+1, len(g.can.cfg.Steps), n)
}

// canaryInstanceLocked reports whether in is an instance of the running
// canary: a scale-in leaves those alone (retireSurplusLocked). g.mu must
// be held.
func (g *Group) canaryInstanceLocked(in *instance) bool {
	return g.can != nil && in.version == g.can.version
}

// deployWeight is the weight a server of in gets while a canary or a
// blue/green deploy runs (0: HAProxy's default, outside one).
func (g *Group) deployWeight(in *instance) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.can == nil {
		return g.blueGreenWeightLocked(in)
	}
	if in.version == g.can.version {
		return g.can.wc
	}
	return g.can.ws
}

// countVersionLocked counts the active instances of version.
func (g *Group) countVersionLocked(version string) int {
	n := 0
	for _, in := range g.activeLocked() {
		if in.version == version {
			n++
		}
	}
	return n
}

// servingCountsLocked counts the instances in service of version and of
// any other.
func (g *Group) servingCountsLocked(version string) (canaries, stables int) {
	for _, in := range g.insts {
		if in.state != InService || in.retiring {
			continue
		}
		if in.version == version {
			canaries++
		} else {
			stables++
		}
	}
	return canaries, stables
}

// canaryPhase runs the canary's steps (see the drawing above). It reports
// whether the canary was promoted; if not, it has rolled it back and the
// error says why.
func (g *Group) canaryPhase(ctx context.Context, target config.Template, version, servingVersion string, started time.Time, progress DeployProgress) (bool, error) {
	c := *g.conf().Deploy.Canary
	threshold := g.conf().Deploy.FailureThreshold
	r := &canaryRun{version: version, stable: servingVersion, cfg: c, phase: CanaryStarting, applied: map[string]int{}, cmd: make(chan canaryCmd), done: make(chan struct{})}
	g.mu.Lock()
	g.dep.begin(version, target)
	g.can = r
	g.mu.Unlock()
	lat := &latencyWindow{}
	g.canLat.Store(lat)

	failure, promoted, err := g.runCanary(ctx, r, lat, threshold, started, progress)
	close(r.done)
	g.canLat.Store(nil)
	if promoted {
		g.mu.Lock()
		g.can = nil
		g.dep.end()
		g.notifyLocked()
		g.mu.Unlock()
		// The canary instances take the weight every server has outside a
		// canary; the stable ones keep theirs until the roll retires them.
		g.resetWeights(ctx, func(in *instance) bool { return in.version == version })
		return true, nil
	}
	if err != nil {
		failure = fmt.Sprintf("interrupted (%v)", err)
	}
	g.rollBackCanary(ctx, version, failure)
	progress("canary rolled back: " + failure)
	if err != nil {
		return false, fmt.Errorf("canary of %s interrupted (%w); rolled back, the serving version %s serves", version, err, servingVersion)
	}
	return false, fmt.Errorf("%w: %s", ErrRolledBack, failure)
}

// runCanary runs the steps until the canary is promoted (promoted), fails
// (failure), or ctx ends (err).
func (g *Group) runCanary(ctx context.Context, r *canaryRun, lat *latencyWindow, threshold int, started time.Time, progress DeployProgress) (failure string, promoted bool, err error) {
	tick, stop := g.clk.NewTicker(deployPoll)
	defer stop()
	wentDown := map[string]bool{}
	last := g.clk.Now()
steps:
	for step := 0; step < len(r.cfg.Steps); step++ {
		st := r.cfg.Steps[step]
		g.mu.Lock()
		// asked is what the step asked for at its start: a step by
		// weight keeps it through a scale-out, one by instance count grows
		// with the group (canary.StepInstances); neither goes below the
		// canary instances already running.
		asked := canary.StepInstances(st, g.desired, canary.Instances(g.desired, st.Share()), g.countVersionLocked(r.version))
		want := asked
		r.step, r.phase, r.elapsed, r.judged, r.last = step, CanaryStarting, 0, time.Time{}, canary.Result{}
		g.dep.canary, g.dep.surge = want, want
		g.notifyLocked()
		g.mu.Unlock()
		g.poke()
		progress(fmt.Sprintf("canary step %d/%d: %s, %d canary instance(s) of %s", step+1, len(r.cfg.Steps), stepText(st), want, r.version))
		running := false
		// stepPaused: the step's pause: true has been asked for.
		stepPaused := false
		for {
			// Taken before what it reads: a change meanwhile wakes the loop.
			g.mu.Lock()
			ch := g.changed
			g.mu.Unlock()
			if f := g.canaryHealthFailure(r.version, started, threshold, wentDown); f != "" {
				return f, false, nil
			}
			now := g.clk.Now()
			g.mu.Lock()
			// A scale-out or -in during the step (a scaling job runs beside
			// a canary): a step by instance count follows the group.
			w := canary.StepInstances(st, g.desired, asked, g.countVersionLocked(r.version))
			grew := w != want
			if grew {
				want = w
				g.dep.canary, g.dep.surge = want, want
				g.notifyLocked()
			}
			g.mu.Unlock()
			if grew {
				g.poke()
			}
			g.applyWeights(ctx, r, lat)
			g.mu.Lock()
			canaries, stables := g.servingCountsLocked(r.version)
			g.mu.Unlock()
			switch {
			case !running && canaries >= want:
				running = true
				g.startWindow(ctx, r, lat)
				g.mu.Lock()
				r.phase = CanaryRunning
				if r.userPaused {
					r.phase = CanaryPaused
				}
				msg := fmt.Sprintf("step %d/%d: %s (%d canary at weight %d, %d stable at weight %d: %.1f%%)",
					step+1, len(r.cfg.Steps), stepText(st), canaries, r.wc, stables, r.ws, 100*canary.Share(canaries, stables, r.wc, r.ws))
				g.mu.Unlock()
				progress(msg)
				g.record(ctx, event.CanaryStep, r.version, "canary "+r.version+" "+msg)
			case running:
				g.mu.Lock()
				if r.phase == CanaryRunning {
					r.elapsed += now.Sub(last)
				}
				g.mu.Unlock()
				if f := g.analyse(ctx, r, lat, now); f != "" {
					return f, false, nil
				}
				g.mu.Lock()
				// A step with an analysis ends only once it has passed:
				// a canary that never got min_requests (too little
				// traffic, ejected as an outlier) is not promoted unjudged;
				// the job's timeout rolls it back.
				judged := r.cfg.Analysis == nil || r.last.Verdict == canary.Pass
				passed := r.phase == CanaryRunning && r.elapsed >= st.For && judged
				askPause := passed && st.Pause && !stepPaused
				if askPause {
					stepPaused, r.userPaused, r.phase = true, true, CanaryPaused
					g.notifyLocked()
				}
				g.mu.Unlock()
				if askPause {
					g.canaryEvent(ctx, event.CanaryPaused, r, fmt.Sprintf("step %d/%d passed its for (%s) and pauses: waiting for `shoal deploy resume` or `promote`", step+1, len(r.cfg.Steps), st.For))
				} else if passed {
					continue steps
				}
			}
			last = now
			select {
			case <-ctx.Done():
				return "", false, context.Cause(ctx)
			case c := <-r.cmd:
				promote, abort := g.canaryCommand(ctx, r, c.action, running)
				close(c.applied)
				if promote {
					return "", true, nil
				} else if abort != "" {
					return abort, false, nil
				}
			case <-ch:
			case <-tick:
			}
		}
	}
	g.canaryEvent(ctx, event.CanaryPromoted, r, fmt.Sprintf("every step passed (%d)", len(r.cfg.Steps)))
	g.setPhase(r, CanaryPromoting)
	return "", true, nil
}

// stepText says what a step gives the canary, for events and progress.
func stepText(st config.CanaryStep) string {
	if st.ByInstances() {
		return fmt.Sprintf("%g%% of the group's instances", st.Instances)
	}
	return fmt.Sprintf("%g%% of the requests", st.Weight)
}

// canaryCommand applies an operator's command: promote, abort (with the
// failure to roll back for), or a pause or resume.
func (g *Group) canaryCommand(ctx context.Context, r *canaryRun, a string, running bool) (promote bool, abort string) {
	g.mu.Lock()
	step, steps, figures := r.step+1, len(r.cfg.Steps), r.last.Reason
	g.mu.Unlock()
	switch a {
	case CanaryAbort:
		reason := fmt.Sprintf("aborted by an operator at step %d/%d", step, steps)
		if figures != "" {
			reason += "; " + figures
		}
		return false, reason
	case CanaryPromote:
		g.canaryEvent(ctx, event.CanaryPromoted, r, fmt.Sprintf("promoted by an operator at step %d/%d", step, steps))
		g.setPhase(r, CanaryPromoting)
		return true, ""
	case CanaryPause, CanaryResume:
		pause := a == CanaryPause
		g.mu.Lock()
		changed := r.userPaused != pause
		r.userPaused = pause
		if running {
			r.phase = CanaryRunning
			if pause {
				r.phase = CanaryPaused
			}
		}
		g.notifyLocked()
		g.mu.Unlock()
		if changed && pause {
			g.canaryEvent(ctx, event.CanaryPaused, r, fmt.Sprintf("paused by an operator at step %d/%d", step, steps))
		} else if changed {
			g.canaryEvent(ctx, event.CanaryResumed, r, fmt.Sprintf("resumed by an operator at step %d/%d", step, steps))
		}
	}
	return false, ""
}

func (g *Group) setPhase(r *canaryRun, phase string) {
	g.mu.Lock()
	r.phase = phase
	g.notifyLocked()
	g.mu.Unlock()
}

// canaryEvent records an event of the canary with its last figures.
func (g *Group) canaryEvent(ctx context.Context, t event.Type, r *canaryRun, what string) {
	g.mu.Lock()
	figures := r.last.Reason
	g.mu.Unlock()
	msg := fmt.Sprintf("canary %s %s", r.version, what)
	if figures != "" {
		msg += "; " + figures
	}
	g.log.Info("canary", "version", r.version, "event", t, "what", what)
	g.record(ctx, t, r.version, msg)
}

// canaryHealthFailure is the first failure of the canary's version once
// threshold of its instances failed (or went DOWN in service) since
// started, as a rolling deploy counts them; "" while fewer did.
func (g *Group) canaryHealthFailure(version string, started time.Time, threshold int, wentDown map[string]bool) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var fails []string
	for _, f := range g.failures {
		if f.version == version && !f.At.Before(started) {
			fails = append(fails, f.Instance+" "+f.Reason)
		}
	}
	for _, in := range g.activeLocked() {
		if in.version == version && in.state == Unhealthy && !wentDown[in.name] {
			wentDown[in.name] = true
		}
	}
	for name := range wentDown {
		fails = append(fails, name+" went DOWN after entering service")
	}
	if len(fails) >= threshold {
		return "health: " + fails[0]
	}
	return ""
}

// applyWeights gives every server in service the weight of its version for
// the step and the instances serving now; HAProxy is told only of changes.
func (g *Group) applyWeights(ctx context.Context, r *canaryRun, lat *latencyWindow) {
	g.mu.Lock()
	canaries, stables := g.servingCountsLocked(r.version)
	r.wc, r.ws = canary.StepWeights(r.cfg.Steps[r.step], canaries, stables)
	type set struct {
		name string
		w    int
	}
	var sets []set
	names := map[string]bool{}
	for _, in := range g.insts {
		if in.version == r.version {
			names[in.name] = true
		}
		if in.state != InService || in.retiring {
			continue
		}
		w := r.ws
		if in.version == r.version {
			w = r.wc
		}
		if r.applied[in.name] != w {
			sets = append(sets, set{in.name, w})
		}
	}
	g.mu.Unlock()
	lat.setCanaries(names)
	for _, s := range sets {
		if err := g.lb.SetWeight(ctx, g.cfg.Name, s.name, s.w); err != nil {
			g.log.Warn("setting a canary weight failed", "instance", s.name, "weight", s.w, "err", err)
			continue
		}
		g.mu.Lock()
		r.applied[s.name] = s.w
		g.mu.Unlock()
	}
}

// startWindow begins the step's analysis window: every server's counters
// now, and no latency sample yet.
func (g *Group) startWindow(ctx context.Context, r *canaryRun, lat *latencyWindow) {
	base := map[string][2]int64{}
	if stats, err := g.lb.Stats(ctx, g.cfg.Name); err == nil {
		for _, st := range stats {
			base[st.Name] = [2]int64{st.Requests, st.Responses[5]}
		}
	}
	lat.mu.Lock()
	lat.can, lat.stable = nil, nil
	lat.mu.Unlock()
	g.mu.Lock()
	r.base, r.can, r.stab = base, canary.Figures{}, canary.Figures{}
	r.judged = g.clk.Now()
	g.mu.Unlock()
}

// analyse takes both versions' figures over the window and, every
// interval, judges them; it returns the failure, if the canary failed.
func (g *Group) analyse(ctx context.Context, r *canaryRun, lat *latencyWindow, now time.Time) string {
	stats, err := g.lb.Stats(ctx, g.cfg.Name)
	if err != nil {
		return "" // HAProxy restarting or unreachable: no news
	}
	can, stable := lat.take()
	g.mu.Lock()
	defer g.mu.Unlock()
	cf, sf := canary.Figures{Latencies: can}, canary.Figures{Latencies: stable}
	for _, st := range stats {
		in := g.insts[st.Name]
		if in == nil {
			continue
		}
		b := r.base[st.Name]
		if st.Requests < b[0] {
			b = [2]int64{} // HAProxy restarted: its counters did too
		}
		req, errs := st.Requests-b[0], st.Responses[5]-b[1]
		if in.version == r.version {
			cf.Requests, cf.Errors = cf.Requests+req, cf.Errors+errs
		} else {
			sf.Requests, sf.Errors = sf.Requests+req, sf.Errors+errs
		}
	}
	r.can, r.stab = cf, sf
	a := r.cfg.Analysis
	if a == nil {
		r.last = canary.Result{Verdict: canary.Pass, Reason: canary.Judge(config.CanaryAnalysis{}, cf, sf).Reason}
		return ""
	}
	if now.Sub(r.judged) < a.Interval {
		return ""
	}
	r.judged = now
	r.last = canary.Judge(*a, cf, sf)
	g.log.Info("canary analysis", "version", r.version, "step", r.step+1, "verdict", r.last.Verdict.String(), "figures", r.last.Reason)
	if r.last.Verdict == canary.Fail {
		return "analysis: " + r.last.Reason
	}
	return ""
}

// rollBackCanary ends a canary that failed: the stable servers get their
// weight back at once, the canary's instances are drained and stopped, and
// the event says why with the figures.
func (g *Group) rollBackCanary(runCtx context.Context, version, failure string) {
	// The rollback's records and weights are done even when the deploy's
	// context has ended (a timeout, shoal stopping); waiting for the
	// instances to go is not, as shoal stopping takes them anyway.
	ctx := context.WithoutCancel(runCtx)
	// The canary's instances retire in the same instant as the canary
	// ends: with its surge gone, they would otherwise count as a surplus
	// the reconciler may take stable instances for.
	g.mu.Lock()
	g.can = nil
	g.dep.end()
	var retired []string
	for _, in := range g.insts {
		if in.version == version && !in.retiring {
			g.retireLocked(in, "canary rollback")
			retired = append(retired, in.name)
		}
	}
	g.notifyLocked()
	g.mu.Unlock()
	g.resetWeights(ctx, func(in *instance) bool { return in.version != version })
	g.poke()
	g.log.Warn("canary rolled back", "version", version, "reason", failure, "retired", retired)
	g.record(ctx, event.CanaryRolledBack, version, fmt.Sprintf("canary %s rolled back: %s", version, failure))
	g.waitGone(runCtx, version)
}

// waitGone waits until no instance of version is left, at most as long as
// one drain and stop take.
func (g *Group) waitGone(ctx context.Context, version string) {
	g.waitLeft(ctx, func(in *instance) bool { return in.version == version })
}

// waitLeft waits until no instance that leaving says is leaving is left, at
// most as long as one drain and stop take.
func (g *Group) waitLeft(ctx context.Context, leaving func(*instance) bool) {
	c := g.conf()
	timer, stop := g.clk.NewTimer(c.DrainTimeout + c.Template.StopTimeout + removeTimeout)
	defer stop()
	for {
		g.mu.Lock()
		left := 0
		for _, in := range g.insts {
			if leaving(in) {
				left++
			}
		}
		ch := g.changed
		g.mu.Unlock()
		if left == 0 {
			return
		}
		select {
		case <-ch:
		case <-timer:
			return
		case <-ctx.Done():
			return
		}
	}
}

// resetWeights gives the servers of the instances which picks HAProxy's
// default weight again.
func (g *Group) resetWeights(ctx context.Context, which func(*instance) bool) {
	g.mu.Lock()
	var names []string
	for _, in := range g.insts {
		if in.inst != nil && !in.retiring && which(in) {
			names = append(names, in.name)
		}
	}
	g.mu.Unlock()
	for _, n := range names {
		if err := g.lb.SetWeight(context.WithoutCancel(ctx), g.cfg.Name, n, defaultWeight); err != nil {
			g.log.Warn("resetting a weight failed", "instance", n, "err", err)
		}
	}
}

// defaultWeight is HAProxy's weight of every server outside a canary.
const defaultWeight = 100

// recoverDeploy rolls back a canary or a blue/green deploy that a restart
// of shoal interrupted (see the drawings here and in bluegreen.go): the
// serving version's servers get the default weight again first (an
// adopted HAProxy kept the deploy's, and a blue/green switch left them at
// 0), then instances of another version are retired. g.mu must not be
// held.
func (g *Group) recoverDeploy(ctx context.Context) {
	t := event.CanaryRolledBack
	what := "canary"
	switch g.conf().Deploy.Strategy {
	case config.StrategyCanary:
	case config.StrategyBlueGreen:
		t, what = event.BlueGreenRolledBack, "blue/green"
	default:
		return
	}
	g.mu.Lock()
	serving := g.dep.version
	g.mu.Unlock()
	g.resetWeights(ctx, func(in *instance) bool { return in.state == InService && in.version == serving })
	g.mu.Lock()
	var leftovers []string
	versions := map[string]bool{}
	for _, in := range g.insts {
		if in.version != serving && !in.retiring {
			leftovers = append(leftovers, in.name)
			versions[in.version] = true
			g.retireLocked(in, what+" interrupted by a restart of shoal or a change of HA leader")
		}
	}
	g.notifyLocked()
	g.mu.Unlock()
	slices.Sort(leftovers)
	for v := range versions {
		g.record(ctx, t, v, fmt.Sprintf("%s %s rolled back: interrupted by a restart of shoal or a change of HA leader (its instances %v are drained and stopped; the serving version %s serves)", what, v, leftovers, serving))
	}
	if len(leftovers) > 0 {
		g.poke()
	}
}

// canaryTimeout is how long a canary's steps may take beyond a rolling
// deploy: every step's for, the canary instances' starts, and a day for
// each step that waits for a person.
func canaryTimeout(c config.Group) time.Duration {
	if c.Deploy.Strategy != config.StrategyCanary || c.Deploy.Canary == nil {
		return 0
	}
	var d time.Duration
	for _, s := range c.Deploy.Canary.Steps {
		d += s.For + c.Health.Grace + time.Second
		if s.Pause {
			d += 24 * time.Hour
		}
	}
	return d
}

// StrategyTimeout is what a canary or a blue/green deploy adds to a
// deploy's time limit (0 for a rolling deploy); the job runner adds it to
// the rolling deploy's.
func (g *Group) StrategyTimeout() time.Duration {
	return canaryTimeout(g.conf()) + blueGreenTimeout(g.conf())
}
