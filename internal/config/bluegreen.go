package config

import (
	"time"
)

// BlueGreen starts a whole second set of instances (green) of the new
// version beside the serving one (blue), health-gates every one, may
// analyse it on a small share of the requests, then switches every request
// to it at once and keeps blue running, out of rotation, for KeepOld, so
// that `shoal deploy rollback` can switch back (group/bluegreen.go).
type BlueGreen struct {
	// KeepOld is how long the old set stays running, out of rotation but
	// healthy, after the switch; then it is drained and stopped and the
	// new version becomes the serving one (0: at once).
	KeepOld time.Duration `yaml:"keep_old"`
	// Weight is the share of requests, in percent ("5%"), the green set
	// gets while the analysis judges it before the switch; needs Analysis.
	Weight float64 `yaml:"weight"`
	// Analysis judges the green set against the blue one at Weight before
	// the switch (the same keys as a canary's analysis); nil: the switch
	// follows the health gate.
	Analysis *CanaryAnalysis `yaml:"analysis"`
}

var defaultBlueGreen = BlueGreen{KeepOld: 10 * time.Minute}

// maxKeepOld bounds keep_old: a blue/green deploy is a job with a bounded
// time, and it lasts until the old set is stopped.
const maxKeepOld = 24 * time.Hour

// blueGreen decodes deploy.blue_green, which applies only to strategy
// blue_green (and defaults there).
func (d *decoder) blueGreen(f *fields, dep *Deploy) {
	bn := f.get("blue_green")
	if bn != nil && dep.Strategy != StrategyBlueGreen {
		d.errorf(bn, f.field("blue_green"), "applies only to strategy: blue_green, and strategy is %q", dep.Strategy)
		return
	}
	if dep.Strategy != StrategyBlueGreen {
		return
	}
	b := defaultBlueGreen
	dep.BlueGreen = &b
	if bn == nil {
		return
	}
	path := f.field("blue_green")
	bf := section[BlueGreen](d, bn, path)
	if bf.node == nil {
		return
	}
	b.KeepOld = d.within(bf, "keep_old", b.KeepOld, 0, maxKeepOld)
	wn := bf.get("weight")
	if wn != nil {
		if w, ok := d.percentOf(wn, bf.field("weight")); ok {
			if w <= 0 || w >= 100 {
				d.errorf(wn, bf.field("weight"), "must be above 0%% and below 100%%, got %s: it is the green set's share while the analysis judges it, before the switch sends it every request", wn.Value)
			} else {
				b.Weight = w
			}
		}
	}
	an := bf.get("analysis")
	if an != nil {
		b.Analysis = d.canaryAnalysis(an, bf.field("analysis"))
	}
	switch {
	case an != nil && wn == nil:
		d.errorf(an, bf.field("analysis"), "needs weight: the share of requests the green set gets for the analysis to judge before the switch")
	case wn != nil && an == nil:
		d.errorf(wn, bf.field("weight"), "needs analysis: the weight is the green set's share while an analysis judges it")
	}
}
