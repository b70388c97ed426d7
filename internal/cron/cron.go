// Package cron parses standard five-field cron expressions and finds when
// they fire in a time zone.
//
// Fields are minute (0-59), hour (0-23), day of month (1-31), month (1-12 or
// JAN-DEC) and day of week (0-7 or SUN-SAT, 0 and 7 both Sunday), each a list
// of *, N, N-M, */S, N-M/S or N/S. As in Vixie cron, when both day of month and
// day of week are restricted a day matches if either does.
//
// Times are matched against the wall clock of the expression's location, one
// minute of absolute time after another, so daylight saving time behaves like
// a wall clock: "30 2 * * *" does not fire on the night 02:00-03:00 is
// skipped, and fires at each of the two 02:30s of the night that repeats it.
package cron

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Spec is a parsed expression bound to a location.
type Spec struct {
	expr                     string
	minute, hour, dom, month uint64 // bit i set: value i allowed
	dow                      uint64 // bits 0-6, Sunday = 0
	domStar, dowStar         bool
	loc                      *time.Location
}

type field struct {
	name     string
	min, max int
	names    []string // names[i] stands for min+i
}

var (
	minuteField = field{name: "minute", min: 0, max: 59}
	hourField   = field{name: "hour", min: 0, max: 23}
	domField    = field{name: "day of month", min: 1, max: 31}
	monthField  = field{name: "month", min: 1, max: 12,
		names: []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}}
	dowField = field{name: "day of week", min: 0, max: 7,
		names: []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}}
)

// searchLimit bounds Next: a valid expression fires at least once in any
// five years (29 February does within four).
const searchLimit = 5 * 366 * 24 * time.Hour

// Parse parses a five-field expression evaluated in loc (UTC if nil).
func Parse(expr string, loc *time.Location) (*Spec, error) {
	if loc == nil {
		loc = time.UTC
	}
	f := strings.Fields(expr)
	if len(f) != 5 {
		if len(f) == 6 {
			return nil, fmt.Errorf("has 6 fields; expected 5 (minute hour day-of-month month day-of-week): seconds are not supported")
		}
		return nil, fmt.Errorf("has %d fields; expected 5 (minute hour day-of-month month day-of-week)", len(f))
	}
	s := &Spec{expr: expr, loc: loc}
	var err error
	if s.minute, err = parseField(f[0], minuteField); err != nil {
		return nil, err
	}
	if s.hour, err = parseField(f[1], hourField); err != nil {
		return nil, err
	}
	if s.dom, err = parseField(f[2], domField); err != nil {
		return nil, err
	}
	if s.month, err = parseField(f[3], monthField); err != nil {
		return nil, err
	}
	if s.dow, err = parseField(f[4], dowField); err != nil {
		return nil, err
	}
	if s.dow&(1<<7) != 0 {
		s.dow = s.dow&^(1<<7) | 1 // 7 is Sunday too
	}
	s.domStar = strings.HasPrefix(f[2], "*")
	s.dowStar = strings.HasPrefix(f[4], "*")
	// An impossible date such as 31 April would make Next search in vain.
	if s.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, loc)).IsZero() {
		return nil, fmt.Errorf("%q never fires (no such date)", expr)
	}
	return s, nil
}

func parseField(s string, f field) (uint64, error) {
	var bits uint64
	for _, part := range strings.Split(s, ",") {
		b, err := parseRange(part, f)
		if err != nil {
			return 0, err
		}
		bits |= b
	}
	return bits, nil
}

func parseRange(s string, f field) (uint64, error) {
	rng, stepText, hasStep := strings.Cut(s, "/")
	lo, hi := f.min, f.max
	switch {
	case rng == "*":
	case strings.Contains(rng, "-"):
		a, b, _ := strings.Cut(rng, "-")
		var err error
		if lo, err = f.value(a); err != nil {
			return 0, err
		}
		if hi, err = f.value(b); err != nil {
			return 0, err
		}
		if lo > hi {
			return 0, fmt.Errorf("%s: range %q runs backwards", f.name, rng)
		}
	default:
		v, err := f.value(rng)
		if err != nil {
			return 0, err
		}
		lo = v
		if !hasStep {
			hi = v // "N/S" means N to the maximum in steps of S
		}
	}
	step := 1
	if hasStep {
		n, err := strconv.Atoi(stepText)
		if err != nil || n < 1 || n > f.max {
			return 0, fmt.Errorf("%s: step %q must be a number from 1 to %d", f.name, stepText, f.max)
		}
		step = n
	}
	var bits uint64
	for v := lo; v <= hi; v += step {
		bits |= 1 << v
	}
	return bits, nil
}

func (f field) value(s string) (int, error) {
	for i, name := range f.names {
		if strings.EqualFold(s, name) {
			return f.min + i, nil
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a number", f.name, s)
	}
	if n < f.min || n > f.max {
		return 0, fmt.Errorf("%s: %d is out of range %d-%d", f.name, n, f.min, f.max)
	}
	return n, nil
}

// String returns the expression as written.
func (s *Spec) String() string { return s.expr }

// Location returns the time zone the expression is evaluated in.
func (s *Spec) Location() *time.Location { return s.loc }

// Next returns the first time after t at which the expression fires, or the
// zero time if it does not fire within five years.
func (s *Spec) Next(t time.Time) time.Time {
	// Step through absolute time so that a DST change neither skips nor
	// repeats a minute that the wall clock does not.
	t = t.Truncate(time.Minute).Add(time.Minute)
	end := t.Add(searchLimit)
	for t.Before(end) {
		l := t.In(s.loc)
		switch {
		case s.month&(1<<uint(l.Month())) == 0:
			t = time.Date(l.Year(), l.Month()+1, 1, 0, 0, 0, 0, s.loc)
		case !s.dayMatches(l):
			t = time.Date(l.Year(), l.Month(), l.Day()+1, 0, 0, 0, 0, s.loc)
		case s.hour&(1<<uint(l.Hour())) == 0:
			t = t.Add(time.Duration(60-l.Minute()) * time.Minute)
		case s.minute&(1<<uint(l.Minute())) == 0:
			t = t.Add(time.Minute)
		default:
			return t
		}
		// time.Date normalises a midnight that DST skips to a later time,
		// never an earlier one, so the loop always advances.
	}
	return time.Time{}
}

func (s *Spec) dayMatches(l time.Time) bool {
	dom := s.dom&(1<<uint(l.Day())) != 0
	dow := s.dow&(1<<uint(l.Weekday())) != 0
	if s.domStar || s.dowStar {
		return dom && dow
	}
	return dom || dow
}

// Active reports whether t lies in a window of length d that opens each time
// the expression fires.
func (s *Spec) Active(t time.Time, d time.Duration) bool {
	// The first firing after t-d is the earliest window that may still be open.
	n := s.Next(t.Add(-d))
	return !n.IsZero() && !n.After(t)
}
