// Package policy decides when a group scales: it evaluates a group's
// autoscale rules, target and schedules against its metric history and
// explains every decision.
//
// Evaluate is a pure function of the history, the group's state and the
// time, so the live Runner, Replay (`shoal policy test`) and a simulator run
// the same code, and a restart of shoal loses nothing: `for` windows, the
// target's stabilization window and rate limits are all read back from the
// history, and rule cooldowns from the recorded decisions.
//
// Semantics:
//   - A rule holds when the samples cover its window (see covers) and every
//     sample in its `for` window is beyond the threshold(s), or (statistic
//     and over) the window's time-weighted statistic is. A missing or
//     stale metric never scales in: with on_missing: keep the rule does
//     nothing, with on_missing: up it scales up one step.
//   - The target recommends ceil(ready × value / target) for per-instance
//     metrics and ceil(value / target) for group totals (requests, errors,
//     connection errors and retries per second, queue, sessions), the size itself inside the tolerance
//     band. Scale-in goes only to the highest recommendation of the
//     stabilization window, and each direction moves at most max_step from the
//     size the group had during the last period.
//   - Scale out if any rule or the target says so (the largest size wins);
//     scale in only if nothing that has an opinion wants more (a rule that
//     does not hold has none; the target always has one). Schedules and
//     min/max bound the result; a schedule whose window opens also moves a
//     group that is outside its bounds.
package policy

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/jobrun"
)

// State is the group's side of an evaluation.
type State struct {
	// Desired is the size the group is reconciling towards.
	Desired int
	// UpCooldownUntil and DownCooldownUntil hold back the next job that scales
	// in that direction.
	UpCooldownUntil, DownCooldownUntil time.Time
	// RunningJob is the id of a job running for the group, if any.
	RunningJob string
	// RuleJobs is when each rule (by name) last had a job accepted; a rule's
	// own cooldown runs from there.
	RuleJobs map[string]time.Time
	// Prediction is the predictive floor for now (Predictor.At); nil when
	// the group does not pre-scale.
	Prediction *Prediction
	// StartDelay is the group's measured start delay (the median time from
	// an instance's start to in service), what a target's start_delay: auto
	// looks ahead by; 0 when none is measured yet.
	StartDelay time.Duration
}

// Codes name the reason for a decision, for filtering and tests.
const (
	CodeScale         decision.Code = "scale"         // a job is requested
	CodeCooldown      decision.Code = "cooldown"      // the group's cooldown holds
	CodeRuleCooldown  decision.Code = "rule_cooldown" // the rule's own cooldown holds
	CodeMaxSize       decision.Code = "max_size"      // already at the largest size or plan
	CodeMinSize       decision.Code = "min_size"      // already at the smallest size or plan
	CodeSchedule      decision.Code = "schedule"      // a schedule's bound holds
	CodeTolerance     decision.Code = "tolerance"     // the target is inside its band
	CodeStabilization decision.Code = "stabilization" // the window holds a higher recommendation
	CodeRateLimit     decision.Code = "rate_limit"    // max_step allows no more this period
	CodeNotAgreed     decision.Code = "not_agreed"    // scale-in wanted, but something wants more
	CodeMissing       decision.Code = "missing"       // a metric is missing or stale
	CodeJobRunning    decision.Code = "job_running"   // a job is running for the group
	CodeSteady        decision.Code = "steady"        // the action leads to the current size
	CodeRefused       decision.Code = "refused"       // the job manager refused the same request lately
)

// TargetName names the target in decisions.
const TargetName = config.TargetName

// totals are metrics that sum over the group rather than average over its
// instances: the target divides them by the target value directly.
var totals = []string{"requests_per_second", "errors_per_second", "connection_errors_per_second",
	"retries_per_second", "queue", "sessions"}

// opinion is what one rule, the target or a schedule wants.
type opinion struct {
	name   string
	size   int // the size it wants
	action config.Action
	fired  bool          // wants size now (false: would have, but is held back)
	code   decision.Code // why it is held back
	reason string
}

// evaluation collects an evaluation's findings.
type evaluation struct {
	g      config.Group
	p      *config.Autoscale
	h      Metrics
	s      State
	now    time.Time
	values map[string]float64
	// sampled is each metric's newest sample as the evaluation first read
	// it: the collector records samples meanwhile, and a rule's window ends
	// at this one, so that the decision's values are those it decided on
	// (a window read before a newer sample, all above 40, was recorded with
	// that sample's 38.9).
	sampled map[string]sampled
	// missing notes metrics that just went missing; recorded if nothing else is.
	missing []string
}

// sampled is a metric's newest fresh sample, or none (ok false).
type sampled struct {
	p  Point
	ok bool
}

// Evaluate evaluates g's policy at now. record reports whether a rule, the
// target or a schedule fired or would have: only those decisions are worth
// keeping. g.Autoscale must not be nil.
func Evaluate(g config.Group, h Metrics, s State, now time.Time) (d decision.Record, record bool) {
	d, record = evaluate(g, h, s, now)
	if p := s.Prediction; p != nil && g.Autoscale.Predictive != nil && d.Request == nil {
		if pd, ok := predictiveOnly(g, d, g.Autoscale.Predictive, p); ok {
			return pd, true
		}
	}
	return d, record
}

func evaluate(g config.Group, h Metrics, s State, now time.Time) (d decision.Record, record bool) {
	e := &evaluation{g: g, p: g.Autoscale, h: h, s: s, now: now, values: map[string]float64{}, sampled: map[string]sampled{}}
	d = decision.Record{Time: now, Group: g.Name, Current: s.Desired, Recommendation: s.Desired, Outcome: decision.Nothing}

	var ops []opinion
	for _, r := range e.p.Rules {
		if op, ok := e.rule(r); ok {
			ops = append(ops, op)
		}
	}
	if e.p.Target != nil {
		if op, ok := e.target(*e.p.Target); ok {
			ops = append(ops, op)
		}
	}
	lo, hi, bounds := e.schedules()
	pred := s.Prediction
	if pred != nil && e.p.Predictive == nil {
		pred = nil
	}
	predLo := false
	if pred != nil && pred.Off == "" {
		key := "forecast." + e.p.Predictive.MetricOf()
		if config.IsFormula(e.p.Predictive.MetricOf()) {
			key = "forecast.value"
		}
		e.values[key] = pred.Rate
		e.values["forecast.floor"] = float64(pred.Floor)
		// The forecast raises the floor; it never lowers anything, so it
		// cannot scale in on its own.
		if f := min(pred.Floor, g.MaxSize); e.p.Predictive.Mode == config.PredictiveScale && f > lo {
			lo, hi, predLo = f, max(hi, f), true
			bounds = append([]string{PredictiveName}, bounds...)
		}
	}
	e.sample("size")
	e.sample("ready")
	d.Values = e.values

	for _, op := range ops {
		d.Sources = append(d.Sources, op.name)
	}
	desired := s.Desired

	// Scale out if anything fired for more; otherwise scale in only to the
	// largest size any opinion holds.
	var win *opinion
	for i := range ops {
		op := &ops[i]
		if op.fired && op.size > desired && (win == nil || op.size > win.size) {
			win = op
		}
	}
	// A group outside a schedule's bounds is moved to them, unless a rule
	// or the target wants it even larger.
	if (desired < lo && win == nil || desired > hi) && len(bounds) > 0 {
		why := "its window is open"
		if predLo && desired < lo {
			why = pred.Explanation
		}
		ops = append(ops, opinion{name: bounds[0], size: desired, fired: true, reason: why})
		d.Sources = append(d.Sources, bounds[0])
		win = &ops[len(ops)-1]
	}
	if win == nil {
		for i := range ops {
			op := &ops[i]
			if op.fired && op.size < desired && (win == nil || op.size > win.size) {
				win = op
			}
		}
		for i := range ops {
			op := &ops[i]
			if win != nil && op != win && op.size > win.size && (op.fired || op.code != "") {
				d.Rule, d.Recommendation = win.name, win.size
				d.Code = CodeNotAgreed
				d.Reason = fmt.Sprintf("%s wants %d (%s), but %s wants %d: scale-in needs every opinion", win.name, win.size, win.reason, op.name, op.size)
				return d, true
			}
		}
	}

	if win == nil {
		// Nothing fired: explain what would have, if anything.
		for _, op := range ops {
			if op.code != "" {
				d.Rule, d.Code, d.Recommendation = op.name, op.code, op.size
				d.Reason = op.reason
				return d, true
			}
		}
		if len(e.missing) > 0 {
			d.Code = CodeMissing
			d.Rule = e.missing[0]
			d.Reason = strings.Join(e.missing[1:], "; ")
			return d, true
		}
		return d, false
	}

	d.Rule = win.name
	target := win.size
	final := min(max(target, lo), hi)
	d.Recommendation = final
	if final == desired {
		// The winner wanted to move, so a bound holds it.
		switch {
		case target > hi && hi < g.MaxSize:
			d.Code, d.Reason = CodeSchedule, fmt.Sprintf("%s wants %d (%s), but schedule %s caps the size at %d", win.name, target, win.reason, strings.Join(bounds, ", "), hi)
		case target > hi:
			d.Code, d.Reason = CodeMaxSize, fmt.Sprintf("%s wants %d (%s), but the group is capped at max_size %d", win.name, target, win.reason, g.MaxSize)
		case lo > g.MinSize:
			d.Code, d.Reason = CodeSchedule, fmt.Sprintf("%s wants %d (%s), but schedule %s holds the size at least %d", win.name, target, win.reason, strings.Join(bounds, ", "), lo)
		default:
			d.Code, d.Reason = CodeMinSize, fmt.Sprintf("%s wants %d (%s), but the group is at min_size %d", win.name, target, win.reason, g.MinSize)
		}
		return d, true
	}

	reason := fmt.Sprintf("%s: %s", win.name, win.reason)
	if final != target {
		reason += fmt.Sprintf("; bounded to %d by %s", final, boundName(bounds, final == hi && hi < g.MaxSize || final == lo && lo > g.MinSize))
	}
	switch {
	case s.RunningJob != "":
		d.Code, d.Reason, d.JobID = CodeJobRunning, reason+fmt.Sprintf("; job %s is still running", s.RunningJob), s.RunningJob
		return d, true
	case final > desired && now.Before(s.UpCooldownUntil):
		d.Code, d.Reason = CodeCooldown, reason+fmt.Sprintf("; in scale-up cooldown until %s", s.UpCooldownUntil.UTC().Format(time.RFC3339))
		return d, true
	case final < desired && now.Before(s.DownCooldownUntil):
		d.Code, d.Reason = CodeCooldown, reason+fmt.Sprintf("; in scale-down cooldown until %s", s.DownCooldownUntil.UTC().Format(time.RFC3339))
		return d, true
	}
	d.Outcome, d.Code, d.Reason = decision.Requested, CodeScale, reason
	d.Request = request(win, final)
	return d, true
}

// predictiveOnly records what the forecast alone has to say when nothing
// else has: once that it is off and why, or (forecast_only) once a minute
// what it would have done.
func predictiveOnly(g config.Group, d decision.Record, cfg *config.Predictive, pred *Prediction) (decision.Record, bool) {
	switch {
	case pred.Off != "" && pred.Announce:
		d.Rule, d.Outcome, d.Code, d.Recommendation, d.Reason = PredictiveName, decision.Nothing, CodePredictiveOff, d.Current, pred.Off
		return d, true
	case pred.Off == "" && cfg.Mode == config.PredictiveForecastOnly && pred.Fresh && min(pred.Floor, g.MaxSize) > d.Current:
		d.Rule, d.Outcome, d.Code, d.Recommendation = PredictiveName, decision.ForecastOnly, CodeForecast, min(pred.Floor, g.MaxSize)
		d.Reason = fmt.Sprintf("mode forecast_only: would raise the floor from %d to %d; %s", d.Current, d.Recommendation, pred.Explanation)
		return d, true
	}
	return d, false
}

// request asks for final in the words of the winning action where they say
// the same, so that jobs show "up" or "plan: medium" rather than a bare size.
func request(win *opinion, final int) *decision.Request {
	r := &decision.Request{Kind: jobrun.Size, Size: final, Source: decision.SourcePrefix + win.name}
	if win.size != final {
		return r
	}
	switch win.action.Kind {
	case config.ActionUp:
		r.Kind, r.Size = jobrun.Up, 0
	case config.ActionDown:
		r.Kind, r.Size = jobrun.Down, 0
	case config.ActionPlan:
		r.Kind, r.Size, r.Plan = jobrun.Plan, 0, win.action.Plan
	}
	return r
}

func boundName(schedules []string, bySchedule bool) string {
	if bySchedule {
		return "schedule " + strings.Join(schedules, ", ")
	}
	return "min_size/max_size"
}

// Apply returns the size action a leads to from size n in group g, before
// min_size and max_size are applied.
func Apply(g config.Group, a config.Action, n int) int {
	switch a.Kind {
	case config.ActionUp:
		to, _ := g.Range().Step(n, config.Up)
		return to
	case config.ActionDown:
		to, _ := g.Range().Step(n, config.Down)
		return to
	case config.ActionAdd:
		return addSat(n, a.N)
	case config.ActionRemove:
		return addSat(n, -a.N)
	case config.ActionSize:
		return a.N
	case config.ActionPlan:
		if p, ok := g.PlanByName(a.Plan); ok {
			return p.Size
		}
		return n
	case config.ActionPercent:
		// As AWS does: a change of less than one instance is one instance.
		change := float64(n) * a.Percent / 100
		step := truncSat(change)
		if step == 0 {
			step = int(math.Copysign(1, change))
		}
		return addSat(n, step)
	}
	return n
}

// addSat is n+d, saturating at the int range rather than wrapping: a huge
// step scales to max_size and never wraps into a scale-in to min_size.
// (Validation bounds steps; this is the defence behind it.)
func addSat(n, d int) int {
	switch {
	case d > 0 && n > math.MaxInt-d:
		return math.MaxInt
	case d < 0 && n < math.MinInt-d:
		return math.MinInt
	}
	return n + d
}

// truncSat is f truncated towards zero, saturating at the int range (a
// conversion out of range is implementation-defined in Go).
func truncSat(f float64) int {
	switch {
	case math.IsNaN(f):
		return 0
	case f >= math.MaxInt:
		return math.MaxInt
	case f <= math.MinInt:
		return math.MinInt
	}
	return int(f)
}

// sample records the newest fresh value of path, read once per evaluation.
func (e *evaluation) sample(path string) (Point, bool) {
	if r, ok := e.sampled[path]; ok {
		return r.p, r.ok
	}
	p, ok := e.readSample(path)
	e.sampled[path] = sampled{p, ok}
	return p, ok
}

func (e *evaluation) readSample(path string) (Point, bool) {
	iv := e.p.Interval
	pts := e.h.Points(path, e.now.Add(-max(3*iv, minStale)-maxStaleSlack), e.now)
	if !e.isFresh(path, pts, e.now) {
		return Point{}, false
	}
	p := pts[len(pts)-1]
	if !finite(p.V) {
		return Point{}, false
	}
	e.values[path] = p.V
	return p, true
}

// wentMissing reports whether path was fresh one interval ago, so that a
// metric going missing is recorded once rather than at every evaluation.
func (e *evaluation) wentMissing(path string) bool {
	iv := e.p.Interval
	prev := e.now.Add(-iv)
	pts := e.h.Points(path, prev.Add(-max(3*iv, minStale)-maxStaleSlack), prev)
	return e.isFresh(path, pts, prev)
}

// isFresh reports whether pts, path's recent samples, are fresh at t: a
// metric reading a source is while each source it reads has a value within
// its max_age (a source read every 30 s is not stale 5 s after a read).
func (e *evaluation) isFresh(path string, pts []Point, t time.Time) bool {
	if e.readsSource(path) {
		_, _, missing := e.missingSource(path, t)
		return !missing && len(pts) > 0
	}
	return fresh(pts, t, e.p.Interval)
}

func (e *evaluation) rule(r config.Rule) (opinion, bool) {
	op := opinion{name: r.Name, action: r.Action}
	w := r.Window()
	// The latest sample first: the window read after it may hold newer
	// ones, which upTo leaves out.
	latest, ok := e.sample(r.Metric)
	pts := e.h.Points(r.Metric, e.now.Add(-w), e.now)
	if !ok {
		what := fmt.Sprintf("%s is missing", r.Metric)
		if len(pts) > 0 {
			what = fmt.Sprintf("%s is stale (newest sample at %s)", r.Metric, pts[len(pts)-1].T.UTC().Format(time.RFC3339))
		}
		onMissing, srcMissing := r.OnMissing, false
		if src, why, missing := e.missingSource(r.Metric, e.now); missing {
			if op, acts := e.onMissingSource(r.Name, src, why); acts {
				return e.ruleCooldown(r, op), true
			}
			what, onMissing, srcMissing = why, src.OnMissing, true
		}
		// on_missing: up acts on a metric missing for the whole window while
		// the group itself was measured (its size series), so that the first
		// seconds of collection, or a restart, do not scale out.
		if r.OnMissing == config.OnMissingUp && len(pts) == 0 && e.measured(w) {
			op.action = config.Action{Kind: config.ActionUp}
			op.reason = fmt.Sprintf("%s has been missing for %s; on_missing: up", r.Metric, fmtDur(w))
			return e.ruleCooldown(r, e.moves(op)), true
		}
		// A missing source is said at every evaluation (the runner keeps
		// the first of a run): it may never have answered at all.
		if srcMissing || e.wentMissing(r.Metric) {
			if len(e.missing) == 0 {
				e.missing = append(e.missing, r.Name)
			}
			then := "the rule holds"
			if r.OnMissing == config.OnMissingUp {
				then = fmt.Sprintf("scaling up if it stays missing for %s", fmtDur(w))
			}
			e.missing = append(e.missing, fmt.Sprintf("%s: %s; on_missing: %s, %s", r.Name, what, onMissing, then))
		}
		return op, false
	}
	pts = inEffect(upTo(pts, latest.T), latest) // as e.window, on the samples read above
	// A window not yet covered (history too short, or a gap) does not hold.
	if !covers(pts, e.now, w, e.p.Interval) {
		return op, false
	}
	if r.Statistic != "" {
		v := statistic(r.Statistic, pts)
		if !finite(v) || !beyond(r, v) {
			return op, false
		}
		op.reason = fmt.Sprintf("%s %s over %s is %s, %s; %s", r.Metric, r.Statistic, fmtDur(w), reading(v), thresholds(r), r.Action)
		return e.ruleCooldown(r, e.moves(op)), true
	}
	lo, hi := pts[0].V, pts[0].V
	for _, p := range pts {
		if !finite(p.V) || !beyond(r, p.V) {
			return op, false
		}
		lo, hi = min(lo, p.V), max(hi, p.V)
	}
	var seen string
	switch {
	case r.HasAbove && r.HasBelow:
		seen = fmt.Sprintf("from %s to %s", reading(lo), reading(hi))
	case r.HasAbove:
		seen = "lowest " + reading(lo)
	default:
		seen = "highest " + reading(hi)
	}
	op.reason = fmt.Sprintf("%s %s for %s (%s); %s", r.Metric, thresholds(r), fmtDur(w), seen, r.Action)
	return e.ruleCooldown(r, e.moves(op)), true
}

// measured reports whether the group itself (its size series) was measured
// over the last w.
func (e *evaluation) measured(w time.Duration) bool {
	latest, ok := e.sample("size")
	return ok && reaches(e.window("size", w, latest), e.now, w, e.p.Interval)
}

// window is path's samples over the last w as of latest, the sample the
// evaluation read (e.sample, called first): those recorded since are left
// out, so that what a decision records is what it decided on. Empty, it
// is latest, the value in effect (inEffect).
func (e *evaluation) window(path string, w time.Duration, latest Point) []Point {
	return inEffect(upTo(e.h.Points(path, e.now.Add(-w), e.now), latest.T), latest)
}

// beyond reports whether v is beyond r's thresholds (strictly: a value equal
// to a threshold is not above or below it).
func beyond(r config.Rule, v float64) bool {
	return (!r.HasAbove || v > r.Above) && (!r.HasBelow || v < r.Below)
}

// thresholds says what r wants of its metric: "above 75", "below 35" or
// "between 1.5 and 19.5".
func thresholds(r config.Rule) string {
	switch {
	case r.HasAbove && r.HasBelow:
		return fmt.Sprintf("between %s and %s", num(r.Above), num(r.Below))
	case r.HasAbove:
		return "above " + num(r.Above)
	}
	return "below " + num(r.Below)
}

// statistic is stat of pts, the samples of a window, weighted by time: each
// sample stands for the time until the next one (the last for the spacing
// before it), so that the 10 s roll-ups read back after a restart weigh ten
// times a live 1 s sample, as the seconds they average do. NaN when pts has
// no finite value.
func statistic(stat string, pts []Point) float64 {
	type weighted struct{ v, w float64 }
	var ws []weighted
	total := 0.0
	for i, p := range pts {
		if !finite(p.V) {
			continue
		}
		var d time.Duration
		switch {
		case i+1 < len(pts):
			d = pts[i+1].T.Sub(p.T)
		case i > 0:
			d = p.T.Sub(pts[i-1].T)
		}
		w := max(d.Seconds(), 1e-3) // samples at the same instant still count
		ws = append(ws, weighted{p.V, w})
		total += w
	}
	if len(ws) == 0 {
		return math.NaN()
	}
	switch stat {
	case config.StatMin:
		return slices.MinFunc(ws, func(a, b weighted) int { return cmp.Compare(a.v, b.v) }).v
	case config.StatMax:
		return slices.MaxFunc(ws, func(a, b weighted) int { return cmp.Compare(a.v, b.v) }).v
	case config.StatAverage:
		sum := 0.0
		for _, x := range ws {
			sum += x.v * x.w
		}
		return sum / total
	}
	// pNN: the least value at or under which NN % of the window's time lies.
	pct, ok := config.Percentile(stat)
	if !ok {
		return math.NaN()
	}
	slices.SortFunc(ws, func(a, b weighted) int { return cmp.Compare(a.v, b.v) })
	acc := 0.0
	for _, x := range ws {
		acc += x.w
		if acc >= total*pct/100-1e-9 {
			return x.v
		}
	}
	return ws[len(ws)-1].v
}

// moves sets the size op's action leads to, and explains an action that
// cannot move the group (up at the largest plan, say).
func (e *evaluation) moves(op opinion) opinion {
	cur := e.s.Desired
	op.size = Apply(e.g, op.action, cur)
	if op.size != cur {
		return op
	}
	switch k := op.action.Kind; {
	case k == config.ActionUp || k == config.ActionPercent && op.action.Percent > 0:
		op.code, op.reason = CodeMaxSize, op.reason+"; "+e.g.Range().AtEnd(config.Up)
	case k == config.ActionDown || k == config.ActionPercent:
		op.code, op.reason = CodeMinSize, op.reason+"; "+e.g.Range().AtEnd(config.Down)
	default:
		op.code, op.reason = CodeSteady, op.reason+fmt.Sprintf("; the size is %d already", cur)
	}
	return op
}

// ruleCooldown fires op unless the rule's own cooldown holds it back.
func (e *evaluation) ruleCooldown(r config.Rule, op opinion) opinion {
	if op.code != "" {
		return op
	}
	last, ok := e.s.RuleJobs[r.Name]
	if until := last.Add(r.Cooldown); ok && r.Cooldown > 0 && e.now.Before(until) {
		op.code = CodeRuleCooldown
		op.reason += fmt.Sprintf("; the rule's cooldown runs until %s", until.UTC().Format(time.RFC3339))
		return op
	}
	op.fired = true
	return op
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// num formats a configured number (a threshold, a target) as written.
func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// fmtDur prints d without trailing zero units ("10m", "1h30m").
func fmtDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// reading formats a measured value as a person reads it: three significant
// digits, but never fewer than its integer digits (43.41537141505418 → 43.4,
// 134.38 → 134, 0.04995 → 0.05). Reasons use it; Decision.Values keeps the
// exact values.
func reading(v float64) string {
	if v == 0 || !finite(v) {
		return num(v)
	}
	decimals := max(0, 2-int(math.Floor(math.Log10(math.Abs(v)))))
	p := math.Pow10(decimals)
	return num(math.Round(v*p) / p)
}

// recommend is the target's recommendation from one sample: value v (a
// group total, or per instance) with
// ready instances, for a group of size n, and what the formula alone gives.
// Inside the tolerance band it is n.
func recommend(t config.Target, total bool, v float64, ready, n int) (rec, raw int, inBand bool) {
	units := v
	if !total {
		units = v * float64(ready)
	}
	exact := units / t.Value
	// The epsilon keeps 150/50 = 3.0000000001 from becoming 4; truncSat keeps
	// a load beyond the int range (a tiny target value) the largest size
	// rather than a wrapped, negative one.
	raw = truncSat(math.Ceil(exact - 1e-9))
	if ready > 0 && math.Abs(exact/float64(ready)-1) <= t.Tolerance {
		return n, raw, true
	}
	// As the HPA does, count instances that are not ready yet (warming up)
	// as loaded to the target before scaling in: otherwise the capacity just
	// added would be taken away before it could take load.
	if raw < n && !total && ready < n {
		if adjusted := truncSat(math.Ceil(exact + float64(n-ready) - 1e-9)); adjusted < n {
			return adjusted, raw, false
		}
		return n, raw, false
	}
	return raw, raw, false
}

func (e *evaluation) target(t config.Target) (opinion, bool) {
	iv := e.p.Interval
	op := opinion{name: TargetName, action: config.Action{Kind: config.ActionSize}}
	cur := e.s.Desired
	latest, ok := e.sample(t.Metric)
	readyP, readyOK := e.sample("ready")
	if !ok || !readyOK {
		what, srcMissing := fmt.Sprintf("%s or ready is missing or stale", t.Metric), false
		if src, why, missing := e.missingSource(t.Metric, e.now); missing {
			if mop, acts := e.onMissingSource(TargetName, src, why); acts {
				mop.fired = mop.code == ""
				return mop, true
			}
			what, srcMissing = why+"; on_missing: hold", true
		}
		if srcMissing || e.wentMissing(t.Metric) || ok && e.wentMissing("ready") {
			if len(e.missing) == 0 {
				e.missing = append(e.missing, TargetName)
			}
			e.missing = append(e.missing, fmt.Sprintf("target: %s; the size holds", what))
		}
		return op, false
	}
	ready := int(readyP.V)
	total := e.total(t.Metric)
	rec, raw, inBand := recommend(t, total, latest.V, ready, cur)
	desc := fmt.Sprintf("%s %s with %d ready → %d for target %s", t.Metric, reading(latest.V), ready, rec, num(t.Value))
	if growth, why := e.lookAhead(t); growth > 1 {
		// Only a scale-out looks ahead: what the load does after the
		// instances arrive is the next evaluation's to see.
		if r, w, b := recommend(t, total, latest.V*growth, ready, cur); r > rec && r > cur {
			rec, raw, inBand = r, w, b
			desc = fmt.Sprintf("%s %s × %s (%s) with %d ready → %d for target %s", t.Metric, reading(latest.V), reading(growth), why, ready, rec, num(t.Value))
		}
	}
	op.size, op.fired, op.reason = rec, true, desc
	switch {
	case inBand && raw != cur:
		op.fired = false
		op.code = CodeTolerance
		op.reason = fmt.Sprintf("%s %s is within %s%% of the target %s: the size stays %d (the formula gives %d)",
			t.Metric, reading(latest.V), reading(t.Tolerance*100), num(t.Value), cur, raw)
		return op, true
	case rec == cur:
		return op, true
	case rec > cur:
		base, ok := e.extremeSize(t.Period, false)
		if !ok {
			base = cur
		}
		limit := addSat(base, t.MaxStep.Up.Of(base))
		if rec > limit {
			if limit <= cur {
				op.fired, op.size = false, cur
				op.code = CodeRateLimit
				op.reason = fmt.Sprintf("%s; max_step up %s per %s from %d allows no more than %d", desc, t.MaxStep.Up, t.Period, base, limit)
				return op, true
			}
			op.size = limit
			op.reason += fmt.Sprintf(", limited to %d by max_step up %s per %s", limit, t.MaxStep.Up, t.Period)
		}
		return op, true
	}

	// Scale in: only to the highest recommendation of the window, which must
	// be covered by history. Time not observed (before the history starts,
	// or a gap while shoal was down) recommends no scale-in, as it makes a
	// rule's window not hold: what the load was then is unknown.
	stab := t.ScaleInStabilization
	if stab > 0 {
		pts := e.window(t.Metric, stab, latest)
		if !reaches(pts, e.now, stab, iv) {
			op.fired, op.size = false, cur
			op.code = CodeStabilization
			op.reason = fmt.Sprintf("%s; the %s stabilization window is not yet covered by history", desc, stab)
			return op, true
		}
		if from, to, gap := hole(pts, stab, iv); gap {
			op.fired, op.size = false, cur
			op.code = CodeStabilization
			op.reason = fmt.Sprintf("%s; the %s stabilization window is not yet covered by history: no samples from %s to %s",
				desc, stab, from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
			return op, true
		}
		readyPts := e.h.Points("ready", e.now.Add(-stab-maxStaleSlack), e.now)
		sizePts := e.h.Points("size", e.now.Add(-stab-maxStaleSlack), e.now)
		high, highAt := rec, e.now
		for _, p := range pts {
			if !finite(p.V) {
				continue
			}
			r, n := ready, cur
			if rp, ok := at(readyPts, p.T); ok {
				r = int(rp.V)
			}
			if sp, ok := at(sizePts, p.T); ok {
				n = int(sp.V)
			}
			if pr, _, _ := recommend(t, total, p.V, r, n); pr > high {
				high, highAt = pr, p.T
			}
		}
		if high >= cur {
			op.fired, op.size = false, cur
			op.code = CodeStabilization
			op.reason = fmt.Sprintf("%s; the %s stabilization window holds a higher recommendation (%d at %s)", desc, stab, high, highAt.UTC().Format(time.RFC3339))
			return op, true
		}
		if high > rec {
			op.size = high
			op.reason += fmt.Sprintf(", stabilized to %d (the highest in the last %s, at %s)", high, stab, highAt.UTC().Format(time.RFC3339))
		}
	}
	base, ok := e.extremeSize(t.Period, true)
	if !ok {
		base = cur
	}
	limit := addSat(base, -t.MaxStep.Down.Of(base))
	if op.size < limit {
		if limit >= cur {
			op.fired, op.size = false, cur
			op.code = CodeRateLimit
			op.reason = fmt.Sprintf("%s; max_step down %s per %s from %d allows no fewer than %d", desc, t.MaxStep.Down, t.Period, base, limit)
			return op, true
		}
		op.size = limit
		op.reason += fmt.Sprintf(", limited to %d by max_step down %s per %s", limit, t.MaxStep.Down, t.Period)
	}
	return op, true
}

// The look-ahead of a target with a start delay: the load's trend is the
// least-squares line through requests_per_second over lookAheadWindow, and
// how far it may lift the load is bounded by maxGrowth, so that one burst
// cannot double a group at every evaluation.
const (
	lookAheadWindow = 5 * time.Minute
	maxGrowth       = 2.0
)

// lookAhead returns by how much the group's load will have grown when an
// instance started now enters service, from the requests_per_second trend
// over the last lookAheadWindow (1: not rising, no delay, or no trend to
// tell), and how it was reached.
func (e *evaluation) lookAhead(t config.Target) (float64, string) {
	delay, src := t.StartDelay.D, "start_delay"
	if t.StartDelay.Auto {
		delay, src = e.s.StartDelay, "the measured start delay"
	}
	if delay <= 0 {
		return 1, ""
	}
	pts := e.h.Points("requests_per_second", e.now.Add(-lookAheadWindow), e.now)
	var n, sx, sy, sxx, sxy float64
	for _, p := range pts {
		if !finite(p.V) {
			continue
		}
		x := p.T.Sub(e.now).Seconds()
		n++
		sx, sy, sxx, sxy = sx+x, sy+p.V, sxx+x*x, sxy+x*p.V
	}
	den := n*sxx - sx*sx
	if n < 3 || !(den > 0) {
		return 1, ""
	}
	slope := (n*sxy - sx*sy) / den
	now := (sy - slope*sx) / n // the line at now (x = 0)
	if !(now > 0) || !(slope > 0) {
		return 1, ""
	}
	g := min((now+slope*delay.Seconds())/now, maxGrowth)
	return g, fmt.Sprintf("requests_per_second rising %s/s over the last %s: the load in %s, %s", reading(slope), fmtDur(lookAheadWindow), fmtDur(delay), src)
}

// extremeSize is the smallest (or, with largest, the largest) size the group
// had during the last period, the base a rate limit counts from.
func (e *evaluation) extremeSize(period time.Duration, largest bool) (int, bool) {
	pts := e.h.Points("size", e.now.Add(-period), e.now)
	if len(pts) == 0 {
		return 0, false
	}
	v := pts[0].V
	for _, p := range pts {
		if largest {
			v = max(v, p.V)
		} else {
			v = min(v, p.V)
		}
	}
	// The desired size leads the measured one while a job runs.
	if largest {
		return max(int(v), e.s.Desired), true
	}
	return min(int(v), e.s.Desired), true
}

// guardHolds reports whether g's metric is beyond its thresholds now: a
// fresh value only (a source within its max_age), so that a stale one
// never opens a schedule's bounds.
func (e *evaluation) guardHolds(g *config.Guard) bool {
	if !e.readsSource(g.Metric) {
		p, ok := e.sample(g.Metric)
		return ok && g.Holds(p.V)
	}
	if _, _, missing := e.missingSource(g.Metric, e.now); missing {
		return false
	}
	// Its sources are fresh; its newest value is within the longest
	// max_age a source may have.
	var pts []Point
	for _, back := range []time.Duration{time.Minute, maxSourceAge} {
		if pts = e.h.Points(g.Metric, e.now.Add(-back), e.now); len(pts) > 0 {
			break
		}
	}
	if len(pts) == 0 || !finite(pts[len(pts)-1].V) {
		return false
	}
	v := pts[len(pts)-1].V
	e.values[g.Metric] = v
	return g.Holds(v)
}

// maxSourceAge bounds how far back a guard looks for a source's newest
// value: Missing has said it is within the source's max_age, which is at
// least its interval (at most 10 minutes) and rarely longer.
const maxSourceAge = time.Hour

// schedules returns the size bounds at now and the names of the schedules
// that set them.
func (e *evaluation) schedules() (lo, hi int, names []string) {
	lo, hi = e.g.MinSize, e.g.MaxSize
	for _, s := range e.p.Schedules {
		if !s.Cron.Active(e.now, s.Duration) || s.When != nil && !e.guardHolds(s.When) {
			continue
		}
		names = append(names, s.Name)
		if s.MinSize > 0 {
			lo = max(lo, s.MinSize)
		}
		if s.MaxSize > 0 {
			hi = min(hi, s.MaxSize)
		}
	}
	// Overlapping windows that disagree: the floor wins, so capacity asked
	// for is there.
	hi = max(hi, lo)
	return lo, hi, names
}
