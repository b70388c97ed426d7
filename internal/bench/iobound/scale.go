package iobound

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/bench"
	"github.com/shoal-lb/shoal/internal/loadgen"
)

// policy is one scaling policy under test: the group's autoscale section.
type policy struct {
	Name, Desc string
	Autoscale  string
}

// policyNamed is the policy of that name for instances of workers each:
// the same target tracking on two metrics.
func policyNamed(name string, workers int) (policy, bool) {
	target := func(metric, value string) string {
		return `cooldown: {up: 0s, down: 0s}
autoscale:
  interval: 1s
  target:
    metric: ` + metric + `
    value: ` + value + `
    scale_in_stabilization: 30s
`
	}
	switch name {
	case "concurrency":
		v := strconv.FormatFloat(0.7*float64(workers), 'f', -1, 64)
		return policy{Name: name, Desc: "target concurrency " + v + " (0.7 × the workers, what `shoal init --max-conn` suggests): requests in flight per ready instance, from HAProxy's scur and queue", Autoscale: target("concurrency", v)}, true
	case "cpu":
		return policy{Name: name, Desc: "target cpu.avg 50 %: the usual policy, blind to an app that waits on I/O", Autoscale: target("cpu.avg", "50")}, true
	}
	return policy{}, false
}

// config is a group of 1 to maxSize instances under p.
func (p policy) config(port int, dir, backend string, s settings) string {
	return bench.BenchConfig(port, dir, "interval: 1s\nwarmup: 10s\n",
		bench.GroupYAMLArgs("web", backend, []string{"--workers", strconv.Itoa(s.workers)}, 1, s.maxSize, "500ms", p.Autoscale))
}

// scaleResult is one policy's run.
type scaleResult struct {
	Policy           string                `json:"policy"`
	Description      string                `json:"description"`
	ViolationSeconds int                   `json:"slo_violation_seconds"`
	Seconds          int                   `json:"seconds"`
	InstanceSeconds  int                   `json:"instance_seconds"`
	MaxSize          int                   `json:"max_in_service"`
	Scheduled        int64                 `json:"scheduled"`
	Completed        int64                 `json:"completed"`
	Errors           int64                 `json:"errors"`
	Late             int64                 `json:"late"`
	P99ms            float64               `json:"p99_ms"`
	CPUAvgMax        *float64              `json:"cpu_avg_max"`
	ConcurrencyMax   *float64              `json:"concurrency_max"`
	FirstScaleOutSec *float64              `json:"first_scale_out_after_step_s"`
	Sizes            []int                 `json:"in_service_per_second"`
	ScaleEvents      []bench.Event         `json:"scale_events"`
	Timeline         []loadgen.TimelineRow `json:"timeline"`
	FailureSamples   []string              `json:"failure_samples,omitempty"`
}

// violated reports whether a second missed the SLO.
func violated(s loadgen.Second, slo time.Duration) bool {
	return s.P99 > slo || s.Errors > 0 || s.Late > 0 || s.Completed < s.Scheduled
}

func runScale(ctx context.Context, env *bench.Env, p policy, backend, sbin string, s settings, schedule []loadgen.Segment) (*scaleResult, error) {
	sh, err := env.StartShoalOn(sbin, func(port int) string { return p.config(port, stateDir(env, "scale-"+p.Name), backend, s) })
	if err != nil {
		return nil, err
	}
	defer env.Stop(sh.Proc)
	if err := sh.WaitInService(ctx, "web", 1, 60*time.Second, bench.PollEvery); err != nil {
		return nil, err
	}
	// Both policies start from an instance in the metrics they read.
	mon := &bench.Monitor{API: sh.API, Group: "web", Window: 2 * time.Second}
	if err := bench.WaitView(ctx, mon, 2*time.Minute, func(v bench.View) bool { return v.Err == "" && v.Ready >= 1 && v.CPUAvg != nil }); err != nil {
		return nil, fmt.Errorf("the instance did not enter the metrics: %w", err)
	}
	r := &scaleResult{Policy: p.Name, Description: p.Desc}
	url := sh.URL(fmt.Sprintf("/work?ms=0&wait=%d", s.waitMS))
	var total time.Duration
	for _, seg := range schedule {
		total += seg.Duration
	}
	start := time.Now()
	load := bench.StartOpenLoad(ctx, loadgen.OpenOptions{URL: url, Schedule: schedule, Timeout: 10 * time.Second, MaxConns: 512})
	defer load.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	maxOf := func(cur *float64, v *float64) *float64 {
		if v != nil && (cur == nil || *v > *cur) {
			return bench.Num(*v)
		}
		return cur
	}
	for time.Since(start) < total {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		n, err := sh.API.InService(ctx, "web")
		if err != nil {
			n = -1 // unknown this second
		}
		r.Sizes = append(r.Sizes, n)
		if d, err := sh.API.Metrics(ctx, "web", 2*time.Second, ""); err == nil {
			r.CPUAvgMax = maxOf(r.CPUAvgMax, d.CPU.Avg)
			r.ConcurrencyMax = maxOf(r.ConcurrencyMax, d.Concurrency)
		}
		if err := mon.PollEvents(ctx); err != nil {
			env.Log.Warn("policy events", "err", err)
		}
	}
	res, err := load.Wait()
	if err != nil {
		return nil, err
	}
	if err := mon.PollEvents(ctx); err != nil {
		return nil, err
	}
	r.ScaleEvents = mon.Scaled
	stepAt := start.Add(schedule[0].Duration)
	for _, e := range mon.Scaled {
		if e.Recommendation > e.Current && e.Time.After(stepAt) {
			r.FirstScaleOutSec = bench.Num(e.Time.Sub(stepAt).Seconds())
			break
		}
	}
	r.Seconds, r.Scheduled, r.Completed, r.Errors, r.Late, r.P99ms = len(res.Seconds), res.Scheduled, res.Completed, res.Errors, res.Late, bench.Msf(res.P99)
	for _, sec := range res.Seconds {
		if violated(sec, s.slo) {
			r.ViolationSeconds++
		}
	}
	for _, n := range r.Sizes {
		r.MaxSize = max(r.MaxSize, n)
		r.InstanceSeconds += max(n, 0)
	}
	r.Timeline = res.Timeline()
	r.FailureSamples = res.FailureSamples
	return r, nil
}

// scaleFigures compares concurrency with cpu when both ran.
func scaleFigures(results []*scaleResult) []bench.Figure {
	by := map[string]*scaleResult{}
	for _, r := range results {
		by[r.Policy] = r
	}
	c, cpu := by["concurrency"], by["cpu"]
	if c == nil || cpu == nil {
		var fs []bench.Figure
		for _, r := range results {
			fs = append(fs, bench.Figure{Name: "SLO-violation seconds, " + r.Policy, Unit: "s", Value: bench.Num(float64(r.ViolationSeconds)),
				Note: fmt.Sprintf("instance-seconds %d", r.InstanceSeconds)})
		}
		return fs
	}
	num := func(v int) *float64 { return bench.Num(float64(v)) }
	return []bench.Figure{{
		Name: "SLO-violation seconds, target on concurrency", Unit: "s", Value: num(c.ViolationSeconds),
		Baseline: "target on cpu.avg", BaselineValue: num(cpu.ViolationSeconds), Ratio: bench.RatioOf(num(c.ViolationSeconds), num(cpu.ViolationSeconds)),
		Note: fmt.Sprintf("of %d and %d seconds", c.Seconds, cpu.Seconds),
	}, {
		Name: "instance-seconds, target on concurrency", Unit: "instance·s", Value: num(c.InstanceSeconds),
		Baseline: "target on cpu.avg", BaselineValue: num(cpu.InstanceSeconds), Ratio: bench.RatioOf(num(c.InstanceSeconds), num(cpu.InstanceSeconds)),
		Note: "what the SLO cost: instances in service, summed over the run's seconds",
	}}
}

func scaleMarkdown(results []*scaleResult) string {
	var b strings.Builder
	b.WriteString("\n### Scale: an I/O-bound app under a ×4 step\n\n")
	b.WriteString("| policy | SLO-violation seconds | of | instance-seconds | most in service | first scale-out after the step | p99 (whole run) | failed | late | cpu.avg at most | concurrency at most |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		first := "none"
		if r.FirstScaleOutSec != nil {
			first = fmt.Sprintf("%.0f s", *r.FirstScaleOutSec)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %s | %.0f ms | %d | %d | %s %% | %s |\n",
			r.Policy, r.ViolationSeconds, r.Seconds, r.InstanceSeconds, r.MaxSize, first, r.P99ms, r.Errors, r.Late, bench.F1(r.CPUAvgMax), bench.F1(r.ConcurrencyMax))
	}
	for _, r := range results {
		fmt.Fprintf(&b, "\nScale events of %s:\n", r.Policy)
		if len(r.ScaleEvents) == 0 {
			b.WriteString("- none\n")
		}
		for _, e := range r.ScaleEvents {
			fmt.Fprintf(&b, "- %s — %s\n", bench.Describe(e), e.Reason)
		}
	}
	return b.String()
}
