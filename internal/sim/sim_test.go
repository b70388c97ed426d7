package sim

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/metrics"
	"github.com/shoal-lb/shoal/internal/policy"
	"github.com/shoal-lb/shoal/internal/source"
)

var t0 = time.Date(1998, 6, 30, 8, 0, 0, 0, time.UTC)

// group parses a one-group config with the given autoscale section.
func group(t *testing.T, minSize, maxSize int, cooldown, autoscale string) config.Group {
	t.Helper()
	doc := "listen: 127.0.0.1:8080\ngroups:\n  - name: web\n    min_size: " + itoa(minSize) + "\n    max_size: " + itoa(maxSize) +
		"\n    cooldown: " + cooldown + "\n    template: {command: [app]}\n    autoscale:\n" + autoscale
	path := filepath.Join(t.TempDir(), "shoal.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Groups[0]
}

func itoa(n int) string { return string(rune('0'+n/10)) + string(rune('0'+n%10)) }

// wave is a day-shaped load: a slow sine between lo and hi req/s, one period
// per period minutes, with a step at the top.
func wave(minutes, period int, lo, hi float64) []float64 {
	r := make([]float64, minutes)
	for i := range r {
		r[i] = lo + (hi-lo)*(0.5-0.5*math.Cos(2*math.Pi*float64(i)/float64(period)))
	}
	return r
}

// TestSimulatorDecidesAsReplay runs the simulator, then feeds the metric
// history it recorded to policy.Replay (the code `shoal policy test` and the
// live loop share) and compares the decisions one by one: the simulator's
// evaluation path is the live one. With no start delay a job ends at the next
// sample, as Replay assumes when it starts cooldowns at size changes.
func TestSimulatorDecidesAsReplay(t *testing.T) {
	policies := map[string]string{
		"target": `      target: {metric: cpu.p90, value: 60, scale_in_stabilization: 120s}
`,
		"rules": `      rules:
        - {name: out, metric: cpu.avg, above: 75, for: 1m, action: {add: 1}, cooldown: 300s}
        - {name: in, metric: cpu.avg, below: 35, for: 5m, action: {remove: 1}, cooldown: 600s}
`,
	}
	for name, as := range policies {
		t.Run(name, func(t *testing.T) {
			g := group(t, 1, 20, "{up: 30s, down: 60s}", as)
			run := Run{Group: g, Model: Model{Capacity: 100, BaseP99: 20 * time.Millisecond, ServiceCV: 1}, SLO: 200 * time.Millisecond,
				Interval: time.Second, Warmup: 30 * time.Second, Start: t0, Rates: wave(240, 120, 50, 900)}
			res, err := Simulate(run)
			if err != nil {
				t.Fatal(err)
			}
			if res.ScaleEvents < 4 {
				t.Fatalf("only %d scale events: the test load should move the group", res.ScaleEvents)
			}
			end := t0.Add(240*time.Minute - time.Second)
			replayed, err := policy.Replay(context.Background(), g, res.History, t0, end)
			if err != nil {
				t.Fatal(err)
			}
			if len(replayed) != len(res.Decisions) {
				t.Fatalf("simulator recorded %d decisions, Replay %d", len(res.Decisions), len(replayed))
			}
			for i, d := range res.Decisions {
				r := replayed[i]
				if d.Outcome == decision.Accepted {
					d.Outcome, d.JobID = decision.Requested, ""
				}
				if !reflect.DeepEqual(d, r) {
					t.Fatalf("decision %d differs:\n sim    %+v\n replay %+v", i, d, r)
				}
			}
			t.Logf("%d decisions, %d scale events, %.0f instance-seconds, %.0f violation seconds",
				len(res.Decisions), res.ScaleEvents, res.InstanceSeconds, res.ViolationSeconds)
		})
	}
}

// TestSimulateAccounting checks the bookkeeping on a static group: the
// instance-seconds are size × duration, and an overloaded stretch counts as
// violation seconds, exactly, as does the drain of the queue it left.
func TestSimulateAccounting(t *testing.T) {
	g := config.Group{Name: "web", MinSize: 2, MaxSize: 2}
	rates := []float64{100, 100, 250, 100} // the third minute overloads 2 × 100 req/s
	res, err := Simulate(Run{Group: g, Model: Model{Capacity: 100, BaseP99: 10 * time.Millisecond, ServiceCV: 1}, SLO: 200 * time.Millisecond,
		Interval: time.Second, Warmup: 30 * time.Second, Start: t0, Rates: rates})
	if err != nil {
		t.Fatal(err)
	}
	// The overloaded minute leaves 50 × 60 = 3,000 requests queued, which
	// drain at the spare 100 req/s; a second's p99 is over 200 ms while more
	// than 38 of them wait for 200 req/s: the first 30 seconds of minute 3.
	if res.InstanceSeconds != 2*240 || res.ViolationSeconds != 60+30 || res.ScaleEvents != 0 {
		t.Errorf("instance-seconds %v (want 480), violation seconds %v (want 90), events %d (want 0)",
			res.InstanceSeconds, res.ViolationSeconds, res.ScaleEvents)
	}
	if res.Minutes[2].P99ms != -1 || math.Abs(res.Minutes[2].Capacity-200) > 1e-9 {
		t.Errorf("minute 2: %+v, want an unbounded p99 and capacity 200", res.Minutes[2])
	}
}

// TestStartDelayAndWarmup checks that new instances serve only after the
// start delay and count in the aggregates only after the warmup.
func TestStartDelayAndWarmup(t *testing.T) {
	g := group(t, 1, 10, "{up: 0s, down: 600s}", `      target: {metric: cpu.avg, value: 50}
`)
	rates := append([]float64{40}, make([]float64, 9)...)
	for i := 1; i < len(rates); i++ {
		rates[i] = 160
	}
	res, err := Simulate(Run{Group: g, Model: Model{Capacity: 100, BaseP99: 10 * time.Millisecond, ServiceCV: 1}, SLO: 200 * time.Millisecond,
		StartDelay: 20 * time.Second, Interval: time.Second, Warmup: 30 * time.Second, Start: t0, Rates: rates})
	if err != nil {
		t.Fatal(err)
	}
	first := res.Decisions[0]
	if first.Request == nil || first.Time != t0.Add(time.Minute) || first.Recommendation != 2 {
		t.Fatalf("first decision %+v: want a request for 2 at 08:01:00, the first sample of the higher load", first)
	}
	// 160 req/s on one instance of 100 overloads for the 20 s start delay.
	if res.Minutes[1].ViolationSeconds < 20 {
		t.Errorf("minute 1 violated %v s, want >= 20 (the start delay)", res.Minutes[1].ViolationSeconds)
	}
	ready := res.History.Points("ready", t0.Add(time.Minute+49*time.Second), t0.Add(time.Minute+49*time.Second))
	if len(ready) != 1 || ready[0].V != 1 {
		t.Errorf("ready at 08:01:49 = %v, want 1: the new instance (in service 08:01:20) is warming up until 08:01:50", ready)
	}
	if ready := res.History.Points("ready", t0.Add(time.Minute+50*time.Second), t0.Add(time.Minute+50*time.Second)); len(ready) != 1 || ready[0].V < 2 {
		t.Errorf("ready at 08:01:50 = %v, want >= 2: the warmup is over", ready)
	}
}

// TestPerInstanceRateWhileWarming: a new instance serves its share of the
// load while it warms up, so the ready instance's requests per second is
// the load over the instances serving it, as the live collector measures it:
// 160 req/s on two is 80, not 160 over the one ready instance.
func TestPerInstanceRateWhileWarming(t *testing.T) {
	g := group(t, 1, 10, "{up: 0s, down: 600s}", `      target: {metric: requests_per_second_per_instance, value: 100}
`)
	rates := []float64{160, 160, 160}
	res, err := Simulate(Run{Group: g, Model: Model{Capacity: 200, BaseP99: 10 * time.Millisecond, ServiceCV: 1}, SLO: 200 * time.Millisecond,
		StartDelay: 20 * time.Second, Interval: time.Second, Warmup: 30 * time.Second, Start: t0, Initial: 1, Rates: rates})
	if err != nil {
		t.Fatal(err)
	}
	// The target asks for 2 at 08:00:00; the second serves from 08:00:20 and
	// is ready at 08:00:50.
	for _, c := range []struct {
		at   time.Duration
		want float64
	}{{10 * time.Second, 160}, {30 * time.Second, 80}, {49 * time.Second, 80}, {55 * time.Second, 80}} {
		pts := res.History.Points("requests_per_second_per_instance", t0.Add(c.at), t0.Add(c.at))
		ready := res.History.Points("ready", t0.Add(c.at), t0.Add(c.at))
		if len(pts) != 1 || pts[0].V != c.want {
			t.Errorf("requests_per_second_per_instance at +%s (ready %v) = %v, want %v", c.at, ready, pts, c.want)
		}
	}
	if res.Ups != 1 {
		t.Errorf("%d scale-ups, want 1: the warming instance's share must not read as load on the ready one (decisions %+v)", res.Ups, res.Decisions)
	}
}

// TestCoarseResolution: with 5-minute averages read by a 2-minute cron, as
// in seed 000, a load step at 08:10 is seen when the 08:10-08:15 average is
// published (08:15) and acted on at the next evaluation (08:16).
func TestCoarseResolution(t *testing.T) {
	g := group(t, 1, 5, "540", `      interval: 2m
      rules:
        - {name: scale-up, metric: cpu.avg, above: 50, for: 5m, action: up}
`)
	rates := make([]float64, 30)
	for i := range rates {
		rates[i] = 30
		if i >= 10 {
			rates[i] = 80
		}
	}
	res, err := Simulate(Run{Group: g, Model: Model{Capacity: 100, BaseP99: 10 * time.Millisecond, ServiceCV: 1}, SLO: 200 * time.Millisecond,
		Interval: time.Second, Warmup: 30 * time.Second, Resolution: 5 * time.Minute, Start: t0, Rates: rates})
	if err != nil {
		t.Fatal(err)
	}
	if res.Ups != 1 || res.Decisions[0].Time != t0.Add(16*time.Minute) {
		t.Fatalf("ups %d, first decision %+v: want one scale-up at 08:16", res.Ups, res.Decisions[0])
	}
	if pts := res.History.Points("cpu.avg", t0, t0.Add(30*time.Minute)); len(pts) != 6 || pts[2].T != t0.Add(15*time.Minute) || pts[2].V != 80 {
		t.Errorf("cpu.avg %v: want one 5-minute average every 5 minutes, 80 for 08:10-08:15 at 08:15", pts)
	}
}

// TestConcurrencyTarget: the simulator models the policy metric
// concurrency, so a target on it scales: 150 req/s on instances serving 100
// each at 80 % busy keeps well above 0.5 requests in flight per instance, so
// the group grows until it is near the target.
func TestConcurrencyTarget(t *testing.T) {
	g := group(t, 1, 10, "{up: 0s, down: 600s}", `      target: {metric: concurrency, value: 0.5}
`)
	res, err := Simulate(Run{Group: g, Model: Model{Capacity: 100, BaseP99: 10 * time.Millisecond, ServiceCV: 1}, SLO: 500 * time.Millisecond,
		StartDelay: 5 * time.Second, Interval: time.Second, Start: t0, Initial: 2, Rates: []float64{150, 150, 150}})
	if err != nil {
		t.Fatal(err)
	}
	first := res.History.Points("concurrency", t0, t0)
	// Two instances at rho 0.75: L = 1.5 + C(2, 1.5)·0.75/0.25 = 1.5 + 0.643·3 ≈ 3.43, 1.71 each.
	if len(first) != 1 || math.Abs(first[0].V-1.71) > 0.01 {
		t.Errorf("concurrency at the start = %v, want about 1.71", first)
	}
	if res.Ups == 0 || res.MaxSize < 4 {
		t.Errorf("a concurrency target of 0.5 at 1.71 per instance: %d scale-ups to at most %d, want some to 4 or more (decisions %+v)", res.Ups, res.MaxSize, res.Decisions)
	}
	last := res.History.Points("concurrency", t0.Add(170*time.Second), t0.Add(180*time.Second))
	if len(last) == 0 || last[len(last)-1].V > 0.8 {
		t.Errorf("concurrency at the end = %v, want near the target 0.5", last)
	}
}

// TestSimulateOnRecordedSources: a policy reading a source and a formula
// over it is simulated on the source's recorded values, replayed at the
// times they were read: the queue's growth scales out to what the target
// asks, its drain back in, whatever the load.
func TestSimulateOnRecordedSources(t *testing.T) {
	path := filepath.Join(t.TempDir(), "queue.yaml")
	doc := `listen: 127.0.0.1:8080
metrics:
  sources: [{name: queue_depth, command: [queue-depth], interval: 1s}]
groups:
  - name: web
    min_size: 1
    max_size: 4
    cooldown: {up: 0s, down: 0s}
    template: {command: [app]}
    autoscale:
      target: {metric: "queue_depth + 0", value: 10, scale_in_stabilization: 3s, max_step: {up: 10, down: 10}, period: 1s}
`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := LoadPolicy(path, "")
	if err != nil {
		t.Fatal(err)
	}
	if !p.ReadsSources() {
		t.Fatal("ReadsSources = false for a formula over a source")
	}
	// 0 for a minute, 35 for a minute, 0 for a minute: read every second.
	var pts []metrics.Point
	for i := range 180 {
		v := 0.0
		if i >= 60 && i < 120 {
			v = 35
		}
		pts = append(pts, metrics.Point{T: t0.Add(time.Duration(i) * time.Second), V: v})
	}
	res, err := Simulate(Run{Group: p.Group, Model: Model{Capacity: 100, BaseP99: 10 * time.Millisecond, ServiceCV: 1}, SLO: 200 * time.Millisecond,
		StartDelay: 2 * time.Second, Interval: time.Second, Start: t0, Rates: []float64{1, 1, 1},
		Sources: func(h *History) policy.Metrics {
			return source.Recorded("web", h, p.Sources, map[string][]metrics.Point{"queue_depth": pts}, nil)
		}})
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for _, d := range res.Decisions {
		if d.Request != nil {
			sizes = append(sizes, d.Recommendation)
		}
	}
	if !reflect.DeepEqual(sizes, []int{4, 1}) || res.Ups != 1 || res.Downs != 1 {
		t.Errorf("scalings %v (%d up, %d down), want [4 1]: out when the queue reached 35, in when it drained", sizes, res.Ups, res.Downs)
		for _, d := range res.Decisions {
			t.Logf("%s %s %s → %d: %s", d.Time.Format("15:04:05"), d.Outcome, d.Code, d.Recommendation, d.Reason)
		}
	}
	// Without the source's values the policy holds: the decision says so.
	res, err = Simulate(Run{Group: p.Group, Model: Model{Capacity: 100, BaseP99: 10 * time.Millisecond, ServiceCV: 1}, SLO: 200 * time.Millisecond,
		Interval: time.Second, Start: t0, Rates: []float64{1},
		Sources: func(h *History) policy.Metrics { return source.Recorded("web", h, p.Sources, nil, nil) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Decisions) == 0 || res.ScaleEvents != 0 || !strings.Contains(res.Decisions[0].Reason, "source queue_depth has no value") {
		t.Errorf("no recorded values: %d scalings, decisions %+v; want none, the source said missing", res.ScaleEvents, res.Decisions)
	}
}
