package metrics

import "time"

// Series is a group's metrics over a window in equal steps, for charts.
type Series struct {
	Group string `json:"group"`
	// Step is the steps' length in seconds.
	Step float64 `json:"step_s"`
	// Times are the steps' starts, Unix seconds, oldest first.
	Times []int64 `json:"times"`
	// Values holds one value a step for each metric (as the policies name
	// them: "cpu.p90", "size"): the mean of the samples in the step, null
	// when there were none.
	Values map[string][]*float64 `json:"values"`
}

// Series returns group's metrics over the window ending at to, in n steps.
func (c *Collector) Series(group string, metrics []string, to time.Time, window time.Duration, n int) Series {
	step := window / time.Duration(n)
	from := to.Add(-window)
	s := Series{Group: group, Step: step.Seconds(), Times: make([]int64, n), Values: map[string][]*float64{}}
	for i := range s.Times {
		s.Times[i] = from.Add(time.Duration(i) * step).Unix()
	}
	h := c.ForGroup(group)
	for _, m := range metrics {
		s.Values[m] = resample(h.Points(m, from, to), from, step, n)
	}
	return s
}

// resample averages pts (oldest first) into n steps from from.
func resample(pts []Point, from time.Time, step time.Duration, n int) []*float64 {
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
		sum[i] += p.V
		cnt[i]++
	}
	out := make([]*float64, n)
	for i := range out {
		if cnt[i] > 0 {
			out[i] = num(sum[i] / float64(cnt[i]))
		}
	}
	return out
}
