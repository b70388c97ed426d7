package policy

import (
	"sort"
	"time"
)

// Point is one sample of a group metric.
type Point struct {
	T time.Time
	V float64
}

// Metrics is a group's metric history: the live collector's, the stored
// down-sampled series after a restart, or a simulator's.
type Metrics interface {
	// Points returns the samples of path (such as "cpu.avg") with
	// from <= T <= to, oldest first; none when the metric is unknown.
	Points(path string, from, to time.Time) []Point
}

// Freshness rules. Samples arrive every collection interval (1 s live, 10 s
// in the stored history a restart reads), so "recent" and "gap" are measured
// against both the evaluation interval and the series' own spacing.
const (
	minStale      = 5 * time.Second
	maxStaleSlack = 30 * time.Second
)

// staleAfter is how old the newest sample may be: three evaluation intervals
// and at least 5 s, or one and a half sample spacings for a coarse series.
func staleAfter(pts []Point, interval time.Duration) time.Duration {
	limit := max(3*interval, minStale)
	if n := len(pts); n >= 2 {
		limit = max(limit, min(pts[n-1].T.Sub(pts[n-2].T)*3/2, maxStaleSlack))
	}
	return limit
}

// maxGap is the longest stretch without samples that a window of length w
// tolerates: three intervals, a tenth of the window, or one and a half mean
// spacings, whichever is longest.
func maxGap(pts []Point, w, interval time.Duration) time.Duration {
	g := max(3*interval, w/10)
	if n := len(pts); n >= 2 {
		g = max(g, pts[n-1].T.Sub(pts[0].T)/time.Duration(n-1)*3/2)
	}
	return g
}

// fresh reports whether the newest of pts is recent at now.
func fresh(pts []Point, now time.Time, interval time.Duration) bool {
	return len(pts) > 0 && now.Sub(pts[len(pts)-1].T) <= staleAfter(pts, interval)
}

// covers reports whether pts, the samples in [now-w, now], cover the whole
// window: fresh at the end, starting near now-w, and without a long gap.
func covers(pts []Point, now time.Time, w, interval time.Duration) bool {
	if !fresh(pts, now, interval) {
		return false
	}
	gap := maxGap(pts, w, interval)
	if pts[0].T.Sub(now.Add(-w)) > gap {
		return false
	}
	for i := 1; i < len(pts); i++ {
		if pts[i].T.Sub(pts[i-1].T) > gap {
			return false
		}
	}
	return true
}

// at returns the newest sample at or before t.
func at(pts []Point, t time.Time) (Point, bool) {
	i := sort.Search(len(pts), func(i int) bool { return pts[i].T.After(t) })
	if i == 0 {
		return Point{}, false
	}
	return pts[i-1], true
}
