package sim

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// Series is one simulated policy's timeline for a plot.
type Series struct {
	Name    string
	Minutes []Minute
}

// WriteSVG plots load, capacity in service and instances over time for one
// or more simulations of the same window: the load (requests/s) and each
// policy's capacity on the left axis, its instances on the right axis.
// Minutes with SLO violations are marked under the time axis.
func WriteSVG(w io.Writer, title string, runs []Series) error {
	if len(runs) == 0 || len(runs[0].Minutes) == 0 {
		return fmt.Errorf("plot: nothing to plot")
	}
	const (
		width, height          = 1100.0, 520.0
		left, right, top, foot = 70.0, 60.0, 40.0, 60.0
	)
	pw, ph := width-left-right, height-top-foot
	ms := runs[0].Minutes
	n := len(ms)
	maxRate, maxInst := 0.0, 1.0
	for _, r := range runs {
		for _, m := range r.Minutes {
			maxRate = max(maxRate, m.Rate, m.Capacity)
			maxInst = max(maxInst, m.Instances)
		}
	}
	maxRate = niceCeil(maxRate)
	maxInst = math.Ceil(maxInst)
	x := func(i int) float64 { return left + pw*float64(i)/float64(max(n-1, 1)) }
	yr := func(v float64) float64 { return top + ph*(1-v/maxRate) }
	yi := func(v float64) float64 { return top + ph*(1-v/maxInst) }
	path := func(f func(Minute) float64, y func(float64) float64, ms []Minute) string {
		var b strings.Builder
		for i, m := range ms {
			cmd := "L"
			if i == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&b, "%s%.1f,%.1f ", cmd, x(i), y(f(m)))
		}
		return b.String()
	}
	colours := []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2"}

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="20" font-size="15">%s</text>`+"\n", left, esc(title))
	// Axes and grid.
	for k := 0; k <= 4; k++ {
		v := maxRate * float64(k) / 4
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, yr(v), left+pw, yr(v))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%.0f</text>`+"\n", left-6, yr(v)+4, v)
		iv := maxInst * float64(k) / 4
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%.1f</text>`+"\n", left+pw+6, yi(iv)+4, iv)
	}
	fmt.Fprintf(&b, `<text x="14" y="%.1f" transform="rotate(-90 14 %.1f)" text-anchor="middle">requests/s (load, capacity)</text>`+"\n", top+ph/2, top+ph/2)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" transform="rotate(90 %.1f %.1f)" text-anchor="middle">instances (dashed)</text>`+"\n", width-14, top+ph/2, width-14, top+ph/2)
	step := max(1, n/12)
	for i := 0; i < n; i += step {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x(i), top+ph+16, ms[i].T.UTC().Format("15:04"))
	}
	fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#444"/>`+"\n", left, top, pw, ph)
	// Load.
	fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="#000" stroke-width="1.5"/>`+"\n", path(func(m Minute) float64 { return m.Rate }, yr, ms))
	for k, r := range runs {
		c := colours[k%len(colours)]
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1"/>`+"\n", path(func(m Minute) float64 { return m.Capacity }, yr, r.Minutes), c)
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1" stroke-dasharray="4 3"/>`+"\n", path(func(m Minute) float64 { return m.Instances }, yi, r.Minutes), c)
		// SLO violations: a tick per minute with any, one row per policy.
		y := top + ph + 24 + 5*float64(k)
		for i, m := range r.Minutes {
			if m.ViolationSeconds > 0 {
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="4" fill="%s"/>`+"\n", x(i), y, max(pw/float64(n), 1), c)
			}
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="%s">%s: capacity (solid), instances (dashed), SLO violations (ticks below)</text>`+"\n",
			left+10, top+16+14*float64(k+1), c, esc(r.Name))
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">load (black)</text>`+"\n", left+10, top+16)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
