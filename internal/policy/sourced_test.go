package policy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

// sourcedHistory is a history with sources (as package source's History),
// whose values are history's series by name.
type sourcedHistory struct {
	history
	sources map[string]config.Source
	formula map[string][]string // a formula's inputs
}

func (h sourcedHistory) Missing(path string, now time.Time) (config.Source, string, bool) {
	for _, in := range h.inputs(path) {
		src, ok := h.sources[in]
		if ok && len(h.Points(in, now.Add(-src.MaxAgeOf()), now)) == 0 {
			return src, fmt.Sprintf("source %s has no value newer than max_age %s", in, src.MaxAgeOf()), true
		}
	}
	return config.Source{}, "", false
}

func (h sourcedHistory) Inputs(path string) ([]string, bool) { return h.inputs(path), false }

func (h sourcedHistory) inputs(path string) []string {
	if ins, ok := h.formula[path]; ok {
		return ins
	}
	return []string{path}
}

// sourcedGroup is a group of 1 to 10 whose policy reads queue_depth, read
// every 10 s with on_missing as given.
func sourcedGroup(t *testing.T, onMissing, autoscale string) (config.Group, config.Source) {
	t.Helper()
	doc := fmt.Sprintf(`listen: :8080
metrics:
  sources: [{name: queue_depth, command: [queue-depth], interval: 10s, on_missing: %s}]
groups:
  - name: web
    min_size: 1
    max_size: 10
    cooldown: 0
    template: {command: [app]}
    autoscale:
%s`, onMissing, autoscale)
	cfg, err := config.Parse("shoal.yaml", []byte(doc))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, doc)
	}
	return cfg.Groups[0], cfg.Metrics.Sources[0]
}

// queue is queue_depth read every 10 s from -600 to last.
func queue(h history, last int, v float64) history {
	for i := -600; i <= last; i += 10 {
		h["queue_depth"] = append(h["queue_depth"], Point{T: secs(i), V: v})
	}
	return h
}

func TestTargetOverSource(t *testing.T) {
	g, src := sourcedGroup(t, "hold", "      target: {metric: queue_depth, value: 10}\n")
	h := sourcedHistory{history: queue(base(), 0, 45), sources: map[string]config.Source{"queue_depth": src}}
	// A source with one value is a total: 45 jobs at 10 per instance is 5,
	// whatever the size (4).
	d, record := Evaluate(g, h, State{Desired: 4}, secs(0))
	check(t, "queue 45", d, record, want{record: true, code: CodeScale, rule: TargetName, request: size(5, "target")})

	// 25 s after the last read, within max_age (30 s): still fresh, though
	// the policy's own staleness bound (5 s at a 1 s interval) has passed.
	h = sourcedHistory{history: queue(base().fill("size", 1, 25, constant(4)).fill("ready", 1, 25, constant(4)), 0, 45), sources: h.sources}
	d, _ = Evaluate(g, h, State{Desired: 4}, secs(25))
	if d.Code != CodeScale {
		t.Errorf("25 s after a read: %s %s; want it fresh", d.Code, d.Reason)
	}
	// 35 s after: stale; the size holds and the decision says why.
	h = sourcedHistory{history: queue(base().fill("size", 1, 40, constant(4)).fill("ready", 1, 40, constant(4)), 0, 45), sources: h.sources}
	d, record = Evaluate(g, h, State{Desired: 4}, secs(31))
	if d.Request != nil || d.Code != CodeMissing || !strings.Contains(d.Reason, "source queue_depth has no value newer than max_age 30s; on_missing: hold") {
		t.Errorf("stale: %v %s %q; want missing, the reason naming the source", record, d.Code, d.Reason)
	}
	// Never acts on the stale value, however long it stays stale.
	for n := 32; n <= 40; n++ {
		if d, _ := Evaluate(g, h, State{Desired: 4}, secs(n)); d.Request != nil {
			t.Fatalf("at %d s: acts on a stale value: %s", n, d.Reason)
		}
	}
}

func TestSourceOnMissing(t *testing.T) {
	for _, tc := range []struct {
		onMissing string
		want      int
	}{{"up", 5}, {"down", 3}} {
		g, src := sourcedGroup(t, tc.onMissing, "      target: {metric: queue_depth, value: 10}\n      rules: [{metric: queue_depth, above: 100, for: 1m, action: up}]\n")
		h := sourcedHistory{history: queue(base().fill("size", 1, 60, constant(4)).fill("ready", 1, 60, constant(4)), 0, 40), sources: map[string]config.Source{"queue_depth": src}}
		d, _ := Evaluate(g, h, State{Desired: 4}, secs(45))
		if d.Request == nil || d.Recommendation != tc.want || !strings.Contains(d.Reason, "on_missing: "+tc.onMissing) ||
			!strings.Contains(d.Reason, "source queue_depth has no value newer than max_age 30s") {
			t.Errorf("on_missing %s: %s → %d, %q; want %d, the reason naming the source", tc.onMissing, d.Code, d.Recommendation, d.Reason, tc.want)
		}
	}
}

func TestFormulaPerInstance(t *testing.T) {
	// queue_depth / max(size, 1) reads the size: a per-instance value, so
	// the target multiplies it by the ready instances.
	const f = "queue_depth / max(size, 1)"
	g, src := sourcedGroup(t, "hold", "      target: {metric: \""+f+"\", value: 10}\n")
	h := sourcedHistory{history: queue(base(), 0, 60), sources: map[string]config.Source{"queue_depth": src},
		formula: map[string][]string{f: {"queue_depth", "size"}}}
	h.fill(f, -600, 0, constant(15)) // 60 / 4
	d, record := Evaluate(g, h, State{Desired: 4}, secs(0))
	check(t, "formula", d, record, want{record: true, code: CodeScale, rule: TargetName, request: size(6, "target")})
	if d.Values[f] != 15 {
		t.Errorf("values = %v; want the formula's", d.Values)
	}
}

// TestScheduleGuardOnSource: a schedule guarded by a source holds its
// bounds only while the source's fresh value is beyond the guard's
// threshold; a stale source closes the guard.
func TestScheduleGuardOnSource(t *testing.T) {
	g, src := sourcedGroup(t, "hold", `      schedule:
        - {name: rush, cron: "* * * * *", duration: 1h, min_size: 6, when: {metric: queue_depth, above: 100}}
`)
	srcs := map[string]config.Source{"queue_depth": src}
	h := sourcedHistory{history: queue(base(), 0, 150), sources: srcs}
	d, record := Evaluate(g, h, State{Desired: 4}, secs(0))
	check(t, "queue 150", d, record, want{record: true, code: CodeScale, rule: "rush", request: size(6, "rush")})
	if d.Values["queue_depth"] != 150 {
		t.Errorf("values %v: want the guard's queue_depth", d.Values)
	}
	h = sourcedHistory{history: queue(base(), 0, 50), sources: srcs}
	if d, _ := Evaluate(g, h, State{Desired: 4}, secs(0)); d.Request != nil {
		t.Errorf("queue 50, under the guard's 100: %s → %d (%s); want the schedule closed", d.Code, d.Recommendation, d.Reason)
	}
	// 150, but read 40 s ago (max_age 30 s): the guard does not open.
	h = sourcedHistory{history: queue(base().fill("size", 1, 40, constant(4)).fill("ready", 1, 40, constant(4)), 0, 150), sources: srcs}
	if d, _ := Evaluate(g, h, State{Desired: 4}, secs(40)); d.Request != nil {
		t.Errorf("stale queue: %s → %d (%s); want the schedule closed", d.Code, d.Recommendation, d.Reason)
	}
}

// TestPredictiveOnSource: the predictive floor forecasts a source (a queue
// whose depth peaks daily from 12:10) and sizes it by per_instance.
func TestPredictiveOnSource(t *testing.T) {
	g, src := sourcedGroup(t, "hold", `      predictive: {metric: queue_depth, per_instance: 200, lookback: 3d, horizon: 15m, mode: forecast_and_scale}
`)
	h := history{}
	for tm := t0.Add(-3 * 24 * time.Hour); tm.Before(t0.Add(-10 * time.Minute)); tm = tm.Add(time.Minute) {
		v := 100.0
		if m := tm.Hour()*60 + tm.Minute(); m >= 12*60+10 && m < 13*60 {
			v = 1000
		}
		h["queue_depth"] = append(h["queue_depth"], Point{T: tm, V: v})
	}
	h.fill("queue_depth", -600, 0, constant(100)).fill("size", -600, 0, constant(2)).fill("ready", -600, 0, constant(2))
	sh := sourcedHistory{history: h, sources: map[string]config.Source{"queue_depth": src}}
	var p Predictor
	d, _ := Evaluate(g, sh, State{Desired: 2, Prediction: p.At(g, sh, t0)}, t0)
	if d.Request == nil || d.Rule != PredictiveName || d.Recommendation != 5 ||
		!strings.Contains(d.Reason, "floor 5 = ⌈forecast peak queue_depth 1000.0 ÷ per_instance 200⌉") {
		t.Fatalf("got %s %s → %d: %q; want predictive's floor 5 = 1000 ÷ 200", d.Rule, d.Code, d.Recommendation, d.Reason)
	}
	if d.Values["forecast.queue_depth"] != 1000 {
		t.Errorf("values %v: want forecast.queue_depth 1000", d.Values)
	}
}
