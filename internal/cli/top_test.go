package cli

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/group"
)

func ptr(x float64) *float64 { return &x }

// A sparkline scales its values from 0 to their maximum, keeps the last
// width of them, and leaves a missing value blank.
func TestSparkline(t *testing.T) {
	for _, tc := range []struct {
		vals  []float64
		width int
		want  string
	}{
		{[]float64{0, 1, 2, 3, 4, 5, 6, 7}, 10, "▁▂▃▄▅▆▇█"},
		{[]float64{0, 0, 0}, 10, "▁▁▁"},
		{[]float64{5, math.NaN(), 10}, 10, "▅ █"},
		{[]float64{1, 2, 3, 4}, 2, "▆█"},
		{nil, 5, ""},
		{[]float64{1}, 0, ""},
	} {
		if got := sparkline(tc.vals, tc.width); got != tc.want {
			t.Errorf("sparkline(%v, %d) = %q, want %q", tc.vals, tc.width, got, tc.want)
		}
	}
}

// A history keeps the last topHistory refreshes, a missing value as NaN.
func TestAppendHistory(t *testing.T) {
	var h []float64
	for i := range topHistory + 5 {
		h = appendHistory(h, ptr(float64(i)))
	}
	if len(h) != topHistory || h[0] != 5 || h[len(h)-1] != topHistory+4 {
		t.Errorf("history of %d: first %v, last %v", len(h), h[0], h[len(h)-1])
	}
	if h = appendHistory(h, nil); !math.IsNaN(h[len(h)-1]) {
		t.Errorf("a missing value is %v, want NaN", h[len(h)-1])
	}
}

func sampleView() topView {
	at := time.Date(2026, 11, 25, 13, 0, 0, 0, time.Local)
	return topView{
		Time:     at,
		Interval: time.Second,
		Groups: []topGroup{{
			Status:      group.Status{Name: "web", Plan: "two", Desired: 3, InService: 2, MinSize: 1, MaxSize: 4},
			CPUP90:      ptr(71.25),
			RPS:         ptr(1234.5),
			P99:         ptr(18.4),
			RPSHistory:  []float64{0, 617.25, 1234.5},
			SizeHistory: []float64{2, 2, 2},
		}, {
			Status: group.Status{Name: "api", Desired: 0, MinSize: 0, MaxSize: 2},
		}},
		Decisions: []api.Event{
			{ID: 7, Time: at.Add(-time.Minute), Group: "web", Rule: "rule-1", Current: 2, Recommendation: 3,
				Outcome: decision.Accepted, JobID: "12", Reason: "cpu.avg 85 > 80 for 1m"},
			{ID: 9, Time: at.Add(-time.Second), Group: "web", Rule: "target", Current: 3, Recommendation: 3,
				Outcome: decision.Nothing, Reason: "within tolerance"},
		},
	}
}

// A group's row has its plan, size with bounds, CPU p90, requests/s and
// p99, or a dash for what is not measured.
func TestTopRow(t *testing.T) {
	v := sampleView()
	if got, want := topRow(v.Groups[0]), "web            two        2/3 (1-4)        71.2%    1234.5      18ms"; got != want {
		t.Errorf("row:\n%q\nwant\n%q", got, want)
	}
	if got, want := topRow(v.Groups[1]), "api            -          0/0 (0-2)            -         -         -"; got != want {
		t.Errorf("row without metrics:\n%q\nwant\n%q", got, want)
	}
}

// The terminal view redraws from the top left, erases each line's rest
// and the screen below, cuts lines to the width and the screen's height,
// and shows sparklines and the last decisions.
func TestRenderTop(t *testing.T) {
	v := sampleView()
	got := renderTop(v, 120, 40)
	if !strings.HasPrefix(got, "\x1b[H") || !strings.HasSuffix(got, "\x1b[J") {
		t.Errorf("not a redraw from the top left: %q", got)
	}
	lines := strings.Split(strings.TrimSuffix(strings.TrimPrefix(got, "\x1b[H"), "\x1b[J"), "\r\n")
	for i, l := range lines {
		if !strings.HasSuffix(l, "\x1b[K") {
			t.Errorf("line %d does not erase its rest: %q", i, l)
		}
		lines[i] = strings.TrimSuffix(l, "\x1b[K")
	}
	want := []string{
		"shoal top  13:00:00  every 1s  (Ctrl-C quits)",
		"",
		topHeader,
		topRow(v.Groups[0]),
		"  req/s ▁▅█" + strings.Repeat(" ", 44) + "  size ███", // scaled from 0: a steady 2 is full
		topRow(v.Groups[1]),
		"  req/s " + strings.Repeat(" ", 47) + "  size ",
		"",
		"LAST DECISIONS",
		"12:59:00  web          rule-1       2→3     " + string(decision.Accepted) + " (job 12)  cpu.avg 85 > 80 for 1m",
		"12:59:59  web          target       3→3     " + string(decision.Nothing) + "  within tolerance",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("view:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}

	small := renderTop(v, 30, 5)
	if n := strings.Count(small, "\r\n") + 1; n != 5 {
		t.Errorf("%d lines on a 5-line screen", n)
	}
	for _, l := range strings.Split(small, "\r\n") {
		l = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(l, "\x1b[J"), "\x1b[H"), "\x1b[K")
		if n := len([]rune(l)); n > 30 {
			t.Errorf("line of %d columns on a 30-column screen: %q", n, l)
		}
	}
}

// Plain, each refresh is a line per group; a decision is printed once.
func TestPlainTop(t *testing.T) {
	v := sampleView()
	lines, printed := plainTop(v, -1)
	want := []string{
		"13:00:00  " + topRow(v.Groups[0]),
		"13:00:00  " + strings.TrimRight(topRow(v.Groups[1]), " "),
		"13:00:00  decision " + decisionLine(v.Decisions[0]),
		"13:00:00  decision " + decisionLine(v.Decisions[1]),
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") || printed != 9 {
		t.Errorf("first refresh (newest %d):\n%s\nwant:\n%s", printed, strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	lines, printed = plainTop(v, printed)
	if len(lines) != 2 || printed != 9 {
		t.Errorf("second refresh printed %d lines (newest %d), want the 2 groups only:\n%s", len(lines), printed, strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		if strings.ContainsRune(l, '\x1b') {
			t.Errorf("escape sequence in a plain line: %q", l)
		}
	}
}

// Only the last n decisions are kept, oldest first.
func TestLastDecisions(t *testing.T) {
	var last []api.Event
	for i := range 4 {
		last = lastDecisions(last, []api.Event{{ID: int64(2 * i)}, {ID: int64(2*i + 1)}}, 3)
	}
	if len(last) != 3 || last[0].ID != 5 || last[2].ID != 7 {
		t.Errorf("last = %+v, want ids 5, 6, 7", last)
	}
}
