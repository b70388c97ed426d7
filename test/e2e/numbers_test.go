package e2e

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/loadgen"
	"github.com/shoal-lb/shoal/internal/metrics"
)

// TestPerInstanceRateAfterScaleOut: right after a scale-out under load, the
// new instance takes its share of the requests while it warms up; the
// ready instance's requests_per_second_per_instance is what it serves
// itself, not the whole backend's rate over the one ready instance (which
// read twice the truth for the whole warmup, so a rule on it fired again).
func TestPerInstanceRateAfterScaleOut(t *testing.T) {
	parallel(t)
	const warmup = 20 * time.Second
	e := newEnv(t, fmt.Sprintf("metrics: {warmup: %s}\n", warmup), groupSpec{Name: "web", Min: 1, Max: 2})
	e.start()
	e.waitInService("web", 1)
	doc := func(window time.Duration) *metrics.Document {
		t.Helper()
		d, err := e.client().Metrics(context.Background(), "web", window, "")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	e.eventually("web-001 past its warmup", warmup+15*time.Second, func() error {
		if d := doc(5 * time.Second); d.Ready != 1 {
			return fmt.Errorf("ready %d", d.Ready)
		}
		return nil
	})

	// The load starts in the step alone: waiting in line, it would burn a
	// core for nothing.
	alone(t) // the shares are measured from the scale-out on
	stop := workLoad(t, e, "/work?ms=2", 4)
	time.Sleep(2 * time.Second) // web-001 serves the load by itself first
	scaleSync(t, e, "up")
	e.eventually("web-002 takes requests", 10*time.Second, func() error {
		d := doc(time.Second)
		if len(d.Instances) != 2 || d.Instances[1].RequestsPerSecond == nil || *d.Instances[1].RequestsPerSecond <= 0 {
			return errors.New("web-002 serves nothing yet")
		}
		return nil
	})
	// Three seconds in which web-002 served throughout, well inside its warmup.
	time.Sleep(3500 * time.Millisecond)
	d := doc(3 * time.Second)
	if d.Size != 2 || d.Ready != 1 {
		t.Fatalf("size %d, ready %d: want web-002 still warming up (%s); is the machine too slow?", d.Size, d.Ready, warmup)
	}
	res := stop()
	if res.Failures != 0 {
		t.Fatalf("%d of %d requests failed: %v", res.Failures, res.Requests, res.FailureSamples)
	}
	total, per := d.RequestsPerSecond, d.RequestsPerSecondPerInstance
	own, warming := d.Instances[0].RequestsPerSecond, d.Instances[1].RequestsPerSecond
	if total == nil || per == nil || own == nil || warming == nil {
		t.Fatalf("unmeasured: total %v, per instance %v, web-001 %v, web-002 %v", total, per, own, warming)
	}
	t.Logf("backend %.1f req/s; web-001 (ready) %.1f, web-002 (warming) %.1f; requests_per_second_per_instance %.1f",
		*total, *own, *warming, *per)
	if *warming < 0.2**total {
		t.Fatalf("web-002 serves %.1f of %.1f req/s: it should take a share while warming up", *warming, *total)
	}
	if math.Abs(*per-*own) > 0.15**own || *per > 0.85**total {
		t.Errorf("requests_per_second_per_instance %.1f, want what the ready web-001 serves (%.1f), not the backend's %.1f over 1 ready",
			*per, *own, *total)
	}
}

// TestLatencyWeightedThroughRamp: HAProxy logs a busy group's requests one
// in 5 and, once it is quiet, every one; after a ramp down from slow
// requests to fast ones, a window holding both has few lines of the slow
// requests and many of the fast. Most requests were slow, so shoal's latency
// p50 is a slow request's, because each line weighs its sample rate; counted
// line by line the fast requests' many lines outvoted them.
func TestLatencyWeightedThroughRamp(t *testing.T) {
	parallel(t)
	e := newEnv(t, "metrics: {warmup: 1s}\naccess_log: {sample: auto}\n", groupSpec{Name: "web", Min: 1, Max: 1})
	e.start()
	e.waitInService("web", 1)
	run := func(path string, rate float64, d time.Duration) loadgen.OpenResult {
		t.Helper()
		res, err := loadgen.RunOpen(context.Background(), loadgen.OpenOptions{
			URL: "http://" + e.listen + path, Timeout: 10 * time.Second,
			Schedule: []loadgen.Segment{{Rate: rate, Duration: d}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Errors != 0 || res.Late != 0 {
			t.Fatalf("%s: %d errors, %d late of %d: %v", path, res.Errors, res.Late, res.Scheduled, res.FailureSamples)
		}
		return res
	}
	// At 500 requests/s one in 5 is logged, under 100/s every one. The
	// window starts once the rate has risen (it follows the load within a
	// few seconds) and holds 5 s of slow requests (2500, 500 lines), then
	// 14 s of fast ones (1330, a line each): the same shares as a longer
	// ramp, the slow ones about two thirds of the requests and a quarter of
	// the lines.
	alone(t) // open-loop load: a late request fails it
	const slowRate, slowWindow = 500, 5 * time.Second
	from := time.Now().Add(4 * time.Second)
	slow := run("/work?ms=0&wait=200", slowRate, 4*time.Second+slowWindow)
	fast := run("/work?ms=0&wait=1", 95, 14*time.Second)
	time.Sleep(1500 * time.Millisecond) // the last lines and the last sample
	doc, err := e.client().Metrics(context.Background(), "web", time.Since(from), "")
	if err != nil {
		t.Fatal(err)
	}
	l := doc.Latency
	if l.P50 == nil || l.P90 == nil {
		t.Fatalf("no latency: %+v", l)
	}
	slowN := int64(slowRate * slowWindow.Seconds())
	t.Logf("%d slow requests in the window (p50 %s), then %d fast (p50 %s); shoal: %d lines, p50 %.1f ms, p90 %.1f ms",
		slowN, slow.P50, fast.Completed, fast.P50, l.Samples, *l.P50, *l.P90)
	if fast.P50 > 100*time.Millisecond || slow.P50 < 200*time.Millisecond {
		t.Fatalf("the load was not as planned: fast p50 %s, slow p50 %s", fast.P50, slow.P50)
	}
	// Most slow requests were not logged (had they been, there would be
	// slowN + fast lines), and the fast ones' lines are the majority.
	if int64(l.Samples) >= slowN/2+fast.Completed || int64(l.Samples) >= 2*fast.Completed {
		t.Fatalf("%d lines for %d slow and %d fast requests: the sample rate did not follow the load", l.Samples, slowN, fast.Completed)
	}
	if *l.P50 < 190 {
		t.Errorf("latency p50 %.1f ms, want a slow request's (>= 190 ms): about %d of %d requests were slow",
			*l.P50, slowN, slowN+fast.Completed)
	}
}
