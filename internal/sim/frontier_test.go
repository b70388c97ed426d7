package sim

import (
	"bytes"
	"encoding/xml"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

var sweep = []Point{
	{"a", 100, 900},
	{"b", 120, 500},
	{"c", 130, 600}, // dearer than b and worse: off the front
	{"d", 150, 0},
	{"e", 150, 0}, // a tie with d
	{"f", 200, 0},
}

func TestBestWithin(t *testing.T) {
	for _, c := range []struct {
		budget float64
		want   string
	}{
		{99, ""},     // nothing fits
		{100, "a"},   // exactly the budget fits
		{125, "b"},   // fewest violations within
		{135, "b"},   // c is dearer and worse
		{1000, "d"},  // ties on violations: the cheaper, then the first
		{149.9, "b"}, // d just out of reach
	} {
		got, ok := BestWithin(sweep, c.budget)
		if ok != (c.want != "") || ok && got.Name != c.want {
			t.Errorf("BestWithin(%v) = %v, %v; want %q", c.budget, got, ok, c.want)
		}
	}
}

func TestPareto(t *testing.T) {
	var names []string
	for _, p := range Pareto(sweep) {
		names = append(names, p.Name)
	}
	if want := []string{"a", "b", "d"}; !reflect.DeepEqual(names, want) {
		t.Errorf("Pareto = %v, want %v", names, want)
	}
	if Pareto(nil) != nil {
		t.Error("Pareto(nil) is not empty")
	}
}

func TestWithTargetLeavesTheOriginalAlone(t *testing.T) {
	g := group(t, 1, 10, "{up: 0s, down: 30s}", `      target: {metric: cpu.p90, value: 45, scale_in_stabilization: 10m}
`)
	p := Policy{Name: "twin", Group: g, Interval: time.Second}
	v, err := WithTarget(p, 60, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if v.Name != "twin-60-2m0s" || v.Group.Autoscale.Target.Value != 60 || v.Group.Autoscale.Target.ScaleInStabilization != 2*time.Minute {
		t.Errorf("variant %s: %+v", v.Name, *v.Group.Autoscale.Target)
	}
	if tg := p.Group.Autoscale.Target; tg.Value != 45 || tg.ScaleInStabilization != 10*time.Minute {
		t.Errorf("the original changed: %+v", *tg)
	}
	noTarget := group(t, 1, 10, "{up: 0s, down: 30s}", `      rules:
        - {name: out, metric: cpu.avg, above: 75, for: 1m, action: {add: 1}}
`)
	if _, err := WithTarget(Policy{Name: "rules", Group: noTarget}, 60, 0); err == nil || !strings.Contains(err.Error(), "rules has no target") {
		t.Errorf("a policy without a target: %v", err)
	}
}

func TestWriteFrontierSVG(t *testing.T) {
	var buf bytes.Buffer
	err := WriteFrontierSVG(&buf, `reactive <vs> "predictive"`, []FrontierSet{{"reactive", sweep}, {"predictive", sweep[:2]}}, []Point{{"chosen", 120, 500}})
	if err != nil {
		t.Fatal(err)
	}
	// Well-formed XML, with a point per policy and the title escaped.
	d := xml.NewDecoder(&buf)
	circles := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "circle" {
			circles++
		}
	}
	if circles != len(sweep)+2 {
		t.Errorf("%d points drawn, want %d", circles, len(sweep)+2)
	}
	if err := WriteFrontierSVG(io.Discard, "empty", nil, nil); err == nil {
		t.Error("an empty plot: no error")
	}
}
