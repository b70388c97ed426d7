package metrics

import (
	"cmp"
	"math"
	"slices"
)

// percentile returns the nearest-rank percentile p (0 < p <= 1) of sorted
// values: the value at rank round(n·p), as sacloud-cpu-usage computes its
// 75pt–99pt, so shoal's numbers match the tool the seed's scripts read.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Round(float64(len(sorted))*p)) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// weighted is a value that stands for w observations (w > 0).
type weighted struct {
	v, w float64
}

func sortWeighted(vals []weighted) {
	slices.SortFunc(vals, func(a, b weighted) int { return cmp.Compare(a.v, b.v) })
}

// weightedPercentile is percentile over sorted values each repeated by its
// weight: the value at cumulative weight round(W·p), W the total weight.
// With every weight 1 it is percentile.
func weightedPercentile(sorted []weighted, p float64) float64 {
	var total float64
	for _, x := range sorted {
		total += x.w
	}
	if len(sorted) == 0 || !(total > 0) {
		return math.NaN()
	}
	rank := max(math.Round(total*p), 1)
	var cum float64
	for _, x := range sorted {
		if cum += x.w; cum >= rank {
			return x.v
		}
	}
	return sorted[len(sorted)-1].v
}

// summary is avg, min, max and the percentiles shoal reports across instances.
type summary struct {
	avg, min, max, p75, p90, p95, p99 float64
}

// summarize returns the summary of vals (which it sorts), or false if empty.
func summarize(vals []float64) (summary, bool) {
	if len(vals) == 0 {
		return summary{}, false
	}
	slices.Sort(vals)
	sum := 0.0
	for _, v := range vals {
		sum += v
	}
	return summary{
		avg: sum / float64(len(vals)),
		min: vals[0],
		max: vals[len(vals)-1],
		p75: percentile(vals, 0.75),
		p90: percentile(vals, 0.90),
		p95: percentile(vals, 0.95),
		p99: percentile(vals, 0.99),
	}, true
}

// meanMax averages the points' averages, each weighted by the samples it
// holds (a 1-minute roll-up counts as its 60 seconds, not as one sample
// beside the ring's 1-second ones), and takes the largest maximum.
func meanMax(pts []point) (mean, peak float64, ok bool) {
	var sum, n float64
	peak = math.Inf(-1)
	for _, p := range pts {
		w := float64(p.weight())
		sum += p.Avg * w
		n += w
		peak = max(peak, p.Max)
	}
	if n == 0 {
		return 0, 0, false
	}
	return sum / n, peak, true
}
