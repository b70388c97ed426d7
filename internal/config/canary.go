package config

import (
	"fmt"
	"math"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Values of Deploy.Strategy.
const (
	StrategyRolling   = "rolling"
	StrategyCanary    = "canary"
	StrategyBlueGreen = "blue_green"
)

// DeployStrategies lists the values of deploy.strategy.
var DeployStrategies = []string{StrategyRolling, StrategyCanary, StrategyBlueGreen}

// Canary runs a new version beside the stable one, step by step on a
// growing share of the requests (HAProxy weights), while Analysis compares
// the two; after the last step the new version replaces the stable one as
// in a rolling deploy (internal/canary, group/canary.go).
type Canary struct {
	// Steps are the shares of requests the canary gets, increasing.
	Steps []CanaryStep `yaml:"steps" required:"true"`
	// Analysis compares canary and stable while a step lasts; nil: only
	// health failures roll a canary back.
	Analysis *CanaryAnalysis `yaml:"analysis"`
}

// CanaryStep is one share of the requests and how long it lasts: a step
// gives either Weight or Instances.
type CanaryStep struct {
	// Weight is the share of requests the canary gets, in percent ("5%"),
	// whatever the instance counts: a scale-out during the step adds
	// stable instances and the weights keep the share.
	Weight float64 `yaml:"weight"`
	// Instances is the canary's instances as a share of the group's size,
	// in percent ("25%"): every server gets the same weight, so the canary
	// gets its share of the servers, and a scale-out during the step adds
	// canary instances in proportion.
	Instances float64 `yaml:"instances"`
	// For is how long the step lasts once its weight is set (0: the next
	// step follows as soon as its instances serve).
	For time.Duration `yaml:"for"`
	// Pause, once For has passed, waits for `shoal deploy resume` (or
	// promote) before the next step; the analysis goes on meanwhile.
	Pause bool `yaml:"pause"`
}

// Share is the step's percentage: its weight, or for a step by instance
// count its share of the group's instances.
func (s CanaryStep) Share() float64 { return max(s.Weight, s.Instances) }

// ByInstances reports a step by instance count (instances:).
func (s CanaryStep) ByInstances() bool { return s.Instances > 0 }

// CanaryAnalysis is what rolls a canary back: its error rate or p99 beyond
// the bounds over the step so far, judged every Interval once the canary
// has answered MinRequests.
type CanaryAnalysis struct {
	// MaxErrorRate bounds the canary's share of 5xx answers; nil: off.
	MaxErrorRate *CanaryErrorRate `yaml:"max_error_rate"`
	// MaxP99 bounds the canary's p99 time to respond (from the sampled
	// access log); nil: off.
	MaxP99 *CanaryP99 `yaml:"max_p99"`
	// MinRequests is the fewest answers of the canary in a step that the
	// analysis judges.
	MinRequests int `yaml:"min_requests" required:"true"`
	// Interval is how often the analysis judges.
	Interval time.Duration `yaml:"interval"`
}

// CanaryErrorRate fails a canary whose share of 5xx answers is above
// Above (percent; 0: no absolute bound) and above VsStable times the
// stable version's over the same window (0: no comparison).
type CanaryErrorRate struct {
	// Above is the share of 5xx answers, in percent ("1%"), beyond which
	// the canary fails (0: no absolute bound).
	Above float64 `yaml:"above"`
	// VsStable is how many times the stable version's share the canary's
	// must be to fail ("2x", at least 1; 0: no comparison).
	VsStable float64 `yaml:"vs_stable"`
}

// CanaryP99 fails a canary whose p99 is above Above (0: no absolute bound)
// and above VsStable times the stable version's (0: no comparison).
type CanaryP99 struct {
	// Above is the p99 beyond which the canary fails (0: no absolute
	// bound).
	Above time.Duration `yaml:"above"`
	// VsStable is how many times the stable version's p99 the canary's
	// must be to fail ("1.5x", at least 1; 0: no comparison).
	VsStable float64 `yaml:"vs_stable"`
}

var (
	defaultCanary         = Canary{}
	defaultCanaryStep     = CanaryStep{}
	defaultCanaryAnalysis = CanaryAnalysis{Interval: 30 * time.Second}
	defaultCanaryError    = CanaryErrorRate{}
	defaultCanaryP99      = CanaryP99{}
)

// maxCanaryStepFor bounds a step: a canary is a deploy, and a deploy is a
// job with a bounded time.
const maxCanaryStepFor = 24 * time.Hour

// strategy decodes deploy.strategy, deploy.canary and deploy.blue_green
// into dep.
func (d *decoder) strategy(f *fields, n *yaml.Node, dep *Deploy) {
	if s, sn := f.str("strategy", dep.Strategy); sn != nil {
		switch s {
		case StrategyRolling, StrategyCanary, StrategyBlueGreen:
			dep.Strategy = s
		default:
			d.errorf(sn, f.field("strategy"), "must be one of %s, got %q", strings.Join(DeployStrategies, ", "), s)
		}
	}
	cn := f.get("canary")
	switch {
	case cn == nil && dep.Strategy == StrategyCanary:
		d.errorf(n, f.field("canary"), "required with strategy: canary (its steps and analysis)")
	case cn != nil && dep.Strategy != StrategyCanary:
		d.errorf(cn, f.field("canary"), "applies only to strategy: canary, and strategy is %q", dep.Strategy)
	case cn != nil:
		dep.Canary = d.canary(cn, f.field("canary"))
	}
	d.blueGreen(f, dep)
}

func (d *decoder) canary(n *yaml.Node, path string) *Canary {
	f := section[Canary](d, n, path)
	if f.node == nil {
		return nil
	}
	c := defaultCanary
	if sn := f.get("steps"); sn != nil {
		items, ok := d.sequence(sn, f.field("steps"), "a list of steps such as {weight: 5%, for: 5m}")
		if ok && len(items) == 0 {
			d.errorf(sn, f.field("steps"), "must list at least one step")
		}
		prev := 0.0
		for i, it := range items {
			field := fmt.Sprintf("%s[%d]", f.field("steps"), i)
			s, ok := d.canaryStep(it, field, prev, i == len(items)-1)
			if ok {
				prev = s.Share()
				c.Steps = append(c.Steps, s)
			}
		}
	}
	if an := f.get("analysis"); an != nil {
		c.Analysis = d.canaryAnalysis(an, f.field("analysis"))
	}
	return &c
}

// canaryStep decodes one step; prev is the weight of the step before.
func (d *decoder) canaryStep(n *yaml.Node, path string, prev float64, last bool) (CanaryStep, bool) {
	f := section[CanaryStep](d, n, path)
	if f.node == nil {
		return CanaryStep{}, false
	}
	s := defaultCanaryStep
	wn, in := f.get("weight"), f.get("instances")
	key := "weight"
	switch {
	case wn != nil && in != nil:
		d.errorf(in, f.field("instances"), "conflicts with weight: a step is by weight (a share of the requests) or by instances (a share of the group's instances), not both")
		return s, false
	case wn == nil && in == nil:
		d.errorf(n, f.field("weight"), "required (or instances): the canary's share of the requests, such as 5%%")
		return s, false
	case in != nil:
		wn, key = in, "instances"
	}
	w, ok := d.percentOf(wn, f.field(key))
	if !ok {
		return s, false
	}
	switch {
	case w <= 0:
		d.errorf(wn, f.field(key), "must be above 0%%, got %s: a step of 0%% sends the canary nothing to judge", wn.Value)
		return s, false
	case w > 100:
		d.errorf(wn, f.field(key), "must be at most 100%%, got %s", wn.Value)
		return s, false
	case w <= prev:
		d.errorf(wn, f.field(key), "must be above the step before's %g%%, got %s: steps must increase", prev, wn.Value)
		return s, false
	}
	if key == "instances" {
		s.Instances = w
	} else {
		s.Weight = w
	}
	s.For = d.within(f, "for", 0, 0, maxCanaryStepFor)
	s.Pause, _ = f.boolean("pause", false)
	if !last && s.For == 0 && !s.Pause {
		d.errorf(n, f.field("for"), "required on every step but the last (or pause: true): a step of no time judges nothing")
	}
	return s, true
}

func (d *decoder) canaryAnalysis(n *yaml.Node, path string) *CanaryAnalysis {
	f := section[CanaryAnalysis](d, n, path)
	if f.node == nil {
		return nil
	}
	a := defaultCanaryAnalysis
	if v, vn := f.integer("min_requests", 0); vn != nil {
		if v < 1 || v > 100_000_000 {
			d.errorf(vn, f.field("min_requests"), "must be from 1 to 100000000, got %d", v)
		} else {
			a.MinRequests = v
		}
	}
	a.Interval = d.within(f, "interval", a.Interval, time.Second, time.Hour)
	if en := f.get("max_error_rate"); en != nil {
		ef := section[CanaryErrorRate](d, en, f.field("max_error_rate"))
		if ef.node != nil {
			e := defaultCanaryError
			if vn := ef.get("above"); vn != nil {
				if v, ok := d.percentOf(vn, ef.field("above")); ok {
					if v < 0 || v >= 100 {
						d.errorf(vn, ef.field("above"), "must be a percentage from 0%% to below 100%%, got %s", vn.Value)
					} else {
						e.Above = v
					}
				}
			}
			e.VsStable = d.vsStable(ef)
			if ef.get("above") == nil && ef.get("vs_stable") == nil {
				d.errorf(en, f.field("max_error_rate"), "needs above or vs_stable (or both)")
			}
			a.MaxErrorRate = &e
		}
	}
	if pn := f.get("max_p99"); pn != nil {
		pf := section[CanaryP99](d, pn, f.field("max_p99"))
		if pf.node != nil {
			p := defaultCanaryP99
			p.Above = d.within(pf, "above", 0, 0, time.Hour)
			p.VsStable = d.vsStable(pf)
			if pf.get("above") == nil && pf.get("vs_stable") == nil {
				d.errorf(pn, f.field("max_p99"), "needs above or vs_stable (or both)")
			}
			a.MaxP99 = &p
		}
	}
	if a.MaxErrorRate == nil && a.MaxP99 == nil {
		d.errorf(n, path, "judges nothing: give max_error_rate, max_p99 or both")
	}
	return &a
}

// vsStable reads a vs_stable multiple ("2x" or a number) of at least 1:
// below 1 a canary as good as the stable version would fail.
func (d *decoder) vsStable(f *fields) float64 {
	n := f.get("vs_stable")
	if n == nil {
		return 0
	}
	var v float64
	ok := false
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
		s := strings.TrimSpace(n.Value)
		_, err := fmt.Sscanf(strings.TrimSuffix(s, "x"), "%g", &v)
		ok = err == nil && strings.HasSuffix(s, "x")
	} else if n.Kind == yaml.ScalarNode && (n.ShortTag() == "!!int" || n.ShortTag() == "!!float") {
		ok = n.Decode(&v) == nil
	}
	switch {
	case !ok || math.IsNaN(v) || math.IsInf(v, 0):
		d.errorf(n, f.field("vs_stable"), `must be a multiple of the stable version's figure such as "2x", got %s`, describe(n))
	case v < 1 || v > 1000:
		d.errorf(n, f.field("vs_stable"), "must be from 1x to 1000x, got %s: below 1 a canary as good as the stable version fails", n.Value)
	default:
		return v
	}
	return 0
}
