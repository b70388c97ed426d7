package metrics

import (
	"math"
	"time"
)

// ring keeps the last n ticks of every series in memory. All series share
// one clock: slot i of every series holds the value of the tick whose time is
// times[i], or NaN where the series had no value then.
type ring struct {
	n      int
	times  []int64 // unix nanoseconds
	ticks  uint64  // ticks appended so far
	series map[string]*ringSeries
}

// A series' values are float32: the ring holds an hour of every series
// each interval (at 1,000 instances, 6,000 series × 3,600 seconds), and
// float64 doubled shoal's memory for digits no chart or policy reads
// (float32 keeps 7 significant ones; a sample's own noise is larger).
type ringSeries struct {
	vals []float32
	last uint64 // tick of the last value
}

var nan32 = float32(math.NaN())

func newRing(n int) *ring {
	return &ring{n: n, times: make([]int64, n), series: make(map[string]*ringSeries)}
}

// append records one tick. Series absent from vals get NaN; a series with no
// value for a whole ring's length is dropped.
func (r *ring) append(t time.Time, vals map[string]float64) {
	i := int(r.ticks % uint64(r.n))
	r.times[i] = t.UnixNano()
	for key, v := range vals {
		if math.IsNaN(v) {
			continue
		}
		s := r.series[key]
		if s == nil {
			s = &ringSeries{vals: make([]float32, r.n)}
			for j := range s.vals {
				s.vals[j] = nan32
			}
			r.series[key] = s
		}
		s.vals[i] = float32(v)
		s.last = r.ticks
	}
	for key, s := range r.series {
		if s.last == r.ticks {
			continue
		}
		if r.ticks-s.last >= uint64(r.n) {
			delete(r.series, key)
			continue
		}
		s.vals[i] = nan32
	}
	r.ticks++
}

// oldest returns the time of the oldest tick held, or false if there is none.
func (r *ring) oldest() (time.Time, bool) {
	if r.ticks == 0 {
		return time.Time{}, false
	}
	first := uint64(0)
	if r.ticks > uint64(r.n) {
		first = r.ticks - uint64(r.n)
	}
	return time.Unix(0, r.times[first%uint64(r.n)]), true
}

// read returns key's values with from <= T <= to, oldest first.
func (r *ring) read(key string, from, to time.Time) []point {
	s := r.series[key]
	if s == nil {
		return nil
	}
	lo, hi := from.UnixNano(), to.UnixNano()
	first := uint64(0)
	if r.ticks > uint64(r.n) {
		first = r.ticks - uint64(r.n)
	}
	var out []point
	for k := first; k < r.ticks; k++ {
		i := k % uint64(r.n)
		t := r.times[i]
		if t < lo || t > hi {
			continue
		}
		if v := float64(s.vals[i]); !math.IsNaN(v) {
			out = append(out, point{T: time.Unix(0, t), Avg: v, Max: v, N: 1})
		}
	}
	return out
}
