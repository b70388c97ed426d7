package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

// daily is history with a per-minute request rate for the days before t0:
// 100 req/s, and 1,000 req/s from 12:10 to 13:00 every day (t0 is 12:00),
// plus live per-second samples of the last 10 minutes at 100 req/s.
func daily(days int) history {
	h := history{}
	start := t0.Add(-time.Duration(days) * 24 * time.Hour)
	for t := start; t.Before(t0.Add(-10 * time.Minute)); t = t.Add(time.Minute) {
		v := 100.0
		if m := t.Hour()*60 + t.Minute(); m >= 12*60+10 && m < 13*60 {
			v = 1000
		}
		h["requests_per_second"] = append(h["requests_per_second"], Point{T: t, V: v})
	}
	h.fill("requests_per_second", -600, 0, constant(100))
	h.fill("size", -600, 0, constant(2)).fill("ready", -600, 0, constant(2))
	h.fill("cpu.avg", -600, 0, constant(50)).fill("requests_per_second_per_instance", -600, 0, constant(50))
	return h
}

// predictive is a group tracking 50 % CPU with a predictive section.
func predictive(t *testing.T, mode string) config.Group {
	return parseGroup(t, 1, 30, "", `      target: {metric: cpu.avg, value: 50}
      predictive: {lookback: 7d, horizon: 15m, mode: `+mode+`}
`)
}

// TestPredictiveRaisesFloorBeforePeak: at 12:00, ten minutes before the
// daily peak, the load is flat and the target wants nothing, but the forecast
// of the next 15 minutes has the peak: the floor rises to the peak's 1,000
// req/s ÷ (capacity 100 req/s measured × the target's 50 % × its 1.1
// tolerance edge) = 18.2, so 19 instances.
func TestPredictiveRaisesFloorBeforePeak(t *testing.T) {
	g := predictive(t, "forecast_and_scale")
	h := daily(3)
	var p Predictor
	d, record := Evaluate(g, h, State{Desired: 2, Prediction: p.At(g, h, t0)}, t0)
	if !record || d.Request == nil || d.Rule != PredictiveName || d.Recommendation != 19 || d.Request.Source != "policy:predictive" {
		t.Fatalf("got %+v, want a request from predictive for 19", d)
	}
	if !strings.Contains(d.Reason, "floor 19 = ⌈forecast peak 1000.0 req/s ÷ 55.0 req/s per instance") {
		t.Errorf("reason %q does not explain the floor", d.Reason)
	}
	if d.Values["forecast.floor"] != 19 {
		t.Errorf("values %v: want forecast.floor 19", d.Values)
	}
	// Without the forecast the same moment is steady.
	if d, _ := Evaluate(g, h, State{Desired: 2}, t0); d.Request != nil {
		t.Errorf("without predictive: %+v, want no request", d)
	}
}

// TestPredictiveNeverScalesIn: a group larger than the forecast needs is not
// made smaller by it, and the floor holds the target's scale-in back.
func TestPredictiveNeverScalesIn(t *testing.T) {
	h := daily(3)
	alone := parseGroup(t, 1, 30, "", `      predictive: {mode: forecast_and_scale, horizon: 5m}
`)
	var p Predictor
	if d, _ := Evaluate(alone, h, State{Desired: 10, Prediction: p.At(alone, h, t0)}, t0); d.Request != nil {
		t.Fatalf("forecast alone (floor 3) at size 10: %+v, want no request", d)
	}
	// The target would go to 5 (10 % CPU on 25 at a target of 50 %), but
	// the floor for the next 15 minutes is 19.
	g := parseGroup(t, 1, 30, "", `      target: {metric: cpu.avg, value: 50, max_step: {down: 100%}}
      predictive: {lookback: 7d, horizon: 15m, mode: forecast_and_scale, capacity: 100}
`)
	h = daily(3)
	h["cpu.avg"] = nil
	h.fill("cpu.avg", -600, 0, constant(10))
	h["size"], h["ready"] = nil, nil
	h.fill("size", -600, 0, constant(25)).fill("ready", -600, 0, constant(25))
	p = Predictor{}
	d, _ := Evaluate(g, h, State{Desired: 25, Prediction: p.At(g, h, t0)}, t0)
	if d.Request == nil || d.Recommendation != 19 {
		t.Fatalf("got %+v, want the target's scale-in bounded to the floor 19", d)
	}
}

// TestPredictiveForecastOnly records what it would do, once a minute, and
// does nothing.
func TestPredictiveForecastOnly(t *testing.T) {
	g := predictive(t, "forecast_only")
	h := daily(3)
	var p Predictor
	d, record := Evaluate(g, h, State{Desired: 2, Prediction: p.At(g, h, t0)}, t0)
	if !record || d.Request != nil || d.Outcome != OutcomeForecastOnly || d.Code != CodeForecast || d.Recommendation != 19 {
		t.Fatalf("got %+v, want a forecast-only decision for 19", d)
	}
	if !strings.Contains(d.Reason, "mode forecast_only: would raise the floor from 2 to 19") {
		t.Errorf("reason %q", d.Reason)
	}
	if d, record := Evaluate(g, h, State{Desired: 2, Prediction: p.At(g, h, t0.Add(time.Second))}, t0.Add(time.Second)); record || d.Outcome == OutcomeForecastOnly {
		t.Errorf("second evaluation of the minute: %+v, want nothing recorded", d)
	}
}

// TestPredictiveInsufficientHistory: with two hours of history the forecast
// is off; it says so once, with what it has and needs, and the target acts
// alone.
func TestPredictiveInsufficientHistory(t *testing.T) {
	g := predictive(t, "forecast_and_scale")
	h := history{}
	h.fill("requests_per_second", -7200, 0, constant(100))
	h.fill("size", -600, 0, constant(2)).fill("ready", -600, 0, constant(2))
	h.fill("cpu.avg", -600, 0, constant(50))
	var p Predictor
	d, record := Evaluate(g, h, State{Desired: 2, Prediction: p.At(g, h, t0)}, t0)
	if !record || d.Code != CodePredictiveOff || d.Rule != PredictiveName || d.Request != nil ||
		!strings.Contains(d.Reason, "insufficient history: have 2h, need 1d10m; predictive stays off") {
		t.Fatalf("got %+v, want predictive off for insufficient history", d)
	}
	for _, at := range []time.Time{t0.Add(time.Second), t0.Add(time.Minute), t0.Add(10 * time.Minute)} {
		h.fill("requests_per_second", int(at.Sub(t0)/time.Second), int(at.Sub(t0)/time.Second), constant(100))
		if d, record := Evaluate(g, h, State{Desired: 2, Prediction: p.At(g, h, at)}, at); record {
			t.Errorf("at %s: recorded %+v again", at.Format("15:04:05"), d)
		}
	}
	// The target still scales out on its own.
	h["cpu.avg"] = nil
	h.fill("cpu.avg", -600, 0, constant(100))
	if d, _ := Evaluate(g, h, State{Desired: 2, Prediction: p.At(g, h, t0)}, t0); d.Request == nil || d.Rule != TargetName {
		t.Errorf("got %+v, want the target to scale out", d)
	}
}
