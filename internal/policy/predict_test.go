package policy

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/decision"
)

// daily is history with a per-minute request rate for the days before t0:
// 100 req/s, and 1,000 req/s from 12:10 to 13:00 every day (t0 is 12:00),
// plus live per-second samples of the last 10 minutes at 100 req/s. An
// instance's CPU is 10 % idle plus 0.9 % per req/s (capacity 100 req/s):
// 40 req/s per instance (46 %) off the peak, 80 (82 %) in it, and 44.4 (50 %)
// in the last 10 minutes.
func daily(days int) history {
	h := history{}
	start := t0.Add(-time.Duration(days) * 24 * time.Hour)
	add := func(path string, t time.Time, v float64) { h[path] = append(h[path], Point{T: t, V: v}) }
	for t := start; t.Before(t0.Add(-10 * time.Minute)); t = t.Add(time.Minute) {
		v, per := 100.0, 40.0
		if m := t.Hour()*60 + t.Minute(); m >= 12*60+10 && m < 13*60 {
			v, per = 1000, 80
		}
		add("requests_per_second", t, v)
		add("requests_per_second_per_instance", t, per)
		add("cpu.avg", t, 10+0.9*per)
	}
	h.fill("requests_per_second", -600, 0, constant(100))
	h.fill("size", -600, 0, constant(2)).fill("ready", -600, 0, constant(2))
	h.fill("cpu.avg", -600, 0, constant(50)).fill("requests_per_second_per_instance", -600, 0, constant(40/0.9))
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
	if !record || d.Request != nil || d.Outcome != decision.ForecastOnly || d.Code != CodeForecast || d.Recommendation != 19 {
		t.Fatalf("got %+v, want a forecast-only decision for 19", d)
	}
	if !strings.Contains(d.Reason, "mode forecast_only: would raise the floor from 2 to 19") {
		t.Errorf("reason %q", d.Reason)
	}
	if d, record := Evaluate(g, h, State{Desired: 2, Prediction: p.At(g, h, t0.Add(time.Second))}, t0.Add(time.Second)); record || d.Outcome == decision.ForecastOnly {
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

// TestMeasuredCapacity: the capacity is where the line of CPU against load
// reaches 100 %, not load ÷ CPU, which takes an instance's idle CPU for work.
// Flat load, no load, too few periods and a CPU that does not follow the load
// are refused with why, never turned into a number (0 req/s at 15 % CPU was
// capacity 0, and the floor int(+Inf)).
func TestMeasuredCapacity(t *testing.T) {
	line := func(n int, idle, k, lo, hi float64) []LoadCPU {
		var out []LoadCPU
		for i := range n {
			x := lo + (hi-lo)*float64(i)/float64(n-1)
			out = append(out, LoadCPU{RPS: x, CPU: idle + k*x})
		}
		return out
	}
	// 15 % idle, 0.85 % per req/s: 100 req/s at 100 %. Load ÷ CPU at 1 req/s
	// (15.85 %) said 6.3.
	c, err := MeasuredCapacity(line(30, 15, 0.85, 1, 60))
	if err != nil || math.Abs(c.RPS-100) > 1e-9 || c.Samples != 30 || c.Low != 1 || c.High != 60 {
		t.Fatalf("got %+v, %v; want 100 req/s from 30 periods over 1-60 req/s", c, err)
	}
	if want := "100.0 req/s at 100 % CPU = (100 − 15.0 % idle) ÷ 0.85 % CPU per req/s, fitted over 30 periods at 1.0–60.0 req/s per instance"; c.String() != want {
		t.Errorf("String() = %q\nwant %q", c.String(), want)
	}
	// Noise around the line does not move it much.
	noisy := line(40, 15, 0.85, 1, 60)
	for i := range noisy {
		noisy[i].CPU += float64(i%3-1) * 2
	}
	if c, err := MeasuredCapacity(noisy); err != nil || math.Abs(c.RPS-100) > 3 {
		t.Errorf("noisy: %+v, %v; want about 100", c, err)
	}

	refused := []struct {
		name    string
		samples []LoadCPU
		why     string
	}{
		{"flat load at 15 % CPU", line(30, 14, 1, 1, 1), "the load was 1.0 req/s per instance throughout"},
		{"no load at 15 % CPU", line(30, 15, 0, 0, 0), "the load was 0.0 req/s per instance throughout"},
		{"a narrow span", line(30, 15, 0.85, 40, 45), "the load varied only over 40.0–45.0 req/s per instance, where CPU rose 4.2 points; need 10"},
		{"too few periods", line(5, 15, 0.85, 1, 60), "5 periods with both requests per instance and CPU, need 10"},
		{"CPU falls with load", line(30, 80, -0.5, 1, 60), "where CPU rose -29.5 points"},
		{"nothing finite", []LoadCPU{{math.NaN(), 10}, {math.Inf(1), 10}, {1, math.Inf(1)}}, "0 periods"},
		{"saturated", line(30, 100, 0.5, 1, 60), "CPU is 100 % with no load"},
	}
	for _, tt := range refused {
		c, err := MeasuredCapacity(tt.samples)
		if err == nil || !strings.Contains(err.Error(), tt.why) || c.RPS != 0 {
			t.Errorf("%s: got %+v, %v; want refused: %q", tt.name, c, err, tt.why)
		}
	}
	unrelated := line(30, 15, 0.85, 1, 60)
	for i := range unrelated {
		// A slight rise (0.5 % per req/s, 29.5 points) under swings of 40.
		unrelated[i].CPU = 20 + 0.5*unrelated[i].RPS + float64(i%2)*40
	}
	if c, err := MeasuredCapacity(unrelated); err == nil || !strings.Contains(err.Error(), "CPU does not follow the load") {
		t.Errorf("unrelated CPU: got %+v, %v; want refused", c, err)
	}
}

// TestPredictiveIdleCapacity: an idle group at 15 % CPU and 1 req/s per
// instance, every minute of its history. Load ÷ CPU measured 6.7 req/s per
// instance, and the forecast peak then asked for max_size; with no load
// variation there is no slope to measure: predictive says once that it cannot
// estimate the capacity yet, and the floor stays off.
func TestPredictiveIdleCapacity(t *testing.T) {
	g := parseGroup(t, 1, 30, "", `      predictive: {lookback: 7d, horizon: 15m, mode: forecast_and_scale}
`)
	h := daily(3)
	for _, p := range []string{"cpu.avg", "requests_per_second_per_instance"} {
		for i := range h[p] {
			h[p][i].V = map[string]float64{"cpu.avg": 15, "requests_per_second_per_instance": 1}[p]
		}
	}
	var p Predictor
	d, record := Evaluate(g, h, State{Desired: 2, Prediction: p.At(g, h, t0)}, t0)
	if !record || d.Code != CodePredictiveOff || d.Request != nil ||
		!strings.Contains(d.Reason, "cannot estimate an instance's capacity yet from the minutes the forecast reads: the load was 1.0 req/s per instance throughout") ||
		!strings.Contains(d.Reason, "set predictive.capacity to pre-scale meanwhile; predictive stays off, the reactive policy acts alone") {
		t.Fatalf("got %+v, want predictive off: capacity cannot be estimated yet", d)
	}
	if d, record := Evaluate(g, h, State{Desired: 2, Prediction: p.At(g, h, t0.Add(time.Minute))}, t0.Add(time.Minute)); record {
		t.Errorf("next minute: recorded %+v again", d)
	}
	// No load at all, at 15 % CPU: the same, and no floor from +Inf.
	for i := range h["requests_per_second_per_instance"] {
		h["requests_per_second_per_instance"][i].V = 0
	}
	if pr := Predict(g, h, t0); pr.Off == "" || pr.Floor != 0 {
		t.Errorf("no load: %+v, want off with no floor", pr)
	}
}

// TestPredictiveKeepsMeasuredCapacity: a target holds each instance's load
// near its value, so the minutes the forecast reads often span too little
// load to measure the capacity again. The last measure is kept, and said to
// be; a Predictor that never measured one stays off.
func TestPredictiveKeepsMeasuredCapacity(t *testing.T) {
	g := predictive(t, "forecast_and_scale")
	var p Predictor
	if pr := p.At(g, daily(3), t0); pr.Off != "" || math.Abs(pr.Capacity-100) > 1e-9 {
		t.Fatalf("measured: %+v, want capacity 100", pr)
	}
	flat := daily(3)
	for _, path := range []string{"cpu.avg", "requests_per_second_per_instance"} {
		for i := range flat[path] {
			flat[path][i].V = 50
		}
	}
	at := t0.Add(time.Minute)
	pr := p.At(g, flat, at)
	if pr.Off != "" || math.Abs(pr.Capacity-100) > 1e-9 || pr.Floor != 19 ||
		!strings.Contains(pr.Explanation, "measured at 2026-03-02 12:00: 100.0 req/s at 100 % CPU = (100 − 10.0 % idle) ÷ 0.9 % CPU per req/s") ||
		!strings.Contains(pr.Explanation, "kept, as the minutes read now cannot measure it: the load was 50.0 req/s per instance throughout") {
		t.Fatalf("flat load after a measure: %+v, want the measure kept and said so", pr)
	}
	var fresh Predictor
	if pr := fresh.At(g, flat, at); pr.Off == "" || !pr.Announce {
		t.Errorf("flat load, never measured: %+v, want off", pr)
	}
}

// TestPredictiveOffWhenTheDayIsOdd: the same days as daily(3), but the hour
// before the last 10 minutes today swings between 20 and 500 req/s where the
// pattern says 100: the forecast's own recent error is far above what it
// trusts, so predictive stays off and says why, and the target acts alone.
func TestPredictiveOffWhenTheDayIsOdd(t *testing.T) {
	g := predictive(t, "forecast_and_scale")
	h := daily(3)
	from := t0.Add(-70 * time.Minute)
	for i, p := range h["requests_per_second"] {
		if !p.T.Before(from) && p.T.Before(t0.Add(-10*time.Minute)) {
			h["requests_per_second"][i].V = 20
			if p.T.Minute()%2 == 0 {
				h["requests_per_second"][i].V = 500
			}
		}
	}
	pr := Predict(g, h, t0)
	if pr.Floor != 0 || !strings.Contains(pr.Off, "the day does not follow the pattern") {
		t.Fatalf("prediction %+v: want off because the day does not follow the pattern", pr)
	}
	d, _ := Evaluate(g, h, State{Desired: 2, Prediction: &pr}, t0)
	if d.Request != nil {
		t.Errorf("got %+v, want no request: the target alone is steady", d)
	}
	// The regular days keep the floor.
	if pr := Predict(g, daily(3), t0); pr.Off != "" || pr.Floor != 19 {
		t.Errorf("regular day: %+v, want floor 19", pr)
	}
}
