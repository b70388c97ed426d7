// Package outlier decides which instances of a group are outliers: it
// reads each instance's HAProxy counters (requests and 5xx answers, as
// cumulated by show stat) and its sampled request latencies over time, and
// answers with decisions to take an instance out of rotation (eject), put
// it back (return), or replace it. It is pure logic on the times it is
// given; the group applies its decisions (see group/outliers.go).
//
// One instance's life in the detector:
//
//	             consecutive 5xx, failure rate or latency
//	             beyond the thresholds, and room under max_ejected
//	+---------+ ------------------------------------------------> +---------+
//	| serving |                                                   | ejected |
//	|         | <------------------------------------------------ +---------+
//	+---------+   eject_for passed (eject_for × 2^(k-1), up to 5 min,
//	     |        k its ejections in the last 10 min): return
//	     | its third ejection within 10 min
//	     v
//	  replace (the group retires it; its replacement starts afresh)
package outlier

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

const (
	// MaxEjection bounds an ejection however often it doubled.
	MaxEjection = 5 * time.Minute
	// ReplaceWindow and ReplaceAfter: an instance ejected ReplaceAfter
	// times within ReplaceWindow is replaced, not ejected again.
	ReplaceWindow = 10 * time.Minute
	ReplaceAfter  = 3
	// minLatencySamples is the fewest sampled requests a p99 is taken of;
	// fewer say nothing about the tail.
	minLatencySamples = 20
	// maxLatencyKept bounds one instance's latency samples.
	maxLatencyKept = 4096
)

// Kind is what a Decision asks.
type Kind string

// Decision kinds.
const (
	Eject   Kind = "eject"
	Return  Kind = "return"
	Replace Kind = "replace"
	// GroupFailing is not about one instance: more instances are outliers
	// than max_ejected lets out at once, so the group as a whole is failing
	// (Instance is empty). It is said once per episode.
	GroupFailing Kind = "group-failing"
)

// Decision is one thing the group should do, with the numbers behind it.
type Decision struct {
	Kind     Kind
	Instance string
	// For is how long an ejection lasts (Eject).
	For time.Duration
	// Reason says why, with the numbers.
	Reason string
}

// Sample is one instance's counters at one time.
type Sample struct {
	Name string
	// Requests and Errors are HAProxy's cumulated req_tot and hrsp_5xx.
	Requests, Errors int64
	// Serving is an instance in rotation, or out of it by this detector
	// only; one that is starting or held out by an operator is not a
	// candidate and not counted in the group's size.
	Serving bool
}

type point struct {
	at               time.Time
	requests, errors int64
}

type latency struct {
	at time.Time
	d  time.Duration
}

type state struct {
	points []point
	// streak counts 5xx answers with no other answer among them, as far as
	// the counters tell: a poll whose new answers were all 5xx adds them,
	// any other answer ends it.
	streak    int64
	latencies []latency
	// until is when an ejection ends (zero: in rotation).
	until time.Time
	// ejections are when it was ejected, within ReplaceWindow.
	ejections []time.Time
	serving   bool
}

// Detector keeps each instance's history. It is not safe for concurrent
// use: its owner serialises Observe and Step.
type Detector struct {
	cfg     config.Outliers
	insts   map[string]*state
	failing bool // a GroupFailing episode is on
}

// New returns a detector for cfg.
func New(cfg config.Outliers) *Detector {
	return &Detector{cfg: cfg, insts: map[string]*state{}}
}

// SetConfig takes a reloaded config; the history is kept.
func (d *Detector) SetConfig(cfg config.Outliers) { d.cfg = cfg }

// Observe records one sampled request's time to the response (from the
// access log) of an instance.
func (d *Detector) Observe(name string, at time.Time, took time.Duration) {
	s := d.insts[name]
	if s == nil || !s.serving || !s.until.IsZero() {
		return // unknown yet, or out of rotation: not its own traffic
	}
	s.latencies = append(s.latencies, latency{at, took})
	if len(s.latencies) > maxLatencyKept {
		s.latencies = slices.Delete(s.latencies, 0, len(s.latencies)-maxLatencyKept)
	}
}

// Ejected reports the instances the detector has out of rotation.
func (d *Detector) Ejected() []string {
	var out []string
	for n, s := range d.insts {
		if !s.until.IsZero() {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// History is what must outlive this detector of an instance's ejections
// (the group keeps it in the instance's record, so a restart of shoal
// resumes it): when its ejection ends (zero: in rotation) and when it was
// ejected within ReplaceWindow, which count toward its replacement and
// double its next ejection.
func (d *Detector) History(name string) (until time.Time, at []time.Time) {
	s := d.insts[name]
	if s == nil {
		return time.Time{}, nil
	}
	return s.until, slices.Clone(s.ejections)
}

// Restore gives an instance the History an earlier detector recorded,
// before the first Step that samples it. Ejections older than
// ReplaceWindow at now are dropped.
func (d *Detector) Restore(now time.Time, name string, until time.Time, at []time.Time) {
	var kept []time.Time
	for _, t := range at {
		if now.Sub(t) < ReplaceWindow {
			kept = append(kept, t)
		}
	}
	if until.IsZero() && len(kept) == 0 {
		return
	}
	slices.SortFunc(kept, time.Time.Compare)
	d.insts[name] = &state{until: until, ejections: kept}
}

// Forget drops an instance's history (it is gone, or an operator took it
// out of rotation: it is not this detector's to return).
func (d *Detector) Forget(name string) { delete(d.insts, name) }

// window is the longest history a check reads.
func (d *Detector) window() time.Duration {
	w := time.Duration(0)
	if f := d.cfg.FailureRate; f != nil {
		w = max(w, f.Over)
	}
	if l := d.cfg.Latency; l != nil {
		w = max(w, l.Over)
	}
	return max(w, time.Minute)
}

type candidate struct {
	name    string
	reasons []string
	score   float64
}

// Step takes every instance's counters at now and returns what to do, in
// order: returns first (they make room), then ejections, replacements and
// a group-failing notice. An instance missing from samples is forgotten.
func (d *Detector) Step(now time.Time, samples []Sample) []Decision {
	var out []Decision
	seen := map[string]bool{}
	for _, smp := range samples {
		seen[smp.Name] = true
		s := d.insts[smp.Name]
		if s == nil {
			s = &state{}
			d.insts[smp.Name] = s
		}
		if !smp.Serving && !s.until.IsZero() {
			// An operator took it out while ejected: it is theirs now.
			s.until = time.Time{}
		}
		s.serving = smp.Serving
		d.record(s, now, smp)
	}
	for n := range d.insts {
		if !seen[n] {
			delete(d.insts, n)
		}
	}
	s := d.sorted()
	// Returns.
	for _, name := range s {
		st := d.insts[name]
		if !st.until.IsZero() && !now.Before(st.until) {
			st.until = time.Time{}
			st.reset()
			out = append(out, Decision{Kind: Return, Instance: name,
				Reason: fmt.Sprintf("%s back in rotation: its ejection of %s is over", name, ejection(d.cfg.EjectFor, len(st.ejections)))})
		}
	}
	// Candidates.
	serving, ejected := 0, 0
	var cands []candidate
	groupP99 := d.p99s(now)
	for _, name := range s {
		st := d.insts[name]
		if !st.serving {
			continue
		}
		serving++
		if !st.until.IsZero() {
			ejected++
			continue
		}
		if c, ok := d.judge(name, st, now, groupP99); ok {
			cands = append(cands, c)
		}
	}
	allowed := int(math.Floor(float64(serving) * d.cfg.MaxEjected / 100))
	room := max(0, allowed-ejected)
	slices.SortStableFunc(cands, func(a, b candidate) int { return cmp.Compare(b.score, a.score) })
	if len(cands) > room {
		if !d.failing {
			var names []string
			for _, c := range cands {
				names = append(names, c.name)
			}
			out = append(out, Decision{Kind: GroupFailing, Reason: fmt.Sprintf(
				"the group as a whole is failing, not an outlier: %d of %d instances in rotation are beyond the thresholds (%s) and %d already ejected; max_ejected %s lets %d out at once, so %d stay in rotation",
				len(cands), serving, strings.Join(names, ", "), ejected, percent(d.cfg.MaxEjected), allowed, len(cands)-room)})
		}
		d.failing = true
		cands = cands[:room]
	} else {
		d.failing = false
	}
	for _, c := range cands {
		st := d.insts[c.name]
		st.ejections = append(st.ejections, now)
		why := strings.Join(c.reasons, "; ")
		if len(st.ejections) >= ReplaceAfter {
			delete(d.insts, c.name)
			out = append(out, Decision{Kind: Replace, Instance: c.name, Reason: fmt.Sprintf(
				"%s replaced: an outlier %d times within %s (%s)", c.name, ReplaceAfter, ReplaceWindow, why)})
			continue
		}
		dur := ejection(d.cfg.EjectFor, len(st.ejections))
		st.until = now.Add(dur)
		st.reset()
		out = append(out, Decision{Kind: Eject, Instance: c.name, For: dur, Reason: fmt.Sprintf(
			"%s ejected for %s (ejection %d within %s): %s", c.name, dur, len(st.ejections), ReplaceWindow, why)})
	}
	return out
}

// ejection is the k-th ejection's length: eject_for doubling, up to MaxEjection.
func ejection(base time.Duration, k int) time.Duration {
	dur := base
	for i := 1; i < k && dur < MaxEjection; i++ {
		dur *= 2
	}
	return min(dur, MaxEjection)
}

func percent(p float64) string { return fmt.Sprintf("%g%%", p) }

// reset forgets the counters' history: what an instance did before it left
// rotation must not eject it again the moment it is back.
func (s *state) reset() {
	if n := len(s.points); n > 0 {
		s.points = s.points[n-1:]
	}
	s.streak = 0
	s.latencies = nil
}

func (d *Detector) sorted() []string {
	names := make([]string, 0, len(d.insts))
	for n := range d.insts {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// record adds a sample to s's history; counters that went back (HAProxy
// re-added the server) start the history again.
func (d *Detector) record(s *state, now time.Time, smp Sample) {
	p := point{now, smp.Requests, smp.Errors}
	if n := len(s.points); n > 0 {
		last := s.points[n-1]
		if p.requests < last.requests || p.errors < last.errors {
			s.points, s.streak = nil, 0
		} else if dr, de := p.requests-last.requests, p.errors-last.errors; dr > 0 {
			if de >= dr {
				s.streak += de
			} else {
				s.streak = 0
			}
		}
	}
	s.points = append(s.points, p)
	from := now.Add(-d.window())
	i := 0
	for i < len(s.points)-1 && s.points[i+1].at.Before(from) {
		i++
	}
	s.points = s.points[i:]
	k := 0
	for k < len(s.ejections) && now.Sub(s.ejections[k]) >= ReplaceWindow {
		k++
	}
	s.ejections = s.ejections[k:]
	j := 0
	for j < len(s.latencies) && s.latencies[j].at.Before(from) {
		j++
	}
	s.latencies = s.latencies[j:]
}

// since returns the counters' change over the last over (from the oldest
// point within it).
func (s *state) since(now time.Time, over time.Duration) (requests, errors int64) {
	from := now.Add(-over)
	for _, p := range s.points {
		if !p.at.Before(from) {
			last := s.points[len(s.points)-1]
			return last.requests - p.requests, last.errors - p.errors
		}
	}
	return 0, 0
}

// p99 is the 99th percentile of the latencies sampled within over, and
// whether there were enough of them.
func (s *state) p99(now time.Time, over time.Duration) (time.Duration, int, bool) {
	from := now.Add(-over)
	var ds []time.Duration
	for _, l := range s.latencies {
		if !l.at.Before(from) {
			ds = append(ds, l.d)
		}
	}
	if len(ds) < minLatencySamples {
		return 0, len(ds), false
	}
	slices.Sort(ds)
	i := int(math.Ceil(0.99*float64(len(ds)))) - 1
	return ds[max(i, 0)], len(ds), true
}

// p99s are the serving instances' p99s (those with enough samples).
func (d *Detector) p99s(now time.Time) map[string]time.Duration {
	l := d.cfg.Latency
	if l == nil {
		return nil
	}
	out := map[string]time.Duration{}
	for n, s := range d.insts {
		if s.serving && s.until.IsZero() {
			if v, _, ok := s.p99(now, l.Over); ok {
				out[n] = v
			}
		}
	}
	return out
}

// judge reports whether an instance in rotation is beyond a threshold,
// with why; score orders candidates when max_ejected cannot take them all.
func (d *Detector) judge(name string, s *state, now time.Time, p99s map[string]time.Duration) (candidate, bool) {
	c := candidate{name: name}
	if n := d.cfg.Consecutive5xx; n > 0 && s.streak >= int64(n) {
		c.reasons = append(c.reasons, fmt.Sprintf("%d consecutive 5xx answers (consecutive_5xx %d)", s.streak, n))
		c.score = max(c.score, 1)
	}
	if f := d.cfg.FailureRate; f != nil {
		req, errs := s.since(now, f.Over)
		if req >= int64(f.MinRequests) && req > 0 {
			rate := float64(errs) / float64(req)
			if rate > f.Above {
				c.reasons = append(c.reasons, fmt.Sprintf("%d of %d answers 5xx over %s (%.1f%%, above %g%%)", errs, req, f.Over, 100*rate, 100*f.Above))
				c.score = max(c.score, rate)
			}
		}
	}
	if l := d.cfg.Latency; l != nil {
		if v, n, ok := s.p99(now, l.Over); ok {
			beyond := l.P99Above > 0 || l.VsGroup > 0
			why := fmt.Sprintf("p99 %s over %s (%d sampled requests)", v.Round(time.Millisecond), l.Over, n)
			if l.P99Above > 0 {
				beyond = beyond && v > l.P99Above
				why += fmt.Sprintf(", above %s", l.P99Above)
			}
			if l.VsGroup > 0 {
				var others []time.Duration
				for o, ov := range p99s {
					if o != name {
						others = append(others, ov)
					}
				}
				if len(others) == 0 {
					beyond = false // no group to compare with
				} else {
					slices.Sort(others)
					med := others[len(others)/2]
					beyond = beyond && float64(v) > l.VsGroup*float64(med)
					why += fmt.Sprintf(", %.1fx the rest of the group's median p99 %s (vs_group %gx)", float64(v)/float64(max(med, 1)), med.Round(time.Millisecond), l.VsGroup)
				}
			}
			if beyond {
				c.reasons = append(c.reasons, why)
				c.score = max(c.score, 0.5)
			}
		}
	}
	return c, len(c.reasons) > 0
}
