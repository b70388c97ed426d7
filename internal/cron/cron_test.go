package cron

import (
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the DST cases must not depend on the host's zoneinfo
)

func TestParseErrors(t *testing.T) {
	tests := []struct{ expr, want string }{
		{"0 8 * * 1-5 2026", "has 6 fields"},
		{"* * * *", "has 4 fields"},
		{"60 * * * *", "minute: 60 is out of range 0-59"},
		{"0 24 * * *", "hour: 24 is out of range 0-23"},
		{"0 0 0 * *", "day of month: 0 is out of range 1-31"},
		{"0 0 1 13 *", "month: 13 is out of range 1-12"},
		{"0 0 * * 8", "day of week: 8 is out of range 0-7"},
		{"0 0 * * mon-xyz", `day of week: "xyz" is not a number`},
		{"5-1 * * * *", "runs backwards"},
		{"*/0 * * * *", "step"},
		{"0 0 31 4 *", "never fires"},
	}
	for _, tt := range tests {
		_, err := Parse(tt.expr, nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", tt.expr, err, tt.want)
		}
	}
}

func TestNext(t *testing.T) {
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tests := []struct {
		expr, from, want string
	}{
		{"*/15 * * * *", "2026-01-01T10:07:30Z", "2026-01-01T10:15:00Z"},
		{"0 8 * * mon-fri", "2026-01-02T09:00:00Z", "2026-01-05T08:00:00Z"}, // Friday → Monday
		{"0 0 29 2 *", "2026-03-01T00:00:00Z", "2028-02-29T00:00:00Z"},
		// Both day fields restricted: either matches (the 1st, or a Sunday).
		{"0 12 1 * 0", "2026-03-02T00:00:00Z", "2026-03-08T12:00:00Z"},
		{"0 12 1 * 7", "2026-03-09T00:00:00Z", "2026-03-15T12:00:00Z"},
		{"30 6 * jan,dec *", "2026-02-01T00:00:00Z", "2026-12-01T06:30:00Z"},
		{"0 0/6 * * *", "2026-01-01T00:00:00Z", "2026-01-01T06:00:00Z"},
		// Strictly after: a firing at from itself does not count.
		{"0 * * * *", "2026-01-01T10:00:00Z", "2026-01-01T11:00:00Z"},
	}
	for _, tt := range tests {
		s, err := Parse(tt.expr, nil)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.expr, err)
		}
		if got := s.Next(utc(tt.from)); !got.Equal(utc(tt.want)) {
			t.Errorf("%q.Next(%s) = %s, want %s", tt.expr, tt.from, got.UTC().Format(time.RFC3339), tt.want)
		}
	}
}

// TestDST checks windows across Europe/Berlin's changes in 2026: clocks go
// 02:00 CET → 03:00 CEST on 29 March and 03:00 CEST → 02:00 CET on 25 October.
func TestDST(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	morning, err := Parse("0 8 * * *", berlin)
	if err != nil {
		t.Fatal(err)
	}
	// 08:00 local is 07:00 UTC before the spring change and 06:00 UTC after.
	if got := morning.Next(at("2026-03-28T12:00:00Z")); !got.Equal(at("2026-03-29T06:00:00Z")) {
		t.Errorf("spring: next 08:00 = %s, want 06:00 UTC", got.UTC())
	}
	if got := morning.Next(at("2026-10-24T12:00:00Z")); !got.Equal(at("2026-10-25T07:00:00Z")) {
		t.Errorf("autumn: next 08:00 = %s, want 07:00 UTC", got.UTC())
	}

	// A 10 h window opened at 08:00 local on the day of the change covers
	// 08:00-18:00 CEST = 06:00-16:00 UTC.
	for _, c := range []struct {
		t    string
		want bool
	}{
		{"2026-03-29T05:59:00Z", false},
		{"2026-03-29T06:00:00Z", true},
		{"2026-03-29T15:59:59Z", true},
		{"2026-03-29T16:00:00Z", false},
		{"2026-03-28T06:30:00Z", false}, // the day before, 07:30 CET
		{"2026-03-28T16:30:00Z", true},  // the day before, 17:30 CET
	} {
		if ok := morning.Active(at(c.t), 10*time.Hour); ok != c.want {
			t.Errorf("Active(%s) = %v, want %v", c.t, ok, c.want)
		}
	}

	// A window that spans the change itself: opened 01:00 CET (00:00 UTC) for
	// 3 h of real time ends at 03:00 UTC = 05:00 CEST, not 04:00 wall time.
	night, err := Parse("0 1 * * *", berlin)
	if err != nil {
		t.Fatal(err)
	}
	if !night.Active(at("2026-03-29T02:30:00Z"), 3*time.Hour) {
		t.Error("night window should be open at 04:30 CEST")
	}
	if night.Active(at("2026-03-29T03:00:00Z"), 3*time.Hour) {
		t.Error("night window should be closed at 05:00 CEST")
	}

	// 02:30 does not exist on 29 March and exists twice on 25 October.
	skipped, err := Parse("30 2 * * *", berlin)
	if err != nil {
		t.Fatal(err)
	}
	if got := skipped.Next(at("2026-03-28T12:00:00Z")); !got.Equal(at("2026-03-30T00:30:00Z")) {
		t.Errorf("spring: next 02:30 = %s, want 30 March 00:30 UTC", got.UTC())
	}
	first := skipped.Next(at("2026-10-24T12:00:00Z"))
	second := skipped.Next(first)
	if !first.Equal(at("2026-10-25T00:30:00Z")) || !second.Equal(at("2026-10-25T01:30:00Z")) {
		t.Errorf("autumn: 02:30 fired at %s and %s, want 00:30 and 01:30 UTC", first.UTC(), second.UTC())
	}
}
