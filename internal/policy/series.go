package policy

import (
	"sort"
	"time"

	"github.com/shoal-lb/shoal/internal/metrics"
)

// Point is one sample of a group metric.
type Point = metrics.Point

// Metrics is a group's metric history: the collector's (metrics.GroupHistory:
// the 1 s ring, then the stored 10 s averages after a restart), or a
// simulator's.
type Metrics interface {
	// Points returns the samples of path (such as "cpu.avg") with
	// from <= T <= to, oldest first; none when the metric is unknown.
	Points(path string, from, to time.Time) []Point
}

// Freshness rules. Samples arrive every collection interval (1 s live; 10 s
// or 1 min roll-ups, stamped with their bucket's start, in older history), so
// "recent" and "gap" are measured against both the evaluation interval and
// the series' own spacing; maxStaleSlack is enough for a 1-minute bucket.
const (
	minStale      = 5 * time.Second
	maxStaleSlack = 90 * time.Second
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

// gapLimit is the longest stretch without samples that a window of length w
// tolerates between samples otherwise spacing apart: three intervals (or
// spacings, when fewer), a tenth of the window, or one and a half spacings
// of a coarse series (the stored 10 s averages a restart reads back).
func gapLimit(w, interval, spacing time.Duration) time.Duration {
	// The evaluation interval stands in for the spacing only up to the
	// spacing itself: a 1 s series evaluated every 2 minutes still has a
	// sample a second, and minutes without one are minutes not observed.
	step := interval
	if spacing > 0 {
		step = min(interval, spacing)
	}
	return max(3*step, w/10, spacing*3/2)
}

// fresh reports whether the newest of pts is recent at now.
func fresh(pts []Point, now time.Time, interval time.Duration) bool {
	return len(pts) > 0 && now.Sub(pts[len(pts)-1].T) <= staleAfter(pts, interval)
}

// reaches reports whether pts, the samples in [now-w, now], are fresh and
// start near now-w: history as long as the window.
func reaches(pts []Point, now time.Time, w, interval time.Duration) bool {
	if !fresh(pts, now, interval) {
		return false
	}
	var spacing time.Duration
	if len(pts) >= 2 {
		spacing = pts[1].T.Sub(pts[0].T)
	}
	return pts[0].T.Sub(now.Add(-w)) <= gapLimit(w, interval, spacing)
}

// upTo is pts without the samples after t (recorded since the evaluation
// read its latest one).
func upTo(pts []Point, t time.Time) []Point {
	for len(pts) > 0 && pts[len(pts)-1].T.After(t) {
		pts = pts[:len(pts)-1]
	}
	return pts
}

// inEffect is a window's samples, pts, or when it holds none, latest (the
// newest fresh sample, from before the window): the value in effect over
// it. A window as long as the collection interval (for: 1s at 1 s
// metrics) holds one sample or none, by when the evaluation runs: the
// collector stamps a sample with its tick and records it once it has read
// /proc and HAProxy (1–9 ms later, measured), while the policy's ticker,
// started just after the collector's, ticks 1 ms after it; the evaluation
// then sees the previous sample, a little over one interval old, and the
// two tickers keep that phase, so a rule on such a window decided only when
// a sample happened to be recorded first, and on a loaded machine never.
// covers and reaches still bound how old latest may be.
func inEffect(pts []Point, latest Point) []Point {
	if len(pts) > 0 {
		return pts
	}
	return []Point{latest}
}

// covers reports whether pts, the samples in [now-w, now], cover the whole
// window: they reach back to its start, have no long gap and reach now (a
// series that stopped within the window, though not yet stale, leaves its
// end unobserved).
func covers(pts []Point, now time.Time, w, interval time.Duration) bool {
	if !reaches(pts, now, w, interval) {
		return false
	}
	var spacing time.Duration
	if n := len(pts); n >= 2 {
		spacing = pts[n-1].T.Sub(pts[n-2].T)
	}
	// As a gap, and never stricter than freshness at a short interval.
	if now.Sub(pts[len(pts)-1].T) > max(gapLimit(w, interval, spacing), minStale) {
		return false
	}
	_, _, gap := hole(pts, w, interval)
	return !gap
}

// hole returns the first gap between pts, the samples of a window of length
// w, that is longer than the window tolerates (see gapLimit): the time shoal
// did not observe, while it was down, say.
func hole(pts []Point, w, interval time.Duration) (from, to time.Time, ok bool) {
	for i := 1; i < len(pts); i++ {
		// A coarse series is coarse on at least one side of its gaps.
		var spacing time.Duration
		if i >= 2 {
			spacing = pts[i-1].T.Sub(pts[i-2].T)
		}
		if i+1 < len(pts) {
			spacing = max(spacing, pts[i+1].T.Sub(pts[i].T))
		}
		if pts[i].T.Sub(pts[i-1].T) > gapLimit(w, interval, spacing) {
			return pts[i-1].T, pts[i].T, true
		}
	}
	return time.Time{}, time.Time{}, false
}

// at returns the newest sample at or before t.
func at(pts []Point, t time.Time) (Point, bool) {
	i := sort.Search(len(pts), func(i int) bool { return pts[i].T.After(t) })
	if i == 0 {
		return Point{}, false
	}
	return pts[i-1], true
}
