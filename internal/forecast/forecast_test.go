package forecast

import (
	"math"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// series builds minutes of history from t0 with f(minute index).
func series(minutes int, f func(i int) float64) History {
	h := History{Start: t0, Values: make([]float64, minutes)}
	for i := range h.Values {
		h.Values[i] = f(i)
	}
	return h
}

func sine(i int) float64 {
	return 1000 + 600*math.Sin(2*math.Pi*float64(i)/(24*60))
}

func TestSineWithinFivePercent(t *testing.T) {
	h := series(8*24*60, sine) // 8 days: 7 of seasonal history and a day of forecasts to check
	for _, minute := range []int{7*24*60 + 17, 7*24*60 + 6*60, 7*24*60 + 13*60 + 31, 7*24*60 + 18*60 + 2} {
		now := t0.Add(time.Duration(minute) * time.Minute)
		f, err := Default.Forecast(h, now, 30*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Values) != 30 || !f.Start.Equal(now) {
			t.Fatalf("forecast has %d values from %v, want 30 from %v", len(f.Values), f.Start, now)
		}
		for i, v := range f.Values {
			want := sine(minute + i)
			if math.Abs(v-want) > 0.05*want {
				t.Errorf("at minute %d+%d: forecast %.1f, actual %.1f: off by more than 5%%", minute, i, v, want)
			}
		}
		if math.Abs(f.Trend-1) > 0.02 || f.Days != 7 {
			t.Errorf("trend %.3f from %d days, want about 1 from 7", f.Trend, f.Days)
		}
	}
}

func TestTrendFollowsStep(t *testing.T) {
	// Flat 100 req/s for a week, then 250 for the last two hours: the
	// seasonal part still says 100, the trend must lift it to 250.
	const minutes = 7*24*60 + 2*60
	h := series(minutes, func(i int) float64 {
		if i >= minutes-2*60 {
			return 250
		}
		return 100
	})
	now := h.End()
	f, err := Default.Forecast(h, now, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range f.Values {
		if math.Abs(v-250) > 250*0.05 {
			t.Errorf("minute %d: forecast %.1f, want 250 within 5%%", i, v)
		}
	}
	if f.Trend < 2.4 || f.Trend > 2.6 {
		t.Errorf("trend %.2f, want 2.5", f.Trend)
	}
	if !strings.Contains(f.Explanation, "trend 2.50") || !strings.Contains(f.Explanation, "250%") {
		t.Errorf("explanation %q does not state the trend", f.Explanation)
	}

	// A step beyond the clamp is held to TrendMax, and the explanation says so.
	h.Values[len(h.Values)-1] = 1e6
	f, err = Default.Forecast(h, now, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if f.Trend != Default.TrendMax || !strings.Contains(f.Explanation, "clamped") {
		t.Errorf("trend %.2f, explanation %q; want clamped to %v", f.Trend, f.Explanation, Default.TrendMax)
	}
}

func TestRecentDaysWeighMore(t *testing.T) {
	// Day k before now had level 100·k at this time: yesterday 100, a week ago 700.
	m := Default
	m.TrendMin, m.TrendMax = 1, 1 // isolate the seasonal part
	const minutes = 7 * 24 * 60
	h := series(minutes, func(i int) float64 { return float64(100 * (7 - i/(24*60))) })
	f, err := m.Forecast(h, h.End(), 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var num, den float64
	w := 1.0
	for d := 1; d <= 7; d++ {
		num += w * float64(100*d)
		den += w
		w *= m.Decay
	}
	// Smoothing spans the day boundary for the first minutes; the middle of
	// the horizon is clear of it.
	if got, want := f.Seasonal[9], num/den; math.Abs(got-want) > 1e-6 {
		t.Errorf("seasonal %.3f, want the decay-weighted mean %.3f", got, want)
	}
	if f.Seasonal[9] >= 400 {
		t.Errorf("seasonal %.1f is not below the unweighted mean 400: recent days must weigh more", f.Seasonal[9])
	}
}

func TestInsufficientHistory(t *testing.T) {
	h := series(20*60, sine) // 20 hours
	_, err := Default.Forecast(h, h.End(), 10*time.Minute)
	if !IsInsufficient(err) {
		t.Fatalf("err = %v, want insufficient history", err)
	}
	if want := "insufficient history: have 20h, need 1d10m"; err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}

	// Fewer than Days days but at least MinDays: forecasts from what there is.
	h = series(2*24*60, sine)
	f, err := Default.Forecast(h, h.End(), 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if f.Days != 2 || !strings.Contains(f.Explanation, "-3: none") {
		t.Errorf("days %d, explanation %q; want 2 days used and the others shown as none", f.Days, f.Explanation)
	}

	// Stale history (nothing in the trend window) gives no forecast.
	if _, err := Default.Forecast(h, h.End().Add(2*time.Hour), 10*time.Minute); err == nil || !strings.Contains(err.Error(), "no history in the last 10m") {
		t.Errorf("forecast on stale history: %v, want an error", err)
	}

	if _, err := Default.Forecast(h, h.End(), 0); err == nil {
		t.Error("a zero horizon was accepted")
	}
	bad := Default
	bad.Decay = 0
	if _, err := bad.Forecast(h, h.End(), time.Minute); err == nil {
		t.Error("decay 0 was accepted")
	}
}

// TestRecentErrorSeesAnOddDay: a week of a daily sine, then a day whose
// last two hours swing between a fifth and three times the pattern every
// ten minutes (a match the other days did not have): the forecast measures
// its own error over the last hour, and trusts itself on the regular day
// only. Backtest gives the regular day's error in the same measure.
func TestRecentErrorSeesAnOddDay(t *testing.T) {
	const minutes = 7*24*60 + 20*60
	regular := series(minutes, sine)
	now := regular.End()
	f, err := Default.Forecast(regular, now, 30*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !(f.RecentError < 0.05) || !Default.Trusted(f) {
		t.Errorf("regular day: recent error %.3f, trusted %v; want < 5 %%, trusted", f.RecentError, Default.Trusted(f))
	}
	odd := series(minutes, func(i int) float64 {
		if i < minutes-2*60 {
			return sine(i)
		}
		if (i/10)%2 == 0 {
			return 3 * sine(i)
		}
		return sine(i) / 5
	})
	f, err = Default.Forecast(odd, now, 30*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !(f.RecentError > Default.MaxError) || Default.Trusted(f) {
		t.Errorf("odd day: recent error %.3f, trusted %v; want > %.2f, not trusted", f.RecentError, Default.Trusted(f), Default.MaxError)
	}
	day := t0.Add(7 * 24 * time.Hour)
	e, err := Default.Backtest(regular, day, day.Add(12*time.Hour), 30*time.Minute)
	if err != nil || !(e < 0.05) {
		t.Errorf("backtest of the regular day: %.3f, %v; want < 5 %%", e, err)
	}
	if _, err := Default.Backtest(regular, day, day.Add(time.Hour), 0); err == nil {
		t.Error("backtest with no horizon: no error")
	}
}
