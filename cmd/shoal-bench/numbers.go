package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// The numbers the reports share: how a figure is computed from samples and
// how it is printed. A nil *float64 is a figure not measured.

// num returns a pointer to v, or nil for NaN (not measured).
func num(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// fmtNum prints a figure to about three significant digits, "-" when not
// measured.
func fmtNum(v *float64) string {
	if v == nil {
		return "-"
	}
	a := math.Abs(*v)
	switch {
	case a >= 1000:
		return fmt.Sprintf("%.0f", *v)
	case a >= 10:
		return fmt.Sprintf("%.1f", *v)
	default:
		return fmt.Sprintf("%.3g", *v)
	}
}

// median returns the median of vs, NaN if there are none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := slices.Sorted(slices.Values(vs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// quantile returns the nearest-rank q-quantile of vs (q in (0, 1]).
func quantile(vs []float64, q float64) float64 {
	if len(vs) == 0 {
		return median(nil)
	}
	s := slices.Sorted(slices.Values(vs))
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ratioOf(a, b *float64) *float64 {
	if a == nil || b == nil || *b == 0 {
		return nil
	}
	return num(*a / *b)
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pct formats a percentage, or "-" when not measured.
func pct(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", *v)
}

// f1 formats a number with one decimal, or "-".
func f1(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f", *v)
}

// diff returns a − b, or nil when either was not measured.
func diff(a, b *float64) *float64 {
	if a == nil || b == nil {
		return nil
	}
	return num(*a - *b)
}
