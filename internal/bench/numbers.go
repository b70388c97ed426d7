package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// The numbers the reports share: how a figure is computed from samples and
// how it is printed. A nil *float64 is a figure not measured.

// Num returns a pointer to v, or nil for NaN (not measured).
func Num(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// FmtNum prints a figure to about three significant digits, "-" when not
// measured.
func FmtNum(v *float64) string {
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

// Median returns the median of vs, NaN if there are none.
func Median(vs []float64) float64 {
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

// Quantile returns the nearest-rank q-quantile of vs (q in (0, 1]).
func Quantile(vs []float64, q float64) float64 {
	if len(vs) == 0 {
		return Median(nil)
	}
	s := slices.Sorted(slices.Values(vs))
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func RatioOf(a, b *float64) *float64 {
	if a == nil || b == nil || *b == 0 {
		return nil
	}
	return Num(*a / *b)
}

func Round2(v float64) float64 { return math.Round(v*100) / 100 }

func Msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Pct formats a percentage, or "-" when not measured.
func Pct(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", *v)
}

// F1 formats a number with one decimal, or "-".
func F1(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f", *v)
}

// Diff returns a − b, or nil when either was not measured.
func Diff(a, b *float64) *float64 {
	if a == nil || b == nil {
		return nil
	}
	return Num(*a - *b)
}

func JoinFloats(vs []float64, format string) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmt.Sprintf(format, v)
	}
	return strings.Join(s, ", ")
}
