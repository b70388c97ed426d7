package core

import (
	"context"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/policy"
)

// points is a load history for the policy's pure evaluation: the group's
// metrics collector is not what this test is about.
type points map[string][]policy.Point

func (h points) Points(path string, from, to time.Time) []policy.Point {
	pts := h[path]
	i := sort.Search(len(pts), func(i int) bool { return !pts[i].T.Before(from) })
	j := sort.Search(len(pts), func(i int) bool { return pts[i].T.After(to) })
	if i >= j {
		return nil
	}
	return slices.Clone(pts[i:j])
}

func (h points) fill(path string, now time.Time, from int, f func(i int) float64) points {
	for i := from; i <= 0; i++ {
		h[path] = append(h[path], policy.Point{T: now.Add(time.Duration(i) * time.Second), V: f(i)})
	}
	return h
}

// TestPolicyStateMeasuredStartDelay: with start_delay: auto, the median of
// the start delays the store holds for the group, read at most once a
// minute, reaches the policy's target evaluation: 4 instances on target at
// 50 % CPU while requests_per_second has risen 1 req/s every second for 5
// minutes to 400 scale out to ⌈4 × 50 × 610/400 / 50⌉ = 7, the load 3m30s
// (the median of 2m, 3m30s and 5m) from now; a look-ahead by any of the
// three alone would ask for 6, 7 or 8.
func TestPolicyStateMeasuredStartDelay(t *testing.T) {
	cfg, err := config.Parse("shoal.yaml", []byte(`listen: 127.0.0.1:8080
groups:
  - name: web
    min_size: 1
    max_size: 20
    cooldown: 0
    template: {command: [app]}
    autoscale:
      target: {metric: cpu.avg, value: 50, start_delay: auto}
`))
	if err != nil {
		t.Fatal(err)
	}
	// No instance is to run here (no provider): the group starts at 0.
	c := cfg.Groups[0]
	c.MinSize = 0
	e := newRegistryEnv(t, c)
	g, ok := e.reg.Group("web")
	if !ok {
		t.Fatal("no group web")
	}
	log := slog.New(slog.DiscardHandler)
	ctx := context.Background()

	// Read once a minute: a start measured within the minute shows after it.
	delays := startDelays{g: g, log: log}
	t0 := time.Now()
	if d := delays.get(t0); d != 0 {
		t.Fatalf("start delay before any start = %v, want 0", d)
	}
	for i, d := range []time.Duration{5 * time.Minute, 2 * time.Minute, 210 * time.Second} {
		if err := e.st.AddStartDelay(ctx, "web", "", t0.Add(time.Duration(i)*time.Second), d); err != nil {
			t.Fatal(err)
		}
	}
	if d := delays.get(t0.Add(30 * time.Second)); d != 0 {
		t.Errorf("start delay 30 s after the last read = %v, want 0 (read once a minute)", d)
	}
	if d := delays.get(t0.Add(61 * time.Second)); d != 210*time.Second {
		t.Errorf("start delay a minute after the last read = %v, want the median 3m30s", d)
	}

	// The runner's state, as core builds it, into the target's evaluation.
	gc := g.Config().PolicyGroup()
	s := policyState(g, gc, e.jm, log)()
	if s.StartDelay != 210*time.Second {
		t.Fatalf("policy state start delay = %v, want the measured median 3m30s", s.StartDelay)
	}
	// The group itself is at 0; the history says 4.
	s.Desired = 4
	now := time.Now().Truncate(time.Second)
	h := points{}.fill("size", now, -600, func(int) float64 { return 4 }).fill("ready", now, -600, func(int) float64 { return 4 }).
		fill("cpu.avg", now, -600, func(int) float64 { return 50 }).
		fill("requests_per_second", now, -300, func(i int) float64 { return 400 + float64(i) })
	d, _ := policy.Evaluate(gc, h, s, now)
	if d.Request == nil || d.Request.Size != 7 {
		t.Fatalf("decision %+v, want a request for 7", d)
	}
	if want := "the load in 3m30s, the measured start delay"; !strings.Contains(d.Reason, want) {
		t.Errorf("reason %q lacks %q", d.Reason, want)
	}
}
