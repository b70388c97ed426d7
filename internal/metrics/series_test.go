package metrics

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

func TestResample(t *testing.T) {
	from := time.Unix(1000, 0)
	pts := []Point{
		{T: from.Add(-time.Second), V: 99}, // before the window
		{T: from, V: 1},
		{T: from.Add(4 * time.Second), V: 3},
		{T: from.Add(25 * time.Second), V: 7},
		{T: from.Add(30 * time.Second), V: 99}, // past the last step
	}
	for _, tt := range []struct {
		last bool
		want []*float64
	}{
		{false, []*float64{num(2), nil, num(7)}},
		{true, []*float64{num(3), nil, num(7)}},
	} {
		got := resample(pts, from, 10*time.Second, 3, tt.last)
		if len(got) != len(tt.want) {
			t.Fatalf("last %v: got %d steps, want %d", tt.last, len(got), len(tt.want))
		}
		for i, want := range tt.want {
			switch {
			case (got[i] == nil) != (want == nil):
				t.Errorf("last %v: step %d: got %v, want %v", tt.last, i, got[i], want)
			case got[i] != nil && *got[i] != *want:
				t.Errorf("last %v: step %d: got %v, want %v", tt.last, i, *got[i], *want)
			}
		}
	}
}

// TestSeriesFitsHistory: a chart of the last hour over 40 s of history
// starts at the oldest sample, in steps no shorter than the sampling
// interval; the instance count is a count, never a mean such as 3.5 (a
// roll-up's most, or the step's last sample: the count as it ended),
// the CPU the steps' mean; each metric has its unit.
func TestSeriesFitsHistory(t *testing.T) {
	c := openHistory(t, filepath.Join(t.TempDir(), "metrics.db"))
	defer c.Close()
	t0 := time.Unix(1_700_000_000-1_700_000_000%6000+6000, 0)
	for i := range 40 {
		now := t0.Add(time.Duration(i) * time.Second)
		size := 3.0
		if i%10 >= 5 { // the fourth instance runs in the second half of each 10 s
			size = 4
		}
		c.record(context.Background(), now, map[string]float64{"web/size": size, "web/cpu.avg": float64(i)},
			map[string]*groupView{"web": {at: now}}, nil)
	}
	to := t0.Add(39 * time.Second)

	s := c.Series("web", []string{"size", "cpu.avg"}, to, time.Hour, 360)
	if len(s.Times) != 40 || s.Step != 1 || s.Times[0] != t0.Unix() {
		t.Fatalf("1 h over 40 s of history: %d steps of %gs from %d, want 40 of 1s from %d", len(s.Times), s.Step, s.Times[0], t0.Unix())
	}
	// The ring (30 s here) holds 1 s samples; before it, a 10 s roll-up
	// stamped at its start stands for its bucket.
	for i, v := range s.Values["size"] {
		if i > 0 && i < 10 {
			continue
		}
		if v == nil || *v != 3 && *v != 4 {
			t.Fatalf("size step %d: %v, want a count", i, v)
		}
	}

	s = c.Series("web", []string{"size", "cpu.avg"}, to, time.Hour, 4)
	if len(s.Times) != 4 || s.Step != 10 || s.Times[0] != t0.Unix() {
		t.Fatalf("4 steps: %d steps of %gs from %d", len(s.Times), s.Step, s.Times[0])
	}
	if v := s.Values["size"][0]; v == nil || *v != 4 {
		t.Errorf("size of the first step, a roll-up: %v, want its most, 4", v)
	}
	if v := s.Values["size"][1]; v == nil || *v != 4 {
		t.Errorf("size of the second step, from the ring: %v, want its last sample, 4", v)
	}
	if v := s.Values["cpu.avg"][0]; v == nil || *v != 4.5 {
		t.Errorf("cpu.avg of the first step: %v, want its mean, 4.5", v)
	}
	if s.Units["size"] != "instances" || s.Units["cpu.avg"] != "%" {
		t.Errorf("units %v", s.Units)
	}

	// A window shorter than the history is the window, on a grid of its
	// steps whose newest holds to (t0+39 s).
	s = c.Series("web", []string{"size"}, to, 20*time.Second, 10)
	if len(s.Times) != 10 || s.Step != 2 || s.Times[0] != t0.Add(20*time.Second).Unix() || s.Times[9] != t0.Add(38*time.Second).Unix() {
		t.Errorf("20 s window: %d steps of %gs from %d", len(s.Times), s.Step, s.Times[0])
	}
	// A source read before the group's first sample (since shoal started)
	// does not stretch the window: it fits the group's own history.
	early := withSource{c.ForGroup("web"), "backlog", []Point{{T: t0.Add(-20 * time.Second), V: 7}, {T: to, V: 7}}}
	s = c.SeriesOf(early, "web", []string{"size", "backlog"}, to, time.Hour, 360)
	if len(s.Times) != 40 || s.Times[0] != t0.Unix() || s.Values["backlog"][39] == nil || *s.Values["backlog"][39] != 7 {
		t.Errorf("with a source read 20 s earlier: %d steps from %d, backlog %v; want the group's 40 from %d", len(s.Times), s.Times[0], s.Values["backlog"], t0.Unix())
	}
	// No history: one empty step at the end.
	s = c.Series("api", []string{"size"}, to, time.Hour, 360)
	if len(s.Times) != 1 || s.Values["size"][0] != nil {
		t.Errorf("no history: %d steps, %v", len(s.Times), s.Values["size"])
	}
}

func TestUnit(t *testing.T) {
	for m, want := range map[string]string{
		"size": "instances", "ready": "instances", "cpu.p90": "%", "latency_ms.p99": "ms",
		"requests_per_second": "req/s", "requests_per_second_per_instance": "req/s",
		"errors_per_second": "/s", "queue": "", "sessions": "",
	} {
		if got := Unit(m); got != want {
			t.Errorf("Unit(%q) = %q, want %q", m, got, want)
		}
	}
}

// TestSeriesGrid: steps start on whole seconds, so a change sampled at
// 10.6 s is in the step that starts at 10 s, where the chart draws the
// job that caused it, not a fraction of a second earlier.
func TestSeriesGrid(t *testing.T) {
	c := openHistory(t, filepath.Join(t.TempDir(), "metrics.db"))
	defer c.Close()
	t0 := time.Unix(1_700_000_000-1_700_000_000%6000+6000, 0)
	for i := range 20 {
		now := t0.Add(time.Duration(i)*time.Second + 600*time.Millisecond)
		size := 1.0
		if i >= 10 {
			size = 2
		}
		c.record(context.Background(), now, map[string]float64{"web/size": size}, map[string]*groupView{"web": {at: now}}, nil)
	}
	s := c.Series("web", []string{"size"}, t0.Add(19700*time.Millisecond), time.Hour, 360)
	if len(s.Times) != 20 || s.Times[0] != t0.Unix() || s.Step != 1 {
		t.Fatalf("%d steps of %gs from %d, want 20 of 1s from %d", len(s.Times), s.Step, s.Times[0], t0.Unix())
	}
	if v9, v10 := s.Values["size"][9], s.Values["size"][10]; v9 == nil || *v9 != 1 || v10 == nil || *v10 != 2 {
		t.Errorf("steps at 9 s and 10 s: %v, %v; want 1 then 2", v9, v10)
	}
}

// withSource is a group's history with one more series, as a source's.
type withSource struct {
	GroupHistory
	name string
	pts  []Point
}

func (w withSource) Points(path string, from, to time.Time) []Point {
	if path != w.name {
		return w.GroupHistory.Points(path, from, to)
	}
	var out []Point
	for _, p := range w.pts {
		if !p.T.Before(from) && !p.T.After(to) {
			out = append(out, p)
		}
	}
	return out
}
