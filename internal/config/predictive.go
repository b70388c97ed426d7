package config

import (
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Predictive pre-scaling: package policy forecasts the group's request rate
// for the next Horizon from its own per-minute history over Lookback, and
// raises the group's floor to the instances that rate needs.
type Predictive struct {
	// Lookback is how many days of history the seasonal forecast weighs
	// (whole days; at least one).
	Lookback time.Duration `yaml:"lookback"`
	// Horizon is how far ahead the floor is sized.
	Horizon time.Duration `yaml:"horizon"`
	// Mode is PredictiveForecastOnly or PredictiveScale.
	Mode string `yaml:"mode"`
	// Capacity is the requests per second one instance serves at 100 % CPU;
	// 0 means measured from the group's own recent history.
	Capacity float64 `yaml:"capacity"`
	// Metric is what is forecast: requests_per_second (the default), or a
	// group total from elsewhere, a metrics.sources name or a formula (a
	// queue's depth). PerInstance is then how much of it one instance is
	// planned to take: the floor is the forecast peak ÷ PerInstance.
	Metric      string  `yaml:"metric"`
	PerInstance float64 `yaml:"per_instance"`
}

// MetricOf is the metric p forecasts.
func (p *Predictive) MetricOf() string {
	if p.Metric == "" {
		return "requests_per_second"
	}
	return p.Metric
}

// defaultPredictive holds the defaults of a predictive section's keys.
var defaultPredictive = Predictive{Lookback: 7 * 24 * time.Hour, Horizon: 10 * time.Minute, Mode: PredictiveForecastOnly}

// Predictive modes.
const (
	// PredictiveForecastOnly records what the forecast would have done.
	PredictiveForecastOnly = "forecast_only"
	// PredictiveScale raises the group's floor ahead of the forecast load.
	PredictiveScale = "forecast_and_scale"
)

func (d *decoder) predictive(n *yaml.Node, path string) *Predictive {
	f := section[Predictive](d, n, path)
	if f.node == nil {
		return nil
	}
	p := new(defaultPredictive)
	if ln := f.get("lookback"); ln != nil {
		v, ok := days(ln)
		switch {
		case !ok:
			d.errorf(ln, f.field("lookback"), `must be a whole number of days such as "7d" (or hours that make whole days, "168h"), got %s`, describe(ln))
		case v < 24*time.Hour || v > 30*24*time.Hour:
			// 30 days is what the 1-minute history keeps by default.
			d.errorf(ln, f.field("lookback"), "must be from 1d to 30d, got %s", ln.Value)
		default:
			p.Lookback = v
		}
	}
	if v, hn := f.duration("horizon", p.Horizon); hn != nil {
		if v < time.Minute || v > 24*time.Hour || v%time.Minute != 0 {
			d.errorf(hn, f.field("horizon"), "must be whole minutes from 1m to 24h (the forecast is per minute), got %s", v)
		} else {
			p.Horizon = v
		}
	}
	if m, mn := f.str("mode", p.Mode); mn != nil {
		if m != PredictiveForecastOnly && m != PredictiveScale {
			d.errorf(mn, f.field("mode"), "must be %s or %s, got %q", PredictiveForecastOnly, PredictiveScale, m)
		} else {
			p.Mode = m
		}
	}
	m, mn := f.str("metric", "")
	known := true
	if mn != nil {
		p.Metric, known = m, d.metricOrFormula(mn, f.field("metric"), m)
	}
	pn := f.get("per_instance")
	if pn != nil {
		if v, ok := d.number(pn, f.field("per_instance")); ok {
			if v <= 0 {
				d.errorf(pn, f.field("per_instance"), "must be > 0 of the metric per instance, got %s", pn.Value)
			} else {
				p.PerInstance = v
			}
		}
	}
	switch {
	case !known:
	case p.MetricOf() != "requests_per_second" && pn == nil && mn != nil:
		d.errorf(mn, f.field("metric"), "%q needs per_instance: how much of it one instance takes, which sizes the floor", p.Metric)
	case p.MetricOf() == "requests_per_second" && pn != nil:
		d.errorf(pn, f.field("per_instance"), "is for a metric other than requests_per_second, whose share per instance comes from capacity and the target")
	}
	if cn := f.get("capacity"); cn != nil && p.MetricOf() != "requests_per_second" {
		d.errorf(cn, f.field("capacity"), "is for requests_per_second; %q is sized by per_instance", p.Metric)
	} else if cn != nil {
		if v, ok := d.number(cn, f.field("capacity")); ok {
			if v <= 0 {
				d.errorf(cn, f.field("capacity"), "must be > 0 requests per second per instance, got %s", cn.Value)
			} else {
				p.Capacity = v
			}
		}
	}
	return p
}

// days parses "7d", or a Go duration that is a whole number of days.
func days(n *yaml.Node) (time.Duration, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return 0, false
	}
	if s, ok := strings.CutSuffix(n.Value, "d"); ok {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 || v > 10000 {
			return 0, false
		}
		return time.Duration(v) * 24 * time.Hour, true
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil || v%(24*time.Hour) != 0 {
		return 0, false
	}
	return v, true
}
