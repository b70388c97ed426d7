// Package forecast predicts a service's request rate for the next minutes
// from its own per-minute history, for predictive pre-scaling.
//
// # The model
//
// Web traffic repeats daily, so the forecast for a minute t is a seasonal
// estimate times a trend correction:
//
//	forecast(t) = seasonal(t) × trend
//
// seasonal(t) is the weighted mean of the rate at the same time of day on each
// of the previous Days days, each smoothed over ±Smooth minutes:
//
//	seasonal(t) = Σ_d w_d · mean(x[t − d·Period ± Smooth]) / Σ_d w_d,   d = 1..Days
//
// with w_d = Decay^(d−1), so yesterday counts most (with Decay 0.7 and 7 days:
// weights 1, 0.7, 0.49, … 0.12). Days whose history is missing are skipped
// and their weight with them.
//
// trend corrects for today being busier or quieter than the days before: it
// is the ratio of the actual requests in the last TrendWindow to what the
// seasonal estimate predicted for that same window, clamped to
// [TrendMin, TrendMax] so that one odd stretch cannot multiply a forecast
// wildly:
//
//	trend = clamp(Σ x[now−TrendWindow, now) / Σ seasonal[now−TrendWindow, now))
//
// The model knows when it is wrong: Forecast measures its own error over the
// last ErrorWindow, as the weighted absolute percentage error (WAPE: Σ|f − x|
// ÷ Σx) of the forecasts it would have made a horizon before each of those
// minutes. A day that does not follow the pattern (a match on a weekday, a
// final) shows as a large RecentError, and a caller falls back to reactive
// scaling above MaxError rather than hold a floor that is wrong.
//
// Both parts are printed in Forecast.Explanation, so an operator can check a
// pre-scaling decision by hand. The model needs at least MinDays full periods
// plus the trend window (and smoothing) of history; with less, Forecast returns
// an *InsufficientError saying how much it has and needs, and a caller stays
// off rather than guessing; likewise with no data at all in the last
// TrendWindow (stale metrics).
package forecast

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Step is the resolution of the history and of the forecast.
const Step = time.Minute

// History is a per-minute series of rates (requests per second): Values[i] is
// the mean over the minute starting at Start + i minutes. A NaN marks a
// minute with no data.
type History struct {
	Start  time.Time
	Values []float64
}

// End returns the instant just after the last minute of h.
func (h History) End() time.Time { return h.Start.Add(time.Duration(len(h.Values)) * Step) }

// at returns the value of the minute starting at t, or NaN outside h.
func (h History) at(t time.Time) float64 {
	if t.Before(h.Start) {
		return math.NaN()
	}
	i := int(t.Sub(h.Start) / Step)
	if i >= len(h.Values) {
		return math.NaN()
	}
	return h.Values[i]
}

// Model holds the forecaster's parameters. The zero value is not usable;
// start from Default.
type Model struct {
	Period      time.Duration // the seasonality, normally 24h
	Days        int           // how many previous periods the seasonal part looks at
	MinDays     int           // fewest whole periods of history to forecast at all
	Decay       float64       // weight of period d is Decay^(d-1); in (0, 1]
	Smooth      time.Duration // each past value is the mean over ±Smooth around it
	TrendWindow time.Duration // the recent window the trend compares
	TrendMin    float64       // clamp for the trend ratio
	TrendMax    float64
	// ErrorWindow is how far back Forecast measures its own error;
	// MaxError the RecentError above which the forecast is not to be
	// trusted (see Forecast.Trusted).
	ErrorWindow time.Duration
	MaxError    float64
}

// Default is the model shoal uses: a 7-day lookback weighted towards
// yesterday, no smoothing, and a 10-minute trend clamped to [0.1, 10]: the
// seasonal shape scaled to the current level. Chosen on the World Cup 1998
// trace (TestWorldCup98Window): forecasting the 10-minute peak every minute
// of 1998-06-30 08:00 to 07-01 08:00 UTC, a one-hour trend window erred by
// 10-13 % on average and a 30-minute one by 8-9 %, against 5.4 % for this
// (6.4 % for "the next 10 minutes peak like the last 10"); smoothing the past
// days over ±2 or ±5 minutes only blurred the ramps. The error is measured
// over the last hour; above 25 % the day is not following the pattern.
var Default = Model{
	Period:      24 * time.Hour,
	Days:        7,
	MinDays:     1,
	Decay:       0.7,
	Smooth:      0,
	TrendWindow: 10 * time.Minute,
	TrendMin:    0.1,
	TrendMax:    10,
	ErrorWindow: time.Hour,
	MaxError:    0.25,
}

// Forecast is a prediction for the minutes [Start, Start + len(Values) minutes).
type Forecast struct {
	Start  time.Time
	Values []float64 // requests per second, one per minute
	// Seasonal is the seasonal estimate before the trend, per minute.
	Seasonal []float64
	Trend    float64 // the trend factor applied (after clamping)
	RawTrend float64 // the trend ratio before clamping
	Days     int     // how many previous periods had data
	// RecentError is the WAPE of the forecasts made a horizon before each
	// minute of the last ErrorWindow (NaN when that window has no data).
	RecentError float64
	// Peak is the largest of Values and PeakAt its minute: what pre-scaling
	// sizes for.
	Peak   float64
	PeakAt time.Time
	// Explanation says in one line how Peak was reached.
	Explanation string
}

// InsufficientError reports that the history is too short to forecast.
type InsufficientError struct {
	Have, Need time.Duration
}

func (e *InsufficientError) Error() string {
	return fmt.Sprintf("insufficient history: have %s, need %s", fmtDur(e.Have), fmtDur(e.Need))
}

// Need returns how much history before now m requires.
func (m Model) Need() time.Duration {
	return time.Duration(m.MinDays)*m.Period + m.TrendWindow + m.Smooth
}

func (m Model) validate() error {
	switch {
	case m.Period < Step || m.Period%Step != 0:
		return fmt.Errorf("forecast: period %v: want whole minutes >= 1m", m.Period)
	case m.Days < 1 || m.MinDays < 1 || m.MinDays > m.Days:
		return fmt.Errorf("forecast: days %d, min days %d: want 1 <= min days <= days", m.Days, m.MinDays)
	case !(m.Decay > 0 && m.Decay <= 1):
		return fmt.Errorf("forecast: decay %v: want 0 < decay <= 1", m.Decay)
	case m.Smooth < 0 || m.TrendWindow < Step || m.TrendWindow >= m.Period:
		return fmt.Errorf("forecast: smooth %v, trend window %v: want smooth >= 0 and 1m <= trend window < period", m.Smooth, m.TrendWindow)
	case !(m.TrendMin > 0 && m.TrendMin <= 1 && m.TrendMax >= 1):
		return fmt.Errorf("forecast: trend clamp [%v, %v]: want 0 < min <= 1 <= max", m.TrendMin, m.TrendMax)
	case m.ErrorWindow < 0 || !(m.MaxError > 0):
		return fmt.Errorf("forecast: error window %v, max error %v: want >= 0 and > 0", m.ErrorWindow, m.MaxError)
	}
	return nil
}

// Forecast predicts the rate for the minutes in [now, now+horizon) from the
// history before now (later values in h are ignored, so a simulator can pass
// a whole trace). now is rounded down to a minute; horizon must be at least a
// minute and at most a period.
func (m Model) Forecast(h History, now time.Time, horizon time.Duration) (Forecast, error) {
	if err := m.validate(); err != nil {
		return Forecast{}, err
	}
	if horizon < Step || horizon > m.Period {
		return Forecast{}, fmt.Errorf("forecast: horizon %v: want 1m to %v", horizon, m.Period)
	}
	now = now.Truncate(Step)
	end := h.End()
	if now.Before(end) {
		end = now
	}
	have := end.Sub(h.Start)
	if have < m.Need() {
		return Forecast{}, &InsufficientError{Have: max(have, 0), Need: m.Need()}
	}
	// Only the past is visible.
	past := History{Start: h.Start, Values: h.Values[:int(have/Step)]}

	trend, raw, actual, expected, ok := m.trend(past, now)
	if !ok {
		// Without recent data the trend is unknown: better no forecast than
		// one that silently assumes today is like the days before.
		return Forecast{}, fmt.Errorf("forecast: no history in the last %s before %s", fmtDur(m.TrendWindow), now.UTC().Format(time.RFC3339))
	}

	n := int(horizon / Step)
	f := Forecast{Start: now, Values: make([]float64, n), Seasonal: make([]float64, n), Trend: trend, RawTrend: raw, Peak: -1,
		RecentError: m.wape(past, now.Add(-m.ErrorWindow), now, horizon)}
	var peakDetail []float64
	for i := range n {
		t := now.Add(time.Duration(i) * Step)
		s, per := m.seasonal(past, t)
		if math.IsNaN(s) {
			return Forecast{}, fmt.Errorf("forecast: no history at %s on any of the %d previous periods",
				t.UTC().Format("15:04"), m.Days)
		}
		f.Seasonal[i] = s
		f.Values[i] = s * trend
		if f.Values[i] > f.Peak {
			f.Peak, f.PeakAt, peakDetail = f.Values[i], t, per
		}
	}
	for _, v := range peakDetail {
		if !math.IsNaN(v) {
			f.Days++
		}
	}
	f.Explanation = m.explain(f, peakDetail, actual, expected)
	return f, nil
}

// Trusted reports whether f's recent error is within m.MaxError: the day
// follows the pattern (a window without data cannot say it does not).
func (m Model) Trusted(f Forecast) bool {
	return math.IsNaN(f.RecentError) || f.RecentError <= m.MaxError
}

// trend returns the clamped and raw ratio of the actual requests in the
// TrendWindow before now to their seasonal estimate, and both sums; false
// when no minute of the window has data.
func (m Model) trend(past History, now time.Time) (trend, raw, actual, expected float64, ok bool) {
	seen := 0
	for t := now.Add(-m.TrendWindow); t.Before(now); t = t.Add(Step) {
		x := past.at(t)
		s, _ := m.seasonal(past, t)
		if math.IsNaN(x) || math.IsNaN(s) {
			continue
		}
		actual += x
		expected += s
		seen++
	}
	if seen == 0 {
		return 0, 0, 0, 0, false
	}
	raw = 1.0
	switch {
	case expected > 0:
		raw = actual / expected
	case actual > 0:
		raw = math.Inf(1) // traffic where there never was any: clamp to the max
	}
	return min(max(raw, m.TrendMin), m.TrendMax), raw, actual, expected, true
}

// wape is the weighted absolute percentage error, Σ|f − x| ÷ Σx, over the
// minutes in [from, to) of h, of the forecast made lead before each minute
// (the farthest a forecast of that horizon looks ahead): seasonal × the
// trend known then. NaN when no minute can be judged.
func (m Model) wape(h History, from, to time.Time, lead time.Duration) float64 {
	var errSum, sum float64
	for t := from; t.Before(to); t = t.Add(Step) {
		x := h.at(t)
		s, _ := m.seasonal(h, t)
		if math.IsNaN(x) || math.IsNaN(s) {
			continue
		}
		tr, _, _, _, ok := m.trend(h, t.Add(-lead+Step))
		if !ok {
			continue
		}
		errSum += math.Abs(s*tr - x)
		sum += x
	}
	if !(sum > 0) {
		return math.NaN()
	}
	return errSum / sum
}

// Backtest returns the WAPE over [from, to) of the forecasts with the
// given horizon, each minute judged against the forecast made a horizon
// before it from h's earlier minutes: how well a day followed the pattern.
func (m Model) Backtest(h History, from, to time.Time, horizon time.Duration) (float64, error) {
	if err := m.validate(); err != nil {
		return 0, err
	}
	if horizon < Step || horizon > m.Period {
		return 0, fmt.Errorf("forecast: horizon %v: want 1m to %v", horizon, m.Period)
	}
	return m.wape(h, from.Truncate(Step), to, horizon), nil
}

// seasonal returns the weighted seasonal estimate for t and the smoothed value
// of each previous period (NaN where missing).
func (m Model) seasonal(h History, t time.Time) (float64, []float64) {
	per := make([]float64, m.Days)
	var sum, wsum float64
	w := 1.0
	for d := 1; d <= m.Days; d++ {
		v := smoothed(h, t.Add(-time.Duration(d)*m.Period), m.Smooth)
		per[d-1] = v
		if !math.IsNaN(v) {
			sum += w * v
			wsum += w
		}
		w *= m.Decay
	}
	if wsum == 0 {
		return math.NaN(), per
	}
	return sum / wsum, per
}

// smoothed is the mean of h over the minutes within ±r of t, NaN if none has data.
func smoothed(h History, t time.Time, r time.Duration) float64 {
	var sum float64
	var n int
	for u := t.Add(-r); !u.After(t.Add(r)); u = u.Add(Step) {
		if v := h.at(u); !math.IsNaN(v) {
			sum += v
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

func (m Model) explain(f Forecast, per []float64, actual, expected float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "peak %.1f req/s at %s = seasonal %.1f × trend %.2f; seasonal: weighted mean (decay %.2g) of the same time on %d previous %s (",
		f.Peak, f.PeakAt.UTC().Format("15:04"), f.Peak/f.Trend, f.Trend, m.Decay, f.Days, periodName(m.Period))
	for d, v := range per {
		if d > 0 {
			b.WriteString(", ")
		}
		if math.IsNaN(v) {
			fmt.Fprintf(&b, "d-%d: none", d+1)
		} else {
			fmt.Fprintf(&b, "d-%d: %.1f", d+1, v)
		}
	}
	fmt.Fprintf(&b, "); trend: last %s had %.0f%% of its seasonal estimate (%.1f vs %.1f req/s avg)",
		fmtDur(m.TrendWindow), 100*f.RawTrend, actual/m.TrendWindow.Minutes(), expected/m.TrendWindow.Minutes())
	if f.Trend != f.RawTrend {
		fmt.Fprintf(&b, ", clamped to [%.2g, %.2g]", m.TrendMin, m.TrendMax)
	}
	if !math.IsNaN(f.RecentError) {
		fmt.Fprintf(&b, "; its error over the last %s: %.0f %% (trusted up to %.0f %%)", fmtDur(m.ErrorWindow), 100*f.RecentError, 100*m.MaxError)
	}
	return b.String()
}

func periodName(p time.Duration) string {
	if p == 24*time.Hour {
		return "days"
	}
	return "periods of " + fmtDur(p)
}

// fmtDur prints a duration in days, hours and minutes.
func fmtDur(d time.Duration) string {
	d = d.Truncate(Step)
	if d == 0 {
		return "0m"
	}
	var parts []string
	if days := d / (24 * time.Hour); days > 0 {
		parts = append(parts, fmt.Sprintf("%dd", days))
		d -= days * 24 * time.Hour
	}
	if h := d / time.Hour; h > 0 {
		parts = append(parts, fmt.Sprintf("%dh", h))
		d -= h * time.Hour
	}
	if mins := d / time.Minute; mins > 0 {
		parts = append(parts, fmt.Sprintf("%dm", mins))
	}
	return strings.Join(parts, "")
}

// IsInsufficient reports whether err says the history is too short.
func IsInsufficient(err error) bool {
	var ie *InsufficientError
	return errors.As(err, &ie)
}
