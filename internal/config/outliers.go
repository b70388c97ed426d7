package config

import (
	"math"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Outliers takes an instance that answers worse than the thresholds out of
// rotation for EjectFor (doubling at each ejection again, up to 5 min), and
// replaces one ejected three times within 10 minutes (internal/outlier).
type Outliers struct {
	// Consecutive5xx ejects an instance after that many 5xx answers in a
	// row (0: off).
	Consecutive5xx int `yaml:"consecutive_5xx"`
	// FailureRate ejects an instance whose share of 5xx answers is above
	// a bound; nil: off.
	FailureRate *FailureRate `yaml:"failure_rate"`
	// Latency ejects an instance whose p99 (from the sampled access log)
	// is too high; nil: off.
	Latency *LatencyOutlier `yaml:"latency"`
	// MaxEjected is the most of the group's instances in rotation that may
	// be out at once, in percent ("30%"); below 100.
	MaxEjected float64 `yaml:"max_ejected"`
	// EjectFor is the first ejection's length.
	EjectFor time.Duration `yaml:"eject_for"`
}

// FailureRate is the share of 5xx answers (Above, 0 to 1) over Over that
// ejects an instance that answered at least MinRequests in that time.
type FailureRate struct {
	// Above is the share of 5xx answers (0.2: 20 %) beyond which an
	// instance is an outlier.
	Above float64 `yaml:"above"`
	// Over is the window the share is taken over.
	Over time.Duration `yaml:"over"`
	// MinRequests is the fewest answers within Over the share is judged on.
	MinRequests int `yaml:"min_requests"`
}

// LatencyOutlier ejects an instance whose p99 time to respond over Over is
// above P99Above (0: no absolute bound) and VsGroup times the median p99
// of the group's other instances (0: no comparison).
type LatencyOutlier struct {
	// P99Above is the p99 above which an instance is slow (0: no bound).
	P99Above time.Duration `yaml:"p99_above"`
	// Over is the window of sampled requests the p99 is taken of (at
	// least 20 of them).
	Over time.Duration `yaml:"over"`
	// VsGroup is how many times the median p99 of the group's other
	// instances an instance's p99 must be to be an outlier ("3x"; 0: no
	// comparison).
	VsGroup float64 `yaml:"vs_group"`
}

var (
	defaultOutliers       = Outliers{Consecutive5xx: 5, MaxEjected: 30, EjectFor: 30 * time.Second}
	defaultFailureRate    = FailureRate{Above: 0.2, Over: 30 * time.Second, MinRequests: 50}
	defaultLatencyOutlier = LatencyOutlier{Over: 30 * time.Second, VsGroup: 3}
)

// outliers decodes a group's outliers section (nil when it has none).
func (d *decoder) outliers(n *yaml.Node, path string, g *Group) *Outliers {
	if n == nil {
		return nil
	}
	f := section[Outliers](d, n, path)
	if f.node == nil {
		return nil
	}
	o := new(defaultOutliers)
	if v, vn := f.integer("consecutive_5xx", o.Consecutive5xx); vn != nil {
		if v < 0 || v > 1_000_000 {
			d.errorf(vn, f.field("consecutive_5xx"), "must be from 0 (off) to 1000000, got %d", v)
		} else {
			o.Consecutive5xx = v
		}
	}
	if fn := f.get("failure_rate"); fn != nil {
		ff := section[FailureRate](d, fn, f.field("failure_rate"))
		if ff.node != nil {
			r := defaultFailureRate
			if an := ff.get("above"); an != nil {
				if v, ok := d.number(an, ff.field("above")); ok {
					if v <= 0 || v >= 1 {
						d.errorf(an, ff.field("above"), "must be a share of the answers above 0 and below 1 (0.2: 20 %%), got %s", an.Value)
					} else {
						r.Above = v
					}
				}
			}
			r.Over = d.within(ff, "over", r.Over, time.Second, time.Hour)
			if v, vn := ff.integer("min_requests", r.MinRequests); vn != nil {
				if v < 1 || v > 1_000_000 {
					d.errorf(vn, ff.field("min_requests"), "must be from 1 to 1000000, got %d", v)
				} else {
					r.MinRequests = v
				}
			}
			o.FailureRate = &r
		}
	}
	if ln := f.get("latency"); ln != nil {
		lf := section[LatencyOutlier](d, ln, f.field("latency"))
		if lf.node != nil {
			l := defaultLatencyOutlier
			l.P99Above = d.within(lf, "p99_above", 0, 0, time.Hour)
			l.Over = d.within(lf, "over", l.Over, time.Second, time.Hour)
			if vn := lf.get("vs_group"); vn != nil {
				if v, ok := d.factor(vn, lf.field("vs_group")); ok {
					l.VsGroup = v
				}
			}
			if l.P99Above == 0 && l.VsGroup == 0 {
				d.errorf(ln, f.field("latency"), "needs p99_above or vs_group (or both): with neither no latency is too high")
			}
			o.Latency = &l
		}
	}
	if mn := f.get("max_ejected"); mn != nil {
		if v, ok := d.percentOf(mn, f.field("max_ejected")); ok {
			switch {
			case v >= 100:
				d.errorf(mn, f.field("max_ejected"), "must be below 100%%, got %s: ejecting the whole group leaves nothing to serve, and a whole group failing is not an outlier", mn.Value)
			case v <= 0:
				d.errorf(mn, f.field("max_ejected"), "must be above 0%%, got %s (to eject nothing, leave outliers out)", mn.Value)
			default:
				o.MaxEjected = v
			}
		}
	}
	if at := int(math.Floor(float64(g.MaxSize) * o.MaxEjected / 100)); g.MaxSize == 1 {
		// No max_ejected below 100% ejects the one instance, and 100% is refused.
		d.errorf(n, path, "a group of max_size 1 has no outlier: its one instance is the whole group; give it a max_size of 2 or more, or leave outliers out")
	} else if g.MaxSize > 0 && at < 1 {
		d.errorf(n, f.field("max_ejected"), "%g%% of max_size %d is less than one instance: no instance could ever be ejected; raise max_ejected to at least %g%%",
			o.MaxEjected, g.MaxSize, math.Ceil(100/float64(g.MaxSize)))
	}
	o.EjectFor = d.within(f, "eject_for", o.EjectFor, time.Second, 5*time.Minute)
	if o.Consecutive5xx == 0 && o.FailureRate == nil && o.Latency == nil {
		d.errorf(n, path, "ejects nothing: give consecutive_5xx, failure_rate or latency")
	}
	return o
}

// percentOf reads a percentage: "30%" or a bare number of percent.
func (d *decoder) percentOf(n *yaml.Node, path string) (float64, bool) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
		s := strings.TrimSpace(n.Value)
		if v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(s, "%")), 64); err == nil && strings.HasSuffix(s, "%") && !math.IsNaN(v) {
			return v, true
		}
		d.errorf(n, path, `must be a percentage such as "30%%", got %s`, describe(n))
		return 0, false
	}
	return d.number(n, path)
}

// factor reads a multiple: "3x" or a bare number, above 1.
func (d *decoder) factor(n *yaml.Node, path string) (float64, bool) {
	var v float64
	ok := false
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
		s := strings.TrimSpace(n.Value)
		f, err := strconv.ParseFloat(strings.TrimSuffix(s, "x"), 64)
		v, ok = f, err == nil && strings.HasSuffix(s, "x")
	} else if n.Kind == yaml.ScalarNode && (n.ShortTag() == "!!int" || n.ShortTag() == "!!float") {
		ok = n.Decode(&v) == nil
	}
	if !ok || math.IsNaN(v) || v <= 1 || v > 1000 {
		d.errorf(n, path, `must be a multiple of the group's median p99 above 1 such as "3x" (up to 1000x), got %s`, describe(n))
		return 0, false
	}
	return v, true
}
