package policy

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/forecast"
)

// PredictiveName names the predictive floor in decisions and job sources.
const PredictiveName = config.PredictiveName

// Predictive codes; the outcome of forecast_only is decision.ForecastOnly.
const (
	CodeForecast      decision.Code = "forecast"       // what the forecast wants
	CodePredictiveOff decision.Code = "predictive_off" // the forecast cannot be made; why
)

// defaultUtilisation is the CPU the floor plans for when the group's target
// does not say (a target on cpu.* plans for its own value; one on
// requests_per_second_per_instance gives the rate per instance directly).
const defaultUtilisation = 0.7

// Prediction is a group's predictive floor for one minute.
//
// The model (package forecast): the requests per second of each minute of
// the next horizon is the weighted mean of the same minute on the previous
// lookback days (yesterday weighs most), times the ratio of the last 10
// minutes' actual rate to what the same estimate said for them. The floor is
// the horizon's forecast peak divided by what one instance is planned to
// serve. With a cpu.* or per-instance target, that is the load at the upper
// edge of the target's tolerance band: the most the target itself lets an
// instance carry before it scales out. So the floor puts in service, ahead
// of time, the instances the target would ask for once the forecast load
// arrives, and no headroom of its own; the target keeps acting on top, and
// since a floor only raises the minimum, a forecast never scales in.
type Prediction struct {
	Minute time.Time
	// Off says why there is no forecast, "" when there is one.
	Off string
	// Rate is the requests per second the floor is sized for: the
	// forecast's peak over the horizon.
	Rate float64
	// PerInstance is the requests per second one instance is planned to
	// serve; Capacity is its measured (or configured) 100 % CPU rate.
	PerInstance, Capacity float64
	// Floor is the instances Rate needs.
	Floor       int
	Explanation string
	// Fresh is true for the first evaluation of the minute, so that
	// forecast_only records what it would do once a minute, not every second.
	Fresh bool
	// Announce is true when the prediction has just gone off (or off for a
	// new reason): it is recorded once.
	Announce bool
	offKind  string
	// measured is the capacity measured this minute, or carried from an
	// earlier one; nil when it is configured or unknown.
	measured *measurement
}

// measurement is a measured capacity and the minute it was measured in.
type measurement struct {
	Capacity
	at time.Time
}

// Predictor computes a group's Prediction once a minute. The Runner, Replay
// and the simulator each keep one per group; the zero value is ready.
type Predictor struct {
	last    *Prediction
	offKind string
	used    bool
	// measured is the latest capacity measured: a target keeps each
	// instance's load near its value, so the minutes the forecast reads
	// often span too little load to measure it again.
	measured *measurement
}

// SourceHistory is how long g's predictive floor reads back a metric from
// outside shoal (a source or formula it forecasts), which the sources must
// keep; 0 when it forecasts shoal's own.
func SourceHistory(g config.Group) time.Duration {
	a := g.Autoscale
	if a == nil || a.Predictive == nil || slices.Contains(config.MetricPaths, a.Predictive.MetricOf()) {
		return 0
	}
	m := forecast.Default
	return a.Predictive.Lookback + m.TrendWindow + m.ErrorWindow + a.Predictive.Horizon + time.Minute
}

// At returns the prediction for the minute of now, computing it on the
// minute's first call; nil when g does not pre-scale.
func (p *Predictor) At(g config.Group, h Metrics, now time.Time) *Prediction {
	if g.Autoscale == nil || g.Autoscale.Predictive == nil {
		return nil
	}
	m := now.Truncate(time.Minute)
	if p.last == nil || !p.last.Minute.Equal(m) {
		pr := predict(g, h, m, p.measured)
		if pr.measured != nil {
			p.measured = pr.measured
		}
		pr.Announce = pr.offKind != "" && pr.offKind != p.offKind
		p.offKind = pr.offKind
		p.last, p.used = &pr, false
	}
	out := *p.last
	out.Fresh = !p.used
	if p.used {
		out.Announce = false
	}
	p.used = true
	return &out
}

// Predict computes g's prediction for the minute starting at m from the
// requests_per_second history h holds before m.
func Predict(g config.Group, h Metrics, m time.Time) Prediction {
	return predict(g, h, m, nil)
}

// predict is Predict with the capacity measured last (nil for none), used
// when the minutes read now cannot measure it.
func predict(g config.Group, h Metrics, m time.Time, last *measurement) Prediction {
	cfg := g.Autoscale.Predictive
	pr := Prediction{Minute: m}
	off := func(kind, format string, a ...any) Prediction {
		pr.offKind = kind
		pr.Off = fmt.Sprintf(format, a...) + "; predictive stays off, the reactive policy acts alone"
		return pr
	}
	metric := cfg.MetricOf()
	model := forecast.Default
	model.Days = max(1, int(cfg.Lookback/model.Period))
	// The forecast reads the trend window before each minute it judges
	// itself on, a horizon before that minute, over the error window.
	tw := model.TrendWindow + model.ErrorWindow + cfg.Horizon
	start := m.Add(-time.Duration(model.Days)*model.Period - tw)
	vals := make([]float64, int(m.Sub(start)/forecast.Step))
	for i := range vals {
		vals[i] = math.NaN()
	}
	// Only the minutes the forecast reads are fetched: the recent ones and
	// the same stretch on each previous day, not the whole lookback.
	fill := func(from, to time.Time) {
		from, to = maxTime(from, start), minTime(to, m)
		if !from.Before(to) {
			return
		}
		pts := h.Points(metric, from, to.Add(-time.Nanosecond))
		i0 := int(from.Sub(start) / forecast.Step)
		sums := make([]float64, int(to.Sub(from)/forecast.Step)+1)
		ns := make([]int, len(sums))
		for _, p := range pts {
			if !finite(p.V) || p.T.Before(from) {
				continue
			}
			j := int(p.T.Sub(from) / forecast.Step)
			if j < len(sums) {
				sums[j] += p.V
				ns[j]++
			}
		}
		for j, n := range ns {
			if n > 0 && i0+j < len(vals) {
				vals[i0+j] = sums[j] / float64(n)
			}
		}
	}
	windows := [][2]time.Time{{m.Add(-tw), m}}
	for d := 1; d <= model.Days; d++ {
		base := m.Add(-time.Duration(d) * model.Period)
		windows = append(windows, [2]time.Time{base.Add(-tw), base.Add(cfg.Horizon)})
	}
	for _, w := range windows {
		fill(w[0], w[1])
	}
	first := -1
	for i, v := range vals {
		if !math.IsNaN(v) {
			first = i
			break
		}
	}
	if first < 0 {
		short := &forecast.InsufficientError{Need: model.Need()}
		return off("history", "no %s history yet: %s", metric, strings.TrimPrefix(short.Error(), "forecast: "))
	}
	hist := forecast.History{Start: start.Add(time.Duration(first) * forecast.Step), Values: vals[first:]}
	f, err := model.Forecast(hist, m, cfg.Horizon)
	if err != nil {
		kind := "forecast"
		var short *forecast.InsufficientError
		if errors.As(err, &short) {
			kind = "history"
			// The windows above skip most of the lookback; say how much
			// history there really is (a short one is cheap to read).
			if pts := h.Points(metric, start, m); len(pts) > 0 {
				short.Have = m.Sub(pts[0].T.Truncate(forecast.Step))
			}
		}
		return off(kind, "%s", strings.TrimPrefix(err.Error(), "forecast: "))
	}
	if !model.Trusted(f) {
		return off("pattern", "the day does not follow the pattern: over the last %s the forecast %s ahead erred by %.0f %% (WAPE; trusted up to %.0f %%)",
			model.ErrorWindow, cfg.Horizon, 100*f.RecentError, 100*model.MaxError)
	}

	if metric != "requests_per_second" {
		// A total from elsewhere (a queue): each instance takes its share.
		pr.Rate, pr.PerInstance = f.Peak, cfg.PerInstance
		need := pr.Rate / pr.PerInstance
		if !finite(need) || need < 0 {
			return off("forecast", "floor = forecast peak %v of %s ÷ %v per instance is not a number of instances", pr.Rate, metric, pr.PerInstance)
		}
		if need > 0 {
			pr.Floor = int(math.Ceil(min(need, math.MaxInt32) - 1e-9))
		}
		pr.Explanation = fmt.Sprintf("floor %d = ⌈forecast peak %s %.1f ÷ per_instance %s⌉; %s", pr.Floor, metric, pr.Rate, num(pr.PerInstance), f.Explanation)
		return pr
	}
	pr.Capacity = cfg.Capacity
	source := "configured"
	if pr.Capacity == 0 {
		// The same minutes the forecast reads: the recent ones and each
		// previous day's run-up to the horizon, whose load spans what the
		// floor is sized for.
		var samples []LoadCPU
		for _, w := range windows {
			samples = append(samples, CapacitySamples(h, maxTime(w[0], start), minTime(w[1], m), forecast.Step)...)
		}
		c, err := MeasuredCapacity(samples)
		switch {
		case err == nil:
			pr.measured = &measurement{c, m}
			source = "measured: " + c.String()
		case last != nil:
			pr.measured = last
			source = fmt.Sprintf("measured at %s: %s; kept, as the minutes read now cannot measure it: %v", last.at.Format("2006-01-02 15:04"), last.String(), err)
		default:
			return off("capacity", "cannot estimate an instance's capacity yet from the minutes the forecast reads: %v; set predictive.capacity to pre-scale meanwhile", err)
		}
		pr.Capacity = pr.measured.RPS
	}
	pr.PerInstance = pr.Capacity * defaultUtilisation
	plan := fmt.Sprintf("%.0f %% of capacity %.1f req/s (%s)", 100*defaultUtilisation, pr.Capacity, source)
	if t := g.Autoscale.Target; t != nil {
		edge := 1 + t.Tolerance
		switch {
		case t.Metric == "requests_per_second_per_instance":
			pr.PerInstance = t.Value * edge
			plan = fmt.Sprintf("the target's requests_per_second_per_instance %s at its +%s tolerance edge", num(t.Value), num(t.Tolerance))
		case strings.HasPrefix(t.Metric, "cpu."):
			pr.PerInstance = pr.Capacity * t.Value * edge / 100
			plan = fmt.Sprintf("the target's %s %s %% at its +%s tolerance edge, of capacity %.1f req/s (%s)", t.Metric, num(t.Value), num(t.Tolerance), pr.Capacity, source)
		}
	}
	pr.Rate = f.Peak
	need := pr.Rate / pr.PerInstance
	if !finite(need) || need < 0 {
		return off("forecast", "floor = forecast peak %v req/s ÷ %v req/s per instance is not a number of instances", pr.Rate, pr.PerInstance)
	}
	if need > 0 {
		// Bounded before the conversion, which is undefined past int's range;
		// max_size bounds it far below anyway.
		pr.Floor = int(math.Ceil(min(need, math.MaxInt32) - 1e-9))
	}
	pr.Explanation = fmt.Sprintf("floor %d = ⌈forecast peak %.1f req/s ÷ %.1f req/s per instance (%s)⌉; %s",
		pr.Floor, pr.Rate, pr.PerInstance, plan, f.Explanation)
	return pr
}

// LoadCPU is one period's requests/s per ready instance and their mean CPU
// (percent of their cores).
type LoadCPU struct {
	RPS, CPU float64
}

// CapacitySamples returns h's requests_per_second_per_instance and cpu.avg
// over [from, to), averaged in step-long periods and paired where both have
// a value.
func CapacitySamples(h Metrics, from, to time.Time, step time.Duration) []LoadCPU {
	if !from.Before(to) || step <= 0 {
		return nil
	}
	n := int((to.Sub(from) + step - 1) / step)
	bin := func(metric string) ([]float64, []int) {
		sums, ns := make([]float64, n), make([]int, n)
		for _, p := range h.Points(metric, from, to.Add(-time.Nanosecond)) {
			if i := int(p.T.Sub(from) / step); finite(p.V) && !p.T.Before(from) && i < n {
				sums[i] += p.V
				ns[i]++
			}
		}
		return sums, ns
	}
	rps, rn := bin("requests_per_second_per_instance")
	cpu, cn := bin("cpu.avg")
	var out []LoadCPU
	for i := range n {
		if rn[i] > 0 && cn[i] > 0 {
			out = append(out, LoadCPU{RPS: rps[i] / float64(rn[i]), CPU: cpu[i] / float64(cn[i])})
		}
	}
	return out
}

// The rule that measures an instance's capacity. An idle instance's CPU is
// not zero (runtime, health checks, logging), so CPU ÷ load says little:
// 15 % at 1 req/s is not 6.7 req/s at 100 %. The capacity comes from how
// CPU grows with load instead, which the samples show only when the load in
// them varied.
const (
	// MinCapacityCPU is the least rise of CPU (percentage points) the fitted
	// line must show across the samples' load: under it, noise or an
	// instance's own overhead decide the slope.
	MinCapacityCPU = 10.0
	// minCapacitySamples is the least number of periods fitted.
	minCapacitySamples = 10
	// minCapacityFit is the least share of CPU's variance the load explains
	// (R²): CPU must follow the load for its slope to mean anything.
	minCapacityFit = 0.5
)

// Capacity is an instance's measured capacity and the line it comes from.
type Capacity struct {
	// RPS is the requests/s one instance serves at 100 % CPU.
	RPS float64
	// Idle is the fitted CPU % at no load, PerRequest the CPU % each req/s
	// adds; Low and High bound the load per instance the Samples periods saw.
	Idle, PerRequest float64
	Low, High        float64
	Samples          int
}

// String explains c, as events and the simulator print it.
func (c Capacity) String() string {
	return fmt.Sprintf("%.1f req/s at 100 %% CPU = (100 − %.1f %% idle) ÷ %.3g %% CPU per req/s, fitted over %d periods at %.1f–%.1f req/s per instance",
		c.RPS, max(c.Idle, 0), c.PerRequest, c.Samples, c.Low, c.High)
}

// MeasuredCapacity is the requests/s one instance serves at 100 % CPU,
// from periods of load per instance and CPU: the least-squares line
// CPU = idle + k·load is extended to 100 %, (100 − idle) ÷ k. predictive
// pre-scaling and `shoal policy simulate --capacity measured` both measure
// with it. It refuses (saying why) too few periods, a load that did not vary
// enough for the CPU it explains to rise MinCapacityCPU points, a CPU that
// does not follow the load, and anything not finite.
func MeasuredCapacity(samples []LoadCPU) (Capacity, error) {
	var c Capacity
	var sx, sy float64
	var pts []LoadCPU
	c.Low, c.High = math.Inf(1), math.Inf(-1)
	for _, s := range samples {
		if !finite(s.RPS) || !finite(s.CPU) || s.RPS < 0 || s.CPU < 0 {
			continue
		}
		pts = append(pts, s)
		sx += s.RPS
		sy += s.CPU
		c.Low, c.High = min(c.Low, s.RPS), max(c.High, s.RPS)
	}
	c.Samples = len(pts)
	if c.Samples < minCapacitySamples {
		return c, fmt.Errorf("%d periods with both requests per instance and CPU, need %d", c.Samples, minCapacitySamples)
	}
	n := float64(c.Samples)
	mx, my := sx/n, sy/n
	var sxx, sxy, syy float64
	for _, s := range pts {
		dx, dy := s.RPS-mx, s.CPU-my
		sxx += dx * dx
		sxy += dx * dy
		syy += dy * dy
	}
	if !(sxx > 0) {
		return c, fmt.Errorf("the load was %.1f req/s per instance throughout; CPU's slope against load needs it to vary", mx)
	}
	c.PerRequest = sxy / sxx
	c.Idle = my - c.PerRequest*mx
	if rise := c.PerRequest * (c.High - c.Low); !(rise >= MinCapacityCPU) {
		return c, fmt.Errorf("the load varied only over %.1f–%.1f req/s per instance, where CPU rose %.1f points; need %g", c.Low, c.High, rise, MinCapacityCPU)
	}
	if r2 := sxy * sxy / (sxx * syy); !(r2 >= minCapacityFit) {
		return c, fmt.Errorf("CPU does not follow the load (R² %.2f over %d periods, need %g)", r2, c.Samples, minCapacityFit)
	}
	if c.Idle >= 100 {
		return c, fmt.Errorf("CPU is %.0f %% with no load", c.Idle)
	}
	// An idle CPU below zero is the fit's error, not a machine's.
	c.RPS = (100 - max(c.Idle, 0)) / c.PerRequest
	if !finite(c.RPS) || !(c.RPS > 0) {
		return c, fmt.Errorf("the fit gives %v req/s", c.RPS)
	}
	return c, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
