package source

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/metrics"
)

// Base is a group's own metric history (metrics.GroupHistory).
type Base interface {
	Points(path string, from, to time.Time) []metrics.Point
}

// ownMaxAge is how old a sample of shoal's own metric may be when a formula
// combines it with a source's.
const ownMaxAge = 5 * time.Second

// History is a group's metrics as its policy reads them: shoal's own (from
// Base), the sources' by name, and formulas over both, computed at every
// time one of their inputs has a sample, from each input's newest value no
// older than its bound (a source's max_age).
type History struct {
	base    Base
	group   string
	sources []config.Source
	names   []string
	// read returns a source's values for the group.
	read   func(name string, from, to time.Time) []metrics.Point
	status func(name string) (Status, bool)
	// live is false in a replay, whose missing values are not the
	// sources' present errors.
	live bool

	mu       sync.Mutex
	formulas map[string]*config.Formula
	err      error
}

// ForGroup is group's History over base, with the Set's sources as read live.
func (s *Set) ForGroup(group string, base Base) *History {
	h := newHistory(group, base, s.sources)
	h.live = true
	h.read = func(name string, from, to time.Time) []metrics.Point { return s.points(name, group, from, to) }
	h.status = func(name string) (Status, bool) {
		s.mu.RLock()
		defer s.mu.RUnlock()
		st, ok := s.status[name]
		if !ok {
			return Status{}, false
		}
		return *st, true
	}
	return h
}

func newHistory(group string, base Base, sources []config.Source) *History {
	h := &History{base: base, group: group, sources: sources, formulas: map[string]*config.Formula{}}
	for _, s := range sources {
		h.names = append(h.names, s.Name)
	}
	return h
}

// Replay is group's History for a policy test: a Prometheus source's past
// is asked of Prometheus (query_range, one step per its interval), a command
// or HTTP source's is what the Set read since shoal started. Per-instance
// values are matched to the instances shoal has now.
func (s *Set) Replay(ctx context.Context, group string, base Base) *History {
	h := s.ForGroup(group, base)
	live := h.read
	type fetched struct {
		from, to time.Time
		pts      []metrics.Point
	}
	cache := map[string]*fetched{}
	h.live = false
	h.read = func(name string, from, to time.Time) []metrics.Point {
		src, ok := sourceByName(h.sources, name)
		if !ok || src.Prometheus == nil {
			return live(name, from, to)
		}
		f := cache[name]
		if f == nil || from.Before(f.from) || to.After(f.to) {
			if f != nil {
				from, to = minTime(from, f.from), maxTime(to, f.to)
			}
			pts, err := s.queryRange(ctx, src, group, from, to)
			if err != nil {
				h.mu.Lock()
				h.err = err
				h.mu.Unlock()
				return nil
			}
			f = &fetched{from, to, pts}
			cache[name] = f
		}
		lo := sort.Search(len(f.pts), func(i int) bool { return !f.pts[i].T.Before(from) })
		hi := sort.Search(len(f.pts), func(i int) bool { return f.pts[i].T.After(to) })
		return f.pts[lo:hi:hi]
	}
	return h
}

// Recorded is group's History over base with each source's values given
// (by name, oldest first), for the simulator: a source's recorded past
// (Replay's, fetched from a running shoal) replayed at the times it was
// read. A source missing from pts has no values; perInstance are those
// whose values are per-instance averages (Status.PerInstance).
func Recorded(group string, base Base, sources []config.Source, pts map[string][]metrics.Point, perInstance map[string]bool) *History {
	h := newHistory(group, base, sources)
	h.read = func(name string, from, to time.Time) []metrics.Point {
		p := pts[name]
		lo := sort.Search(len(p), func(i int) bool { return !p[i].T.Before(from) })
		hi := sort.Search(len(p), func(i int) bool { return p[i].T.After(to) })
		return p[lo:hi:hi]
	}
	h.status = func(name string) (Status, bool) { return Status{Name: name, PerInstance: perInstance[name]}, true }
	return h
}

// maxRangePoints is under Prometheus's limit of 11,000 points per series.
const maxRangePoints = 10000

func (s *Set) queryRange(ctx context.Context, src config.Source, group string, from, to time.Time) ([]metrics.Point, error) {
	step := max(src.Interval, to.Sub(from)/maxRangePoints)
	rs, err := QueryRange(ctx, src, from, to, step)
	if err != nil {
		return nil, err
	}
	var out []metrics.Point
	for _, r := range rs {
		vals, _, err := s.split(src.Name, r.Reading)
		if err != nil {
			return nil, fmt.Errorf("at %s: %w", r.T.UTC().Format(time.RFC3339), err)
		}
		v, ok := vals[seriesKey(src.Name, "")]
		if !ok {
			v, ok = vals[seriesKey(src.Name, group)]
		}
		if ok {
			out = append(out, metrics.Point{T: r.T, V: v})
		}
	}
	return out, nil
}

// Err is the first error a replay's reads of Prometheus met.
func (h *History) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

func sourceByName(ss []config.Source, name string) (config.Source, bool) {
	i := slices.IndexFunc(ss, func(s config.Source) bool { return s.Name == name })
	if i < 0 {
		return config.Source{}, false
	}
	return ss[i], true
}

func (h *History) formula(path string) (*config.Formula, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if f, ok := h.formulas[path]; ok {
		return f, f != nil
	}
	f, err := config.CompileFormula(path, h.names)
	if err != nil {
		f = nil // checked at load: a name the running config does not have
	}
	h.formulas[path] = f
	return f, f != nil
}

// Points returns the samples of path with from <= T <= to.
func (h *History) Points(path string, from, to time.Time) []metrics.Point {
	if _, ok := sourceByName(h.sources, path); ok {
		return h.read(path, from, to)
	}
	if !config.IsFormula(path) || strings.HasSuffix(path, ":max") {
		return h.base.Points(path, from, to)
	}
	f, ok := h.formula(path)
	if !ok {
		return nil
	}
	type input struct {
		path string
		age  time.Duration
		pts  []metrics.Point
	}
	ins := make([]input, len(f.Inputs))
	var times []time.Time
	step := time.Duration(math.MaxInt64)
	for i, p := range f.Inputs {
		age := ownMaxAge
		if src, ok := sourceByName(h.sources, p); ok {
			age = src.MaxAgeOf()
			step = min(step, src.Interval)
		}
		ins[i] = input{p, age, h.Points(p, from.Add(-age), to)}
		if pts := ins[i].pts; len(pts) >= 2 {
			step = min(step, pts[len(pts)-1].T.Sub(pts[len(pts)-2].T))
		}
		for _, pt := range ins[i].pts {
			if !pt.T.Before(from) {
				times = append(times, pt.T)
			}
		}
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	times = cluster(times, step/2)
	if len(f.Inputs) == 0 && len(times) == 0 {
		times = []time.Time{to} // a constant
	}
	var out []metrics.Point
	vals := make(map[string]float64, len(ins))
	idx := make([]int, len(ins))
next:
	for _, t := range times {
		for i := range ins {
			in := &ins[i]
			for idx[i] < len(in.pts) && !in.pts[idx[i]].T.After(t) {
				idx[i]++
			}
			if idx[i] == 0 {
				continue next
			}
			p := in.pts[idx[i]-1]
			if t.Sub(p.T) > in.age {
				continue next
			}
			vals[in.path] = p.V
		}
		v, err := f.Eval(h.names, vals)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		out = append(out, metrics.Point{T: t, V: v})
	}
	return out
}

// Missing reports whether path reads a source that has no value at now
// newer than its max_age: the first such source and why, for the decision.
func (h *History) Missing(path string, now time.Time) (config.Source, string, bool) {
	for _, name := range h.sourcesOf(path) {
		src, _ := sourceByName(h.sources, name)
		age := src.MaxAgeOf()
		pts := h.read(name, now.Add(-age), now)
		if len(pts) > 0 {
			continue
		}
		why := fmt.Sprintf("source %s has no value newer than max_age %s", name, age)
		if h.live {
			if st, ok := h.status(name); ok {
				if !st.Last.IsZero() {
					why += fmt.Sprintf(" (last at %s)", st.Last.UTC().Format(time.RFC3339))
				}
				if st.LastError != "" {
					why += ": " + st.LastError
				}
			}
		}
		return src, why, true
	}
	return config.Source{}, "", false
}

// sourcesOf are the sources path reads.
func (h *History) sourcesOf(path string) []string {
	if _, ok := sourceByName(h.sources, path); ok {
		return []string{path}
	}
	if !config.IsFormula(path) {
		return nil
	}
	f, ok := h.formula(path)
	if !ok {
		return nil
	}
	var out []string
	for _, in := range f.Inputs {
		if _, ok := sourceByName(h.sources, in); ok {
			out = append(out, in)
		}
	}
	return out
}

// Inputs are the metrics path reads (path itself for one name), and whether
// any of them is a source whose values are per-instance averages.
func (h *History) Inputs(path string) (inputs []string, perInstance bool) {
	inputs = []string{path}
	if _, ok := sourceByName(h.sources, path); !ok && config.IsFormula(path) {
		if f, ok := h.formula(path); ok {
			inputs = f.Inputs
		}
	}
	for _, in := range h.sourcesOf(path) {
		if h.perInstance(in) {
			perInstance = true
		}
	}
	return inputs, perInstance
}

// perInstance reports whether the source's latest reading was per
// instance.
func (h *History) perInstance(name string) bool {
	st, ok := h.status(name)
	return ok && st.PerInstance
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// cluster keeps the last of each run of times less than gap apart: inputs
// read at nearly the same moment (two sources of one interval) make one
// point, so that the formula's series is spaced as its inputs are, which
// the policies' gap and coverage checks measure.
func cluster(times []time.Time, gap time.Duration) []time.Time {
	var out []time.Time
	for _, t := range times {
		if n := len(out); n > 0 && t.Sub(out[n-1]) < gap {
			out[n-1] = t
			continue
		}
		out = append(out, t)
	}
	return out
}
