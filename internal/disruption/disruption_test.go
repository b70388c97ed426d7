package disruption

import (
	"strings"
	"testing"
	"time"
)

func at(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestWindowContains(t *testing.T) {
	cases := []struct {
		window string
		at     string
		want   bool
	}{
		// 2026-12-07 is a Monday. Tokyo is UTC+9: 02:00-05:00 JST is 17:00-20:00 UTC the day before.
		{"Mon-Fri 02:00-05:00 Asia/Tokyo", "2026-12-06T17:00:00Z", true},  // Mon 02:00 JST
		{"Mon-Fri 02:00-05:00 Asia/Tokyo", "2026-12-06T19:59:59Z", true},  // Mon 04:59:59 JST
		{"Mon-Fri 02:00-05:00 Asia/Tokyo", "2026-12-06T20:00:00Z", false}, // Mon 05:00 JST: end excluded
		{"Mon-Fri 02:00-05:00 Asia/Tokyo", "2026-12-07T02:30:00Z", false}, // Mon 02:30 UTC is 11:30 JST
		{"Mon-Fri 02:00-05:00 Asia/Tokyo", "2026-12-05T17:30:00Z", false}, // Sun 02:30 JST
		{"Mon-Fri 02:00-05:00 Asia/Tokyo", "2026-12-11T18:00:00Z", false}, // Sat 03:00 JST
		{"Mon-Fri 02:00-05:00 Asia/Tokyo", "2026-12-10T18:00:00Z", true},  // Fri 03:00 JST
		// Past midnight: starts Friday 22:00, ends Saturday 02:00.
		{"Fri 22:00-02:00", "2026-12-11T22:00:00Z", true},
		{"Fri 22:00-02:00", "2026-12-12T01:59:00Z", true},  // Saturday morning
		{"Fri 22:00-02:00", "2026-12-12T02:00:00Z", false}, // ended
		{"Fri 22:00-02:00", "2026-12-11T01:00:00Z", false}, // Friday morning: Thursday had no window
		{"Fri 22:00-02:00", "2026-12-12T22:30:00Z", false}, // Saturday evening
		// No days: every day; no zone: UTC.
		{"23:00-24:00", "2026-12-09T23:59:00Z", true},
		{"23:00-24:00", "2026-12-09T22:59:00Z", false},
		// A wrapping day range.
		{"Sat-Mon 00:00-24:00", "2026-12-07T12:00:00Z", true},  // Monday
		{"Sat-Mon 00:00-24:00", "2026-12-08T12:00:00Z", false}, // Tuesday
		{"Tue,Thu 10:00-11:00 UTC", "2026-12-10T10:30:00Z", true},
		{"Tue,Thu 10:00-11:00 UTC", "2026-12-09T10:30:00Z", false},
		// DST: New York is UTC-5 in winter, UTC-4 in summer; the window keeps its wall-clock hours.
		{"02:00-03:00 America/New_York", "2026-01-15T07:30:00Z", true},
		{"02:00-03:00 America/New_York", "2026-07-15T06:30:00Z", true},
		{"02:00-03:00 America/New_York", "2026-07-15T07:30:00Z", false},
	}
	for _, c := range cases {
		w, err := ParseWindow(c.window)
		if err != nil {
			t.Fatalf("ParseWindow(%q): %v", c.window, err)
		}
		if got := w.Contains(at(t, c.at)); got != c.want {
			t.Errorf("%q contains %s = %v, want %v", c.window, c.at, got, c.want)
		}
	}
}

func TestParseWindowErrors(t *testing.T) {
	cases := map[string]string{
		"":                        "must be",
		"Mon-Fri":                 "no time range",
		"Mon-Fry 02:00-05:00":     `unknown day "Fry"`,
		"Mon 2-5":                 "HH:MM",
		"Mon 02:00-05:00 Mars/X":  `unknown time zone "Mars/X"`,
		"Mon 02:00-02:00":         "empty",
		"Mon 02:00-25:00":         "from 00:00 to 24:00",
		"Mon 02:00-05:00 UTC now": `unexpected "now"`,
		"Mon 02:00-05:00 Local":   "unknown time zone",
	}
	for in, want := range cases {
		_, err := ParseWindow(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseWindow(%q) = %v, want an error containing %q", in, err, want)
		}
	}
}

func TestMaxUnavailable(t *testing.T) {
	for _, c := range []struct {
		in             string
		count, percent int
		total, max     int
	}{
		{"1", 1, 0, 4, 1},
		{"3", 3, 0, 10, 3},
		{"10%", 0, 10, 4, 1}, // rounds down, but never below one
		{"10%", 0, 10, 25, 2},
		{"50%", 0, 50, 5, 2},
		{"100%", 0, 100, 7, 7},
	} {
		n, p, err := ParseMaxUnavailable(c.in)
		if err != nil || n != c.count || p != c.percent {
			t.Errorf("ParseMaxUnavailable(%q) = %d, %d, %v; want %d, %d", c.in, n, p, err, c.count, c.percent)
		}
		if got := (Budget{MaxUnavailable: n, Percent: p}).Max(c.total); got != c.max {
			t.Errorf("%s of %d: max %d, want %d", c.in, c.total, got, c.max)
		}
	}
	for _, bad := range []string{"0", "-1", "0%", "101%", "x", "1.5", "%"} {
		if _, _, err := ParseMaxUnavailable(bad); err == nil {
			t.Errorf("ParseMaxUnavailable(%q) accepted", bad)
		}
	}
}

func TestAllowed(t *testing.T) {
	w, err := ParseWindow("Mon-Fri 02:00-05:00 Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	inside, outside := at(t, "2026-12-06T18:00:00Z"), at(t, "2026-12-07T06:00:00Z")
	b := Budget{MaxUnavailable: 1, Windows: []Window{w}}
	if ok, why := b.Allowed(inside, 0, 4); !ok {
		t.Errorf("inside the window with none out: refused (%s)", why)
	}
	if ok, why := b.Allowed(outside, 0, 4); ok || why != "outside window Mon-Fri 02:00-05:00 Asia/Tokyo" {
		t.Errorf("outside the window: %v %q", ok, why)
	}
	if ok, why := b.Allowed(inside, 1, 4); ok || why != "1 of max 1 unavailable" {
		t.Errorf("one out of max one: %v %q", ok, why)
	}
	if ok, why := (Budget{MaxUnavailable: 1}).Allowed(outside, 2, 4); ok || why != "2 of max 1 unavailable" {
		t.Errorf("no windows, two out: %v %q", ok, why)
	}
	p := Budget{Percent: 10}
	if ok, why := p.Allowed(outside, 2, 30); !ok {
		t.Errorf("10%% of 30 with two out: refused: %v %q", ok, why)
	}
	if ok, why := p.Allowed(outside, 3, 30); ok || why != "3 of max 3 (10% of 30) unavailable" {
		t.Errorf("10%% of 30 with three out: %v %q", ok, why)
	}
	if ok, _ := (Budget{}).Allowed(outside, 0, 1); !ok {
		t.Error("the zero budget refuses one replacement of a group of one")
	}
}
