// Package disruption is a group's budget for voluntary replacements
// (lifetime, drift, host drain, consolidation): how many of its instances may be out of
// service at once, and the windows in which such a replacement may start.
// Health replacements and scaling do not ask it. It is pure: the caller
// gives the time and the counts.
package disruption

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Budget bounds voluntary replacements. The zero Budget allows one
// instance out at a time, at any time.
type Budget struct {
	// MaxUnavailable is how many instances may be out at once; Percent,
	// when not 0, replaces it with that share of the group (at least one).
	MaxUnavailable int
	Percent        int
	// Windows are when a replacement may start; none: any time.
	Windows []Window
}

// ParseMaxUnavailable reads max_unavailable: a count of at least 1 ("2")
// or a share of the group from 1% to 100% ("10%").
func ParseMaxUnavailable(s string) (count, percent int, err error) {
	if p, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 100 {
			return 0, 0, fmt.Errorf("a percentage must be from 1%% to 100%%, got %q", s)
		}
		return 0, n, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, 0, fmt.Errorf("must be a count of at least 1 or a percentage such as \"10%%\", got %q", s)
	}
	return n, 0, nil
}

// Max is how many of total instances may be out at once: a percentage
// rounds down but never below one, so a small group still recycles.
func (b Budget) Max(total int) int {
	if b.Percent > 0 {
		return max(1, total*b.Percent/100)
	}
	return max(1, b.MaxUnavailable)
}

// Limit words the budget: "1", "10%".
func (b Budget) Limit() string {
	if b.Percent > 0 {
		return strconv.Itoa(b.Percent) + "%"
	}
	return strconv.Itoa(max(1, b.MaxUnavailable))
}

// Allowed reports whether one more voluntary replacement may start at now
// while unavailable of total instances are out of service; when not, why
// ("outside window Mon-Fri 02:00-05:00 Asia/Tokyo", "1 of max 1
// unavailable").
func (b Budget) Allowed(now time.Time, unavailable, total int) (bool, string) {
	if len(b.Windows) > 0 {
		in := false
		for _, w := range b.Windows {
			if w.Contains(now) {
				in = true
				break
			}
		}
		if !in {
			texts := make([]string, len(b.Windows))
			for i, w := range b.Windows {
				texts[i] = w.Text
			}
			return false, "outside window " + strings.Join(texts, ", ")
		}
	}
	if m := b.Max(total); unavailable >= m {
		limit := strconv.Itoa(m)
		if b.Percent > 0 {
			limit = fmt.Sprintf("%d (%d%% of %d)", m, b.Percent, total)
		}
		return false, fmt.Sprintf("%d of max %s unavailable", unavailable, limit)
	}
	return true, ""
}

// Window is a weekly time window in a time zone: "Mon-Fri 02:00-05:00
// Asia/Tokyo". A window whose end is not after its start runs past
// midnight into the next day ("Fri 22:00-02:00" ends Saturday 02:00); its
// days name the day it starts.
type Window struct {
	Text string
	// days[d] is set when the window starts on weekday d.
	days       [7]bool
	start, end int // minutes after midnight
	loc        *time.Location
}

var dayNames = []string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}

// ParseWindow reads "[DAYS] HH:MM-HH:MM [ZONE]": DAYS a day ("Mon"), a
// range ("Mon-Fri", "Sat-Sun", "Fri-Mon" wraps) or a comma list of them,
// every day when left out; ZONE an IANA zone name ("Asia/Tokyo"), UTC when
// left out.
func ParseWindow(s string) (Window, error) {
	w := Window{Text: s, loc: time.UTC}
	f := strings.Fields(s)
	if len(f) == 0 {
		return w, errors.New(`must be "[DAYS] HH:MM-HH:MM [ZONE]", e.g. "Mon-Fri 02:00-05:00 Asia/Tokyo"`)
	}
	i := 0
	if !strings.Contains(f[0], ":") {
		if err := w.parseDays(f[0]); err != nil {
			return w, err
		}
		i = 1
	} else {
		for d := range w.days {
			w.days[d] = true
		}
	}
	if i >= len(f) {
		return w, fmt.Errorf("no time range after the days %q: must be \"[DAYS] HH:MM-HH:MM [ZONE]\"", f[0])
	}
	from, to, ok := strings.Cut(f[i], "-")
	if !ok {
		return w, fmt.Errorf("time range must be HH:MM-HH:MM, got %q", f[i])
	}
	var err error
	if w.start, err = clock(from); err != nil {
		return w, err
	}
	if w.end, err = clock(to); err != nil {
		return w, err
	}
	if w.start == w.end {
		return w, fmt.Errorf("time range %q is empty: start and end are the same time", f[i])
	}
	i++
	if i < len(f) {
		loc, err := time.LoadLocation(f[i])
		if err != nil || f[i] == "Local" {
			return w, fmt.Errorf("unknown time zone %q: use an IANA name such as Asia/Tokyo or UTC", f[i])
		}
		w.loc = loc
		i++
	}
	if i < len(f) {
		return w, fmt.Errorf("unexpected %q after the time zone", f[i])
	}
	return w, nil
}

func (w *Window) parseDays(s string) error {
	for part := range strings.SplitSeq(s, ",") {
		from, to, isRange := strings.Cut(part, "-")
		a, err := day(from)
		if err != nil {
			return err
		}
		b := a
		if isRange {
			if b, err = day(to); err != nil {
				return err
			}
		}
		for d := a; ; d = (d + 1) % 7 {
			w.days[d] = true
			if d == b {
				break
			}
		}
	}
	return nil
}

func day(s string) (int, error) {
	for i, n := range dayNames {
		if strings.EqualFold(s, n) {
			return i, nil
		}
	}
	return 0, fmt.Errorf("unknown day %q: days are %s", s, strings.Join(dayNames, ", "))
}

func clock(s string) (int, error) {
	t, err := time.Parse("15:04", s)
	if err != nil {
		if s == "24:00" {
			return 24 * 60, nil
		}
		return 0, fmt.Errorf("time must be HH:MM from 00:00 to 24:00, got %q", s)
	}
	return t.Hour()*60 + t.Minute(), nil
}

// Contains reports whether t is inside the window, read on the window's
// zone's wall clock (so a window keeps its local hours across DST).
func (w Window) Contains(t time.Time) bool {
	lt := t.In(w.loc)
	m := lt.Hour()*60 + lt.Minute()
	today := int(lt.Weekday())
	if w.start < w.end {
		return w.days[today] && m >= w.start && m < w.end
	}
	// Past midnight: the evening part today, or the morning part of a
	// window that started yesterday.
	yesterday := (today + 6) % 7
	return (w.days[today] && m >= w.start) || (w.days[yesterday] && m < w.end)
}
