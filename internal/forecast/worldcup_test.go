package forecast

import (
	"math"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/trace"
)

// TestWorldCup98Window forecasts the busiest 10 minutes ahead, every minute
// through the window the issue names (1998-06-30 08:00 to 07-01 08:00 UTC),
// from the trace's own history, and compares the error with the naive
// forecast "the next 10 minutes peak like the last 10". The model must not be
// worse than naive on average; both errors, and how often each fell short by
// more than 10 % (what pre-scaling cares about), are logged.
func TestWorldCup98Window(t *testing.T) {
	path := trace.WorldCup98Path()
	if path == "" {
		t.Skip("trace not found: set SHOAL_TRACE or put ../shared/traces next to the repository")
	}
	s, err := trace.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h := History{Start: s.Start, Values: s.Rates(1)}
	from := time.Date(1998, 6, 30, 8, 0, 0, 0, time.UTC)
	const horizon = 10 * time.Minute
	var modelErr, naiveErr, under, naiveUnder float64
	n := 0
	for now := from; now.Before(from.Add(24 * time.Hour)); now = now.Add(Step) {
		f, err := Default.Forecast(h, now, horizon)
		if err != nil {
			t.Fatal(err)
		}
		i := int(now.Sub(h.Start) / Step)
		actual := peak(h.Values[i : i+10])
		naive := peak(h.Values[i-10 : i])
		modelErr += math.Abs(f.Peak-actual) / actual
		naiveErr += math.Abs(naive-actual) / actual
		if f.Peak < 0.9*actual {
			under++
		}
		if naive < 0.9*actual {
			naiveUnder++
		}
		n++
	}
	modelErr, naiveErr = modelErr/float64(n), naiveErr/float64(n)
	under, naiveUnder = under/float64(n), naiveUnder/float64(n)
	t.Logf("10-minute peak, %d forecasts: mean abs error %.1f%% (naive last-10-minutes: %.1f%%); short by > 10%%: %.1f%% of forecasts (naive: %.1f%%)",
		n, 100*modelErr, 100*naiveErr, 100*under, 100*naiveUnder)
	if modelErr > naiveErr {
		t.Errorf("model error %.1f%% is worse than naive %.1f%%", 100*modelErr, 100*naiveErr)
	}
}

func peak(vs []float64) float64 {
	m := 0.0
	for _, v := range vs {
		m = max(m, v)
	}
	return m
}
