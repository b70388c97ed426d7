package config

import (
	"math"
	"time"

	"gopkg.in/yaml.v3"
)

// Metrics configures how often shoal samples its instances and how long it
// keeps what it saw.
type Metrics struct {
	// Interval is the sampling period.
	Interval time.Duration `yaml:"interval"`
	// Warmup is how long an instance that entered service is kept out of its
	// group's aggregates, so a cold start's CPU spike does not read as load.
	Warmup    time.Duration `yaml:"warmup"`
	Retention `yaml:"retention"`
	// Listen is an optional loopback host:port serving the Prometheus
	// exposition (GET /metrics) without a token, as exporters usually do.
	Listen string `yaml:"listen"`
	// Sources are metrics read from outside shoal (see Source).
	Sources []Source `yaml:"sources"`
}

// Retention is how long metrics history is kept: Ring is how much
// per-interval history is kept in memory; Ten, Minute and Hour how long the
// groups' 10-second, 1-minute and 1-hour averages and maxima are kept on
// disk; Instances how long each instance's own 1-minute ones are (at most
// Minute). metrics.db's rows are then, per group series,
// Ten/10s + Minute/1m + Hour/1h and, per instance series, Instances/1m
// (Retention.Rows): with the defaults, 1,000 instances in 50
// groups keep about 18 million rows, under 1 GB (TestDefaultRetentionBound).
type Retention struct {
	// Ring is how much per-interval history is kept in memory.
	Ring time.Duration `yaml:"ring"`
	// Ten is how long the groups' 10-second roll-ups are kept (0: none).
	Ten time.Duration `yaml:"10s"`
	// Minute is how long the groups' 1-minute roll-ups are kept (0: none).
	Minute time.Duration `yaml:"1m"`
	// Hour is how long the groups' 1-hour roll-ups are kept (0: none).
	Hour time.Duration `yaml:"1h"`
	// Instances is how long each instance's 1-minute roll-ups are kept, at most 1m's (0: none).
	Instances time.Duration `yaml:"instances"`
}

// Rows is how many rows metrics.db holds once r holds, for groupSeries
// series of groups and instanceSeries of instances (every instance's
// metrics): a row per series per 10 s, 1 min and 1 h bucket kept (the
// levels the keys name). At the bytes a row takes (internal/metrics'
// TestDefaultRetentionBound measures them) it bounds metrics.db's size.
func (r Retention) Rows(groupSeries, instanceSeries int) int64 {
	perGroup := int64(r.Ten/(10*time.Second) + r.Minute/time.Minute + r.Hour/time.Hour)
	perInstance := int64(min(r.Instances, r.Minute) / time.Minute)
	return int64(groupSeries)*perGroup + int64(instanceSeries)*perInstance
}

// Kept is how far back any history is kept: a policy window longer than
// this is never covered.
func (r Retention) Kept() time.Duration { return max(r.Ring, r.Ten, r.Minute, r.Hour) }

// DefaultMetrics are the metrics settings used for fields left out of the config.
var DefaultMetrics = Metrics{
	Interval: time.Second,
	Warmup:   30 * time.Second,
	Retention: Retention{Ring: time.Hour, Ten: 12 * time.Hour, Minute: 7 * 24 * time.Hour, Hour: 30 * 24 * time.Hour,
		Instances: 12 * time.Hour},
}

// Bounds that keep the collector's cost and memory sane: below 100ms the
// deltas of /proc's 10ms clock ticks are mostly noise.
const (
	minMetricsInterval = 100 * time.Millisecond
	maxMetricsInterval = time.Minute
	maxRingPoints      = 100000
)

// DefaultCPUs is the number of cores an instance is allotted unless its
// template says otherwise.
const DefaultCPUs = 1.0

func (d *decoder) metrics(n *yaml.Node) Metrics {
	f := section[Metrics](d, n, "metrics")
	m := DefaultMetrics
	m.Listen = d.loopbackListen(f, "listen", byShoal)
	if v, vn := f.duration("interval", m.Interval); vn != nil {
		if v < minMetricsInterval || v > maxMetricsInterval {
			d.errorf(vn, f.field("interval"), "must be from %s to %s, got %s", minMetricsInterval, maxMetricsInterval, v)
		} else {
			m.Interval = v
		}
	}
	m.Warmup, _ = f.duration("warmup", m.Warmup)

	r := section[Retention](d, f.get("retention"), f.field("retention"))
	if v, vn := r.duration("ring", m.Ring); vn != nil {
		switch {
		case v < m.Interval:
			d.errorf(vn, r.field("ring"), "must be at least metrics.interval (%s), got %s", m.Interval, v)
		case v/m.Interval > maxRingPoints:
			d.errorf(vn, r.field("ring"), "must hold at most %d intervals of %s, got %s", maxRingPoints, m.Interval, v)
		default:
			m.Ring = v
		}
	}
	m.Sources = d.sources(f.get("sources"), f.field("sources"), m.Interval)
	d.sourceList = m.Sources
	m.Ten = d.retention(r, "10s", m.Ten, 10*time.Second)
	m.Minute = d.retention(r, "1m", m.Minute, time.Minute)
	m.Hour = d.retention(r, "1h", m.Hour, time.Hour)
	if v, vn := r.duration("instances", m.Instances); vn != nil {
		switch {
		case v != 0 && v < time.Minute:
			d.errorf(vn, r.field("instances"), "must be 0 (keep none) or at least 1m0s, got %s", v)
		case v > m.Minute:
			d.errorf(vn, r.field("instances"), "must be at most metrics.retention.1m (%s): instances' history is kept at 1 m resolution, got %s", m.Minute, v)
		default:
			m.Instances = v
		}
	} else {
		m.Instances = min(m.Instances, m.Minute)
	}
	return m
}

// retention reads how long rollups of step are kept: 0 keeps none, otherwise at
// least one step.
func (d *decoder) retention(f *fields, key string, def, step time.Duration) time.Duration {
	v, n := f.duration(key, def)
	if n != nil && v != 0 && v < step {
		d.errorf(n, f.field(key), "must be 0 (keep none) or at least %s, got %s", step, v)
		return def
	}
	return v
}

// cpus reads template.cpus: the cores an instance is allotted, which its CPU
// usage is a percentage of.
func (d *decoder) cpus(f *fields) float64 {
	n := f.get("cpus")
	if n == nil {
		return DefaultCPUs
	}
	var v float64
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") || n.Decode(&v) != nil {
		d.errorf(n, f.field("cpus"), "must be a number of cores such as 1 or 0.5, got %s", describe(n))
		return DefaultCPUs
	}
	if !(v > 0) || math.IsInf(v, 0) || v > 1024 {
		d.errorf(n, f.field("cpus"), "must be greater than 0 and at most 1024, got %s", truncate(n.Value))
		return DefaultCPUs
	}
	return v
}
