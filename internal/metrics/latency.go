package metrics

import (
	"math"
	"time"
)

// latencyCap bounds the access-log samples kept per group (20 bytes each).
const latencyCap = 1 << 16

// latencyTrail is the window of samples behind each tick's latency series:
// one second of a sampled log holds too few requests for a p99.
const latencyTrail = 10 * time.Second

// latencySamples is a ring of one group's sampled request timings, each with
// the sample rate it was logged at.
type latencySamples struct {
	at     []int64 // unix nanoseconds
	ta, tr []float32
	// w is each line's sample rate: a line logged one in 25 stands for 25
	// requests, so that the percentiles are of requests, not of lines, when
	// the rate changes within a window (as it does through a ramp).
	w    []int32
	next int
	full bool
	rate int // the sample rate of the latest observation (1 in rate)
}

func (l *latencySamples) add(at time.Time, ta, tr time.Duration, rate int) {
	if l.at == nil {
		l.at = make([]int64, latencyCap)
		l.ta = make([]float32, latencyCap)
		l.tr = make([]float32, latencyCap)
		l.w = make([]int32, latencyCap)
	}
	l.at[l.next] = at.UnixNano()
	l.ta[l.next] = float32(ms(ta))
	l.tr[l.next] = float32(ms(tr))
	l.w[l.next] = int32(min(rate, math.MaxInt32))
	l.rate = rate
	if l.next++; l.next == latencyCap {
		l.next, l.full = 0, true
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// latencyStats are percentiles of %Ta and %Tr in milliseconds.
type latencyStats struct {
	ta50, ta90, ta99 float64
	tr50, tr90, tr99 float64
	samples          int
	rate             int
}

// since returns the percentiles of the requests whose samples were taken at
// or after from, each line weighing its sample rate. A negative %Tr (no
// response) is left out of the %Tr percentiles only.
func (l *latencySamples) since(from time.Time) (latencyStats, bool) {
	n := l.next
	if l.full {
		n = latencyCap
	}
	lo := from.UnixNano()
	var ta, tr []weighted
	for i := range n {
		if l.at[i] < lo {
			continue
		}
		w := float64(l.w[i])
		ta = append(ta, weighted{float64(l.ta[i]), w})
		if l.tr[i] >= 0 {
			tr = append(tr, weighted{float64(l.tr[i]), w})
		}
	}
	if len(ta) == 0 {
		return latencyStats{}, false
	}
	sortWeighted(ta)
	sortWeighted(tr)
	return latencyStats{
		ta50: weightedPercentile(ta, 0.50), ta90: weightedPercentile(ta, 0.90), ta99: weightedPercentile(ta, 0.99),
		tr50: weightedPercentile(tr, 0.50), tr90: weightedPercentile(tr, 0.90), tr99: weightedPercentile(tr, 0.99),
		samples: len(ta), rate: l.rate,
	}, true
}
