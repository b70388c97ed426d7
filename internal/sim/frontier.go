package sim

// This file compares policies by the trade-off they make, not by one setting:
// a reactive target can always buy fewer SLO violations with more instances
// (a lower target, a longer stabilization), so "fewer violations at no more
// instance-seconds" is judged against the best any of a sweep of reactive
// settings achieves within the same instance-seconds.

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"
)

// Point is one simulated policy on the cost/violation plane.
type Point struct {
	Name             string  `json:"policy"`
	InstanceSeconds  float64 `json:"instance_seconds"`
	ViolationSeconds float64 `json:"slo_violation_seconds"`
}

// BestWithin returns the point of pts with the fewest violation-seconds among
// those using at most budget instance-seconds (ties: the cheaper one), and
// false when none fits the budget.
func BestWithin(pts []Point, budget float64) (Point, bool) {
	var best Point
	found := false
	for _, p := range pts {
		if p.InstanceSeconds > budget {
			continue
		}
		if !found || p.ViolationSeconds < best.ViolationSeconds ||
			p.ViolationSeconds == best.ViolationSeconds && p.InstanceSeconds < best.InstanceSeconds {
			best, found = p, true
		}
	}
	return best, found
}

// Pareto returns the points no other point beats on both axes (at most as
// many instance-seconds and at most as many violation-seconds, one of them
// fewer), cheapest first.
func Pareto(pts []Point) []Point {
	s := append([]Point(nil), pts...)
	sort.SliceStable(s, func(i, j int) bool {
		if s[i].InstanceSeconds != s[j].InstanceSeconds {
			return s[i].InstanceSeconds < s[j].InstanceSeconds
		}
		return s[i].ViolationSeconds < s[j].ViolationSeconds
	})
	var out []Point
	for _, p := range s {
		if len(out) == 0 || p.ViolationSeconds < out[len(out)-1].ViolationSeconds {
			out = append(out, p)
		}
	}
	return out
}

// WithTarget returns p with its target's value and scale-in stabilization
// replaced, named after them: one setting of a sweep. p must have a target.
func WithTarget(p Policy, value float64, stabilization time.Duration) (Policy, error) {
	if p.Group.Autoscale == nil || p.Group.Autoscale.Target == nil {
		return Policy{}, fmt.Errorf("sim: policy %s has no target to sweep", p.Name)
	}
	as := *p.Group.Autoscale
	t := *as.Target
	t.Value, t.ScaleInStabilization = value, stabilization
	as.Target = &t
	p.Group.Autoscale = &as
	p.Name = fmt.Sprintf("%s-%g-%s", p.Name, value, stabilization)
	return p, nil
}

// FrontierSet is a named set of points for WriteFrontierSVG, drawn as a
// line through its Pareto front with every point marked.
type FrontierSet struct {
	Name   string
	Points []Point
}

// WriteFrontierSVG plots instance-seconds (x) against SLO-violation seconds
// (y, on a log scale so that tens and thousands both read) for each set, and
// marks the named highlights. Zero violations sit on the bottom line.
func WriteFrontierSVG(w io.Writer, title string, sets []FrontierSet, highlights []Point) error {
	var all []Point
	for _, s := range sets {
		all = append(all, s.Points...)
	}
	all = append(all, highlights...)
	if len(all) == 0 {
		return fmt.Errorf("plot: nothing to plot")
	}
	const (
		width, height          = 900.0, 560.0
		left, right, top, foot = 80.0, 30.0, 40.0, 60.0
	)
	pw, ph := width-left-right, height-top-foot
	minX, maxX, maxY := math.Inf(1), 0.0, 1.0
	for _, p := range all {
		minX, maxX, maxY = min(minX, p.InstanceSeconds), max(maxX, p.InstanceSeconds), max(maxY, p.ViolationSeconds)
	}
	span := max(maxX-minX, 1)
	minX, maxX = minX-0.03*span, maxX+0.03*span
	decades := max(1, math.Ceil(math.Log10(maxY+1)))
	x := func(v float64) float64 { return left + pw*(v-minX)/(maxX-minX) }
	y := func(v float64) float64 { return top + ph*(1-math.Log10(v+1)/decades) }
	colours := []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd"}

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="20" font-size="15">%s</text>`+"\n", left, esc(title))
	for d := 0.0; d <= decades; d++ {
		v := 0.0
		if d > 0 {
			v = math.Pow(10, d)
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, y(v), left+pw, y(v))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%.0f</text>`+"\n", left-6, y(v)+4, v)
	}
	for k := 0; k <= 5; k++ {
		v := minX + (maxX-minX)*float64(k)/5
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%.0fk</text>`+"\n", x(v), top+ph+16, v/1000)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">instance-seconds</text>`+"\n", left+pw/2, top+ph+36)
	fmt.Fprintf(&b, `<text x="16" y="%.1f" transform="rotate(-90 16 %.1f)" text-anchor="middle">SLO-violation seconds (log)</text>`+"\n", top+ph/2, top+ph/2)
	fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#444"/>`+"\n", left, top, pw, ph)
	for k, s := range sets {
		c := colours[k%len(colours)]
		for _, p := range s.Points {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s" fill-opacity="0.45"><title>%s</title></circle>`+"\n",
				x(p.InstanceSeconds), y(p.ViolationSeconds), c, esc(fmt.Sprintf("%s: %.0f instance-s, %.0f violation-s", p.Name, p.InstanceSeconds, p.ViolationSeconds)))
		}
		var path strings.Builder
		for i, p := range Pareto(s.Points) {
			fmt.Fprintf(&path, "%s%.1f,%.1f ", map[bool]string{true: "M", false: "L"}[i == 0], x(p.InstanceSeconds), y(p.ViolationSeconds))
		}
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.5"/>`+"\n", path.String(), c)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="%s" text-anchor="end">%s (dots; line: its best trade-offs)</text>`+"\n", left+pw-8, top+18+14*float64(k), c, esc(s.Name))
	}
	for _, p := range highlights {
		px, py := x(p.InstanceSeconds), y(p.ViolationSeconds)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="7" height="7" fill="#000"/>`+"\n", px-3.5, py-3.5)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", px+6, py-6, esc(p.Name))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
