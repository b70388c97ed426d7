// Package canary is the pure logic of a canary deploy: the HAProxy weights
// that give the canary its share of the requests whatever the instance
// counts, how many canary instances a step runs, and the analysis that
// compares the canary with the stable version over one window; and a
// blue/green deploy's phases (bluegreen.go), whose analysis is the same.
// The group runs the deploys (group/canary.go, group/bluegreen.go);
// nothing here reads a clock or HAProxy.
package canary

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

// MaxWeight is HAProxy's highest server weight.
const MaxWeight = 256

// minLatencySamples is the fewest sampled requests a p99 is taken of:
// of fewer, the "p99" is the slowest one or two, and a fresh instance's
// first requests (new connections, a cold runtime) on a busy machine
// failed a good canary on 26 samples.
const minLatencySamples = 100

// Weights returns the per-server weights that give canaries servers of the
// canary version percent % of the requests and stables servers of the
// stable version the rest: canaries×wc / (canaries×wc + stables×ws) is as
// close to percent as HAProxy's weights (1 to 256) allow. At 100 % a
// stable server keeps weight 1 (1/257 of a canary's share, while a step of
// 100 % runs as many canaries as the group's size): a weight that
// survives HAProxy's restarts and reloads as any other, for the moment
// until the stable servers are retired.
func Weights(canaries, stables int, percent float64) (wc, ws int) {
	switch {
	case canaries <= 0:
		return 1, MaxWeight
	case percent >= 100 || stables <= 0:
		return MaxWeight, 1
	}
	p := percent / 100
	best, bestErr := [2]int{1, MaxWeight}, math.Inf(1)
	for s := MaxWeight; s >= 1; s-- {
		c := int(math.Round(p * float64(stables) * float64(s) / ((1 - p) * float64(canaries))))
		c = min(max(c, 1), MaxWeight)
		share := float64(canaries*c) / float64(canaries*c+stables*s)
		if e := math.Abs(share - p); e < bestErr-1e-12 {
			best, bestErr = [2]int{c, s}, e
		}
	}
	return best[0], best[1]
}

// Share is the share of requests (0 to 1) weights wc and ws give the
// canary with these instance counts.
func Share(canaries, stables, wc, ws int) float64 {
	total := canaries*wc + stables*ws
	if total == 0 {
		return 0
	}
	return float64(canaries*wc) / float64(total)
}

// Instances is how many canary instances a step of percent % runs beside a
// group of desired: its share of the group, at least one, so that a step
// of 100 % has the capacity of the whole group.
func Instances(desired int, percent float64) int {
	return max(1, int(math.Ceil(float64(desired)*percent/100-1e-9)))
}

// StepInstances is how many canary instances step runs with the group's
// desired size now, started being how many it wanted at its start and
// running how many run now. A step by weight keeps the count it started
// with: a scale-out adds stable instances and the weights keep the
// canary's share of the requests. A step by instance count grows with the
// group. Neither shrinks: a scale-in retires stable instances only, so
// the canary keeps what it is judged on.
func StepInstances(step config.CanaryStep, desired, started, running int) int {
	want := started
	if step.ByInstances() {
		want = max(want, Instances(desired, step.Instances))
	}
	return max(want, running)
}

// StepWeights returns the weights of canary and stable servers in step: a
// step by weight gives the canary its share of the requests (Weights); a
// step by instance count gives every server the same weight, so the
// canary's share is its share of the servers (at 100 % the stable servers
// keep weight 1, as a step by weight's).
func StepWeights(step config.CanaryStep, canaries, stables int) (wc, ws int) {
	if !step.ByInstances() || step.Instances >= 100 || canaries <= 0 {
		return Weights(canaries, stables, step.Share())
	}
	return MaxWeight, MaxWeight
}

// Figures are one version's answers over a window: HAProxy's requests and
// 5xx answers (differences of req_tot and hrsp_5xx), and the access log's
// sampled times to respond.
type Figures struct {
	Requests  int64           `json:"requests"`
	Errors    int64           `json:"errors"`
	Latencies []time.Duration `json:"-"`
}

// ErrorRate is the share of 5xx answers, 0 to 1 (0 without requests).
func (f Figures) ErrorRate() float64 {
	if f.Requests <= 0 {
		return 0
	}
	return float64(f.Errors) / float64(f.Requests)
}

// P99 is the 99th percentile of the sampled latencies and whether there
// were enough samples to tell.
func (f Figures) P99() (time.Duration, bool) {
	if len(f.Latencies) < minLatencySamples {
		return 0, false
	}
	s := slices.Clone(f.Latencies)
	slices.Sort(s)
	i := int(math.Ceil(0.99*float64(len(s)))) - 1
	return s[max(i, 0)], true
}

// Verdict is what one analysis decided.
type Verdict int

// Verdicts.
const (
	// Wait: the canary has answered fewer than min_requests in the window.
	Wait Verdict = iota
	Pass
	Fail
)

func (v Verdict) String() string {
	return [...]string{"waiting for min_requests", "pass", "fail"}[v]
}

// Result is a verdict and the figures that decided it, in words.
type Result struct {
	Verdict Verdict
	// Reason states the figures of both versions and the bound; for a
	// failure, the bound crossed.
	Reason string
}

// Judge compares the canary with the stable version over the same window.
// It fails the canary when its error rate is beyond both bounds of
// max_error_rate that are set (above, and vs_stable × the stable
// version's), or its p99 beyond both of max_p99's; a bound needing the
// stable version's figure is judged only when the stable version has
// figures (at a step of 100 % it gets no request). Before the canary has
// answered min_requests it waits.
func Judge(a config.CanaryAnalysis, can, stable Figures) Result {
	figures := fmt.Sprintf("canary %d requests, %d 5xx (%.2f%%); stable %d requests, %d 5xx (%.2f%%)",
		can.Requests, can.Errors, 100*can.ErrorRate(), stable.Requests, stable.Errors, 100*stable.ErrorRate())
	cp, cok := can.P99()
	sp, sok := stable.P99()
	if a.MaxP99 != nil {
		figures += "; p99 canary " + p99Text(cp, cok, len(can.Latencies)) + ", stable " + p99Text(sp, sok, len(stable.Latencies))
	}
	if can.Requests < int64(a.MinRequests) {
		return Result{Verdict: Wait, Reason: fmt.Sprintf("%s; judged from %d canary requests (min_requests)", figures, a.MinRequests)}
	}
	if e := a.MaxErrorRate; e != nil {
		rate := can.ErrorRate()
		over := e.Above == 0 || rate*100 > e.Above
		vs := e.VsStable == 0 || stable.Requests == 0 || rate > e.VsStable*stable.ErrorRate()
		if e.Above == 0 && stable.Requests == 0 {
			vs = false // nothing to compare with and no absolute bound
		}
		if over && vs {
			return Result{Verdict: Fail, Reason: fmt.Sprintf("error rate %.2f%% beyond max_error_rate (%s): %s", 100*rate, errorBound(*e), figures)}
		}
	}
	if p := a.MaxP99; p != nil && cok {
		over := p.Above == 0 || cp > p.Above
		// The access log times in whole milliseconds: a stable p99 of 0
		// is under 1 ms, not nothing (a canary at 1 ms is not 3x it).
		vs := p.VsStable == 0 || !sok || float64(cp) > p.VsStable*float64(max(sp, latencyResolution))
		if p.Above == 0 && !sok {
			vs = false
		}
		if over && vs {
			return Result{Verdict: Fail, Reason: fmt.Sprintf("p99 %s beyond max_p99 (%s): %s", cp.Round(time.Millisecond), p99Bound(*p), figures)}
		}
	}
	return Result{Verdict: Pass, Reason: figures}
}

// latencyResolution is the access log's: its timers are whole milliseconds.
const latencyResolution = time.Millisecond

func p99Text(d time.Duration, ok bool, n int) string {
	if !ok {
		return fmt.Sprintf("unknown (%d samples)", n)
	}
	return fmt.Sprintf("%s (%d samples)", d.Round(100*time.Microsecond), n)
}

func errorBound(e config.CanaryErrorRate) string {
	switch {
	case e.Above > 0 && e.VsStable > 0:
		return fmt.Sprintf("above %g%% and %gx the stable version's", e.Above, e.VsStable)
	case e.Above > 0:
		return fmt.Sprintf("above %g%%", e.Above)
	}
	return fmt.Sprintf("%gx the stable version's", e.VsStable)
}

func p99Bound(p config.CanaryP99) string {
	switch {
	case p.Above > 0 && p.VsStable > 0:
		return fmt.Sprintf("above %s and %gx the stable version's", p.Above, p.VsStable)
	case p.Above > 0:
		return fmt.Sprintf("above %s", p.Above)
	}
	return fmt.Sprintf("%gx the stable version's", p.VsStable)
}
