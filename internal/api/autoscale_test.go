package api

import (
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
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

// TestCheckPolicyTestCost: a policy test is refused when it makes too many
// evaluations or scans too many samples, with what was asked and the longest
// window allowed.
func TestCheckPolicyTestCost(t *testing.T) {
	rule := func(iv, f time.Duration) *config.Autoscale {
		return &config.Autoscale{Interval: iv, Rules: []config.Rule{{Name: "r", For: f}}}
	}
	stab := &config.Autoscale{Interval: time.Second, Target: &config.Target{ScaleInStabilization: 12 * time.Hour, Period: 15 * time.Second}}
	for _, tc := range []struct {
		name   string
		a      *config.Autoscale
		window time.Duration
		want   []string // substrings of the error; none for no error
	}{
		{"a day at 100ms", rule(100*time.Millisecond, time.Second), 24 * time.Hour,
			[]string{"window 24h0m0s at autoscale.interval 100ms is 864000 evaluations", "at most 86400", "at most 2h24m0s"}},
		{"2h24m at 100ms", rule(100*time.Millisecond, time.Second), 144 * time.Minute, nil},
		{"a day at 1s of a 25-minute rule", rule(time.Second, 25*time.Minute), 24 * time.Hour, nil},
		// 3600 samples of the ring, then 39600 s of 10 s roll-ups, and the
		// 15 s period.
		{"a day of a 12-hour stabilization window", stab, 24 * time.Hour,
			[]string{"86400 evaluations, each scanning up to 7575 samples (the policy reads 12h0m0s back), 654480000 in all", "at most 200000000", "at most 7h20m2s"}},
		// A statistic rule reads its over: back as a for: rule reads its for:.
		{"a day of a 12-hour statistic rule", &config.Autoscale{Interval: time.Second, Rules: []config.Rule{{Name: "r", Statistic: config.StatAverage, Over: 12 * time.Hour}}}, 24 * time.Hour,
			[]string{"86400 evaluations, each scanning up to 7560 samples (the policy reads 12h0m0s back), 653184000 in all", "at most 200000000"}},
		{"a 100-year rule", rule(time.Second, 100*365*24*time.Hour), time.Minute,
			[]string{"reads 876000h0m0s back", "shorter window in the policy"}},
	} {
		err := checkPolicyTestCost(tc.a, tc.window, time.Second, time.Hour)
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: allowed, want an error", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tc.name, err, w)
			}
		}
	}
}

// TestPolicyLines: the series carry the target and each threshold of the
// rules, on the metric each watches, for the chart to draw.
func TestPolicyLines(t *testing.T) {
	if got := policyLines(nil); got == nil || len(got) != 0 {
		t.Errorf("no policy: %#v, want an empty list (JSON [])", got)
	}
	a := &config.Autoscale{
		Target: &config.Target{Metric: "cpu.avg", Value: 50},
		Rules: []config.Rule{
			{Name: "busy", Metric: "requests_per_second", HasAbove: true, Above: 40, Action: config.Action{Kind: config.ActionAdd, N: 1}},
			{Name: "band", Metric: "latency_ms.p99", HasAbove: true, Above: 5, HasBelow: true, Below: 200, Action: config.Action{Kind: config.ActionAdd, N: 2}},
		},
	}
	got := policyLines(a)
	want := []PolicyLine{
		{Metric: "cpu.avg", Value: 50, Kind: "target", Rule: "target"},
		{Metric: "requests_per_second", Value: 40, Kind: "above", Rule: "busy", Action: "add: 1"},
		{Metric: "latency_ms.p99", Value: 5, Kind: "above", Rule: "band", Action: "add: 2"},
		{Metric: "latency_ms.p99", Value: 200, Kind: "below", Rule: "band", Action: "add: 2"},
	}
	if len(got) != len(want) {
		t.Fatalf("lines %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
