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
