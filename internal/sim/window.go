package sim

import (
	"fmt"
	"time"

	"github.com/shoal-lb/shoal/internal/trace"
)

// PeakInstances is how many instances the peak of a default-scaled window
// needs: the replay's "about 5 instances".
const PeakInstances = 5

// peakUtilisation is how busy PeakInstances are at the peak when the scale is
// chosen for them: 90 %, so that the peak needs PeakInstances and no fewer.
const peakUtilisation = 0.9

// DefaultScale returns the scale at which the peak of w needs PeakInstances
// instances of capacity req/s.
func DefaultScale(w trace.Series, capacity float64) (float64, error) {
	return w.ScaleFor(PeakInstances * peakUtilisation * capacity)
}

// Window cuts [from, to) out of s and returns its rates at scale, and the
// rates of up to history before from (what a live shoal would have kept).
func Window(s trace.Series, from, to time.Time, scale float64, history time.Duration) (w trace.Series, rates, hist []float64, err error) {
	w, err = s.Window(from, to)
	if err != nil {
		return trace.Series{}, nil, nil, err
	}
	if history > 0 {
		hf := from.Add(-history)
		if hf.Before(s.Start) {
			hf = s.Start
		}
		if hf.Before(from) {
			hw, err := s.Window(hf, from)
			if err != nil {
				return trace.Series{}, nil, nil, fmt.Errorf("history: %w", err)
			}
			hist = hw.Rates(scale)
		}
	}
	return w, w.Rates(scale), hist, nil
}
