package compare

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/sim"

	"github.com/shoal-lb/shoal/internal/bench"
)

// compare simulates the policies the autoscaling issue compares on the World
// Cup 1998 day, each with the same policy code as the live loop
// (internal/sim), at the local start delay and at the seeds' cloud's 3.5
// minutes. It needs no processes: a day takes seconds per policy.
var Command = &bench.Command{
	Name:    "compare",
	Summary: "simulate static, seed 000/004, HPA-style, recommended and predictive policies on the World Cup 1998 day",
	Run:     runCompare,
}

// comparedPolicy is one row of the comparison.
type comparedPolicy struct {
	key, file string
	// resolution of the load metrics the policy sees (its native cadence).
	resolution time.Duration
	about      string
}

var comparedPolicies = []comparedPolicy{
	{"seed-000", "bench/policies/seed-000-native.yaml", 5 * time.Minute,
		"cron every 2 min on the 5-min average CPU: up > 50 %, down when 1 < CPU < 20 %, plans 2/3/5, cooldown 540 s"},
	{"seed-004", "bench/policies/seed-004-native.yaml", time.Minute,
		"1-min CPU evaluated every minute: +1 when the 1-min average > 75 % (300 s), -1 when the 25-min average < 35 % (1500 s), 1..9"},
	{"hpa-style", "bench/policies/hpa-style.yaml", 15 * time.Second,
		"target 70 % CPU, 15 s sync on 15 s averages, tolerance 0.1, 300 s stabilization"},
	{"recommended", "examples/recommended.yaml", 0,
		"target 44 % CPU p90 per second, 2 min stabilization, in by 1 a minute"},
	{twinKey, "bench/policies/reactive-75.yaml", 0,
		"predictive's target (75 % CPU p90, 2 min stabilization) without the forecast: its reactive twin"},
	{predictiveKey, "examples/recommended-predictive.yaml", 0,
		"target 75 % CPU p90, 2 min stabilization + forecast floor (7 d lookback, 1 h horizon, forecast_and_scale)"},
}

const (
	twinKey       = "reactive-75"
	predictiveKey = "predictive"
)

// The reactive settings the predictive policy is measured against: its twin
// with every target from 40 to 84 % CPU p90 in steps of 2 and each of these
// scale-in stabilizations. A reactive target can always buy fewer violations
// with more instances, so predictive must beat the best of them that fits in
// its own instance-seconds, not one chosen setting.
var (
	sweepTargets           = []float64{40, 42, 44, 46, 48, 50, 52, 54, 56, 58, 60, 62, 64, 66, 68, 70, 72, 74, 76, 78, 80, 82, 84}
	sweepStabilizations    = []time.Duration{0, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute}
	reactiveTargetTracking = []string{"hpa-style", "recommended", twinKey}
)

type compareRow struct {
	Policy           string  `json:"policy"`
	About            string  `json:"about"`
	File             string  `json:"file,omitempty"`
	Resolution       string  `json:"metric_resolution"`
	InstanceSeconds  float64 `json:"instance_seconds"`
	VsStatic         float64 `json:"instance_seconds_vs_static"`
	ViolationSeconds float64 `json:"slo_violation_seconds"`
	ScaleEvents      int     `json:"scale_events"`
	Ups              int     `json:"scale_ups"`
	Downs            int     `json:"scale_downs"`
	MaxSize          int     `json:"max_size"`
}

type compareRun struct {
	StartDelay string       `json:"start_delay"`
	Plot       string       `json:"plot"`
	Rows       []compareRow `json:"rows"`
	// Sweep is the predictive policy and its reactive twin at each swept
	// setting; SweepPlot their trade-off.
	Sweep     sweepResult `json:"sweep"`
	SweepPlot string      `json:"sweep_plot"`
}

func runCompare(ctx context.Context, env *bench.Env, fs *flag.FlagSet, args []string) (*bench.Report, error) {
	var trc bench.TraceFlags
	trc.Register(fs)
	capacity := fs.Float64("capacity", 100, "req/s one instance serves at 100% CPU")
	baseP99 := fs.Duration("base-p99", 20*time.Millisecond, "the backend's p99 without queueing")
	serviceCV := fs.Float64("service-cv", 1, "coefficient of variation of a request's service time (1: exponential, M/M/c; 0: constant)")
	slo := bench.SLOFlag(fs)
	local := fs.Duration("local-start-delay", sim.LocalStartDelay, "the local start delay")
	cloud := fs.Duration("cloud-start-delay", sim.CloudStartDelay, "the seeds' cloud start delay")
	daysFlag := fs.String("days", "", "FROM..TO (UTC dates, both included): evaluate every policy on each day of the range, 08:00 to 08:00 UTC, instead of -from/-to")
	tunedUntil := fs.String("tuned-until", "1998-07-05", "with -days: the last day the policies were tuned on; the days up to it and the days after it (untested) are also reported apart (\"\": no split)")
	rowsFile := fs.String("rows", "", "with -days: take each day's rows from an earlier compare --days report (its .json) instead of simulating them again; the goals, aggregates and the split are computed anew")
	if err := bench.Parse(fs, args); err != nil {
		return nil, err
	}
	if *rowsFile != "" && *daysFlag == "" {
		return nil, bench.BadUsage("-rows needs -days")
	}
	if !(*capacity > 0) || *slo <= 0 || *baseP99 < 0 || *local < 0 || *cloud < 0 || !(*serviceCV >= 0) {
		return nil, bench.BadUsage("-capacity and -slo > 0, -base-p99, -service-cv and start delays >= 0 please")
	}
	var days []time.Time
	if *daysFlag != "" {
		var err error
		if days, err = parseDays(*daysFlag); err != nil {
			return nil, bench.BadUsage("-days: %v", err)
		}
		if *tunedUntil != "" {
			if *tunedUntil, err = parseDate(*tunedUntil); err != nil {
				return nil, bench.BadUsage("-tuned-until: %v", err)
			}
		}
	}
	tw, err := trc.Read()
	if err != nil {
		return nil, err
	}
	model := sim.Model{Capacity: *capacity, BaseP99: *baseP99, ServiceCV: *serviceCV}
	var pols []sim.Policy
	for _, cp := range comparedPolicies {
		p, err := sim.LoadPolicy(cp.file, "")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cp.key, err)
		}
		p.Name = cp.key
		pols = append(pols, p)
	}
	delays := []namedDelay{{"local", *local}, {"cloud", *cloud}}
	if days != nil {
		return compareDays(ctx, env, tw, days, model, *slo, delays, pols, *tunedUntil, *rowsFile)
	}
	series, fromT, toT, w := tw.Series, tw.From, tw.To, tw.Window
	scale, err := sim.DefaultScale(w, *capacity)
	if err != nil {
		return nil, err
	}
	_, rates, hist, err := sim.Window(series, fromT, toT, scale, 7*24*time.Hour)
	if err != nil {
		return nil, err
	}
	staticN, err := model.StaticFor(rates, *slo)
	if err != nil {
		return nil, err
	}

	rep := &bench.Report{Date: time.Now(), Machine: bench.NewMachine()}
	peak, peakAt := w.Peak()
	rep.Settings = []bench.Setting{
		{Name: "trace", Value: fmt.Sprintf("%s, %s to %s (peak %.0f/min at %s)", filepath.Base(tw.Path), fromT.Format("2006-01-02 15:04"), toT.Format("2006-01-02 15:04 UTC"), peak, peakAt.Format("15:04"))},
		{Name: "scale S", Value: fmt.Sprintf("%.5g (req/s = requests per minute × S / 60; the peak is %.0f req/s, %d instances' worth at 90 %%)", scale, peak*scale/60, sim.PeakInstances)},
		{Name: "model", Value: fmt.Sprintf("%.0f req/s per instance at 100 %% CPU, base p99 %s, M/M/c (Erlang C) p99 with service time CV %g, and the queue an overload leaves; SLO p99 %s", *capacity, *baseP99, *serviceCV, *slo)},
		{Name: "collector", Value: "1 s samples (coarser where a policy's native cadence says), 30 s warmup excluded from aggregates"},
		{Name: "history", Value: "the 7 days before the window, per minute, for predictive"},
		{Name: "static at peak", Value: fmt.Sprintf("%d instances", staticN)},
		{Name: "command", Value: "shoal-bench compare (or per policy: shoal policy simulate --policy FILE --start-delay D [--resolution R])"},
	}
	outDir := "bench/results"
	if f := fs.Lookup("out"); f != nil {
		outDir = f.Value.String()
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	staticSecs := float64(staticN) * toT.Sub(fromT).Seconds()
	var (
		runs []compareRun
		md   strings.Builder
	)
	for _, delay := range delays {
		run := compareRun{StartDelay: delay.d.String()}
		var plots []sim.Series
		all := append([]sim.Policy{sim.Static(pols[0], staticN)}, pols...)
		for i, p := range all {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			row := compareRow{Policy: p.Name, About: "fixed at the size the peak needs", Resolution: "1s"}
			var res time.Duration
			if i > 0 {
				cp := comparedPolicies[i-1]
				row.About, row.File, res = cp.about, cp.file, cp.resolution
				if res > 0 {
					row.Resolution = res.String()
				}
			}
			r, err := sim.Simulate(sim.Run{Group: p.Group, Model: model, SLO: *slo, StartDelay: delay.d, Interval: p.Interval,
				Warmup: p.Warmup, Resolution: res, Initial: p.Group.MinSize, Start: fromT, Rates: rates, History: hist})
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p.Name, err)
			}
			row.InstanceSeconds, row.VsStatic, row.ViolationSeconds = r.InstanceSeconds, r.InstanceSeconds/staticSecs, r.ViolationSeconds
			row.ScaleEvents, row.Ups, row.Downs, row.MaxSize = r.ScaleEvents, r.Ups, r.Downs, r.MaxSize
			run.Rows = append(run.Rows, row)
			plots = append(plots, sim.Series{Name: p.Name, Minutes: r.Minutes})
			env.Log.Info("simulated", "policy", p.Name, "start_delay", delay.d, "instance_seconds", r.InstanceSeconds, "violation_seconds", r.ViolationSeconds)
		}
		run.Plot = filepath.Join(outDir, rep.Date.UTC().Format("20060102-150405")+"-compare-"+delay.name+".svg")
		f, err := os.Create(run.Plot)
		if err != nil {
			return nil, err
		}
		title := fmt.Sprintf("World Cup 1998, %s to %s; start delay %s", fromT.Format("01-02 15:04"), toT.Format("01-02 15:04 UTC"), delay.d)
		if err := errors.Join(sim.WriteSVG(f, title, plots), f.Close()); err != nil {
			return nil, err
		}
		base := sim.Run{Model: model, SLO: *slo, StartDelay: delay.d, Start: fromT, Rates: rates, History: hist}
		if run.Sweep, err = sweep(ctx, base, pols); err != nil {
			return nil, err
		}
		run.SweepPlot = strings.TrimSuffix(run.Plot, ".svg") + "-tradeoff.svg"
		if err := writeTradeoff(run, title); err != nil {
			return nil, err
		}
		runs = append(runs, run)
		rep.Figures = append(rep.Figures, compareFigures(delay.name, run)...)

		fmt.Fprintf(&md, "## Start delay %s (%s)\n\nPlot: `%s`\n\n", delay.d, delay.name, filepath.Base(run.Plot))
		md.WriteString("| policy | instance-seconds | vs static | SLO-violation seconds | scale events (up/down) | max size | metric resolution | what |\n|---|---:|---:|---:|---:|---:|---|---|\n")
		for _, r := range run.Rows {
			fmt.Fprintf(&md, "| %s | %.0f | %.3f | %.0f | %d (%d/%d) | %d | %s | %s |\n", r.Policy, r.InstanceSeconds, r.VsStatic,
				r.ViolationSeconds, r.ScaleEvents, r.Ups, r.Downs, r.MaxSize, r.Resolution, r.About)
		}
		md.WriteString("\n")
		writeSweepMarkdown(&md, run)
	}
	rep.Details = map[string]any{"scale": scale, "static_at_peak": staticN, "runs": runs}
	rep.Markdown = md.String()
	return rep, nil
}

// compareFigures states the goals for one start delay.
func compareFigures(delay string, run compareRun) []bench.Figure {
	rows := run.Rows
	by := map[string]compareRow{}
	for _, r := range rows {
		by[r.Policy] = r
	}
	rec, static, pred := by["recommended"], rows[0], by[predictiveKey]
	ratio := rec.InstanceSeconds / static.InstanceSeconds
	figs := []bench.Figure{{
		Name: fmt.Sprintf("%s: recommended instance-seconds", delay), Unit: "s", Value: bench.Num(rec.InstanceSeconds),
		Baseline: static.Policy, BaselineValue: bench.Num(static.InstanceSeconds), Ratio: bench.Num(ratio),
		Goal: "<= 0.6× static", Verdict: bench.Verdict(bench.Num(ratio), func(v float64) bool { return v <= 0.6 }),
	}}
	for _, other := range []string{"seed-000", "seed-004", "hpa-style"} {
		o := by[other]
		f := bench.Figure{
			Name: fmt.Sprintf("%s: recommended SLO-violation seconds", delay), Unit: "s", Value: bench.Num(rec.ViolationSeconds),
			Baseline: other, BaselineValue: bench.Num(o.ViolationSeconds), Goal: "fewer than " + other,
			Verdict: bench.Verdict(bench.Num(rec.ViolationSeconds), func(v float64) bool { return v < o.ViolationSeconds }),
		}
		if rec.ViolationSeconds == 0 && o.ViolationSeconds == 0 {
			f.Note = fmt.Sprintf("both have none; %s uses %.0f instance-seconds more", other, o.InstanceSeconds-rec.InstanceSeconds)
		}
		figs = append(figs, f)
	}

	// Predictive against reactive target tracking: HPA-style as it is, then
	// the best of every reactive setting within predictive's instance-seconds.
	const goal = "fewer than reactive target tracking, at no more instance-seconds"
	hpa := by["hpa-style"]
	figs = append(figs, bench.Figure{
		Name: fmt.Sprintf("%s: predictive SLO-violation seconds", delay), Unit: "s", Value: bench.Num(pred.ViolationSeconds),
		Baseline: "hpa-style", BaselineValue: bench.Num(hpa.ViolationSeconds), Goal: goal,
		Verdict: passIf(pred.ViolationSeconds < hpa.ViolationSeconds && pred.InstanceSeconds <= hpa.InstanceSeconds),
		Note:    fmt.Sprintf("instance-seconds: predictive %.0f, hpa-style %.0f", pred.InstanceSeconds, hpa.InstanceSeconds),
	})
	reactive := run.Sweep.Reactive
	for _, name := range reactiveTargetTracking {
		reactive = append(reactive, sim.Point{Name: name, InstanceSeconds: by[name].InstanceSeconds, ViolationSeconds: by[name].ViolationSeconds})
	}
	f := bench.Figure{
		Name: fmt.Sprintf("%s: predictive SLO-violation seconds", delay), Unit: "s", Value: bench.Num(pred.ViolationSeconds),
		Goal: fmt.Sprintf("%s (the best of %d reactive settings within it)", goal, len(reactive)), Verdict: "FAIL",
	}
	if best, ok := sim.BestWithin(reactive, pred.InstanceSeconds); ok {
		f.Baseline, f.BaselineValue = best.Name, bench.Num(best.ViolationSeconds)
		f.Verdict = passIf(pred.ViolationSeconds < best.ViolationSeconds)
		f.Note = fmt.Sprintf("instance-seconds: predictive %.0f, %s %.0f", pred.InstanceSeconds, best.Name, best.InstanceSeconds)
	} else {
		f.Note = "no reactive setting uses as few instance-seconds"
	}
	figs = append(figs, f)
	wins, n := run.Sweep.wins()
	figs = append(figs, bench.Figure{
		Name: fmt.Sprintf("%s: swept targets where predictive beats every reactive setting within its instance-seconds", delay),
		Unit: "targets", Value: bench.Num(float64(wins)), Baseline: "swept targets", BaselineValue: bench.Num(float64(n)),
		Note: "the predictive policy at each target of the sweep, its horizon and stabilization unchanged",
	})
	return figs
}

func passIf(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}
