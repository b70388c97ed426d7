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
	if cn := f.get("capacity"); cn != nil {
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
