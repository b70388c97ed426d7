package policy

import (
	"sort"

	"github.com/shoal-lb/shoal/internal/config"
	"time"
)

// heldHistory serves a replay's reads from memory. The first read of a path
// fetches it from that read's start to where its window will end at the
// replay's last step; a read reaching further back (a longer window, or the
// predictor's previous days) fetches only the older part. A replay of N
// steps thus makes a few reads of the metrics database per path instead of
// several per step, and sees one consistent history.
type heldHistory struct {
	h Metrics
	// now is the step being evaluated; end the replay's last step.
	now, end time.Time
	series   map[string]*heldSeries
}

// heldSeries holds the samples of one path with from <= T <= to.
type heldSeries struct {
	from, to time.Time
	pts      []Point
}

func newHeldHistory(h Metrics, end time.Time) *heldHistory {
	return &heldHistory{h: h, end: end, series: map[string]*heldSeries{}}
}

// Points returns the held samples of path in [from, to], fetching what is
// not held yet. The result shares memory with what is held: callers only
// read it.
func (hh *heldHistory) Points(path string, from, to time.Time) []Point {
	// A window ending at or after the step moves with it.
	ahead := to.Add(max(hh.end.Sub(hh.now), 0))
	s := hh.series[path]
	switch {
	case s == nil:
		s = &heldSeries{from: from, to: ahead, pts: hh.h.Points(path, from, ahead)}
		hh.series[path] = s
	case to.After(s.to):
		newer := hh.h.Points(path, s.to.Add(time.Nanosecond), ahead)
		s.pts = append(s.pts[:len(s.pts):len(s.pts)], newer...)
		s.to = ahead
	}
	if from.Before(s.from) {
		older := hh.h.Points(path, from, s.from.Add(-time.Nanosecond))
		s.pts = append(older[:len(older):len(older)], s.pts...)
		s.from = from
	}
	lo := sort.Search(len(s.pts), func(i int) bool { return !s.pts[i].T.Before(from) })
	hi := sort.Search(len(s.pts), func(i int) bool { return s.pts[i].T.After(to) })
	return s.pts[lo:hi:hi]
}

// Missing and Inputs pass a sourced history's answers through (see Sourced);
// its Points are read through the held series.
func (hh *heldHistory) Missing(path string, now time.Time) (config.Source, string, bool) {
	if s, ok := hh.h.(Sourced); ok {
		return s.Missing(path, now)
	}
	return config.Source{}, "", false
}

func (hh *heldHistory) Inputs(path string) ([]string, bool) {
	if s, ok := hh.h.(Sourced); ok {
		return s.Inputs(path)
	}
	return []string{path}, false
}
