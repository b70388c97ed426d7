package reaction

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/loadgen"

	"github.com/shoal-lb/shoal/internal/bench"
)

// reaction measures how long shoal takes from a load step to the first new
// instance in service: a group of one instance with the rule "cpu.avg above
// THRESHOLD for 2s: add 1" gets an open-loop load that keeps its CPU well
// over the threshold, and the clock runs from the first request of the step
// until shoal reports a second instance in service. Each run also records
// when the policy decided (the decision's time), splitting the reaction
// into detection and start. The baseline, measured in the same run before
// each reaction run, is the start alone: the same scale-out asked for by
// hand (POST /v1/groups/web/scale, as `shoal scale web --size 2`) to in
// service. After each run the group is scaled back to one by hand and the
// load stopped until its CPU is below the threshold again.
var Command = &bench.Command{
	Name:    "reaction",
	Summary: "load step to the first new instance in service, by policy (for: 2s) vs by hand",
	Run:     runReaction,
}

const reactionGoal = 5 * time.Second

// reactionRun is one run.
type reactionRun struct {
	Manual    float64 `json:"manual_s"`              // scale by hand to in service
	Reaction  float64 `json:"reaction_s"`            // load step to in service
	Detection float64 `json:"detection_s,omitempty"` // load step to the decision
	Rule      string  `json:"rule,omitempty"`
	Reason    string  `json:"reason,omitempty"`
	JobID     string  `json:"job_id,omitempty"`
}

type reactionDetails struct {
	Runs []reactionRun `json:"runs"`
	// Medians and maxima in seconds.
	ReactionMedian  *float64 `json:"reaction_median_s"`
	ReactionMax     *float64 `json:"reaction_max_s"`
	ManualMedian    *float64 `json:"manual_median_s"`
	DetectionMedian *float64 `json:"detection_median_s"`
}

func runReaction(ctx context.Context, env *bench.Env, fs *flag.FlagSet, args []string) (*bench.Report, error) {
	runs := fs.Int("runs", 5, "runs")
	rate := fs.Float64("rate", 40, "open-loop rate of the step, requests/s")
	workMS := fs.Int("work-ms", 20, "CPU milliseconds per request (/work?ms=N); rate × work-ms / 10 is the CPU % of one instance")
	threshold := fs.Float64("threshold", 40, "the rule's cpu.avg threshold, %")
	forD := fs.Duration("for", 2*time.Second, "the rule's for")
	timeout := fs.Duration("timeout", 60*time.Second, "longest a run may take")
	var bins bench.BinFlags
	bins.Register(fs)
	if err := bench.Parse(fs, args); err != nil {
		return nil, err
	}
	stepCPU := *rate * float64(*workMS) / 10
	if *runs < 1 || *rate <= 0 || *workMS < 1 || *forD < time.Second || *timeout < 10*time.Second {
		return nil, bench.BadUsage("-runs >= 1, -rate > 0, -work-ms >= 1, -for >= 1s and -timeout >= 10s please")
	}
	if stepCPU <= *threshold {
		return nil, bench.BadUsage("the step (-rate × -work-ms = %.0f %% of a core) must exceed -threshold %.0f %%", stepCPU, *threshold)
	}
	backend, sbin, err := bins.Resolve()
	if err != nil {
		return nil, err
	}
	sh, err := env.StartShoalOn(sbin, func(port int) string {
		return reactionConfig(port, filepath.Join(env.Work, "state"), backend, *threshold, *forD)
	})
	if err != nil {
		return nil, err
	}
	if err := sh.WaitInService(ctx, "web", 1, 60*time.Second, bench.PollEvery); err != nil {
		return nil, err
	}
	url := sh.URL(fmt.Sprintf("/work?ms=%d", *workMS))

	rep := &bench.Report{Date: time.Now(), Machine: bench.NewMachine()}
	det := &reactionDetails{}
	rep.Details = det
	mon := &bench.Monitor{API: sh.API, Group: "web", Window: *forD + time.Second}
	for i := 1; i <= *runs; i++ {
		var r reactionRun
		// Baseline: the same scale-out by hand.
		t0 := time.Now()
		if err := sh.API.Size(ctx, "web", 2, *timeout); err != nil {
			return nil, fmt.Errorf("run %d, by hand: %w", i, err)
		}
		if err := sh.WaitInService(ctx, "web", 2, *timeout, bench.PollEvery); err != nil {
			return nil, fmt.Errorf("run %d, by hand: %w", i, err)
		}
		r.Manual = time.Since(t0).Seconds()
		if err := resetToOne(ctx, sh, mon, *threshold, *timeout); err != nil {
			return nil, fmt.Errorf("run %d: %w", i, err)
		}
		// The step.
		if err := mon.PollEvents(ctx); err != nil { // skip the decisions before the step
			return nil, err
		}
		seen := len(mon.Events)
		t0 = time.Now()
		load := bench.StartOpenLoad(ctx, loadgen.OpenOptions{
			URL: url, Timeout: 10 * time.Second,
			Schedule: []loadgen.Segment{{Rate: *rate, Duration: *timeout}},
		})
		// Polled every 50 ms: the reaction is timed to it.
		err := sh.WaitInService(ctx, "web", 2, *timeout, 50*time.Millisecond)
		r.Reaction = time.Since(t0).Seconds()
		if _, lerr := load.Stop(); err == nil {
			err = lerr
		}
		if err != nil {
			return nil, fmt.Errorf("run %d, by policy: %w", i, err)
		}
		if err := mon.PollEvents(ctx); err != nil {
			return nil, err
		}
		for _, e := range mon.Events[seen:] {
			if e.JobID != "" {
				r.Detection, r.Rule, r.Reason, r.JobID = e.Time.Sub(t0).Seconds(), e.Rule, e.Reason, e.JobID
				break
			}
		}
		env.Log.Info("run", "n", i, "of", *runs, "reaction_s", bench.Round2(r.Reaction), "detection_s", bench.Round2(r.Detection), "manual_s", bench.Round2(r.Manual))
		det.Runs = append(det.Runs, r)
		if err := resetToOne(ctx, sh, mon, *threshold, *timeout); err != nil {
			return nil, fmt.Errorf("run %d: %w", i, err)
		}
	}

	var reaction, manual, detection []float64
	for _, r := range det.Runs {
		reaction, manual = append(reaction, r.Reaction), append(manual, r.Manual)
		if r.JobID != "" {
			detection = append(detection, r.Detection)
		}
	}
	det.ReactionMedian, det.ReactionMax = bench.Num(bench.Median(reaction)), bench.Num(slices.Max(reaction))
	det.ManualMedian, det.DetectionMedian = bench.Num(bench.Median(manual)), bench.Num(bench.Median(detection))
	goal := fmt.Sprintf("<= %.0f s", reactionGoal.Seconds())
	ok := func(v float64) bool { return v <= reactionGoal.Seconds() }
	rep.Figures = []bench.Figure{{
		Name: fmt.Sprintf("reaction time, median of %d", len(reaction)), Unit: "s", Value: det.ReactionMedian,
		Baseline: "same scale-out by hand, median", BaselineValue: det.ManualMedian, Ratio: bench.RatioOf(det.ReactionMedian, det.ManualMedian),
		Goal: goal, Verdict: bench.Verdict(det.ReactionMedian, ok),
		Note: "from the first request of the step to a second instance in service; the baseline is the start alone (scale request to in service)",
	}, {
		Name: fmt.Sprintf("reaction time, max of %d", len(reaction)), Unit: "s", Value: det.ReactionMax,
		Goal: goal, Verdict: bench.Verdict(det.ReactionMax, ok),
	}, {
		Name: "detection (step to the policy's decision), median", Unit: "s", Value: det.DetectionMedian,
		Note: fmt.Sprintf("includes the rule's for: %s, 1 s samples and 1 s evaluations", *forD),
	}}
	rep.Settings = []bench.Setting{
		{Name: "group", Value: "1 instance of demo-backend (GOMAXPROCS=1, cpus: 1), max_size 2, health check every 250 ms, rise 2; metrics every 1 s, warmup 5 s"},
		{Name: "rule", Value: fmt.Sprintf("cpu.avg above %g for %s: add 1", *threshold, *forD)},
		{Name: "step", Value: fmt.Sprintf("open loop %g req/s of /work?ms=%d (%.0f %% of one core) from idle", *rate, *workMS, stepCPU)},
	}
	var md strings.Builder
	md.WriteString("| run | reaction | detection | by hand | decision |\n|---:|---:|---:|---:|---|\n")
	for i, r := range det.Runs {
		fmt.Fprintf(&md, "| %d | %.2f s | %.2f s | %.2f s | %s |\n", i+1, r.Reaction, r.Detection, r.Manual, r.Reason)
	}
	md.WriteString(`
Anchors (not measured here): Kubernetes' HPA syncs every 15 s, so >= 15 s plus the pod's start;
AWS target tracking needs 3 one-minute datapoints, >= 3 min plus the instance's start; the seed
(000: cron every 2 min on 5-minute metrics, then ~3.5 min to create a server) ~ 2 + 5 + 3.5 min.
`)
	rep.Markdown = md.String()
	return rep, nil
}

// reactionConfig is a group of one instance (at most 2) that adds one when
// cpu.avg stays above threshold for forD.
func reactionConfig(port int, stateDir, backend string, threshold float64, forD time.Duration) string {
	rule := fmt.Sprintf(`cooldown: {up: 0s, down: 0s}
autoscale:
  interval: 1s
  rules:
    - name: hot
      metric: cpu.avg
      above: %g
      for: %s
      action: {add: 1}
`, threshold, forD)
	return bench.BenchConfig(port, stateDir, "interval: 1s\nwarmup: 5s\n", bench.GroupYAML("web", backend, 1, 2, "250ms", rule))
}

// resetToOne scales web back to one idle instance by hand. It first waits
// until the CPU of the instances, averaged over the monitor's window (longer
// than the rule's for), is below threshold: scaled in while the window still
// holds the step's load, the rule would fire again at once.
func resetToOne(ctx context.Context, sh *bench.Shoal, mon *bench.Monitor, threshold float64, timeout time.Duration) error {
	idle := func(v bench.View) bool { return v.Err == "" && v.CPUAvg != nil && *v.CPUAvg < threshold }
	if err := bench.WaitView(ctx, mon, timeout, idle); err != nil {
		return fmt.Errorf("web not idle: %w", err)
	}
	if err := sh.API.Size(ctx, "web", 1, timeout); err != nil {
		return err
	}
	err := bench.WaitView(ctx, mon, timeout, func(v bench.View) bool {
		return idle(v) && v.InService == 1 && v.Desired == 1 && v.Ready == 1
	})
	if err != nil {
		return fmt.Errorf("web not back to 1 idle instance: %w", err)
	}
	return nil
}
