package policy

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/jobrun"
	"github.com/shoal-lb/shoal/internal/metrics"
)

// The collector's history is what the live loop reads.
var _ Metrics = metrics.GroupHistory{}

// history is an in-memory Metrics for tests: series by path.
type history map[string][]Point

func (h history) Points(path string, from, to time.Time) []Point {
	pts := h[path]
	i := sort.Search(len(pts), func(i int) bool { return !pts[i].T.Before(from) })
	j := sort.Search(len(pts), func(i int) bool { return pts[i].T.After(to) })
	if i >= j {
		return nil
	}
	return slices.Clone(pts[i:j])
}

var t0 = time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)

// secs is t0 plus n seconds.
func secs(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }

// fill sets path to f(i) at every second i in [from, to].
func (h history) fill(path string, from, to int, f func(i int) float64) history {
	for i := from; i <= to; i++ {
		h[path] = append(h[path], Point{T: secs(i), V: f(i)})
	}
	return h
}

func constant(v float64) func(int) float64 { return func(int) float64 { return v } }

// parseGroup builds a group from an autoscale section (indented six spaces)
// through the real config loader, so tests use what users can write.
func parseGroup(t *testing.T, minSize, maxSize int, plans, autoscale string) config.Group {
	t.Helper()
	doc := fmt.Sprintf(`listen: :8080
groups:
  - name: web
    min_size: %d
    max_size: %d
    cooldown: 0
%s    template: {command: [app]}
    autoscale:
%s`, minSize, maxSize, plans, autoscale)
	cfg, err := config.Parse("shoal.yaml", []byte(doc))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, doc)
	}
	return cfg.Groups[0]
}

const ladder = "    plans: {small: 2, medium: 3, large: 5}\n"

// base is a group of 4 ready instances, steady for 10 minutes.
func base() history {
	return history{}.fill("size", -600, 0, constant(4)).fill("ready", -600, 0, constant(4))
}

type want struct {
	record  bool
	code    decision.Code
	rule    string
	request *jobrun.Request // nil: no request
	reason  string          // a substring of the reason
}

func check(t *testing.T, name string, d decision.Record, record bool, w want) {
	t.Helper()
	if record != w.record {
		t.Errorf("%s: record = %v, want %v (decision %+v)", name, record, w.record, d)
	}
	if d.Code != w.code {
		t.Errorf("%s: code = %q, want %q (reason %q)", name, d.Code, w.code, d.Reason)
	}
	if w.rule != "" && d.Rule != w.rule {
		t.Errorf("%s: rule = %q, want %q", name, d.Rule, w.rule)
	}
	switch {
	case w.request == nil && d.Request != nil:
		t.Errorf("%s: request %+v, want none", name, *d.Request)
	case w.request != nil && d.Request == nil:
		t.Errorf("%s: no request, want %+v (reason %q)", name, *w.request, d.Reason)
	case w.request != nil && submission(d) != *w.request:
		t.Errorf("%s: request %+v, want %+v", name, submission(d), *w.request)
	}
	if w.request != nil && d.Outcome != decision.Requested || w.request == nil && d.Outcome != decision.Nothing {
		t.Errorf("%s: outcome %q", name, d.Outcome)
	}
	if !strings.Contains(d.Reason, w.reason) {
		t.Errorf("%s: reason %q does not contain %q", name, d.Reason, w.reason)
	}
}

func up(source string) *jobrun.Request {
	return &jobrun.Request{Group: "web", Kind: jobrun.Up, Source: "policy:" + source}
}

func size(n int, source string) *jobrun.Request {
	return &jobrun.Request{Group: "web", Kind: jobrun.Size, Size: n, Source: "policy:" + source}
}

func TestForWindow(t *testing.T) {
	g := parseGroup(t, 1, 10, "", `      rules:
        - {name: hot, metric: cpu.avg, above: 75, for: 60s, action: up}
`)
	tests := []struct {
		name string
		cpu  history
		want want
	}{
		{"held for the whole window", history{}.fill("cpu.avg", -120, 0, constant(80)),
			want{record: true, code: CodeScale, rule: "hot", request: up("hot"), reason: "cpu.avg above 75 for 1m (lowest 80)"}},
		{"broken by one sample", history{}.fill("cpu.avg", -120, 0, func(i int) float64 {
			if i == -30 {
				return 75 // not above
			}
			return 90
		}), want{}},
		{"a dip before the window does not count", history{}.fill("cpu.avg", -120, 0, func(i int) float64 {
			if i == -61 {
				return 10
			}
			return 90
		}), want{record: true, code: CodeScale, request: up("hot")}},
		{"history shorter than the window", history{}.fill("cpu.avg", -30, 0, constant(90)), want{}},
		{"a gap in the window", history{}.fill("cpu.avg", -120, -40, constant(90)).fill("cpu.avg", -25, 0, constant(90)), want{}},
		{"a short gap is tolerated", history{}.fill("cpu.avg", -120, -40, constant(90)).fill("cpu.avg", -36, 0, constant(90)),
			want{record: true, code: CodeScale, request: up("hot")}},
		// After a restart the older history is 10 s averages.
		{"coarse history", func() history {
			h := history{}
			for i := -120; i < -20; i += 10 {
				h["cpu.avg"] = append(h["cpu.avg"], Point{T: secs(i), V: 85})
			}
			return h.fill("cpu.avg", -20, 0, constant(85))
		}(), want{record: true, code: CodeScale, request: up("hot")}},
	}
	for _, tt := range tests {
		h := base()
		for k, v := range tt.cpu {
			h[k] = v
		}
		d, record := Evaluate(g, h, State{Desired: 4}, secs(0))
		check(t, tt.name, d, record, tt.want)
	}
}

func TestMissingMetric(t *testing.T) {
	keep := parseGroup(t, 1, 10, "", `      rules:
        - {name: cold, metric: cpu.avg, below: 20, for: 10s, action: down}
`)
	upOnMissing := parseGroup(t, 1, 10, "", `      rules:
        - {name: blind, metric: latency_ms.p99, above: 500, for: 10s, action: {add: 2}, on_missing: up}
`)
	// cpu.avg stopped 10 s ago (it was 5 %: a stale low value must not scale in).
	h := base().fill("cpu.avg", -120, -10, constant(5)).fill("latency_ms.p99", -120, -10, constant(100))

	// The first evaluation after the metric went stale records it once.
	d, record := Evaluate(keep, h, State{Desired: 4}, secs(-4))
	check(t, "keep, just went stale", d, record, want{record: true, code: CodeMissing, rule: "cold", reason: "on_missing: keep"})
	d, record = Evaluate(keep, h, State{Desired: 4}, secs(0))
	check(t, "keep, still stale", d, record, want{})

	// on_missing: up waits until the metric has been missing for the rule's
	// whole window: the newest sample, at -10 s, is still inside it.
	d, record = Evaluate(upOnMissing, h, State{Desired: 4}, secs(0))
	check(t, "on_missing up, missing for less than the window", d, record, want{})
	d, record = Evaluate(upOnMissing, h, State{Desired: 4}, secs(-4))
	check(t, "on_missing up, just went stale", d, record, want{record: true, code: CodeMissing, rule: "blind",
		reason: "on_missing: up, scaling up if it stays missing for 10s"})
	h.fill("size", 1, 5, constant(4)).fill("ready", 1, 5, constant(4))
	d, record = Evaluate(upOnMissing, h, State{Desired: 4}, secs(1))
	check(t, "on_missing up", d, record, want{record: true, code: CodeScale, rule: "blind", request: up("blind"),
		reason: "latency_ms.p99 has been missing for 10s; on_missing: up"})
	d, record = Evaluate(upOnMissing, base(), State{Desired: 4}, secs(0))
	check(t, "on_missing up, never seen", d, record, want{record: true, code: CodeScale, request: up("blind")})
	// Without the group's own series (collection just started) nothing is known.
	d, record = Evaluate(upOnMissing, history{}, State{Desired: 4}, secs(0))
	check(t, "on_missing up, no history at all", d, record, want{})

	// A target whose metric is missing holds the size and never scales in.
	target := parseGroup(t, 1, 10, "", `      target: {metric: cpu.avg, value: 50, scale_in_stabilization: 0s}
`)
	d, record = Evaluate(target, h, State{Desired: 4}, secs(0))
	check(t, "target, stale", d, record, want{})
}

func TestTargetTolerance(t *testing.T) {
	g := parseGroup(t, 1, 20, "", `      target: {metric: cpu.avg, value: 50, tolerance: 0.1, scale_in_stabilization: 60s}
`)
	rps := parseGroup(t, 1, 20, "", `      target: {metric: requests_per_second, value: 100}
`)
	tests := []struct {
		name string
		g    config.Group
		path string
		v    float64
		want want
	}{
		{"on target", g, "cpu.avg", 50, want{}},
		{"inside the band above", g, "cpu.avg", 54, want{record: true, code: CodeTolerance, rule: "target", reason: "within 10% of the target 50"}},
		// ceil(4 × 46 / 50) = 4: inside the band below, nothing would change.
		{"inside the band below", g, "cpu.avg", 46, want{}},
		// ceil(4 × 70 / 50) = ceil(5.6) = 6
		{"above the band", g, "cpu.avg", 70, want{record: true, code: CodeScale, rule: "target", request: size(6, "target"),
			reason: "cpu.avg 70 with 4 ready → 6 for target 50"}},
		// A total divides directly: ceil(730 / 100) = 8.
		{"a group total", rps, "requests_per_second", 730, want{record: true, code: CodeScale, request: size(8, "target")}},
		{"a group total in the band", rps, "requests_per_second", 420, want{record: true, code: CodeTolerance}},
	}
	for _, tt := range tests {
		h := base().fill(tt.path, -600, 0, constant(tt.v))
		d, record := Evaluate(tt.g, h, State{Desired: 4}, secs(0))
		check(t, tt.name, d, record, tt.want)
	}

	// Ready instances, not the size: two of six still warming up.
	h := base().fill("cpu.avg", -600, 0, constant(80))
	h["ready"] = nil
	h.fill("ready", -600, 0, constant(2))
	h["size"] = nil
	h.fill("size", -600, 0, constant(6))
	d, record := Evaluate(g, h, State{Desired: 6}, secs(0))
	// ceil(2 × 80 / 50) = 4 < 6, but the four warming up count as loaded to
	// the target: ceil(3.2 + 4) = 8, so nothing is taken away.
	check(t, "warming instances", d, record, want{})

	// Inside the band below: ceil(20 × 46 / 50) = 19 would have scaled in.
	big := base().fill("cpu.avg", -600, 0, constant(46))
	big["ready"], big["size"] = nil, nil
	big.fill("ready", -600, 0, constant(20)).fill("size", -600, 0, constant(20))
	d, record = Evaluate(g, big, State{Desired: 20}, secs(0))
	check(t, "inside the band below, large group", d, record, want{record: true, code: CodeTolerance, reason: "the size stays 20 (the formula gives 19)"})
}

func TestStabilization(t *testing.T) {
	g := parseGroup(t, 1, 20, "", `      target: {metric: cpu.avg, value: 50, scale_in_stabilization: 300s, max_step: {down: 10}}
`)
	tests := []struct {
		name string
		cpu  func(i int) float64
		from int // history starts
		want want
	}{
		{"high recommendation in the window holds", func(i int) float64 {
			if i == -200 {
				return 45 // recommends 4 (inside the band) two hundred seconds ago
			}
			return 10 // recommends ceil(4 × 10 / 50) = 1
		}, -600, want{record: true, code: CodeStabilization, reason: "holds a higher recommendation (4 at 2026-03-02T11:56:40Z)"}},
		{"highest in the window wins", func(i int) float64 {
			switch i {
			case -250:
				return 30 // recommends ceil(2.4) = 3
			case -100:
				return 20 // recommends ceil(1.6) = 2
			}
			return 10
		}, -600, want{record: true, code: CodeScale, request: size(3, "target"), reason: "stabilized to 3"}},
		{"a recommendation older than the window is forgotten", func(i int) float64 {
			if i == -301 {
				return 45
			}
			return 10
		}, -600, want{record: true, code: CodeScale, request: size(1, "target")}},
		{"history shorter than the window", constant(10), -200,
			want{record: true, code: CodeStabilization, reason: "not yet covered by history"}},
		// Only the window's start was checked: a gap in it (shoal down for
		// 150 s) let the scale-in through at once.
		{"a gap in the window", constant(10), -600,
			want{record: true, code: CodeStabilization, reason: "not yet covered by history: no samples from 2026-03-02T11:55:50Z to 2026-03-02T11:58:20Z"}},
	}
	for _, tt := range tests {
		h := base().fill("cpu.avg", tt.from, 0, tt.cpu)
		if tt.name == "a gap in the window" {
			h = base().fill("cpu.avg", tt.from, -250, tt.cpu).fill("cpu.avg", -100, 0, tt.cpu)
		}
		d, record := Evaluate(g, h, State{Desired: 4}, secs(0))
		check(t, tt.name, d, record, tt.want)
		// A restart is a new evaluation over the same history: the same answer.
		again, _ := Evaluate(g, h, State{Desired: 4}, secs(0))
		if !reflect.DeepEqual(again, d) {
			t.Errorf("%s: a second evaluation differs:\n%+v\n%+v", tt.name, d, again)
		}
	}
}

// restarted is what the history looks like after a restart of shoal: the
// stored 10 s averages up to the last batch written (at -60 s), nothing while
// shoal was down, then live 1 s samples from -40 s.
func restarted(path string, from int, f func(i int) float64) history {
	h := history{}
	for i := from; i <= -60; i += 10 {
		h[path] = append(h[path], Point{T: secs(i), V: f(i)})
	}
	return h.fill(path, -40, 0, f)
}

func TestRestart(t *testing.T) {
	stab := parseGroup(t, 1, 20, "", `      target: {metric: cpu.avg, value: 50, scale_in_stabilization: 300s}
`)
	// Two hundred seconds ago, before the restart, the target recommended 4.
	h := restarted("cpu.avg", -600, func(i int) float64 {
		if i == -200 {
			return 45
		}
		return 10
	})
	for _, p := range []string{"size", "ready"} {
		for path, pts := range restarted(p, -600, constant(4)) {
			h[path] = pts
		}
	}
	d, record := Evaluate(stab, h, State{Desired: 4}, secs(0))
	check(t, "stabilization across a restart", d, record, want{record: true, code: CodeStabilization, reason: "(4 at 2026-03-02T11:56:40Z)"})

	// A 25-minute window spans the restart's 20 s gap.
	long := parseGroup(t, 1, 20, "", `      rules: [{name: cold, metric: cpu.avg, below: 35, for: 25m, action: down}]
`)
	h["cpu.avg"] = restarted("cpu.avg", -1600, constant(20))["cpu.avg"]
	d, record = Evaluate(long, h, State{Desired: 4}, secs(0))
	check(t, "long window across a restart", d, record, want{record: true, code: CodeScale, rule: "cold",
		request: &jobrun.Request{Group: "web", Kind: jobrun.Down, Source: "policy:cold"}})
	// A one-minute window does not: a third of it is missing.
	short := parseGroup(t, 1, 20, "", `      rules: [{name: cold, metric: cpu.avg, below: 35, for: 1m, action: down}]
`)
	d, record = Evaluate(short, h, State{Desired: 4}, secs(0))
	check(t, "short window across a restart", d, record, want{})
}

func TestRateLimit(t *testing.T) {
	g := parseGroup(t, 1, 20, "", `      target: {metric: cpu.avg, value: 10, scale_in_stabilization: 0s, period: 15s, max_step: {up: 100%, down: 1}}
`)
	// cpu 100 % on 2 ready recommends 20.
	h := base().fill("cpu.avg", -600, 0, constant(100))
	h["ready"] = nil
	h.fill("ready", -600, 0, constant(2))
	h["size"] = nil
	h.fill("size", -600, 0, constant(2))
	d, record := Evaluate(g, h, State{Desired: 2}, secs(0))
	check(t, "up 100% of 2", d, record, want{record: true, code: CodeScale, request: size(4, "target"), reason: "limited to 4 by max_step up 100% per 15s"})

	// The group was 2 ten seconds ago and is 4 now: 100 % is used up.
	h["size"] = nil
	h.fill("size", -600, -10, constant(2)).fill("size", -9, 0, constant(4))
	d, record = Evaluate(g, h, State{Desired: 4}, secs(0))
	check(t, "up, used up", d, record, want{record: true, code: CodeRateLimit, reason: "allows no more than 4"})
	// Sixteen seconds later the period has passed.
	h.fill("cpu.avg", 1, 16, constant(100)).fill("ready", 1, 16, constant(2)).fill("size", 1, 16, constant(4))
	d, record = Evaluate(g, h, State{Desired: 4}, secs(16))
	check(t, "up, next period", d, record, want{record: true, code: CodeScale, request: size(8, "target")})

	// Down one at a time.
	h = base().fill("cpu.avg", -600, 0, constant(1))
	h["size"] = nil
	h.fill("size", -600, 0, constant(6))
	d, record = Evaluate(g, h, State{Desired: 6}, secs(0))
	check(t, "down by one", d, record, want{record: true, code: CodeScale, request: size(5, "target"), reason: "limited to 5 by max_step down 1"})
	h.fill("size", 1, 5, constant(5))
	d, record = Evaluate(g, h.fill("cpu.avg", 1, 5, constant(1)).fill("ready", 1, 5, constant(4)), State{Desired: 5}, secs(5))
	check(t, "down, used up", d, record, want{record: true, code: CodeRateLimit, reason: "allows no fewer than 5"})
}

func TestAnyOutAllIn(t *testing.T) {
	g := parseGroup(t, 1, 10, "", `      rules:
        - {name: hot, metric: cpu.avg, above: 70, for: 10s, action: {add: 1}}
        - {name: queued, metric: queue, above: 10, for: 10s, action: {add: 3}}
        - {name: cold, metric: cpu.avg, below: 30, for: 10s, action: {remove: 1}}
        - {name: idle, metric: requests_per_second, below: 5, for: 10s, action: {remove: 2}}
`)
	withTarget := parseGroup(t, 1, 10, "", `      rules:
        - {name: cold, metric: cpu.avg, below: 30, for: 10s, action: {remove: 1}}
      target: {metric: requests_per_second_per_instance, value: 100, scale_in_stabilization: 0s}
`)
	tests := []struct {
		name   string
		g      config.Group
		series map[string]float64
		want   want
	}{
		{"largest scale-out wins", g, map[string]float64{"cpu.avg": 90, "queue": 50, "requests_per_second": 100},
			want{record: true, code: CodeScale, rule: "queued", request: size(7, "queued")}},
		{"one scale-out is enough", g, map[string]float64{"cpu.avg": 90, "queue": 0, "requests_per_second": 100},
			want{record: true, code: CodeScale, rule: "hot", request: size(5, "hot")}},
		{"scale-in by the largest of the scale-ins", g, map[string]float64{"cpu.avg": 10, "queue": 0, "requests_per_second": 1},
			want{record: true, code: CodeScale, rule: "cold", request: size(3, "cold")}},
		{"a rule that does not hold has no opinion", g, map[string]float64{"cpu.avg": 10, "queue": 0, "requests_per_second": 100},
			want{record: true, code: CodeScale, rule: "cold", request: size(3, "cold")}},
		// The target sees 4 × 100 = 400 req/s per 100: it wants 4.
		{"the target disagrees", withTarget, map[string]float64{"cpu.avg": 10, "requests_per_second_per_instance": 100},
			want{record: true, code: CodeNotAgreed, rule: "cold", reason: "but target wants 4"}},
		{"the target inside its band disagrees", withTarget, map[string]float64{"cpu.avg": 10, "requests_per_second_per_instance": 95},
			want{record: true, code: CodeNotAgreed, rule: "cold"}},
		// The target wants ceil(4 × 20 / 100) = 1; the rule wants 3: scale in to 3.
		{"both want fewer: the larger wins", withTarget, map[string]float64{"cpu.avg": 10, "requests_per_second_per_instance": 20},
			want{record: true, code: CodeScale, rule: "cold", request: size(3, "cold")}},
		{"missing target metric does not block", withTarget, map[string]float64{"cpu.avg": 10},
			want{record: true, code: CodeScale, rule: "cold", request: size(3, "cold")}},
	}
	for _, tt := range tests {
		h := base()
		for path, v := range tt.series {
			h.fill(path, -60, 0, constant(v))
		}
		d, record := Evaluate(tt.g, h, State{Desired: 4}, secs(0))
		check(t, tt.name, d, record, tt.want)
	}
}

func TestSchedulesAcrossDST(t *testing.T) {
	g := parseGroup(t, 1, 10, "", `      rules:
        - {name: hot, metric: cpu.avg, above: 70, for: 10s, action: {add: 5}}
      schedule:
        - {name: office, cron: "0 8 * * *", timezone: Europe/Berlin, duration: 10h, min_size: 4}
        - {name: night, cron: "0 22 * * *", timezone: Europe/Berlin, duration: 8h, max_size: 3}
`)
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	calm := func(now time.Time, size int) history {
		h := history{}
		for i := -60; i <= 0; i++ {
			ts := now.Add(time.Duration(i) * time.Second)
			h["cpu.avg"] = append(h["cpu.avg"], Point{T: ts, V: 40})
			h["size"] = append(h["size"], Point{T: ts, V: float64(size)})
			h["ready"] = append(h["ready"], Point{T: ts, V: float64(size)})
		}
		return h
	}
	tests := []struct {
		name    string
		now     string
		desired int
		want    want
	}{
		// 29 March 2026: 08:00 CEST is 06:00 UTC (the day before, 07:00 UTC).
		{"before the window, after the change", "2026-03-29T05:59:00Z", 2, want{}},
		{"window opens at 08:00 local", "2026-03-29T06:00:00Z", 2,
			want{record: true, code: CodeScale, rule: "office", request: size(4, "office"), reason: "bounded to 4 by schedule office"}},
		{"the day before, 07:30 CET", "2026-03-28T06:30:00Z", 2, want{}},
		{"the day before, 08:00 CET", "2026-03-28T07:00:00Z", 2, want{record: true, code: CodeScale, request: size(4, "office")}},
		{"inside the bounds", "2026-03-29T12:00:00Z", 5, want{}},
		{"window closed at 18:00 local", "2026-03-29T16:00:00Z", 2, want{}},
		// The night window caps at 3: 22:00 CEST = 20:00 UTC.
		{"night caps a group above it", "2026-03-29T20:00:00Z", 6,
			want{record: true, code: CodeScale, rule: "night", request: size(3, "night")}},
	}
	for _, tt := range tests {
		now := at(tt.now)
		d, record := Evaluate(g, calm(now, tt.desired), State{Desired: tt.desired}, now)
		check(t, tt.name, d, record, tt.want)
	}

	// A rule that fires during the night is capped by the schedule.
	now := at("2026-03-29T21:00:00Z")
	h := calm(now, 3)
	h["cpu.avg"] = nil
	for i := -60; i <= 0; i++ {
		h["cpu.avg"] = append(h["cpu.avg"], Point{T: now.Add(time.Duration(i) * time.Second), V: 95})
	}
	d, record := Evaluate(g, h, State{Desired: 3}, now)
	check(t, "capped by the night", d, record, want{record: true, code: CodeSchedule, rule: "hot", reason: "schedule night caps the size at 3"})
	// Above the night's cap, the schedule wins over a rule that wants more.
	h["size"], h["ready"] = nil, nil
	for i := -60; i <= 0; i++ {
		ts := now.Add(time.Duration(i) * time.Second)
		h["size"] = append(h["size"], Point{T: ts, V: 6})
		h["ready"] = append(h["ready"], Point{T: ts, V: 6})
	}
	d, record = Evaluate(g, h, State{Desired: 6}, now)
	check(t, "night over a hot rule", d, record, want{record: true, code: CodeScale, rule: "night", request: size(3, "night")})

	// Below the office floor, a rule that wants more than the floor wins.
	now = at("2026-03-30T07:00:00Z")
	h = calm(now, 2)
	h["cpu.avg"] = nil
	for i := -60; i <= 0; i++ {
		h["cpu.avg"] = append(h["cpu.avg"], Point{T: now.Add(time.Duration(i) * time.Second), V: 95})
	}
	d, record = Evaluate(g, h, State{Desired: 2}, now)
	check(t, "hot rule above the floor", d, record, want{record: true, code: CodeScale, rule: "hot", request: size(7, "hot")})
}

func TestCooldowns(t *testing.T) {
	g := parseGroup(t, 1, 10, "", `      rules:
        - {name: hot, metric: cpu.avg, above: 70, for: 10s, action: up, cooldown: 300s}
        - {name: cold, metric: cpu.avg, below: 30, for: 10s, action: down}
`)
	hot := base().fill("cpu.avg", -60, 0, constant(90))
	cold := base().fill("cpu.avg", -60, 0, constant(10))
	tests := []struct {
		name string
		h    history
		s    State
		want want
	}{
		{"rule cooldown holds", hot, State{Desired: 4, RuleJobs: map[string]time.Time{"hot": secs(-100)}},
			want{record: true, code: CodeRuleCooldown, rule: "hot", reason: "the rule's cooldown runs until 2026-03-02T12:03:20Z"}},
		{"rule cooldown over", hot, State{Desired: 4, RuleJobs: map[string]time.Time{"hot": secs(-301)}},
			want{record: true, code: CodeScale, request: up("hot")}},
		{"another rule's cooldown does not hold", cold, State{Desired: 4, RuleJobs: map[string]time.Time{"hot": secs(-10)}},
			want{record: true, code: CodeScale, rule: "cold", request: &jobrun.Request{Group: "web", Kind: jobrun.Down, Source: "policy:cold"}}},
		{"group up cooldown", hot, State{Desired: 4, UpCooldownUntil: secs(30), DownCooldownUntil: secs(-1)},
			want{record: true, code: CodeCooldown, reason: "in scale-up cooldown until 2026-03-02T12:00:30Z"}},
		{"up cooldown does not hold a scale-in", cold, State{Desired: 4, UpCooldownUntil: secs(30)},
			want{record: true, code: CodeScale, rule: "cold", request: &jobrun.Request{Group: "web", Kind: jobrun.Down, Source: "policy:cold"}}},
		{"group down cooldown", cold, State{Desired: 4, DownCooldownUntil: secs(30)},
			want{record: true, code: CodeCooldown, reason: "scale-down cooldown"}},
		{"a job is running", hot, State{Desired: 4, RunningJob: "17"},
			want{record: true, code: CodeJobRunning, reason: "job 17 is still running"}},
	}
	for _, tt := range tests {
		d, record := Evaluate(g, tt.h, tt.s, secs(0))
		check(t, tt.name, d, record, tt.want)
	}
}

func TestActionsAtEdges(t *testing.T) {
	plans := parseGroup(t, 2, 5, ladder, `      rules: [{metric: cpu.avg, above: 70, for: 10s, action: up}]
`)
	flat := parseGroup(t, 1, 5, "", `      rules: [{metric: cpu.avg, above: 70, for: 10s, action: up}]
`)
	tests := []struct {
		name   string
		g      config.Group
		action config.Action
		from   int
		want   int
	}{
		{"up the ladder", plans, config.Action{Kind: config.ActionUp}, 2, 3},
		{"up between plans", plans, config.Action{Kind: config.ActionUp}, 4, 5},
		{"up at the largest plan", plans, config.Action{Kind: config.ActionUp}, 5, 5},
		{"down the ladder", plans, config.Action{Kind: config.ActionDown}, 5, 3},
		{"down at the smallest plan", plans, config.Action{Kind: config.ActionDown}, 2, 2},
		{"plan", plans, config.Action{Kind: config.ActionPlan, Plan: "medium"}, 5, 3},
		{"up without plans", flat, config.Action{Kind: config.ActionUp}, 4, 5},
		{"up at max_size", flat, config.Action{Kind: config.ActionUp}, 5, 5},
		{"down at min_size", flat, config.Action{Kind: config.ActionDown}, 1, 1},
		{"add", flat, config.Action{Kind: config.ActionAdd, N: 3}, 4, 7},
		{"remove", flat, config.Action{Kind: config.ActionRemove, N: 3}, 2, -1},
		{"size", flat, config.Action{Kind: config.ActionSize, N: 3}, 1, 3},
		{"percent", flat, config.Action{Kind: config.ActionPercent, Percent: 50}, 3, 4},
		{"percent below one instance", flat, config.Action{Kind: config.ActionPercent, Percent: 10}, 3, 4},
		{"negative percent", flat, config.Action{Kind: config.ActionPercent, Percent: -50}, 5, 3},
	}
	for _, tt := range tests {
		if got := Apply(tt.g, tt.action, tt.from); got != tt.want {
			t.Errorf("%s: Apply(%s) from %d = %d, want %d", tt.name, tt.action, tt.from, got, tt.want)
		}
	}

	// Through Evaluate: min/max bound what the actions ask for.
	type evalCase struct {
		name    string
		g       config.Group
		rule    string
		above   bool
		desired int
		want    want
	}
	grp := func(plansYAML, rule string) config.Group {
		return parseGroup(t, 2, 5, plansYAML, "      rules: ["+rule+"]\n")
	}
	hotRule := func(action string) string {
		return "{name: r, metric: cpu.avg, above: 70, for: 10s, action: " + action + "}"
	}
	coldRule := func(action string) string {
		return "{name: r, metric: cpu.avg, below: 30, for: 10s, action: " + action + "}"
	}
	cases := []evalCase{
		{"up at the largest plan", grp(ladder, hotRule("up")), "", true, 5,
			want{record: true, code: CodeMaxSize, reason: "already at the largest plan (large: 5)"}},
		{"down at the smallest plan", grp(ladder, coldRule("down")), "", false, 2,
			want{record: true, code: CodeMinSize, reason: "already at the smallest plan (small: 2)"}},
		{"up to the next plan", grp(ladder, hotRule("up")), "", true, 3,
			want{record: true, code: CodeScale, request: up("r")}},
		{"plan", grp(ladder, hotRule("{plan: large}")), "", true, 2,
			want{record: true, code: CodeScale, request: &jobrun.Request{Group: "web", Kind: jobrun.Plan, Plan: "large", Source: "policy:r"}}},
		{"plan already", grp(ladder, hotRule("{plan: medium}")), "", true, 3,
			want{record: true, code: CodeSteady, reason: "the size is 3 already"}},
		{"add capped at max_size", grp("", hotRule("{add: 3}")), "", true, 4,
			want{record: true, code: CodeScale, request: size(5, "r"), reason: "bounded to 5 by min_size/max_size"}},
		{"add at max_size", grp("", hotRule("{add: 3}")), "", true, 5,
			want{record: true, code: CodeMaxSize, reason: "capped at max_size 5"}},
		{"remove at min_size", grp("", coldRule("{remove: 2}")), "", false, 2,
			want{record: true, code: CodeMinSize, reason: "at min_size 2"}},
		{"remove bounded by min_size", grp("", coldRule("{remove: 2}")), "", false, 3,
			want{record: true, code: CodeScale, request: size(2, "r")}},
		{"size", grp("", hotRule("{size: 4}")), "", true, 2,
			want{record: true, code: CodeScale, request: size(4, "r")}},
		{"percent", grp("", hotRule("{percent: 100}")), "", true, 2,
			want{record: true, code: CodeScale, request: size(4, "r")}},
		{"percent at max_size", grp("", hotRule("{percent: 100}")), "", true, 5,
			want{record: true, code: CodeMaxSize}},
	}
	for _, c := range cases {
		v := 10.0
		if c.above {
			v = 90
		}
		h := history{}.fill("cpu.avg", -60, 0, constant(v)).fill("size", -60, 0, constant(float64(c.desired))).
			fill("ready", -60, 0, constant(float64(c.desired)))
		d, record := Evaluate(c.g, h, State{Desired: c.desired}, secs(0))
		check(t, c.name, d, record, c.want)
	}
}

// TestHugeActionsSaturate: steps that pass no validation (built in code, as
// a simulator or a future decoder might) saturate. n + N wrapped around
// before, and a scale-up became a scale-in to min_size.
func TestHugeActionsSaturate(t *testing.T) {
	g := parseGroup(t, 2, 5, "", `      rules: [{name: r, metric: cpu.avg, above: 70, for: 10s, action: up}]
`)
	for _, tt := range []struct {
		name string
		a    config.Action
		want int
	}{
		{"add MaxInt", config.Action{Kind: config.ActionAdd, N: math.MaxInt}, math.MaxInt},
		{"remove MaxInt", config.Action{Kind: config.ActionRemove, N: math.MaxInt}, 3 - math.MaxInt},
		{"percent 1e300", config.Action{Kind: config.ActionPercent, Percent: 1e300}, math.MaxInt},
		{"percent -1e300", config.Action{Kind: config.ActionPercent, Percent: -1e300}, 3 + math.MinInt},
	} {
		if got := Apply(g, tt.a, 3); got != tt.want {
			t.Errorf("%s: Apply from 3 = %d, want %d", tt.name, got, tt.want)
		}
	}
	h := history{}.fill("cpu.avg", -60, 0, constant(90)).fill("size", -60, 0, constant(3)).fill("ready", -60, 0, constant(3))
	for _, a := range []config.Action{{Kind: config.ActionAdd, N: math.MaxInt}, {Kind: config.ActionPercent, Percent: 1e300}} {
		g.Autoscale.Rules[0].Action = a
		d, record := Evaluate(g, h, State{Desired: 3}, secs(0))
		check(t, a.String(), d, record, want{record: true, code: CodeScale, rule: "r", request: size(5, "r")})
	}
	// A max_step that large lets the target go to what it recommends.
	g = parseGroup(t, 2, 5, "", `      target: {metric: cpu.avg, value: 50}
`)
	g.Autoscale.Target.MaxStep.Up = config.Step{N: math.MaxInt}
	d, record := Evaluate(g, h, State{Desired: 3}, secs(0))
	check(t, "max_step up MaxInt", d, record, want{record: true, code: CodeScale, request: size(5, "target")})
	g.Autoscale.Target.MaxStep.Up = config.Step{N: 1e300, Percent: true}
	d, record = Evaluate(g, h, State{Desired: 3}, secs(0))
	check(t, "max_step up 1e300%", d, record, want{record: true, code: CodeScale, request: size(5, "target")})
}

// TestHugeRecommendationsSaturate: a load that is more times the target than
// an int holds (a target value of 1e-18, say) recommends the largest size;
// the conversion must not wrap into a negative size that scales in.
func TestHugeRecommendationsSaturate(t *testing.T) {
	for _, metric := range []string{"requests_per_second", "cpu.avg"} {
		g := parseGroup(t, 2, 5, "", "      target: {metric: "+metric+", value: 1e-18}\n")
		h := base().fill(metric, -600, 0, constant(20))
		d, record := Evaluate(g, h, State{Desired: 4}, secs(0))
		check(t, metric, d, record, want{record: true, code: CodeScale, rule: "target", request: size(5, "target"),
			reason: fmt.Sprintf("→ %d for target", math.MaxInt)})
	}
}

// TestReasonsRound: a reason shows measured values as a person reads them
// (three significant digits), not as float64 prints them; Values keeps them
// exact.
func TestReasonsRound(t *testing.T) {
	const raw = 43.41537141505418
	h := base().fill("cpu.avg", -600, 0, constant(raw))
	rule := parseGroup(t, 1, 10, "", `      rules: [{name: hot, metric: cpu.avg, above: 40.25, for: 1m, action: up}]
`)
	d, record := Evaluate(rule, h, State{Desired: 4}, secs(0))
	check(t, "rule", d, record, want{record: true, code: CodeScale, request: up("hot"),
		reason: "hot: cpu.avg above 40.25 for 1m (lowest 43.4); up"})
	if d.Values["cpu.avg"] != raw {
		t.Errorf("Values[cpu.avg] = %v, want the exact %v", d.Values["cpu.avg"], raw)
	}
	target := parseGroup(t, 1, 10, "", `      target: {metric: cpu.avg, value: 20, tolerance: 0.15}
`)
	d, record = Evaluate(target, h, State{Desired: 4}, secs(0))
	check(t, "target", d, record, want{record: true, code: CodeScale, request: size(8, "target"),
		reason: "target: cpu.avg 43.4 with 4 ready → 9 for target 20, limited to 8 by max_step up 100% per 15s"})
	d, _ = Evaluate(target, base().fill("cpu.avg", -600, 0, constant(22.0123456)), State{Desired: 4}, secs(0))
	if want := "cpu.avg 22 is within 15% of the target 20: the size stays 4 (the formula gives 5)"; d.Reason != want {
		t.Errorf("tolerance reason %q, want %q", d.Reason, want)
	}
	for v, want := range map[float64]string{raw: "43.4", 134.387807330411: "134", 0.4995350896855209: "0.5",
		9.0041561023571: "9", 0.012345: "0.0123", -3.14159: "-3.14", 1234.5: "1235", 0: "0"} {
		if got := reading(v); got != want {
			t.Errorf("reading(%v) = %q, want %q", v, got, want)
		}
	}
}

// TestStatisticRules: a rule with statistic and over compares the window's
// aggregate once, as a CloudWatch alarm of one evaluation period does; a
// load whose samples swing across the threshold holds it on average where
// `for` (every sample) never does.
func TestStatisticRules(t *testing.T) {
	swing := func(i int) float64 { // 15 and 45: 30 on average
		if i%2 == 0 {
			return 15
		}
		return 45
	}
	h := base().fill("cpu.avg", -1800, 0, swing)
	eval := func(rules string, h history) (decision.Record, bool) {
		g := parseGroup(t, 1, 9, "", "      rules:\n"+rules)
		return Evaluate(g, h, State{Desired: 4}, secs(0))
	}
	d, record := eval("        - {name: cw, metric: cpu.avg, below: 35, statistic: average, over: 25m, action: {remove: 1}}\n", h)
	check(t, "average below", d, record, want{record: true, code: CodeScale, request: size(3, "cw"),
		reason: "cw: cpu.avg average over 25m is 30, below 35; remove: 1"})
	d, record = eval("        - {name: every, metric: cpu.avg, below: 35, for: 25m, action: {remove: 1}}\n", h)
	check(t, "for: every sample", d, record, want{})
	d, record = eval("        - {name: p, metric: cpu.avg, above: 40, statistic: p90, over: 1m, action: up}\n", h)
	check(t, "p90 above", d, record, want{record: true, code: CodeScale, request: up("p"), reason: "cpu.avg p90 over 1m is 45, above 40"})
	d, record = eval("        - {name: p, metric: cpu.avg, above: 40, statistic: p40, over: 1m, action: up}\n", h)
	check(t, "p40 not above", d, record, want{})
	d, record = eval("        - {name: lo, metric: cpu.avg, above: 10, statistic: min, over: 1m, action: up}\n", h)
	check(t, "min above", d, record, want{record: true, code: CodeScale, request: up("lo"), reason: "cpu.avg min over 1m is 15, above 10"})
	d, record = eval("        - {name: hi, metric: cpu.avg, below: 45, statistic: max, over: 1m, action: down}\n", h)
	check(t, "max not below", d, record, want{})
	// A band: the seed's `-lt 20 -a -gt 1`.
	band := "        - {name: b, metric: cpu.avg, above: 1.5, below: 19.5, statistic: average, over: 5m, action: down}\n"
	for _, c := range []struct {
		v    float64
		want want
	}{
		{10, want{record: true, code: CodeScale, request: &jobrun.Request{Group: "web", Kind: jobrun.Down, Source: "policy:b"},
			reason: "cpu.avg average over 5m is 10, between 1.5 and 19.5; down"}},
		{1, want{}},
		{1.5, want{}},
		{19.5, want{}},
		{30, want{}},
	} {
		d, record := eval(band, base().fill("cpu.avg", -600, 0, constant(c.v)))
		check(t, fmt.Sprintf("band at %v", c.v), d, record, c.want)
	}
	d, record = eval("        - {name: b, metric: cpu.avg, above: 1.5, below: 19.5, for: 10s, action: down}\n", base().fill("cpu.avg", -600, 0, constant(3.14159)))
	check(t, "band for", d, record, want{record: true, code: CodeScale, reason: "b: cpu.avg between 1.5 and 19.5 for 10s (from 3.14 to 3.14); down",
		request: &jobrun.Request{Group: "web", Kind: jobrun.Down, Source: "policy:b"}})
	// A gap in the window: what the load was then is unknown.
	gap := base().fill("cpu.avg", -1800, -1000, swing).fill("cpu.avg", -700, 0, swing)
	d, record = eval("        - {name: cw, metric: cpu.avg, below: 35, statistic: average, over: 25m, action: {remove: 1}}\n", gap)
	check(t, "average over a gap", d, record, want{})
}

// TestCoverageIgnoresLongIntervals: a window is covered by its samples, at
// their own spacing, however seldom the policy is evaluated. A 1 s series
// evaluated every 2 minutes (seed 000) with only its last 10 s, or its first
// 2 minutes, in a 5-minute window does not cover it: the load in the rest
// is unknown, so the band does not hold and nothing scales in.
func TestCoverageIgnoresLongIntervals(t *testing.T) {
	g := parseGroup(t, 1, 5, "", `      interval: 2m
      rules:
        - {name: down, metric: cpu.avg, above: 1.5, below: 19.5, statistic: average, over: 5m, action: down}
`)
	for name, h := range map[string]history{
		"only the last 10s":  base().fill("cpu.avg", -10, 0, constant(5)),
		"a 4-minute hole":    base().fill("cpu.avg", -600, -290, constant(5)).fill("cpu.avg", -50, 0, constant(5)),
		"stopped 3m ago":     base().fill("cpu.avg", -600, -180, constant(5)),
		"only the first 20s": base().fill("cpu.avg", -300, -280, constant(5)),
	} {
		d, record := Evaluate(g, h, State{Desired: 3}, secs(0))
		check(t, name, d, record, want{})
	}
	d, record := Evaluate(g, base().fill("cpu.avg", -600, 0, constant(5)), State{Desired: 3}, secs(0))
	check(t, "covered", d, record, want{record: true, code: CodeScale, rule: "down",
		request: &jobrun.Request{Group: "web", Kind: jobrun.Down, Source: "policy:down"}})
}

// TestStatisticWeighsTime: after a restart the window holds 10 s roll-ups
// and live 1 s samples; each counts for the time it stands for.
func TestStatisticWeighsTime(t *testing.T) {
	var pts []Point
	for i := 0; i < 30; i += 10 {
		pts = append(pts, Point{T: secs(i), V: 60}) // three 10 s roll-ups
	}
	for i := 30; i < 40; i++ {
		pts = append(pts, Point{T: secs(i), V: 0}) // ten live seconds
	}
	for stat, want := range map[string]float64{"average": 45, "min": 0, "max": 60, "p25": 0, "p26": 60, "p99": 60} {
		if got := statistic(stat, pts); got != want {
			t.Errorf("%s = %v, want %v", stat, got, want)
		}
	}
	if got := statistic("average", []Point{{T: secs(0), V: 7}}); got != 7 {
		t.Errorf("average of one sample = %v, want 7", got)
	}
	if got := statistic("average", nil); !math.IsNaN(got) {
		t.Errorf("average of none = %v, want NaN", got)
	}
}

// arriving is a history to which one sample of path arrives right after
// the evaluation's first read of path, as the collector records one while
// a policy evaluates.
type arriving struct {
	history
	path string
	late Point
	read bool
}

func (a *arriving) Points(path string, from, to time.Time) []Point {
	pts := a.history.Points(path, from, to)
	if path == a.path && !a.read {
		a.read = true
		a.history[path] = append(a.history[path], a.late)
	}
	return pts
}

// TestDecisionValuesAreWhatItDecidedOn: a sample recorded while the policy
// evaluates is not half seen: the rule's window ends at the latest sample
// the evaluation read, whose value the decision records.
func TestDecisionValuesAreWhatItDecidedOn(t *testing.T) {
	g := parseGroup(t, 1, 8, "", "      rules:\n        - {name: hot, metric: cpu.avg, above: 40, for: 2s, action: up}\n")
	h := &arriving{history: base().fill("cpu.avg", -600, -1, constant(45)), path: "cpu.avg", late: Point{T: secs(0), V: 38.9}}
	d, _ := Evaluate(g, h, State{Desired: 4}, secs(0))
	if d.Outcome != decision.Requested || d.Values["cpu.avg"] != 45 {
		t.Errorf("decision %s with cpu.avg %v; want it requested on the samples it read, all 45, and 45 recorded", d.Outcome, d.Values["cpu.avg"])
	}
}

func TestDedup(t *testing.T) {
	var dd Dedup
	held := decision.Record{Rule: "hot", Code: CodeCooldown, Outcome: decision.Nothing, Current: 4, Recommendation: 5}
	if dd.Repeat(held) {
		t.Error("the first decision is not a repeat")
	}
	if !dd.Repeat(held) {
		t.Error("the same held-back decision again is a repeat")
	}
	other := held
	other.Code = CodeRuleCooldown
	if dd.Repeat(other) {
		t.Error("a different reason is not a repeat")
	}
	byJob := held
	byJob.Code, byJob.JobID = CodeJobRunning, "1"
	byDeploy := byJob
	byDeploy.JobID = "2"
	if dd.Repeat(byJob) || !dd.Repeat(byJob) || dd.Repeat(byDeploy) {
		t.Error("held back by job 1, again, then by job 2: want only the second a repeat")
	}
	acted := held
	acted.Outcome = decision.Requested
	if dd.Repeat(acted) || dd.Repeat(acted) {
		t.Error("a request is never a repeat")
	}
}

// BenchmarkEvaluate is one evaluation of a policy with the seed 004 rules (a
// 25-minute window) and a target with a 300 s stabilization window, over an
// hour of 1 s history.
func BenchmarkEvaluate(b *testing.B) {
	doc := `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 10
    template: {command: [app]}
    autoscale:
      rules:
        - {name: out, metric: cpu.avg, above: 75, statistic: average, over: 1m, action: {add: 1}, cooldown: 300s}
        - {name: in, metric: cpu.avg, below: 35, statistic: average, over: 25m, action: {remove: 1}, cooldown: 1500s}
      target: {metric: cpu.avg, value: 50}
`
	cfg, err := config.Parse("shoal.yaml", []byte(doc))
	if err != nil {
		b.Fatal(err)
	}
	g := cfg.Groups[0]
	h := history{}.fill("cpu.avg", -3600, 0, func(i int) float64 { return 20 + float64(i%7) }).
		fill("size", -3600, 0, constant(4)).fill("ready", -3600, 0, constant(4))
	b.ReportAllocs()
	for b.Loop() {
		Evaluate(g, h, State{Desired: 4}, secs(0))
	}
}

// TestTargetLooksAheadByStartDelay: 4 instances at 50 % CPU (on target), but
// requests_per_second has risen 1 req/s every second for 5 minutes, to 400:
// in the 3 minutes a new instance takes to start it will be 580, 1.45 times
// now, so the target scales out to ⌈4 × 50 × 1.45 / 50⌉ = 6 already. A
// falling load, no delay, or auto before a start was measured look at now
// only.
func TestTargetLooksAheadByStartDelay(t *testing.T) {
	fixed := parseGroup(t, 1, 20, "", `      target: {metric: cpu.avg, value: 50, start_delay: 3m}
`)
	auto := parseGroup(t, 1, 20, "", `      target: {metric: cpu.avg, value: 50, start_delay: auto}
`)
	plain := parseGroup(t, 1, 20, "", `      target: {metric: cpu.avg, value: 50}
`)
	rising := func() history {
		return base().fill("cpu.avg", -600, 0, constant(50)).fill("requests_per_second", -300, 0, func(i int) float64 { return 400 + float64(i) })
	}
	falling := base().fill("cpu.avg", -600, 0, constant(50)).fill("requests_per_second", -300, 0, func(i int) float64 { return 400 - float64(i) })
	tests := []struct {
		name string
		g    config.Group
		h    history
		s    State
		want want
	}{
		{"fixed start delay, rising", fixed, rising(), State{Desired: 4}, want{record: true, code: CodeScale, rule: "target", request: size(6, "target"),
			reason: "cpu.avg 50 × 1.45 (requests_per_second rising 1/s over the last 5m: the load in 3m, start_delay) with 4 ready → 6 for target 50"}},
		{"auto, measured", auto, rising(), State{Desired: 4, StartDelay: 3 * time.Minute}, want{record: true, code: CodeScale, request: size(6, "target"),
			reason: "the measured start delay"}},
		{"auto, not measured yet", auto, rising(), State{Desired: 4}, want{}},
		{"fixed start delay, falling", fixed, falling, State{Desired: 4}, want{}},
		{"no start delay", plain, rising(), State{Desired: 4, StartDelay: 3 * time.Minute}, want{}},
	}
	for _, tt := range tests {
		d, record := Evaluate(tt.g, tt.h, tt.s, secs(0))
		check(t, tt.name, d, record, tt.want)
	}
}

// TestWindowOfOneInterval: a window as long as the collection interval
// (for: 1s at 1 s metrics, the shortest the config allows) holds one sample
// or none, depending on when the evaluation ticks. The collector stamps a
// sample with its tick and records it once it has read /proc and HAProxy;
// the policy's ticker starts just after the collector's, so at every
// evaluation the newest recorded sample can be the previous tick's, 1 s
// plus the evaluation's lag old: the window [now-1s, now] then holds none,
// at every tick for as long as the two tickers keep their phase. A rule so
// decided never, and a stabilization window of one interval was never
// covered. The sample in effect at the window's start stands for it.
func TestWindowOfOneInterval(t *testing.T) {
	rule := parseGroup(t, 1, 2, "", `      rules:
        - {name: old, metric: size, below: 100, for: 1s, action: down}
`)
	avg := parseGroup(t, 1, 10, "", `      rules:
        - {name: cold, metric: cpu.avg, statistic: average, over: 1s, below: 20, action: down}
`)
	stab := parseGroup(t, 1, 20, "", `      target: {metric: cpu.avg, value: 50, scale_in_stabilization: 1s, max_step: {down: 10}}
`)
	// Samples up to the tick at 0 s; the tick at 1 s is not recorded yet.
	h := history{}.fill("size", -10, 0, constant(1)).fill("ready", -10, 0, constant(1)).fill("cpu.avg", -10, 0, constant(10))
	for _, lag := range []time.Duration{time.Millisecond, 5 * time.Millisecond, 300 * time.Millisecond, 999 * time.Millisecond} {
		now := secs(1).Add(lag)
		d, record := Evaluate(rule, h, State{Desired: 1}, now)
		check(t, fmt.Sprintf("rule for one interval, %s after the uncollected tick", lag), d, record,
			want{record: true, code: CodeMinSize, rule: "old", reason: "size below 100 for 1s (highest 1)"})
		d, record = Evaluate(avg, h, State{Desired: 4}, now)
		check(t, fmt.Sprintf("statistic over one interval, %s after the uncollected tick", lag), d, record,
			want{record: true, code: CodeScale, rule: "cold", request: &jobrun.Request{Group: "web", Kind: jobrun.Down, Source: "policy:cold"}})
		hs := history{}.fill("size", -10, 0, constant(4)).fill("ready", -10, 0, constant(4)).fill("cpu.avg", -10, 0, constant(10))
		d, record = Evaluate(stab, hs, State{Desired: 4}, now)
		check(t, fmt.Sprintf("stabilization of one interval, %s after the uncollected tick", lag), d, record,
			want{record: true, code: CodeScale, request: size(1, "target")})
	}
	// on_missing: up on a window of one interval: the metric was never
	// seen, the group was measured, up to the uncollected tick.
	blind := parseGroup(t, 1, 10, "", `      rules:
        - {name: blind, metric: latency_ms.p99, above: 500, for: 1s, action: up, on_missing: up}
`)
	d, record := Evaluate(blind, h, State{Desired: 1}, secs(1).Add(5*time.Millisecond))
	check(t, "on_missing up over one interval", d, record, want{record: true, code: CodeScale, rule: "blind", request: up("blind"),
		reason: "latency_ms.p99 has been missing for 1s; on_missing: up"})

	// The stand-in is a fresh sample, not a guess: with none, or only a
	// stale one, the rule still holds nothing.
	d, record = Evaluate(rule, history{}, State{Desired: 1}, secs(1))
	check(t, "no history", d, record, want{})
	old := history{}.fill("size", -10, -5, constant(1)).fill("ready", -10, -5, constant(1))
	d, record = Evaluate(rule, old, State{Desired: 1}, secs(1))
	check(t, "a sample 6 s old", d, record, want{record: true, code: CodeMissing, rule: "old", reason: "size is missing"})
}
