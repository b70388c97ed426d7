package overload

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/loadgen"

	"github.com/shoal-lb/shoal/internal/bench"
)

// overload counts the seconds in which a group was overloaded — the p99 of
// the requests scheduled in that second above the SLO, or any of them
// failed or not sent — in a run with two load steps: a base rate, three
// times it, and back. The same run is made with three policies, each on a
// fresh shoal with a group of one instance:
//
//	target    shoal's target tracking (cpu.avg 50 %) on 1 s metrics;
//	seed-000  the seed's cron script as rules (up when the average is
//	          above 50 %, down when it is above 1 and below 20 %, one 540 s
//	          cooldown) on 1-minute metrics evaluated every minute: a
//	          faster cadence than the seed's (a 2-minute cron on 5-minute
//	          averages), so that it can act within a 10-minute run;
//	seed-004  EC2's simple scaling (+1 when the 1-minute average is above
//	          75 %, −1 when the 25-minute average is below 35 %; cooldowns
//	          300 s and 1500 s), evaluated every minute as CloudWatch does.
//
// shoal's target is the figure; the seed policies are its baselines.
var Command = &bench.Command{
	Name:    "overload",
	Summary: "seconds over the p99 SLO in a ×3 load step: shoal's target tracking vs the seed 000 and 004 rules",
	Run:     runOverload,
}

// overloadPolicy is one policy under test: its metrics section and the
// group's cooldown and autoscale fields.
type overloadPolicy struct {
	Name, Desc     string
	Metrics, Extra string
}

var overloadPolicies = []overloadPolicy{{
	Name: "target", Desc: "shoal target tracking: cpu.avg 50 %, tolerance 0.1, scale-in stabilization 300 s; 1 s metrics",
	Metrics: "interval: 1s\nwarmup: 10s\n",
	Extra: `cooldown: {up: 0s, down: 0s}
autoscale:
  interval: 1s
  target:
    metric: cpu.avg
    value: 50
`,
}, {
	Name: "seed-000", Desc: "seed 000: cpu.avg 1-min average above 50.5 %: up, between 1.5 and 19.5 %: down, cooldown 540 s; 1 min metrics, evaluated every minute (the seed: every 2 min on 5-min averages)",
	Metrics: "interval: 1m\nwarmup: 10s\n",
	Extra: `cooldown: 540s
autoscale:
  interval: 1m
  rules:
    - name: scale-up
      metric: cpu.avg
      above: 50.5
      statistic: average
      over: 1m
      action: up
    - name: scale-down
      metric: cpu.avg
      above: 1.5
      below: 19.5
      statistic: average
      over: 1m
      action: down
`,
}, {
	Name: "seed-004", Desc: "seed 004: cpu.avg 1-min average above 75 %: +1; 25-min average below 35 %: −1, its own cooldown 1500 s; group cooldown 300 s; 1 min metrics, evaluated every minute",
	Metrics: "interval: 1m\nwarmup: 10s\n",
	Extra: `cooldown: 300s
autoscale:
  interval: 1m
  rules:
    - name: cdp-out
      metric: cpu.avg
      above: 75
      statistic: average
      over: 1m
      action: {add: 1}
    - name: cdp-down
      metric: cpu.avg
      below: 35
      statistic: average
      over: 25m
      action: {remove: 1}
      cooldown: 1500s
`,
}}

// config is a group of 1 to maxSize instances under the policy.
func (p overloadPolicy) config(port int, stateDir, backend string, maxSize int) string {
	return bench.BenchConfig(port, stateDir, p.Metrics, bench.GroupYAML("web", backend, 1, maxSize, "500ms", p.Extra))
}

// window is twice the policy's metrics interval: long enough to hold a sample.
func (p overloadPolicy) window() time.Duration {
	if strings.Contains(p.Metrics, "interval: 1m") {
		return 2 * time.Minute
	}
	return 2 * time.Second
}

// overloadResult is one policy's run.
type overloadResult struct {
	Policy           string                `json:"policy"`
	Description      string                `json:"description"`
	OverloadSeconds  int                   `json:"overload_seconds"`
	Seconds          int                   `json:"seconds"`
	Scheduled        int64                 `json:"scheduled"`
	Completed        int64                 `json:"completed"`
	Errors           int64                 `json:"errors"`
	Late             int64                 `json:"late"`
	P99ms            float64               `json:"p99_ms"`
	MaxSize          int                   `json:"max_in_service"`
	InstanceSeconds  int                   `json:"instance_seconds"`
	ScaleEvents      []bench.Event         `json:"scale_events"`
	Sizes            []int                 `json:"in_service_per_second"`
	Timeline         []loadgen.TimelineRow `json:"timeline"`
	FirstScaleOutSec *float64              `json:"first_scale_out_after_step_s"`
	FailureSamples   []string              `json:"failure_samples,omitempty"`
	// Decisions counts the policy's recorded decisions by outcome and code,
	// so a policy that never scaled shows why.
	Decisions map[string]int `json:"decisions"`
}

func runOverload(ctx context.Context, env *bench.Env, fs *flag.FlagSet, args []string) (*bench.Report, error) {
	minutes := fs.Float64("minutes", 10, "length of each policy's run")
	rate := fs.Float64("rate", 35, "base open-loop rate, requests/s (the step is 3×)")
	workMS := fs.Int("work-ms", 10, "CPU milliseconds per request (/work?ms=N)")
	slo := bench.SLOFlag(fs)
	maxSize := fs.Int("max-size", 4, "the group's max_size")
	which := fs.String("policies", "target,seed-000,seed-004", "policies to run, comma-separated")
	var bins bench.BinFlags
	bins.Register(fs)
	if err := bench.Parse(fs, args); err != nil {
		return nil, err
	}
	if *minutes < 1.0/6 || *rate <= 0 || *workMS < 1 || *slo <= 0 || *maxSize < 2 || *maxSize > bench.GroupCap {
		return nil, bench.BadUsage("-minutes >= 0.17, -rate > 0, -work-ms >= 1, -slo > 0 and -max-size 2..%d please", bench.GroupCap)
	}
	var policies []overloadPolicy
	for name := range strings.SplitSeq(*which, ",") {
		i := slices.IndexFunc(overloadPolicies, func(p overloadPolicy) bool { return p.Name == strings.TrimSpace(name) })
		if i < 0 {
			return nil, bench.BadUsage("-policies: unknown %q (want target, seed-000, seed-004)", name)
		}
		policies = append(policies, overloadPolicies[i])
	}
	backend, sbin, err := bins.Resolve()
	if err != nil {
		return nil, err
	}
	total := time.Duration(*minutes * float64(time.Minute)).Round(time.Second)
	schedule := stepSchedule(*rate, total)

	rep := &bench.Report{Date: time.Now(), Machine: bench.NewMachine()}
	var results []*overloadResult
	rep.Details = &results
	for _, p := range policies {
		env.Log.Info("overload run", "policy", p.Name, "minutes", *minutes)
		r, err := runOverloadPolicy(ctx, env, p, backend, sbin, *maxSize, *workMS, schedule, *slo)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		env.Log.Info("overload result", "policy", p.Name, "overload_seconds", r.OverloadSeconds, "max_in_service", r.MaxSize, "errors", r.Errors, "late", r.Late)
		results = append(results, r)
	}

	byName := map[string]*overloadResult{}
	for _, r := range results {
		byName[r.Policy] = r
	}
	t := byName["target"]
	for _, seed := range []string{"seed-000", "seed-004"} {
		s := byName[seed]
		if t == nil || s == nil {
			continue
		}
		rep.Figures = append(rep.Figures, bench.Figure{
			Name: "overload seconds, shoal target tracking", Unit: "s", Value: bench.Num(float64(t.OverloadSeconds)),
			Baseline: seed + " rules", BaselineValue: bench.Num(float64(s.OverloadSeconds)),
			Ratio: bench.RatioOf(bench.Num(float64(t.OverloadSeconds)), bench.Num(float64(s.OverloadSeconds))),
			Note:  fmt.Sprintf("instance-seconds used: %d (target) vs %d (%s)", t.InstanceSeconds, s.InstanceSeconds, seed),
		})
	}
	if len(rep.Figures) == 0 { // not both sides of a comparison: each on its own
		for _, r := range results {
			rep.Figures = append(rep.Figures, bench.Figure{Name: "overload seconds, " + r.Policy, Unit: "s", Value: bench.Num(float64(r.OverloadSeconds))})
		}
	}
	rep.Settings = []bench.Setting{
		{Name: "load", Value: fmt.Sprintf("open loop on /work?ms=%d: %s (×3 and back); %g req/s is %.0f %% of one core", *workMS, describeSchedule(schedule), *rate, *rate*float64(*workMS)/10)},
		{Name: "SLO", Value: fmt.Sprintf("p99 of the requests scheduled in a second <= %v (client side, from the scheduled instant); a second with a failed or unsent request is overloaded too", *slo)},
		{Name: "group", Value: fmt.Sprintf("demo-backends (GOMAXPROCS=1, cpus: 1), min_size 1, max_size %d, metrics warmup 10 s; the load starts once the first instance is in the metrics", *maxSize)},
	}
	for _, p := range policies {
		rep.Settings = append(rep.Settings, bench.Setting{Name: "policy " + p.Name, Value: p.Desc})
	}
	rep.Markdown = overloadMarkdown(results)
	return rep, nil
}

// stepSchedule is rate for the first fifth of total, 3×rate for half, and
// rate for the rest.
func stepSchedule(rate float64, total time.Duration) []loadgen.Segment {
	first := (total / 5).Round(time.Second)
	high := (total / 2).Round(time.Second)
	return []loadgen.Segment{{Rate: rate, Duration: first}, {Rate: 3 * rate, Duration: high}, {Rate: rate, Duration: total - first - high}}
}

func describeSchedule(segs []loadgen.Segment) string {
	var parts []string
	for _, s := range segs {
		parts = append(parts, fmt.Sprintf("%g req/s for %v", s.Rate, s.Duration))
	}
	return strings.Join(parts, ", ")
}

// overloaded reports whether a second missed the SLO.
func overloaded(s loadgen.Second, slo time.Duration) bool {
	return s.P99 > slo || s.Errors > 0 || s.Late > 0 || s.Completed < s.Scheduled
}

func runOverloadPolicy(ctx context.Context, env *bench.Env, p overloadPolicy, backend, sbin string, maxSize, workMS int, schedule []loadgen.Segment, slo time.Duration) (*overloadResult, error) {
	sh, err := env.StartShoalOn(sbin, func(port int) string {
		return p.config(port, filepath.Join(env.Work, "state-"+p.Name), backend, maxSize)
	})
	if err != nil {
		return nil, err
	}
	defer env.Stop(sh.Proc)
	if err := sh.WaitInService(ctx, "web", 1, 60*time.Second, bench.PollEvery); err != nil {
		return nil, err
	}
	// The load starts once the instance is in the metrics the policy reads
	// (past warmup, sampled): before, every policy is blind alike.
	mon := &bench.Monitor{API: sh.API, Group: "web", Window: p.window()}
	if err := bench.WaitView(ctx, mon, 3*time.Minute, func(v bench.View) bool { return v.Err == "" && v.Ready >= 1 && v.CPUAvg != nil }); err != nil {
		return nil, fmt.Errorf("the instance did not enter the metrics: %w", err)
	}
	r := &overloadResult{Policy: p.Name, Description: p.Desc}
	url := sh.URL(fmt.Sprintf("/work?ms=%d", workMS))

	start := time.Now()
	load := bench.StartOpenLoad(ctx, loadgen.OpenOptions{URL: url, Schedule: schedule, Timeout: 10 * time.Second})
	defer load.Stop()
	tick := time.NewTicker(time.Second)
	var total time.Duration
	for _, s := range schedule {
		total += s.Duration
	}
	for time.Since(start) < total {
		select {
		case <-ctx.Done():
			tick.Stop()
			load.Stop()
			return nil, ctx.Err()
		case <-tick.C:
		}
		n, err := sh.API.InService(ctx, "web")
		if err != nil {
			n = -1 // unknown this second
		}
		r.Sizes = append(r.Sizes, n)
		// Every second: a page holds 100, and a long run makes more.
		if err := mon.PollEvents(ctx); err != nil {
			env.Log.Warn("policy events", "err", err)
		}
	}
	tick.Stop()
	res, err := load.Wait()
	if err != nil {
		return nil, err
	}
	if err := mon.PollEvents(ctx); err != nil {
		return nil, err
	}
	r.ScaleEvents = mon.Scaled
	r.Decisions = map[string]int{}
	for _, e := range mon.Events {
		if !e.Time.Before(start) {
			r.Decisions[strings.TrimSuffix(string(e.Outcome)+" "+string(e.Code), " ")]++
		}
	}
	stepAt := start.Add(schedule[0].Duration)
	for _, e := range mon.Scaled {
		if e.Recommendation > e.Current && e.Time.After(stepAt) {
			r.FirstScaleOutSec = bench.Num(e.Time.Sub(stepAt).Seconds())
			break
		}
	}
	r.Seconds, r.Scheduled, r.Completed, r.Errors, r.Late, r.P99ms = len(res.Seconds), res.Scheduled, res.Completed, res.Errors, res.Late, bench.Msf(res.P99)
	for _, s := range res.Seconds {
		if overloaded(s, slo) {
			r.OverloadSeconds++
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

func overloadMarkdown(results []*overloadResult) string {
	var b strings.Builder
	b.WriteString("| policy | overload seconds | of | first scale-out after the step | most in service | instance-seconds | p99 (whole run) | failed | late |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		first := "none"
		if r.FirstScaleOutSec != nil {
			first = fmt.Sprintf("%.0f s", *r.FirstScaleOutSec)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %d | %d | %.0f ms | %d | %d |\n",
			r.Policy, r.OverloadSeconds, r.Seconds, first, r.MaxSize, r.InstanceSeconds, r.P99ms, r.Errors, r.Late)
	}
	for _, r := range results {
		var counts []string
		for _, k := range slices.Sorted(maps.Keys(r.Decisions)) {
			counts = append(counts, fmt.Sprintf("%s %d", k, r.Decisions[k]))
		}
		if len(counts) == 0 {
			counts = []string{"none"}
		}
		fmt.Fprintf(&b, "\nDecisions of %s during the load: %s. Scale events:\n", r.Policy, strings.Join(counts, ", "))
		if len(r.ScaleEvents) == 0 {
			b.WriteString("- none\n")
		}
		for _, e := range r.ScaleEvents {
			fmt.Fprintf(&b, "- %s — %s\n", bench.Describe(e), e.Reason)
		}
	}
	return b.String()
}
