package throughput

import (
	"math"
	"reflect"
	"testing"

	"github.com/shoal-lb/shoal/internal/bench"
)

// TestBracketed: each of a shoal's slices is compared with the mean of
// (b)'s slices just before and after it, and a price is one shoal's
// ratios over another's, round by round.
func TestBracketed(t *testing.T) {
	slices := func(rps ...float64) []bench.Sample {
		var out []bench.Sample
		for _, r := range rps {
			out = append(out, bench.Sample{RPS: r})
		}
		return out
	}
	// Round 1: b c b f, round 2: b f b c, then b: (b)'s speed drifts.
	b := &target{Rounds: slices(100, 110, 120, 130, 140), CPUus: []float64{20, 22, 24, 26, 28}}
	c := &target{Rounds: slices(105, 120), CPUus: []float64{21, 30}, before: []int{0, 3}}
	f := &target{Rounds: slices(125, 135), CPUus: []float64{25, 25}, before: []int{1, 2}}
	rps, cpu := bracketed(c, b)
	if want := []float64{105.0 / 105, 120.0 / 135}; !reflect.DeepEqual(rps, want) {
		t.Errorf("rps ratios %v, want %v", rps, want)
	}
	if want := []float64{21.0 / 21, 30.0 / 27}; !reflect.DeepEqual(cpu, want) {
		t.Errorf("cpu ratios %v, want %v", cpu, want)
	}
	frps, _ := bracketed(f, b)
	if got, want := ratios(rps, frps), []float64{(105.0 / 105) / (125.0 / 115), (120.0 / 135) / (135.0 / 125)}; len(got) != 2 || math.Abs(got[0]-want[0]) > 1e-12 || math.Abs(got[1]-want[1]) > 1e-12 {
		t.Errorf("price %v, want %v", got, want)
	}
	// A last slice without (b) after it has no ratio.
	short := &target{Rounds: b.Rounds[:4], CPUus: b.CPUus[:4]}
	if rps, cpu := bracketed(c, short); len(rps) != 1 || len(cpu) != 1 {
		t.Errorf("without (b)'s closing slice: %v, %v; want the first round only", rps, cpu)
	}
}
