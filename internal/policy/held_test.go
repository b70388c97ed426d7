package policy

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingMetrics counts the reads that reach h.
type countingMetrics struct {
	h     Metrics
	reads atomic.Int64
}

func (c *countingMetrics) Points(path string, from, to time.Time) []Point {
	c.reads.Add(1)
	return c.h.Points(path, from, to)
}

// TestHeldHistoryMatchesDirectReads: every window a replay reads, moving with
// the step, longer ones later, the predictor's previous days, is what the
// history itself returns, from a few reads per path.
func TestHeldHistoryMatchesDirectReads(t *testing.T) {
	h := history{}.fill("cpu.avg", -3*86400, 3000, func(i int) float64 { return float64(i % 97) }).
		fill("size", -600, 3000, func(i int) float64 { return float64(1 + i/1000) })
	c := &countingMetrics{h: h}
	hh := newHeldHistory(c, secs(600))
	windows := []struct {
		path     string
		back, to time.Duration // [now-back, now-to]
	}{
		{"cpu.avg", time.Minute, 0},
		{"size", time.Hour, 0},
		{"cpu.avg", 10 * time.Minute, 0},                           // a longer window after a short one
		{"cpu.avg", 24*time.Hour + 10*time.Minute, 24 * time.Hour}, // the same minutes yesterday
		{"cpu.avg", 48*time.Hour + 10*time.Minute, 48*time.Hour - 30*time.Minute},
		{"nosuch", time.Minute, 0},
	}
	for now := secs(0); !now.After(secs(600)); now = now.Add(time.Second) {
		hh.now = now
		for _, w := range windows {
			got := hh.Points(w.path, now.Add(-w.back), now.Add(-w.to))
			want := h.Points(w.path, now.Add(-w.back), now.Add(-w.to))
			if len(got) != len(want) || len(want) > 0 && !reflect.DeepEqual(got, want) {
				t.Fatalf("at %s, %s over [-%s, -%s]: %d points, want %d", now.Sub(t0), w.path, w.back, w.to, len(got), len(want))
			}
		}
	}
	// One read per path and window that reaches further back than those
	// before it; 601 steps × 6 windows read directly would be 3,606.
	if n := c.reads.Load(); n > 6 {
		t.Fatalf("%d reads of the history, want at most 6", n)
	}
}

// TestReplayReadsHistoryOnce: a replay reads each metric a few times, not at
// every step (each read is a query of metrics.db, which the collector needs
// too).
func TestReplayReadsHistoryOnce(t *testing.T) {
	g := parseGroup(t, 1, 10, "", `      rules:
        - {name: out, metric: cpu.avg, above: 75, for: 1m, action: {add: 1}, cooldown: 300s}
        - {name: in, metric: cpu.avg, below: 35, for: 10m, action: {remove: 1}, cooldown: 600s}
      target: {metric: cpu.avg, value: 60, scale_in_stabilization: 120s, period: 60s}
`)
	h := history{}.fill("cpu.avg", -600, 3000, func(i int) float64 { return float64(10 + i%90) }).
		fill("size", -600, 3000, constant(3)).fill("ready", -600, 3000, constant(3))
	c := &countingMetrics{h: h}
	ds, err := Replay(context.Background(), g, c, secs(0), secs(3000))
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) == 0 {
		t.Fatal("no decisions: the history should make the policy act")
	}
	if n := c.reads.Load(); n > 20 {
		t.Fatalf("a replay of 3001 steps read the history %d times, want at most 20", n)
	}
}

// TestReplayStopsWithContext: a replay whose context ends returns at the
// next step with the context's error.
func TestReplayStopsWithContext(t *testing.T) {
	g := parseGroup(t, 1, 10, "", `      rules:
        - {name: out, metric: cpu.avg, above: 75, for: 1m, action: {add: 1}}
`)
	h := history{}.fill("cpu.avg", -600, 86400, constant(50)).fill("size", -600, 86400, constant(3))
	ctx, cancel := context.WithCancel(context.Background())
	// The first read of cpu.avg, in the first step, cancels: the replay
	// stops before its second.
	stop := stepHook{Metrics: h, at: func(path string) {
		if path == "cpu.avg" {
			cancel()
		}
	}}
	_, err := Replay(ctx, g, stop, secs(0), secs(86400))
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "stopped at "+secs(1).Format(time.RFC3339)) {
		t.Fatalf("Replay after its context was cancelled: %v, want context.Canceled at the second step", err)
	}
}

// stepHook calls at before each read it passes on.
type stepHook struct {
	Metrics
	at func(path string)
}

func (s stepHook) Points(path string, from, to time.Time) []Point {
	s.at(path)
	return s.Metrics.Points(path, from, to)
}
