package compare

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/forecast"
	"github.com/shoal-lb/shoal/internal/sim"
	"github.com/shoal-lb/shoal/internal/trace"

	"github.com/shoal-lb/shoal/internal/bench"
)

// This file is the rolling evaluation: `compare --days FROM..TO` simulates
// every compared policy on each day of a range, each day with its own 7 days
// of history, so that a policy is judged on days it was not tuned on and not
// on one sample.

// dayStart is when a compared day begins: 08:00 UTC, as the tuned window
// (1998-06-30 08:00 to 07-01 08:00), so that a day's evening matches and the
// quiet night after them stay together.
const dayStart = 8 * time.Hour

// dayStabilization is the scale-in stabilization of the reactive settings a
// day's predictive run is measured against: the rolling run sweeps the
// targets only (the full grid costs four times as much per day).
const dayStabilization = 2 * time.Minute

// parseDate parses a UTC date as 1998-07-05 and returns it so spelled.
func parseDate(v string) (string, error) {
	d, err := time.ParseInLocation(time.DateOnly, v, time.UTC)
	if err != nil {
		return "", fmt.Errorf("%q: want a date as 1998-07-05", v)
	}
	return d.Format(time.DateOnly), nil
}

// parseDays parses FROM..TO, two UTC dates, both included.
func parseDays(v string) (days []time.Time, err error) {
	a, b, ok := strings.Cut(v, "..")
	if !ok {
		return nil, fmt.Errorf("%q: want FROM..TO, e.g. 1998-06-23..1998-07-05", v)
	}
	from, err := time.ParseInLocation(time.DateOnly, a, time.UTC)
	if err != nil {
		return nil, fmt.Errorf("%q: FROM: want a date as 1998-06-23", v)
	}
	to, err := time.ParseInLocation(time.DateOnly, b, time.UTC)
	if err != nil {
		return nil, fmt.Errorf("%q: TO: want a date as 1998-07-05", v)
	}
	if to.Before(from) {
		return nil, fmt.Errorf("%q: TO is before FROM", v)
	}
	for d := from; !d.After(to); d = d.AddDate(0, 0, 1) {
		days = append(days, d.Add(dayStart))
	}
	return days, nil
}

// dayRow is every compared policy on one day at one start delay.
type dayRow struct {
	Day             string `json:"day"`
	StaticInstances int    `json:"static_instances"`
	// ForecastError is the WAPE over the day of the seasonal forecast
	// predictive uses, each minute against the forecast made its horizon
	// before: how well the day followed the pattern.
	ForecastError float64 `json:"forecast_error_wape"`
	// Policies are static first, then comparedPolicies in order.
	Policies []sim.Point `json:"policies"`
	// Reactive is the reactive twin at each swept target.
	Reactive []sim.Point `json:"reactive"`
	// BestReactive is the best reactive setting (swept or compared) within
	// predictive's instance-seconds; nil when none is as cheap.
	BestReactive *sim.Point `json:"best_reactive_within_predictive,omitempty"`
	// Scalable is false on a day whose peak one instance serves: no policy
	// can use less than static then, so the day counts in the totals but
	// not in the days a goal holds.
	Scalable bool `json:"scalable"`
	// RecommendedHolds and PredictiveHolds say whether the goals
	// held on the day.
	RecommendedHolds bool `json:"recommended_goal_holds"`
	PredictiveHolds  bool `json:"predictive_goal_holds"`
}

// aggRow is one policy over the whole range at one start delay.
type aggRow struct {
	Policy          string  `json:"policy"`
	InstanceSeconds float64 `json:"instance_seconds"`
	VsStatic        float64 `json:"instance_seconds_vs_static"`
	// ScalableVsStatic is VsStatic over the days whose peak needs more
	// than one instance, the only days a policy can save on; nil when none.
	ScalableVsStatic *float64 `json:"instance_seconds_vs_static_days_needing_more_than_one"`
	ViolationSeconds float64  `json:"slo_violation_seconds"`
	// MedianViolations, WorstDay and DaysWon are over the days whose peak
	// needs more than one instance; nil and "" when there are none.
	MedianViolations *float64 `json:"median_day_violation_seconds"`
	WorstDay         string   `json:"worst_day"`
	WorstViolations  float64  `json:"worst_day_violation_seconds"`
	// DaysWon counts the days the policy had the fewest violation-seconds
	// of the scaling policies (ties: the fewer instance-seconds).
	DaysWon int `json:"days_won"`
}

// compareDays is the compare command's --days mode.
func compareDays(ctx context.Context, env *bench.Env, tw bench.TraceWindow, days []time.Time, model sim.Model, slo time.Duration,
	delays []namedDelay, pols []sim.Policy, tunedUntil, rowsFile string) (*bench.Report, error) {
	scale, err := sim.DefaultScale(tw.Window, model.Capacity)
	if err != nil {
		return nil, err
	}
	command := fmt.Sprintf("shoal-bench compare --days %s..%s -tuned-until '%s'", days[0].Format(time.DateOnly), days[len(days)-1].Format(time.DateOnly), tunedUntil)
	if rowsFile != "" {
		command += " -rows " + rowsFile
	}
	rep := &bench.Report{Date: time.Now(), Machine: bench.NewMachine()}
	rep.Settings = []bench.Setting{
		{Name: "trace", Value: fmt.Sprintf("%s, days %s to %s, each from 08:00 UTC to 08:00 the next day", tw.Path, days[0].Format(time.DateOnly), days[len(days)-1].Format(time.DateOnly))},
		{Name: "scale S", Value: fmt.Sprintf("%.5g on every day: the scale at which the peak of the -from/-to window (%s to %s) needs %d instances at 90 %%, so that an instance serves the same share of the trace every day; each day's static group is sized for its own peak",
			scale, tw.From.Format("2006-01-02 15:04"), tw.To.Format("2006-01-02 15:04 UTC"), sim.PeakInstances)},
		{Name: "model", Value: fmt.Sprintf("%.0f req/s per instance at 100 %% CPU, base p99 %s, M/M/c p99 with service time CV %g; SLO p99 %s", model.Capacity, model.BaseP99, model.ServiceCV, slo)},
		{Name: "history", Value: "each day: the 7 days before it, per minute, for predictive"},
		{Name: "reactive sweep", Value: fmt.Sprintf("the reactive twin at %d targets (%g..%g %% CPU p90) with %s stabilization, plus hpa-style, recommended and reactive-75", len(sweepTargets), sweepTargets[0], sweepTargets[len(sweepTargets)-1], dayStabilization)},
		{Name: "command", Value: command},
	}
	var earlier map[string][]dayRow
	if rowsFile != "" {
		var about string
		var err error
		if earlier, about, err = loadDayRows(rowsFile, days, delays); err != nil {
			return nil, err
		}
		rep.Settings = append(rep.Settings, bench.Setting{Name: "per-day rows", Value: about})
	}
	if tunedUntil != "" {
		rep.Settings = append(rep.Settings, bench.Setting{Name: "tuned until", Value: tunedUntil + ": the defaults (examples/recommended*.yaml) were chosen on days up to it; the days after it are reported apart, as untested"})
	}
	var twin sim.Policy
	for _, p := range pols {
		if p.Name == twinKey {
			twin = p
		}
	}
	var runs []daysRun
	var md strings.Builder
	for _, delay := range delays {
		run := daysRun{Name: delay.name, StartDelay: delay.d.String()}
		for i, day := range days {
			if earlier != nil {
				row := earlier[delay.name][i]
				row.judge()
				run.Days = append(run.Days, row)
				continue
			}
			row, err := compareDay(ctx, env, tw.Series, day, scale, model, slo, delay.d, pols, twin)
			if err != nil {
				return nil, fmt.Errorf("%s at %s: %w", day.Format(time.DateOnly), delay.name, err)
			}
			run.Days = append(run.Days, row)
		}
		run.aggregate(tunedUntil)
		runs = append(runs, run)
		rep.Figures = append(rep.Figures, daysFigures(run)...)
		writeDaysMarkdown(&md, run)
	}
	rep.Details = map[string]any{"scale": scale, "runs": runs}
	rep.Markdown = md.String()
	return rep, nil
}

// loadDayRows reads each day's rows at each delay from an earlier compare
// --days report, so that a new split or aggregate needs no new simulation:
// the rows are a pure function of the trace, the model and the policies,
// which the report's commit names. It returns the rows by delay name, in the
// order of days, and a line saying where they came from.
func loadDayRows(path string, days []time.Time, delays []namedDelay) (map[string][]dayRow, string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("-rows: %w", err)
	}
	var earlier struct {
		Date    time.Time     `json:"date"`
		Machine bench.Machine `json:"machine"`
		Details struct {
			Runs []daysRun `json:"runs"`
		} `json:"details"`
	}
	if err := json.Unmarshal(b, &earlier); err != nil {
		return nil, "", fmt.Errorf("-rows %s: not a compare --days report: %w", path, err)
	}
	rows := map[string][]dayRow{}
	for _, delay := range delays {
		i := slices.IndexFunc(earlier.Details.Runs, func(r daysRun) bool {
			return r.Name == delay.name && r.StartDelay == delay.d.String()
		})
		if i < 0 {
			return nil, "", fmt.Errorf("-rows %s: no %s run at start delay %s", path, delay.name, delay.d)
		}
		run := earlier.Details.Runs[i]
		for _, day := range days {
			name := day.Format(time.DateOnly)
			j := slices.IndexFunc(run.Days, func(r dayRow) bool { return r.Day == name })
			if j < 0 {
				return nil, "", fmt.Errorf("-rows %s: no row for %s at the %s start delay", path, name, delay.name)
			}
			rows[delay.name] = append(rows[delay.name], run.Days[j])
		}
	}
	about := fmt.Sprintf("each day's rows from %s (written %s at commit %s), not simulated again; the goals, aggregates and the split are computed anew",
		path, earlier.Date.UTC().Format("2006-01-02 15:04 UTC"), earlier.Machine.Commit)
	return rows, about, nil
}

type namedDelay struct {
	name string
	d    time.Duration
}

// compareDay simulates static, the compared policies and the reactive sweep
// on the day starting at from.
func compareDay(ctx context.Context, env *bench.Env, series trace.Series, from time.Time, scale float64, model sim.Model, slo, delay time.Duration,
	pols []sim.Policy, twin sim.Policy) (dayRow, error) {
	to := from.Add(24 * time.Hour)
	_, rates, hist, err := sim.Window(series, from, to, scale, 7*24*time.Hour)
	if err != nil {
		return dayRow{}, err
	}
	staticN, err := model.StaticFor(rates, slo)
	if err != nil {
		return dayRow{}, err
	}
	jobs := []simJob{{p: sim.Static(pols[0], staticN)}}
	for i, p := range pols {
		jobs = append(jobs, simJob{p: p, res: comparedPolicies[i].resolution})
	}
	for _, t := range sweepTargets {
		p, err := sim.WithTarget(twin, t, dayStabilization)
		if err != nil {
			return dayRow{}, err
		}
		p.Name = fmt.Sprintf("reactive %g %% / %s", t, fmtStab(dayStabilization))
		jobs = append(jobs, simJob{p: p})
	}
	var horizon time.Duration
	for _, p := range pols {
		if p.Name == predictiveKey {
			horizon = p.Group.Autoscale.Predictive.Horizon
		}
	}
	fh := forecast.History{Start: from.Add(-time.Duration(len(hist)) * time.Minute), Values: append(append([]float64(nil), hist...), rates...)}
	ferr, err := forecast.Default.Backtest(fh, from, to, horizon)
	if err != nil {
		return dayRow{}, err
	}
	base := sim.Run{Model: model, SLO: slo, StartDelay: delay, Start: from, Rates: rates, History: hist}
	pts, err := simulateAll(ctx, base, jobs)
	if err != nil {
		return dayRow{}, err
	}
	n := len(pols) + 1
	row := dayRow{Day: from.Format(time.DateOnly), StaticInstances: staticN, ForecastError: ferr, Scalable: staticN > 1, Policies: pts[:n], Reactive: pts[n:]}
	row.judge()
	env.Log.Info("simulated day", "day", row.Day, "forecast_error", ferr, "start_delay", delay, "recommended_goal", row.RecommendedHolds, "predictive_goal", row.PredictiveHolds)
	return row, nil
}

func (r dayRow) point(name string) sim.Point {
	for _, p := range r.Policies {
		if p.Name == name {
			return p
		}
	}
	return sim.Point{Name: name, InstanceSeconds: math.NaN(), ViolationSeconds: math.NaN()}
}

// reactivePoints are the reactive settings predictive is measured against.
func (r dayRow) reactivePoints() []sim.Point {
	pts := append([]sim.Point(nil), r.Reactive...)
	for _, name := range reactiveTargetTracking {
		pts = append(pts, r.point(name))
	}
	return pts
}

// judge sets the day's goals: recommended within 0.6× static and with fewer
// violation-seconds than each baseline (none for either counts when
// recommended is the cheaper); predictive with fewer than the best reactive
// setting within its instance-seconds.
func (r *dayRow) judge() {
	static, rec := r.Policies[0], r.point("recommended")
	r.RecommendedHolds = rec.InstanceSeconds <= 0.6*static.InstanceSeconds
	for _, other := range []string{"seed-000", "seed-004", "hpa-style"} {
		r.RecommendedHolds = r.RecommendedHolds && fewerViolations(rec, r.point(other))
	}
	pred := r.point(predictiveKey)
	if best, ok := sim.BestWithin(r.reactivePoints(), pred.InstanceSeconds); ok {
		r.BestReactive = &best
		r.PredictiveHolds = pred.ViolationSeconds < best.ViolationSeconds
	}
}

// fewerViolations reports whether a beats b: fewer violation-seconds, or
// none for either and fewer instance-seconds.
func fewerViolations(a, b sim.Point) bool {
	return a.ViolationSeconds < b.ViolationSeconds ||
		a.ViolationSeconds == 0 && b.ViolationSeconds == 0 && a.InstanceSeconds < b.InstanceSeconds
}

// daysPart is the aggregate over some of the range's days: all of them, the
// days the defaults were tuned on, or the days nobody tuned on.
type daysPart struct {
	Name string `json:"name"`
	Days int    `json:"days"`
	// Scalable are the days whose peak needs more than one instance: on
	// the others no policy can use less than static, so they count in the
	// totals but not in the days won, the median, the worst day or the
	// days a goal holds.
	Scalable         []string `json:"days_needing_more_than_one_instance"`
	RecommendedHolds int      `json:"days_recommended_goal_holds"`
	PredictiveHolds  int      `json:"days_predictive_goal_holds"`
	Aggregate        []aggRow `json:"aggregate"`
	// BestReactiveTotal is the reactive setting with the fewest
	// violation-seconds over the part within predictive's total
	// instance-seconds (one setting on every day).
	BestReactiveTotal *sim.Point `json:"best_reactive_within_predictive_total,omitempty"`
	rows              []dayRow
}

// daysRun is the range at one start delay.
type daysRun struct {
	Name       string   `json:"name"`
	StartDelay string   `json:"start_delay"`
	Days       []dayRow `json:"days"`
	// Parts are all days, then, with a tuned-until date, the days up to it
	// and the days after it (each only if it has any).
	Parts []daysPart `json:"parts"`
}

// aggregate sums all days and, when tunedUntil (a date as 1998-07-05) is
// set, the days up to it and the days after it apart.
func (run *daysRun) aggregate(tunedUntil string) {
	run.Parts = []daysPart{newPart("all days", run.Days)}
	if tunedUntil == "" {
		return
	}
	var tuned, untested []dayRow
	for _, d := range run.Days {
		if d.Day <= tunedUntil {
			tuned = append(tuned, d)
		} else {
			untested = append(untested, d)
		}
	}
	if len(tuned) > 0 {
		run.Parts = append(run.Parts, newPart("tuned days (to "+tunedUntil+")", tuned))
	}
	if len(untested) > 0 {
		run.Parts = append(run.Parts, newPart("untested days (after "+tunedUntil+")", untested))
	}
}

// newPart sums days per policy and finds each scalable day's winner.
func newPart(name string, days []dayRow) daysPart {
	part := daysPart{Name: name, Days: len(days), rows: days}
	if len(days) == 0 {
		return part
	}
	staticTotal, staticScalable := 0.0, 0.0
	for _, d := range days {
		staticTotal += d.Policies[0].InstanceSeconds
		if !d.Scalable {
			continue
		}
		staticScalable += d.Policies[0].InstanceSeconds
		part.Scalable = append(part.Scalable, d.Day)
		if d.RecommendedHolds {
			part.RecommendedHolds++
		}
		if d.PredictiveHolds {
			part.PredictiveHolds++
		}
	}
	for i, p := range days[0].Policies {
		a := aggRow{Policy: p.Name}
		if i == 0 {
			a.Policy = "static (per day)"
		}
		var per []float64
		scalable := 0.0
		for _, d := range days {
			q := d.Policies[i]
			a.InstanceSeconds += q.InstanceSeconds
			a.ViolationSeconds += q.ViolationSeconds
			if !d.Scalable {
				continue
			}
			scalable += q.InstanceSeconds
			per = append(per, q.ViolationSeconds)
			if a.WorstDay == "" || q.ViolationSeconds > a.WorstViolations {
				a.WorstViolations, a.WorstDay = q.ViolationSeconds, d.Day
			}
		}
		a.VsStatic = a.InstanceSeconds / staticTotal
		a.MedianViolations = bench.Num(bench.Median(per))
		a.ScalableVsStatic = bench.Num(scalable / staticScalable)
		part.Aggregate = append(part.Aggregate, a)
	}
	for _, d := range days {
		if !d.Scalable {
			continue // nothing to win: every policy can only run the one instance
		}
		win := 1 // static is no scaling policy
		for i := 2; i < len(d.Policies); i++ {
			if fewerViolations(d.Policies[i], d.Policies[win]) {
				win = i
			}
		}
		part.Aggregate[win].DaysWon++
	}

	// One reactive setting on every day against predictive's total.
	pred := part.agg(predictiveKey)
	totals := map[string]*sim.Point{}
	var order []string
	for _, d := range days {
		for _, p := range d.reactivePoints() {
			t := totals[p.Name]
			if t == nil {
				t = &sim.Point{Name: p.Name}
				totals[p.Name] = t
				order = append(order, p.Name)
			}
			t.InstanceSeconds += p.InstanceSeconds
			t.ViolationSeconds += p.ViolationSeconds
		}
	}
	var pts []sim.Point
	for _, name := range order {
		pts = append(pts, *totals[name])
	}
	if best, ok := sim.BestWithin(pts, pred.InstanceSeconds); ok {
		part.BestReactiveTotal = &best
	}
	return part
}

func (part daysPart) agg(name string) aggRow {
	for _, a := range part.Aggregate {
		if a.Policy == name {
			return a
		}
	}
	return aggRow{Policy: name, InstanceSeconds: math.NaN(), ViolationSeconds: math.NaN()}
}

// daysFigures states the goals at one start delay over each part.
func daysFigures(run daysRun) []bench.Figure {
	var figs []bench.Figure
	for _, part := range run.Parts {
		figs = append(figs, partFigures(run.Name, part)...)
	}
	return figs
}

// partFigures states the goals over one part of the range.
func partFigures(delay string, part daysPart) []bench.Figure {
	rec, pred := part.agg("recommended"), part.agg(predictiveKey)
	n := float64(len(part.Scalable))
	most := func(v float64) bool { return v > n/2 }
	if n == 0 {
		// No day to judge: a count of none is no verdict either way.
		most = nil
	}
	days := func(v int) *float64 {
		if n == 0 {
			return nil
		}
		return bench.Num(float64(v))
	}
	skipped := fmt.Sprintf("of the %d days whose peak needs more than one instance (%s; %d days with one instance left out)",
		len(part.Scalable), strings.Join(part.Scalable, ", "), part.Days-len(part.Scalable))
	name := delay + ": "
	figs := []bench.Figure{{
		Name: name + "recommended instance-seconds, " + part.Name, Unit: "s", Value: bench.Num(rec.InstanceSeconds),
		Baseline: "static (per day)", BaselineValue: bench.Num(part.Aggregate[0].InstanceSeconds), Ratio: bench.Num(rec.VsStatic),
		Goal: "<= 0.6× static", Verdict: bench.Verdict(bench.Num(rec.VsStatic), func(v float64) bool { return v <= 0.6 }),
	}, {
		Name: name + "recommended instance-seconds vs static, " + part.Name + ", only the days that need more than one instance", Unit: "×",
		Value: rec.ScalableVsStatic, Goal: "<= 0.6× static", Verdict: bench.Verdict(rec.ScalableVsStatic, func(v float64) bool { return v <= 0.6 }),
		Note: "a day whose peak one instance serves has nothing to save: every policy but seed-000 runs its one instance all day",
	}}
	for _, other := range []string{"seed-000", "seed-004", "hpa-style"} {
		o := part.agg(other)
		won := 0
		for _, d := range part.rows {
			if d.Scalable && fewerViolations(d.point("recommended"), d.point(other)) {
				won++
			}
		}
		figs = append(figs, bench.Figure{
			Name: name + "recommended SLO-violation seconds, " + part.Name, Unit: "s", Value: bench.Num(rec.ViolationSeconds),
			Baseline: other, BaselineValue: bench.Num(o.ViolationSeconds), Goal: "fewer than " + other,
			Verdict: passIf(rec.ViolationSeconds < o.ViolationSeconds),
			Note:    fmt.Sprintf("recommended beats %s on %d of the %d days whose peak needs more than one instance", other, won, len(part.Scalable)),
		})
	}
	figs = append(figs, bench.Figure{
		Name: name + "days recommended holds every goal, " + part.Name, Unit: "days", Value: days(part.RecommendedHolds),
		Baseline: "days", BaselineValue: bench.Num(n), Goal: "most days", Verdict: verdictIf(days(part.RecommendedHolds), most), Note: skipped,
	})
	f := bench.Figure{
		Name: name + "predictive SLO-violation seconds, " + part.Name, Unit: "s", Value: bench.Num(pred.ViolationSeconds),
		Goal: "fewer than the best reactive setting within its instance-seconds", Verdict: "FAIL",
		Note: "no reactive setting uses as few instance-seconds over these days",
	}
	if b := part.BestReactiveTotal; b != nil {
		f.Baseline, f.BaselineValue = b.Name, bench.Num(b.ViolationSeconds)
		f.Verdict = passIf(pred.ViolationSeconds < b.ViolationSeconds)
		f.Note = fmt.Sprintf("instance-seconds: predictive %.0f, %s %.0f", pred.InstanceSeconds, b.Name, b.InstanceSeconds)
	}
	return append(figs, f, bench.Figure{
		Name: name + "days predictive beats the best reactive setting within its instance-seconds, " + part.Name, Unit: "days",
		Value: days(part.PredictiveHolds), Baseline: "days", BaselineValue: bench.Num(n), Goal: "most days",
		Verdict: verdictIf(days(part.PredictiveHolds), most), Note: skipped,
	})
}

// verdictIf is bench.Verdict, with no verdict when there is no test.
func verdictIf(v *float64, ok func(float64) bool) string {
	if ok == nil {
		return ""
	}
	return bench.Verdict(v, ok)
}

// writeDaysMarkdown adds one start delay's per-day tables (the tuned and the
// untested days apart when the range is split) and each part's aggregate.
func writeDaysMarkdown(md *strings.Builder, run daysRun) {
	fmt.Fprintf(md, "## Start delay %s (%s), per day\n\nEach policy's cell: instance-seconds vs static / SLO-violation seconds. Forecast error: the WAPE over the day of predictive's seasonal forecast, each minute against the forecast made a horizon before it (the forecast falls back to reactive while its error over the last hour is above %.0f %%). On a day whose peak one instance serves no policy can save anything: such a day is marked and left out of the days won and the goal days.\n\n", run.StartDelay, run.Name, 100*forecast.Default.MaxError)
	tables := run.Parts[:1]
	if len(run.Parts) > 1 {
		tables = run.Parts[1:]
	}
	for _, part := range tables {
		if len(tables) > 1 {
			fmt.Fprintf(md, "### %s\n\n", part.Name)
		}
		writeDayTable(md, part.rows)
	}
	for _, part := range run.Parts {
		fmt.Fprintf(md, "## Start delay %s (%s), %s: %d days\n\n", run.StartDelay, run.Name, part.Name, part.Days)
		fmt.Fprintf(md, "Days whose peak needs more than one instance: %d (%s). Recommended holds every goal on %d of them, predictive beats the best reactive setting within its instance-seconds on %d.\n\n",
			len(part.Scalable), orNone(strings.Join(part.Scalable, ", ")), part.RecommendedHolds, part.PredictiveHolds)
		md.WriteString("| policy | instance-seconds | vs static | vs static, days needing more than one | SLO-violation seconds | median day | worst day | days won |\n|---|---:|---:|---:|---:|---:|---|---:|\n")
		for _, a := range part.Aggregate {
			worst := "-"
			if a.WorstDay != "" {
				worst = fmt.Sprintf("%s (%.0f)", a.WorstDay, a.WorstViolations)
			}
			fmt.Fprintf(md, "| %s | %.0f | %.3f | %s | %.0f | %s | %s | %d |\n", a.Policy, a.InstanceSeconds, a.VsStatic,
				fmtRatio(a.ScalableVsStatic), a.ViolationSeconds, bench.FmtNum(a.MedianViolations), worst, a.DaysWon)
		}
		if b := part.BestReactiveTotal; b != nil {
			fmt.Fprintf(md, "| best reactive within predictive (one setting, these days): %s | %.0f | %.3f | | %.0f | | | |\n",
				b.Name, b.InstanceSeconds, b.InstanceSeconds/part.Aggregate[0].InstanceSeconds, b.ViolationSeconds)
		}
		md.WriteString("\nInstance- and violation-seconds: every day. Median day, worst day and days won: the days whose peak needs more than one instance only. Days won: the days a policy had the fewest SLO-violation seconds of the scaling policies (ties: fewer instance-seconds).\n\n")
	}
}

// writeDayTable is one row per day.
func writeDayTable(md *strings.Builder, days []dayRow) {
	md.WriteString("| day | forecast error | static |")
	for _, p := range days[0].Policies[1:] {
		md.WriteString(" " + p.Name + " |")
	}
	md.WriteString(" best reactive within predictive | recommended goal | predictive goal |\n|---|---:|---:|")
	md.WriteString(strings.Repeat("---:|", len(days[0].Policies)-1))
	md.WriteString("---|---|---|\n")
	for _, d := range days {
		static := d.Policies[0].InstanceSeconds
		fmt.Fprintf(md, "| %s | %.0f %% | %d |", d.Day, 100*d.ForecastError, d.StaticInstances)
		for _, p := range d.Policies[1:] {
			fmt.Fprintf(md, " %.3f / %.0f |", p.InstanceSeconds/static, p.ViolationSeconds)
		}
		best := "none as cheap"
		if b := d.BestReactive; b != nil {
			best = fmt.Sprintf("%s: %.3f / %.0f", b.Name, b.InstanceSeconds/static, b.ViolationSeconds)
		}
		if !d.Scalable {
			fmt.Fprintf(md, " %s | one instance serves the peak: nothing to save | left out |\n", best)
			continue
		}
		fmt.Fprintf(md, " %s | %s | %s |\n", best, holds(d.RecommendedHolds), holds(d.PredictiveHolds))
	}
	md.WriteString("\n")
}

func fmtRatio(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.3f", *v)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func holds(ok bool) string {
	if ok {
		return "holds"
	}
	return "**fails**"
}
