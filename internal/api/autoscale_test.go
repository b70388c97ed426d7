package api

import (
	"testing"
	"time"
)

func TestParseWindow(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"5m", 5 * time.Minute, true},
		{"90s", 90 * time.Second, true},
		{"3", 3 * time.Minute, true}, // sacloud-cpu-usage's --time
		{"0", 0, false},
		{"-5m", 0, false},
		{"5x", 0, false},
		{"", 0, false},
		{"99999999999", 0, false},
	} {
		got, err := ParseWindow(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseWindow(%q) = %s, %v; want %s, ok %t", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	if got, err := parseSince("10m", now); err != nil || !got.Equal(now.Add(-10*time.Minute)) {
		t.Errorf("10m: %s %v", got, err)
	}
	if got, err := parseSince("2026-11-23T09:00:00Z", now); err != nil || !got.Equal(now.Add(-time.Hour)) {
		t.Errorf("RFC 3339: %s %v", got, err)
	}
	if _, err := parseSince("yesterday", now); err == nil {
		t.Error("yesterday accepted")
	}
}

func TestInstanceOf(t *testing.T) {
	for _, tc := range []struct {
		group, name string
		want        bool
	}{
		{"web", "web-001", true},
		{"web", "web-api-001", false},
		{"web-api", "web-api-012", true},
		{"web", "web-", false},
		{"web", "webx-001", false},
	} {
		if got := instanceOf(tc.group, tc.name); got != tc.want {
			t.Errorf("instanceOf(%q, %q) = %t", tc.group, tc.name, got)
		}
	}
}
