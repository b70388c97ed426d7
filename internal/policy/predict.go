package policy

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/forecast"
)

// PredictiveName names the predictive floor in decisions and job sources.
const PredictiveName = "predictive"

// Predictive outcomes and codes.
const (
	// OutcomeForecastOnly: mode forecast_only, and the forecast would have
	// raised the floor; nothing was done.
	OutcomeForecastOnly = "forecast only"
	CodeForecast        = "forecast"       // what the forecast wants
	CodePredictiveOff   = "predictive_off" // the forecast cannot be made; why
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
}

// Predictor computes a group's Prediction once a minute. The Runner, Replay
// and the simulator each keep one per group; the zero value is ready.
type Predictor struct {
	last    *Prediction
	offKind string
	used    bool
}

// At returns the prediction for the minute of now, computing it on the
// minute's first call; nil when g does not pre-scale.
func (p *Predictor) At(g config.Group, h Metrics, now time.Time) *Prediction {
	if g.Autoscale == nil || g.Autoscale.Predictive == nil {
		return nil
	}
	m := now.Truncate(time.Minute)
	if p.last == nil || !p.last.Minute.Equal(m) {
		pr := Predict(g, h, m)
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
	cfg := g.Autoscale.Predictive
	pr := Prediction{Minute: m}
	off := func(kind, format string, a ...any) Prediction {
		pr.offKind = kind
		pr.Off = fmt.Sprintf(format, a...) + "; predictive stays off, the reactive policy acts alone"
		return pr
	}
	model := forecast.Default
	model.Days = max(1, int(cfg.Lookback/model.Period))
	tw := model.TrendWindow
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
		pts := h.Points("requests_per_second", from, to.Add(-time.Nanosecond))
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
	fill(m.Add(-max(tw, cfg.Horizon)), m)
	for d := 1; d <= model.Days; d++ {
		base := m.Add(-time.Duration(d) * model.Period)
		fill(base.Add(-tw), base.Add(cfg.Horizon))
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
		return off("history", "no requests_per_second history yet: %s", strings.TrimPrefix(short.Error(), "forecast: "))
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
			if pts := h.Points("requests_per_second", start, m); len(pts) > 0 {
				short.Have = m.Sub(pts[0].T.Truncate(forecast.Step))
			}
		}
		return off(kind, "%s", strings.TrimPrefix(err.Error(), "forecast: "))
	}

	pr.Capacity = cfg.Capacity
	source := "configured"
	if pr.Capacity == 0 {
		rps, cpu := mean(h.Points("requests_per_second_per_instance", m.Add(-tw), m)), mean(h.Points("cpu.avg", m.Add(-tw), m))
		c, ok := MeasuredCapacity(rps, cpu)
		if !ok {
			return off("capacity", "cannot measure an instance's capacity: the last %s had no requests per instance or CPU under %g %%; set predictive.capacity", fmtDur(tw), MinCapacityCPU)
		}
		pr.Capacity, source = c, fmt.Sprintf("measured: %.1f req/s per instance at %.0f %% CPU", rps, cpu)
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
	if pr.Rate > 0 {
		pr.Floor = int(math.Ceil(pr.Rate/pr.PerInstance - 1e-9))
	}
	pr.Explanation = fmt.Sprintf("floor %d = ⌈forecast peak %.1f req/s ÷ %.1f req/s per instance (%s)⌉; %s",
		pr.Floor, pr.Rate, pr.PerInstance, plan, f.Explanation)
	return pr
}

// MinCapacityCPU is the least mean CPU % that measures an instance's
// capacity: under it the CPU is mostly the instance's own overhead, not
// its requests.
const MinCapacityCPU = 10.0

// MeasuredCapacity is the requests/s one instance serves at 100 % CPU, from
// the requests/s per instance it served at a mean CPU %, assuming CPU grows
// in proportion to load. ok is false when either is unknown (NaN) or the CPU
// is under MinCapacityCPU.
func MeasuredCapacity(rps, cpu float64) (capacity float64, ok bool) {
	if math.IsNaN(rps) || math.IsNaN(cpu) || cpu < MinCapacityCPU {
		return 0, false
	}
	return rps * 100 / cpu, true
}

func mean(pts []Point) float64 {
	var sum float64
	n := 0
	for _, p := range pts {
		if finite(p.V) {
			sum += p.V
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
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

// fmtDur prints d without trailing zero units ("10m", "1h30m").
func fmtDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
