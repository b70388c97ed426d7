package e2e

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/metrics"
)

// TestPerInstanceRateAfterScaleOut: right after a scale-out under load, the
// new instance takes its share of the requests while it warms up; the
// ready instance's requests_per_second_per_instance is what it serves
// itself, not the whole backend's rate over the one ready instance (which
// read twice the truth for the whole warmup, so a rule on it fired again).
func TestPerInstanceRateAfterScaleOut(t *testing.T) {
	const warmup = 20 * time.Second
	e := newEnv(t, fmt.Sprintf("metrics: {warmup: %s}\n", warmup), groupSpec{Name: "web", Min: 1, Max: 2})
	e.start()
	e.waitInService("web", 1)
	stop := workLoad(t, e, "/work?ms=2", 4)
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
