package metrics

import (
	"slices"
	"strings"
	"time"
)

// Series is a group's metrics over a window in equal steps, for charts.
type Series struct {
	Group string `json:"group"`
	// Step is the steps' length in seconds.
	Step float64 `json:"step_s"`
	// Times are the steps' starts, Unix seconds, oldest first.
	Times []int64 `json:"times"`
	// Values holds one value a step for each metric (as the policies name
	// them: "cpu.p90", "size"), null when there were no samples: a count
	// (Count) its last sample, the count as the step ended (of a roll-up,
	// the most it counted), so a step line drawn from the step's end shows
	// instances that ran, not a fraction of one, and rises after the job
	// that started them, never before; any other metric the samples' mean.
	Values map[string][]*float64 `json:"values"`
	// Units are each metric's unit (Unit), for the charts' axes.
	Units map[string]string `json:"units"`
}

// Series returns group's metrics over the window ending at to, in at most n
// steps. The window starts at the oldest sample held when the history is
// shorter than the window, so a chart fits the data it has rather than
// showing it as a sliver of the window; and a step is never shorter than
// the sampling interval, so a short history is not a row of gaps.
func (c *Collector) Series(group string, metrics []string, to time.Time, window time.Duration, n int) Series {
	return c.SeriesOf(c.ForGroup(group), group, metrics, to, window, n)
}

// SeriesOf is Series read from h, the group's history as its policy reads
// it: with metrics.sources and formulas beside shoal's own metrics.
func (c *Collector) SeriesOf(h interface {
	Points(path string, from, to time.Time) []Point
}, group string, metrics []string, to time.Time, window time.Duration, n int) Series {
	from := to.Add(-window)
	pts := make(map[string][]Point, len(metrics))
	oldest := to
	for _, m := range metrics {
		path := m
		if Count(m) {
			path += ":max"
		}
		p := h.Points(path, from, to)
		pts[m] = p
		// The window fits the group's own history: a source read since
		// shoal started may be older than the group (or its first sample).
		if len(p) > 0 && p[0].T.Before(oldest) && (isOwn(m) || !slices.ContainsFunc(metrics, isOwn)) {
			oldest = p[0].T
		}
	}
	if oldest.After(from) {
		from = oldest
	}
	step := max(to.Sub(from)/time.Duration(n), c.opts.Interval, time.Nanosecond)
	if step >= time.Second {
		// Whole seconds, on a grid of the step: the steps' starts are exact
		// Unix seconds, so a chart puts a change where it happened.
		step = (step + time.Second - 1).Truncate(time.Second)
	}
	// The newest step holds to; as many before it as cover from, at most n.
	last := to.Truncate(step)
	k := int((last.Sub(from)+step-1)/step) + 1
	n = max(min(n, k), 1)
	from = last.Add(-time.Duration(n-1) * step)
	s := Series{Group: group, Step: step.Seconds(), Times: make([]int64, n), Values: map[string][]*float64{}, Units: map[string]string{}}
	for i := range s.Times {
		s.Times[i] = from.Add(time.Duration(i) * step).Unix()
	}
	for _, m := range metrics {
		s.Values[m] = resample(pts[m], from, step, n, Count(m))
		s.Units[m] = Unit(m)
	}
	return s
}

func isOwn(m string) bool { return slices.Contains(GroupMetrics, m) }

// Count reports whether a group metric counts instances: its steps take
// their last sample (a roll-up's most).
func Count(metric string) bool { return metric == "size" || metric == "ready" }

// Unit is a group metric's unit, as a chart's axis names it: "%" for CPU,
// "ms", "req/s", "/s" for other rates, "instances", or "" when the metric
// is a plain number (queue, sessions).
func Unit(metric string) string {
	switch {
	case Count(metric):
		return "instances"
	case strings.HasPrefix(metric, "cpu."):
		return "%"
	case strings.HasPrefix(metric, "latency_ms."):
		return "ms"
	case strings.HasPrefix(metric, "requests_per_second"):
		return "req/s"
	case strings.HasSuffix(metric, "_per_second"):
		return "/s"
	}
	return ""
}

// resample puts pts (oldest first) into n steps from from: each step's
// mean, or its last point when last is set.
func resample(pts []Point, from time.Time, step time.Duration, n int, last bool) []*float64 {
	sum := make([]float64, n)
	cnt := make([]int, n)
	for _, p := range pts {
		if p.T.Before(from) { // would truncate into the first step
			continue
		}
		i := int(p.T.Sub(from) / step)
		if i >= n {
			continue
		}
		if last {
			sum[i] = p.V
		} else {
			sum[i] += p.V
		}
		cnt[i]++
	}
	out := make([]*float64, n)
	for i := range out {
		switch {
		case cnt[i] == 0:
		case last:
			out[i] = num(sum[i])
		default:
			out[i] = num(sum[i] / float64(cnt[i]))
		}
	}
	return out
}
