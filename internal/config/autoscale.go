package config

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // schedules' time zones must not depend on the host's zoneinfo

	"gopkg.in/yaml.v3"

	"github.com/shoal-lb/shoal/internal/cron"
)

// Autoscale is a group's scaling policy: threshold rules, a target to track
// and schedules that bound the result. Package policy evaluates it.
type Autoscale struct {
	// Interval is how often the policy is evaluated. (How long a new
	// instance stays out of the metrics is metrics.warmup.)
	Interval  time.Duration `yaml:"interval"`
	Rules     []Rule        `yaml:"rules"`
	Target    *Target       `yaml:"target"`
	Schedules []Schedule    `yaml:"schedule"`
	// Predictive is nil when the group does not pre-scale.
	Predictive *Predictive `yaml:"predictive"`
}

// Names the policy gives its target and its predictive floor in decisions
// and job sources (policy:NAME); no rule or schedule may take them.
const (
	TargetName     = "target"
	PredictiveName = "predictive"
)

// reservedName says what a reserved rule or schedule name stands for, "" for
// a name free to use.
func reservedName(name string) string {
	switch name {
	case TargetName:
		return "the target"
	case PredictiveName:
		return "the predictive floor"
	}
	return ""
}

// defaultAutoscale holds the defaults of an autoscale section's keys.
var defaultAutoscale = Autoscale{Interval: time.Second}

// MetricPaths are the group metrics a policy can refer to (package metrics'
// GroupMetrics): cpu.* over the group's ready instances, the rest over its
// whole backend.
var MetricPaths = []string{
	"cpu.avg", "cpu.min", "cpu.max", "cpu.p75", "cpu.p90", "cpu.p95", "cpu.p99",
	"latency_ms.p50", "latency_ms.p90", "latency_ms.p99",
	"requests_per_second", "requests_per_second_per_instance", "errors_per_second",
	"connection_errors_per_second", "retries_per_second", "queue", "sessions", "ready", "size",
	"concurrency", "queue_max", "queue_time_ms",
}

// MetricsRead are the metrics a's target and rules read, each once: shoal's
// own, sources' names or formulas.
func (a *Autoscale) MetricsRead() []string {
	var out []string
	add := func(m string) {
		if m != "" && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	if a.Target != nil {
		add(a.Target.Metric)
	}
	for _, r := range a.Rules {
		add(r.Metric)
	}
	for _, s := range a.Schedules {
		if s.When != nil {
			add(s.When.Metric)
		}
	}
	if a.Predictive != nil {
		add(a.Predictive.MetricOf())
	}
	return out
}

// untrackable metrics describe the group's size, not its load.
var untrackable = []string{"ready", "size"}

// Rule scales when a metric is above or below a threshold, or between two:
// every sample of a window (For), or the window's aggregate (Statistic over
// Over, as a CloudWatch alarm compares one datapoint).
type Rule struct {
	// Name is "rule-N" (N counting from 1) unless the file names the rule.
	Name string `yaml:"name"`
	// Metric is one of shoal's metrics, a metrics.sources name, or a
	// formula over both ("queue_depth / max(size, 1)").
	Metric string `yaml:"metric" required:"true"`
	// Above and Below are the thresholds, each set when its Has flag is: the
	// value must be above Above and below Below, strictly (with both, between).
	HasAbove, HasBelow bool
	Above              float64 `yaml:"above"`
	Below              float64 `yaml:"below"`
	// For is how long every sample must be beyond the thresholds; 0 when
	// Statistic is set.
	For time.Duration `yaml:"for"`
	// Statistic (StatAverage, StatMin, StatMax or "pNN") of the samples of
	// the last Over is what is compared, once per evaluation.
	Statistic string        `yaml:"statistic"`
	Over      time.Duration `yaml:"over"`
	Action    Action        `yaml:"action" required:"true"`
	// Cooldown holds the rule back after it scaled the group (0: none).
	Cooldown time.Duration `yaml:"cooldown"`
	// OnMissing is what a missing or stale metric means: OnMissingKeep or OnMissingUp.
	OnMissing string `yaml:"on_missing"`
}

// defaultRule holds the defaults of a rule's keys.
var defaultRule = Rule{OnMissing: OnMissingKeep}

// Window is the stretch of history the rule reads: For or Over.
func (r Rule) Window() time.Duration {
	if r.Statistic != "" {
		return r.Over
	}
	return r.For
}

// Statistics a rule can compare over its window; "pNN" (0 < NN < 100) is a
// percentile.
const (
	StatAverage = "average"
	StatMin     = "min"
	StatMax     = "max"
)

// Percentile returns NN of a "pNN" statistic.
func Percentile(stat string) (float64, bool) {
	v, err := strconv.ParseFloat(strings.TrimPrefix(stat, "p"), 64)
	return v, strings.HasPrefix(stat, "p") && err == nil && v > 0 && v < 100
}

// What a rule does when its metric is missing or stale.
const (
	OnMissingKeep = "keep" // nothing: a missing metric never scales
	OnMissingUp   = "up"   // scale up one step, as if the metric were overloaded
)

// ActionKind is what a rule does when it fires.
type ActionKind string

// Rule actions.
const (
	ActionUp      ActionKind = "up"      // one plan up (one instance without plans)
	ActionDown    ActionKind = "down"    // one plan down
	ActionAdd     ActionKind = "add"     // N instances more
	ActionRemove  ActionKind = "remove"  // N instances fewer
	ActionPlan    ActionKind = "plan"    // to the named plan
	ActionSize    ActionKind = "size"    // to N instances
	ActionPercent ActionKind = "percent" // by P % of the size (negative: in)
)

// Action is a rule's action; N, Plan or Percent as its kind needs.
type Action struct {
	Kind    ActionKind
	N       int
	Plan    string
	Percent float64
}

func (a Action) String() string {
	switch a.Kind {
	case ActionAdd, ActionRemove, ActionSize:
		return fmt.Sprintf("%s: %d", a.Kind, a.N)
	case ActionPlan:
		return "plan: " + a.Plan
	case ActionPercent:
		return "percent: " + strconv.FormatFloat(a.Percent, 'g', -1, 64)
	}
	return string(a.Kind)
}

// Target keeps a metric near Value by resizing the group, like Kubernetes'
// HorizontalPodAutoscaler.
type Target struct {
	// Metric is as a rule's; a source with one value, or a formula reading
	// no per-instance metric nor size or ready, is a group total (as queue).
	Metric string  `yaml:"metric" required:"true"`
	Value  float64 `yaml:"value" required:"true"`
	// Tolerance is the relative band around Value in which nothing changes.
	Tolerance float64 `yaml:"tolerance"`
	// ScaleInStabilization: scale in only to the highest recommendation made
	// within this window.
	ScaleInStabilization time.Duration `yaml:"scale_in_stabilization"`
	// MaxStep limits the change per Period.
	MaxStep MaxStep       `yaml:"max_step"`
	Period  time.Duration `yaml:"period"`
	// StartDelay makes scale-out act on where the load will be when a new
	// instance enters service: the load the requests_per_second trend
	// reaches this long from now, when it is rising. "auto" is the
	// group's measured start delay (the median of its last starts); 0
	// looks at now only.
	StartDelay StartDelay `yaml:"start_delay"`
}

// StartDelay is a target's look-ahead: a fixed duration, or Auto for the
// group's measured start delay.
type StartDelay struct {
	Auto bool
	D    time.Duration
}

// String prints d as the file writes it.
func (d StartDelay) String() string {
	if d.Auto {
		return "auto"
	}
	return d.D.String()
}

// maxStartDelay bounds a fixed start_delay: past an hour a trend says
// nothing about the load.
const maxStartDelay = time.Hour

// defaultTarget holds the defaults of a target's keys.
var defaultTarget = Target{
	Tolerance:            0.1,
	ScaleInStabilization: 300 * time.Second,
	MaxStep:              MaxStep{Up: Step{N: 100, Percent: true}, Down: Step{N: 1}},
	Period:               15 * time.Second,
}

// MaxStep is the most a target may change the group's size per period, up
// and down.
type MaxStep struct {
	Up   Step `yaml:"up"`
	Down Step `yaml:"down"`
}

// Step is a number of instances, or a percentage of the size when Percent.
type Step struct {
	N       float64
	Percent bool
}

// Of returns the step for a group of size n, at least one instance and at
// most maxGroupSize (validation bounds N; this keeps a Step built in code
// from overflowing the size it is added to).
func (s Step) Of(n int) int {
	v := s.N
	if s.Percent {
		v = math.Ceil(float64(n) * s.N / 100)
	}
	if !(v < maxGroupSize) { // also NaN
		return maxGroupSize
	}
	return max(1, int(v))
}

func (s Step) String() string {
	if s.Percent {
		return strconv.FormatFloat(s.N, 'g', -1, 64) + "%"
	}
	return strconv.Itoa(int(s.N))
}

// Schedule bounds the group's size for Duration after each time Cron fires.
type Schedule struct {
	// Name is "schedule-N" (N counting from 1) unless the file names it.
	Name string     `yaml:"name"`
	Cron *cron.Spec `yaml:"cron" required:"true"`
	// Timezone is the IANA zone Cron is read in.
	Timezone string `yaml:"timezone"`
	// Duration is the length of each window.
	Duration time.Duration `yaml:"duration" required:"true"`
	// MinSize and MaxSize are the bounds; 0 when not set. Plan sets MinSize
	// to the plan's size: the group is at least that plan in the window.
	MinSize int    `yaml:"min_size"`
	MaxSize int    `yaml:"max_size"`
	Plan    string `yaml:"plan"`
	// When, if set, guards the schedule: its bounds hold in its window
	// only while the guard's metric is beyond its threshold (a fresh
	// value; a stale source closes the guard).
	When *Guard `yaml:"when"`
}

// Guard is a condition on a metric: one of shoal's, a metrics.sources name,
// or a formula over both.
type Guard struct {
	Metric string `yaml:"metric" required:"true"`
	// Above and Below are the thresholds, each set when its Has flag is:
	// the value must be above Above and below Below, strictly.
	HasAbove, HasBelow bool
	Above              float64 `yaml:"above"`
	Below              float64 `yaml:"below"`
}

// Holds reports whether v is beyond g's thresholds.
func (g *Guard) Holds(v float64) bool {
	return (!g.HasAbove || v > g.Above) && (!g.HasBelow || v < g.Below)
}

func (d *decoder) guard(n *yaml.Node, path string) *Guard {
	f := section[Guard](d, n, path)
	if f.node == nil {
		return nil
	}
	g := &Guard{}
	g.Metric, _ = d.metric(f, "metric")
	above, below := f.get("above"), f.get("below")
	if above != nil {
		g.Above, g.HasAbove = d.number(above, f.field("above"))
	}
	if below != nil {
		g.Below, g.HasBelow = d.number(below, f.field("below"))
	}
	switch {
	case above == nil && below == nil:
		d.errorf(f.node, path, "needs above or below: the threshold (both: a band the value must be inside)")
	case g.HasAbove && g.HasBelow && g.Below <= g.Above:
		d.errorf(below, f.field("below"), "must be greater than above (%s) for a band between them, got %s", above.Value, below.Value)
	}
	return g
}

// defaultSchedule holds the defaults of a schedule's keys.
var defaultSchedule = Schedule{Timezone: "UTC"}

func (d *decoder) autoscale(n *yaml.Node, path string, g *Group, groupOK bool) *Autoscale {
	f := section[Autoscale](d, n, path)
	if f.node == nil {
		return nil
	}
	a := new(defaultAutoscale)
	a.Interval = d.within(f, "interval", a.Interval, 100*time.Millisecond, time.Hour)

	names := make(map[string]*yaml.Node) // the rules'
	if rn := f.get("rules"); rn != nil {
		items, _ := d.sequence(rn, f.field("rules"), "a list of rules")
		for i, item := range items {
			field := fmt.Sprintf("%s[%d]", f.field("rules"), i)
			r, nameNode, ok := d.rule(item, field, i, a.Interval, g, groupOK)
			if !ok {
				continue
			}
			if first, dup := names[r.Name]; dup {
				d.errorf(nameNode, field+".name", "duplicate rule name %q (first at line %d)", r.Name, first.Line)
			} else {
				names[r.Name] = nameNode
			}
			a.Rules = append(a.Rules, r)
		}
	}
	if tn := f.get("target"); tn != nil {
		a.Target = d.target(tn, f.field("target"))
	}
	if sn := f.get("schedule"); sn != nil {
		items, _ := d.sequence(sn, f.field("schedule"), "a list of schedules")
		// A decision, its job's source and a rule's cooldown name what made
		// it: a schedule under a rule's name would hold that rule back.
		scheduleNames := make(map[string]*yaml.Node)
		for i, item := range items {
			field := fmt.Sprintf("%s[%d]", f.field("schedule"), i)
			s, nameNode, ok := d.schedule(item, field, i, g, groupOK)
			if !ok {
				continue
			}
			at := field
			if nameNode != item {
				at = field + ".name"
			}
			if rule, dup := names[s.Name]; dup {
				d.errorf(nameNode, at, "duplicate name %q (a rule's, at line %d): rules and schedules need names of their own", s.Name, rule.Line)
			} else if first, dup := scheduleNames[s.Name]; dup {
				d.errorf(nameNode, at, "duplicate schedule name %q (first at line %d)", s.Name, first.Line)
			} else {
				scheduleNames[s.Name] = nameNode
			}
			a.Schedules = append(a.Schedules, s)
		}
	}
	if pn := f.get("predictive"); pn != nil {
		a.Predictive = d.predictive(pn, f.field("predictive"))
	}
	// Unknown keys (reported above) are likely misspelt rules or targets.
	if !f.has("rules") && !f.has("target") && !f.has("schedule") && !f.has("predictive") && len(f.vals) == len(n.Content)/2 {
		d.errorf(n, path, "needs rules, a target or a schedule")
	}
	return a
}

func (d *decoder) metric(f *fields, key string) (string, *yaml.Node) {
	m, mn := f.str(key, "")
	if mn != nil && !d.metricOrFormula(mn, f.field(key), m) {
		return "", nil
	}
	return m, mn
}

func (d *decoder) number(n *yaml.Node, path string) (float64, bool) {
	var v float64
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") || n.Decode(&v) != nil ||
		math.IsNaN(v) || math.IsInf(v, 0) {
		d.errorf(n, path, "must be a number, got %s", describe(n))
		return 0, false
	}
	return v, true
}

func (d *decoder) rule(item *yaml.Node, path string, i int, interval time.Duration, g *Group, groupOK bool) (Rule, *yaml.Node, bool) {
	f := section[Rule](d, item, path)
	if f.node == nil {
		return Rule{}, nil, false
	}
	r := defaultRule
	var nameNode *yaml.Node
	r.Name, nameNode = d.decisionName(f, fmt.Sprintf("rule-%d", i+1))
	r.Metric, _ = d.metric(f, "metric")

	above, below := f.get("above"), f.get("below")
	if above != nil {
		r.Above, r.HasAbove = d.number(above, f.field("above"))
	}
	if below != nil {
		r.Below, r.HasBelow = d.number(below, f.field("below"))
	}
	switch {
	case above == nil && below == nil:
		d.errorf(f.node, path, "needs above or below: the threshold (both: a band the value must be inside)")
	case r.HasAbove && r.HasBelow && r.Below <= r.Above:
		d.errorf(below, f.field("below"), "must be greater than above (%s) for a band between them, got %s", above.Value, below.Value)
	}

	window := func(key string) time.Duration {
		v, n := f.duration(key, 0)
		// A shorter window would hold one sample, or none.
		switch {
		case n == nil:
		case v < interval:
			d.errorf(n, f.field(key), "must be at least the autoscale interval (%s), got %s", interval, v)
		default:
			d.windows = append(d.windows, windowRef{node: n, field: f.field(key), v: v, sampled: true})
		}
		return v
	}
	forN, statN, overN := f.get("for"), f.get("statistic"), f.get("over")
	switch {
	case forN != nil && (statN != nil || overN != nil):
		key := "statistic"
		if statN == nil {
			key = "over"
		}
		d.errorf(f.get(key), f.field(key), "conflicts with for: a rule compares every sample (for) or the window's statistic (statistic and over), not both")
	case forN != nil:
		r.For = window("for")
	case statN == nil && overN == nil:
		d.errorf(f.node, path, "needs for (every sample of the window beyond the threshold) or statistic and over (the window's aggregate)")
	case overN == nil:
		d.errorf(statN, f.field("over"), "required with statistic: the window the statistic is taken over")
	case statN == nil:
		d.errorf(overN, f.field("statistic"), "required with over: average, min, max or a percentile such as p90")
	default:
		r.Over = window("over")
		if st, ok := d.str(statN, f.field("statistic")); ok {
			if _, pct := Percentile(st); st != StatAverage && st != StatMin && st != StatMax && !pct {
				d.errorf(statN, f.field("statistic"), "must be average, min, max or a percentile such as p90 (p followed by more than 0, less than 100), got %q", st)
			}
			r.Statistic = st
		}
	}
	if an := f.get("action"); an != nil {
		r.Action = d.action(an, f.field("action"), g, groupOK)
	}
	r.Cooldown, _ = f.duration("cooldown", r.Cooldown)
	if m, mn := f.str("on_missing", r.OnMissing); mn != nil {
		if m != OnMissingKeep && m != OnMissingUp {
			d.errorf(mn, f.field("on_missing"), "must be keep or up, got %q", m)
		}
		r.OnMissing = m
	}
	return r, nameNode, true
}

// windowRef is a window the policy reads back from the metrics history (a
// rule's for or over, the target's stabilization), left by the decoding
// for checkWindows, which has the metrics section.
type windowRef struct {
	node  *yaml.Node
	field string
	v     time.Duration
	// sampled: the window is compared sample by sample, so it must hold
	// at least one metrics interval.
	sampled bool
}

// checkWindows checks the policies' windows against the metrics section:
// a rule's window shorter than metrics.interval would hold one sample or
// none; a window longer than the history kept (kept; 0: unchecked) starts
// before it, so it is never covered and never holds.
func (d *decoder) checkWindows(interval, kept time.Duration) {
	for _, w := range d.windows {
		switch {
		case w.sampled && w.v < interval:
			d.errorf(w.node, w.field, "must be at least metrics.interval (%s), got %s", interval, w.v)
		case kept > 0 && w.v > kept:
			d.errorf(w.node, w.field, "must be at most the metrics history kept (%s, the longest of metrics.retention), got %s", kept, w.v)
		}
	}
	d.windows = nil
}

// action accepts "up" or "down", or a one-key mapping such as "add: 2".
func (d *decoder) action(n *yaml.Node, path string, g *Group, groupOK bool) Action {
	const expected = `must be up, down, or one of {add: N}, {remove: N}, {plan: NAME}, {size: N}, {percent: P}`
	if n.Kind == yaml.ScalarNode {
		switch n.Value {
		case "up":
			return Action{Kind: ActionUp}
		case "down":
			return Action{Kind: ActionDown}
		}
		d.errorf(n, path, "%s, got %s", expected, describe(n))
		return Action{}
	}
	entries, ok := d.entries(n, path)
	if !ok {
		return Action{}
	}
	if len(entries) != 1 {
		d.errorf(n, path, "%s, got %d keys", expected, len(entries))
		return Action{}
	}
	e := entries[0]
	field := join(path, e.key)
	a := Action{Kind: ActionKind(e.key)}
	switch a.Kind {
	case ActionAdd, ActionRemove:
		// More than a group can hold is a typo, and n+N must not overflow.
		if v, ok := d.integer(e.v, field); ok {
			if v < 1 || v > maxGroupSize {
				d.errorf(e.v, field, "must be from 1 to %d (the largest max_size), got %d", maxGroupSize, v)
			}
			a.N = v
		}
	case ActionSize:
		if v, ok := d.integer(e.v, field); ok {
			if r := g.Range(); groupOK && !r.Contains(v) {
				d.errorf(e.v, field, "must be within %s, got %d", r, v)
			}
			a.N = v
		}
	case ActionPlan:
		if v, ok := d.str(e.v, field); ok {
			d.checkPlan(e.v, field, v, g)
			a.Plan = v
		}
	case ActionPercent:
		if v, ok := d.number(e.v, field); ok {
			if v == 0 || v < -100 || v > maxPercent {
				d.errorf(e.v, field, "must be a non-zero percentage from -100 to %d, got %s", maxPercent, e.v.Value)
			}
			a.Percent = v
		}
	default:
		d.errorf(e.k, field, "%s", expected)
	}
	return a
}

func (d *decoder) checkPlan(n *yaml.Node, field, name string, g *Group) {
	r := g.Range()
	if _, ok := r.PlanByName(name); !ok {
		d.errorf(n, field, "unknown plan %q (%s)", name, r.ValidPlans())
	}
}

func (d *decoder) target(n *yaml.Node, path string) *Target {
	f := section[Target](d, n, path)
	t := new(defaultTarget)
	if m, mn := d.metric(f, "metric"); mn != nil {
		if slices.Contains(untrackable, m) {
			d.errorf(mn, f.field("metric"), "%s counts instances; a target needs a load metric", m)
		}
		t.Metric = m
	}
	if vn := f.get("value"); vn != nil {
		if v, ok := d.number(vn, f.field("value")); ok {
			if v <= 0 {
				d.errorf(vn, f.field("value"), "must be > 0, got %s", vn.Value)
			}
			t.Value = v
		}
	}
	if tn := f.get("tolerance"); tn != nil {
		if v, ok := d.number(tn, f.field("tolerance")); ok {
			if v < 0 || v >= 1 {
				d.errorf(tn, f.field("tolerance"), "must be from 0 to below 1 (a fraction of value), got %s", tn.Value)
			}
			t.Tolerance = v
		}
	}
	if v, n := f.duration("scale_in_stabilization", t.ScaleInStabilization); n != nil {
		d.windows = append(d.windows, windowRef{node: n, field: f.field("scale_in_stabilization"), v: v})
		t.ScaleInStabilization = v
	}
	t.Period = d.within(f, "period", t.Period, time.Second, 24*time.Hour)
	if sn := f.get("start_delay"); sn != nil && sn.Kind == yaml.ScalarNode && sn.Value == "auto" {
		t.StartDelay.Auto = true
	} else {
		t.StartDelay.D = d.within(f, "start_delay", t.StartDelay.D, 0, maxStartDelay)
	}
	if sn := f.get("max_step"); sn != nil {
		s := section[MaxStep](d, sn, f.field("max_step"))
		if n := s.get("up"); n != nil {
			t.MaxStep.Up = d.step(n, s.field("up"), t.MaxStep.Up)
		}
		if n := s.get("down"); n != nil {
			t.MaxStep.Down = d.step(n, s.field("down"), t.MaxStep.Down)
		}
	}
	return t
}

// maxPercent bounds percentages of a group's size: 10000 % takes one
// instance to the largest max_size, so more changes nothing (and 1e300 %
// would overflow the size).
const maxPercent = 100 * maxGroupSize

// step accepts a whole number of instances or a percentage such as "50%".
func (d *decoder) step(n *yaml.Node, path string, def Step) Step {
	const expected = `must be a number of instances (1 to %d) or a percentage such as "100%%" (above 0 to %d%%), got %s`
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int" {
		if v, ok := d.integer(n, path); ok {
			if v < 1 || v > maxGroupSize {
				d.errorf(n, path, expected, maxGroupSize, maxPercent, describe(n))
				return def
			}
			return Step{N: float64(v)}
		}
		return def
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" && strings.HasSuffix(n.Value, "%") {
		v, err := strconv.ParseFloat(strings.TrimSuffix(n.Value, "%"), 64)
		if err == nil && v > 0 && v <= maxPercent {
			return Step{N: v, Percent: true}
		}
	}
	d.errorf(n, path, expected, maxGroupSize, maxPercent, describe(n))
	return def
}

// decisionName is the name of a rule or a schedule, which decisions record:
// its name field when that is valid, with the field's node, or else def
// (rule-N, schedule-N) and the item's node, where a duplicate is reported.
func (d *decoder) decisionName(f *fields, def string) (string, *yaml.Node) {
	name, nn := f.str("name", "")
	if nn == nil {
		return def, f.node
	}
	if !nameRE.MatchString(name) {
		d.errorf(nn, f.field("name"), "must match %s, got %q", namePattern, name)
		return def, f.node
	}
	if what := reservedName(name); what != "" {
		d.errorf(nn, f.field("name"), "%q names %s in decisions; choose another name", name, what)
		return def, f.node
	}
	return name, nn
}

// schedule returns the schedule at item and the node its name is reported
// at: its name, or item itself for a default name.
func (d *decoder) schedule(item *yaml.Node, path string, i int, g *Group, groupOK bool) (Schedule, *yaml.Node, bool) {
	f := section[Schedule](d, item, path)
	if f.node == nil {
		return Schedule{}, nil, false
	}
	s := defaultSchedule
	var nameNode *yaml.Node
	s.Name, nameNode = d.decisionName(f, fmt.Sprintf("schedule-%d", i+1))
	loc, _ := time.LoadLocation(s.Timezone) // the table's zone, which always loads
	if tz, tn := f.str("timezone", ""); tn != nil {
		l, err := time.LoadLocation(tz)
		if err != nil || tz == "" || strings.EqualFold(tz, "local") {
			// "Local" would make the policy depend on the host's TZ.
			d.errorf(tn, f.field("timezone"), "unknown time zone %q; use an IANA name such as Europe/Berlin or UTC", tz)
		} else {
			loc, s.Timezone = l, tz
		}
	}
	if expr, cn := f.str("cron", ""); cn != nil {
		spec, err := cron.Parse(expr, loc)
		if err != nil {
			d.errorf(cn, f.field("cron"), "%v", err)
		}
		s.Cron = spec
	}
	if v, n := f.duration("duration", 0); n != nil {
		if v < time.Minute {
			d.errorf(n, f.field("duration"), "must be at least 1m (cron fires at most once a minute), got %s", v)
		}
		s.Duration = v
	}

	minN, maxN, planN := f.get("min_size"), f.get("max_size"), f.get("plan")
	if minN == nil && maxN == nil && planN == nil {
		d.errorf(f.node, path, "needs min_size, max_size or plan: what the schedule sets")
	}
	// 0 means "not set", so a bound must be at least least.
	inRange := func(key string, n *yaml.Node, least int) int {
		v, ok := d.integer(n, f.field(key))
		if !ok {
			return 0
		}
		if v < least {
			d.errorf(n, f.field(key), "must be >= %d, got %d", least, v)
			return 0
		}
		if r := g.Range(); groupOK && !r.Contains(v) {
			d.errorf(n, f.field(key), "must be within the group's %s, got %d", r, v)
			return 0
		}
		return v
	}
	if minN != nil {
		s.MinSize = inRange("min_size", minN, 0)
	}
	if maxN != nil {
		s.MaxSize = inRange("max_size", maxN, 1)
	}
	if planN != nil {
		if minN != nil {
			d.errorf(planN, f.field("plan"), "conflicts with min_size; the plan sets it")
		} else if name, ok := d.str(planN, f.field("plan")); ok {
			d.checkPlan(planN, f.field("plan"), name, g)
			s.Plan = name
			if p, ok := g.PlanByName(name); ok {
				s.MinSize = p.Size
			}
		}
	}
	if s.MinSize > 0 && s.MaxSize > 0 && s.MinSize > s.MaxSize {
		d.errorf(maxN, f.field("max_size"), "must be >= the schedule's minimum (%d), got %d", s.MinSize, s.MaxSize)
	}
	if wn := f.get("when"); wn != nil {
		s.When = d.guard(wn, f.field("when"))
	}
	return s, nameNode, true
}
