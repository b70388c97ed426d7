package canary

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

func TestWeightsGiveTheShareWhateverTheCounts(t *testing.T) {
	// The canary instances a step runs (Instances) beside any group size:
	// HAProxy's weights (1 to 256) reach every share within half a point.
	for _, stables := range []int{1, 2, 3, 4, 7, 20, 50} {
		for _, pct := range []float64{1, 5, 10, 25, 50, 75, 99} {
			for _, canaries := range []int{Instances(stables, pct), Instances(stables, pct) + 1} {
				wc, ws := Weights(canaries, stables, pct)
				if wc < 1 || wc > MaxWeight || ws < 1 || ws > MaxWeight {
					t.Fatalf("%d/%d at %g%%: weights %d, %d out of 1..256", canaries, stables, pct, wc, ws)
				}
				got := 100 * Share(canaries, stables, wc, ws)
				if math.Abs(got-pct) > 0.5 {
					t.Errorf("%d canaries, %d stables at %g%%: weights %d/%d give %.3f%%", canaries, stables, pct, wc, ws, got)
				}
			}
		}
	}
	if wc, ws := Weights(3, 3, 100); wc != MaxWeight || ws != 1 || Share(3, 3, wc, ws) < 0.99 {
		t.Errorf("100%%: %d, %d; want all but 1/257 to the canary", wc, ws)
	}
	if wc, ws := Weights(0, 3, 25); wc != 1 || ws != MaxWeight {
		t.Errorf("no canary: %d, %d", wc, ws)
	}
}

func TestInstances(t *testing.T) {
	for _, c := range []struct {
		desired int
		pct     float64
		want    int
	}{{4, 5, 1}, {4, 25, 1}, {4, 26, 2}, {4, 100, 4}, {10, 25, 3}, {1, 5, 1}, {3, 100, 3}} {
		if got := Instances(c.desired, c.pct); got != c.want {
			t.Errorf("Instances(%d, %g) = %d, want %d", c.desired, c.pct, got, c.want)
		}
	}
}

func lat(n int, d time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

func TestJudge(t *testing.T) {
	a := config.CanaryAnalysis{MinRequests: 200, Interval: time.Second,
		MaxErrorRate: &config.CanaryErrorRate{Above: 1, VsStable: 2},
		MaxP99:       &config.CanaryP99{VsStable: 1.5}}
	stable := Figures{Requests: 4000, Errors: 4, Latencies: lat(400, 10*time.Millisecond)}
	for _, c := range []struct {
		name   string
		can    Figures
		stable Figures
		want   Verdict
		reason string
	}{
		{"too few requests", Figures{Requests: 199, Errors: 100}, stable, Wait, "judged from 200 canary requests"},
		{"3% errors", Figures{Requests: 200, Errors: 6}, stable, Fail, "error rate 3.00% beyond max_error_rate (above 1% and 2x the stable version's)"},
		{"good", Figures{Requests: 200, Errors: 1, Latencies: lat(100, 11*time.Millisecond)}, stable, Pass, "canary 200 requests, 1 5xx (0.50%)"},
		// Above 1 % but no worse than the stable version: the fault is
		// not the canary's.
		{"as bad as stable", Figures{Requests: 1000, Errors: 30}, Figures{Requests: 4000, Errors: 120}, Pass, "stable 4000 requests, 120 5xx (3.00%)"},
		{"2x slower", Figures{Requests: 300, Latencies: lat(100, 20*time.Millisecond)}, stable, Fail, "p99 20ms beyond max_p99 (1.5x the stable version's)"},
		// The log's timers are whole ms: 1 ms against a stable 0 (under
		// 1 ms) is no regression; 3 ms against it is.
		{"1 ms vs under 1 ms", Figures{Requests: 300, Latencies: lat(100, time.Millisecond)}, Figures{Requests: 900, Latencies: lat(400, 0)}, Pass, "p99 canary 1ms"},
		{"3 ms vs under 1 ms", Figures{Requests: 300, Latencies: lat(100, 3*time.Millisecond)}, Figures{Requests: 900, Latencies: lat(400, 0)}, Fail, "p99 3ms beyond max_p99"},
		{"slow but few samples", Figures{Requests: 300, Latencies: lat(99, 20*time.Millisecond)}, stable, Pass, "p99 canary unknown (99 samples)"},
		// At 100 % the stable version answers nothing: the absolute bound
		// alone judges.
		{"alone, 3% errors", Figures{Requests: 300, Errors: 9}, Figures{}, Fail, "error rate 3.00%"},
		{"alone, slow", Figures{Requests: 300, Latencies: lat(100, time.Second)}, Figures{}, Pass, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := Judge(a, c.can, c.stable)
			if r.Verdict != c.want || !strings.Contains(r.Reason, c.reason) {
				t.Fatalf("Judge = %v: %s\nwant %v with %q", r.Verdict, r.Reason, c.want, c.reason)
			}
		})
	}
}

func TestP99(t *testing.T) {
	var ls []time.Duration
	for i := 1; i <= 100; i++ {
		ls = append(ls, time.Duration(i)*time.Millisecond)
	}
	if p, ok := (Figures{Latencies: ls}).P99(); !ok || p != 99*time.Millisecond {
		t.Fatalf("p99 of 1..100 ms = %s, %v", p, ok)
	}
}

// TestStepWeights: a step by weight keeps the share whatever the counts;
// one by instances gives every server the same weight, but at 100 %.
func TestStepWeights(t *testing.T) {
	for _, tc := range []struct {
		what       string
		step       config.CanaryStep
		c, s       int
		share, tol float64
	}{
		{"by weight, 1 of 4", config.CanaryStep{Weight: 25}, 1, 3, 25, 0.5},
		{"by weight after a scale-out", config.CanaryStep{Weight: 25}, 1, 9, 25, 0.5},
		{"by instances, 1 of 4", config.CanaryStep{Instances: 25}, 1, 3, 25, 1e-9},
		{"by instances, 2 of 7", config.CanaryStep{Instances: 25}, 2, 5, 100 * 2.0 / 7, 1e-9},
		{"by instances at 100%", config.CanaryStep{Instances: 100}, 3, 3, 100 * 256.0 / 257, 0.01},
	} {
		wc, ws := StepWeights(tc.step, tc.c, tc.s)
		if got := 100 * Share(tc.c, tc.s, wc, ws); math.Abs(got-tc.share) > tc.tol {
			t.Errorf("%s: weights %d/%d give %.2f%%, want %.2f%%", tc.what, wc, ws, got, tc.share)
		}
	}
}

// TestStepInstances: a step by weight keeps the count it started with
// through a scale-out; one by instances grows with the group; neither
// goes below the canary instances running.
func TestStepInstances(t *testing.T) {
	byWeight, byCount := config.CanaryStep{Weight: 25}, config.CanaryStep{Instances: 25}
	for _, tc := range []struct {
		what                            string
		step                            config.CanaryStep
		desired, started, running, want int
	}{
		{"by weight, at its start", byWeight, 3, 1, 0, 1},
		{"by weight, scaled out to 9", byWeight, 9, 1, 1, 1},
		{"by instances, scaled out to 5", byCount, 5, 1, 1, 2},
		{"by instances, scaled out to 9", byCount, 9, 1, 1, 3},
		{"by instances, scaled in to 2", byCount, 2, 1, 2, 2},
		{"by weight, more running than asked", byWeight, 3, 1, 2, 2},
	} {
		if got := StepInstances(tc.step, tc.desired, tc.started, tc.running); got != tc.want {
			t.Errorf("%s: %d canary instances, want %d", tc.what, got, tc.want)
		}
	}
}
