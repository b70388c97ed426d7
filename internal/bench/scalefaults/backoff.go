package scalefaults

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/bench"
)

// badGroup is the group whose template cannot start; the others are
// group(1..others).
const badGroup = "bad"

// othersAtRest is each other group's size; a scale request takes the
// first from it to perOther and back.
const (
	othersAtRest = 10
	perOther     = 20
)

func group(i int) string { return fmt.Sprintf("g%02d", i) }

// backoffPhase is one shoal: the bad group's template failing, or working
// (the baseline).
type backoffPhase struct {
	Template string `json:"template"`
	// The first pass: the scale request to bad's size until every instance
	// of it failed (failing) or is in service (working).
	FirstPassS        float64 `json:"first_pass_seconds"`
	FirstPassCPUS     float64 `json:"first_pass_shoal_cpu_seconds"`
	FirstPassLaunches int     `json:"first_pass_launched_events"`
	FirstPassReports  int     `json:"first_pass_launch_failed_events"`
	FirstPassWarnings int     `json:"first_pass_failed_warnings"`
	// The window after it.
	CPU      float64 `json:"shoal_cpu_percent"`
	RSSKiB   float64 `json:"shoal_rss_kib"`
	Launches int     `json:"window_launched_events"`
	Reports  int     `json:"window_launch_failed_events"`
	Warnings int     `json:"window_failed_warnings"`
	// A scale request on g01 from 10 to 20 and back, each until converged.
	ScaleUpS   float64  `json:"other_group_scale_up_seconds"`
	ScaleDownS float64  `json:"other_group_scale_down_seconds"`
	Reasons    []string `json:"window_reports,omitempty"`
}

type backoffRun struct {
	Bad     int          `json:"bad_size"`
	Others  int          `json:"other_groups"`
	WindowS float64      `json:"window_seconds"`
	Fault   backoffPhase `json:"failing"`
	Base    backoffPhase `json:"baseline_working"`
}

func measureBackoff(ctx context.Context, env *bench.Env, sbin, standin string, bad, others int, window time.Duration) (*backoffRun, error) {
	r := &backoffRun{Bad: bad, Others: others, WindowS: window.Seconds()}
	for _, working := range []bool{false, true} {
		ph := &r.Fault
		if working {
			ph = &r.Base
		}
		if err := backoffPhaseRun(ctx, env, sbin, standin, bad, others, window, working, ph); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func backoffPhaseRun(ctx context.Context, env *bench.Env, sbin, standin string, bad, others int, window time.Duration, working bool, ph *backoffPhase) error {
	name := "backoff-failing"
	ph.Template = "exits at once (no address argument)"
	if working {
		name, ph.Template = "backoff-working", "works"
	}
	port, err := env.FreePort()
	if err != nil {
		return err
	}
	cfg := backoffConfig(port, filepath.Join(env.Work, "state-"+name), standin, bad, others, working)
	sh, err := env.StartShoalNamed(name, sbin, cfg)
	if err != nil {
		return err
	}
	sh.Proc.Grace = 2 * time.Minute // SIGINT stops hundreds of instances
	defer env.Stop(sh.Proc)
	logPath := filepath.Join(env.Work, name+".log")
	if err := sh.WaitInService(ctx, group(1), 0, time.Minute, bench.PollEvery); err != nil {
		return err
	}
	if err := sizeGroups(ctx, sh, others, othersAtRest); err != nil {
		return err
	}

	// The first pass.
	env.Log.Info("scaling the bad group", "size", bad, "template", ph.Template)
	last, err := lastEvent(ctx, sh)
	if err != nil {
		return err
	}
	offset := logSize(logPath)
	ticks0, _ := bench.CPUTicks(sh.Proc.Pid())
	t0 := time.Now()
	j, err := sh.API.Scale(ctx, badGroup, api.ScaleRequest{Size: &bad, Source: "shoal-bench"})
	if err != nil {
		return fmt.Errorf("scale %s to %d: %w", badGroup, bad, err)
	}
	jctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	_, jerr := sh.API.WaitJob(jctx, j.ID)
	cancel()
	if working {
		if jerr != nil {
			return fmt.Errorf("scale %s to %d: %w", badGroup, bad, jerr)
		}
	} else if err := waitEmpty(ctx, sh, badGroup, 5*time.Minute); err != nil {
		// Every instance of the pass failed and is gone.
		return err
	}
	ph.FirstPassS = time.Since(t0).Seconds()
	ticks1, _ := bench.CPUTicks(sh.Proc.Pid())
	ph.FirstPassCPUS = float64(ticks1-ticks0) / bench.ClockTicks
	evs, err := eventsAfter(ctx, sh, badGroup, last)
	if err != nil {
		return err
	}
	ph.FirstPassLaunches, ph.FirstPassReports, _ = countEvents(evs)
	ph.FirstPassWarnings = countLog(logPath, offset, `msg="instance failed"`, "group="+badGroup)
	env.Log.Info("first pass", "seconds", bench.Round2(ph.FirstPassS), "launched", ph.FirstPassLaunches, "launch_failed", ph.FirstPassReports, "warnings", ph.FirstPassWarnings)

	// The window: the bad group backs off (or rests), the others rest.
	if last, err = lastEvent(ctx, sh); err != nil {
		return err
	}
	offset = logSize(logPath)
	if ph.CPU, ph.RSSKiB, err = bench.ProcessCPU(ctx, sh.Proc.Pid(), window); err != nil {
		return err
	}
	// Another group scales meanwhile.
	t0 = time.Now()
	if err := sh.API.Size(ctx, group(1), perOther, 5*time.Minute); err != nil {
		return err
	}
	ph.ScaleUpS = time.Since(t0).Seconds()
	t0 = time.Now()
	if err := sh.API.Size(ctx, group(1), othersAtRest, 5*time.Minute); err != nil {
		return err
	}
	ph.ScaleDownS = time.Since(t0).Seconds()
	if evs, err = eventsAfter(ctx, sh, badGroup, last); err != nil {
		return err
	}
	ph.Launches, ph.Reports, ph.Reasons = countEvents(evs)
	ph.Warnings = countLog(logPath, offset, `msg="instance failed"`, "group="+badGroup)
	env.Log.Info("window", "template", ph.Template, "shoal_cpu", bench.Round2(ph.CPU), "launched", ph.Launches, "launch_failed", ph.Reports,
		"warnings", ph.Warnings, "g01_up_s", bench.Round2(ph.ScaleUpS), "g01_down_s", bench.Round2(ph.ScaleDownS))
	return nil
}

// sizeGroups scales group(1..n) to size side by side, each until converged.
func sizeGroups(ctx context.Context, sh *bench.Shoal, n, size int) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 1; i <= n; i++ {
		wg.Go(func() { errs[i-1] = sh.API.Size(ctx, group(i), size, 5*time.Minute) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// waitEmpty waits until the group has no instance left.
func waitEmpty(ctx context.Context, sh *bench.Shoal, name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st, err := sh.API.Group(ctx, name)
		if err == nil && len(st.Instances) == 0 {
			return nil
		}
		if !sh.Proc.Alive() {
			return fmt.Errorf("shoal exited: %s", sh.LogTail(5))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d instances left after %v (err %v)", name, len(st.Instances), timeout, err)
		}
		if err := wait(ctx, bench.PollEvery); err != nil {
			return err
		}
	}
}

// lastEvent is the id of the newest event shoal recorded (of any group).
func lastEvent(ctx context.Context, sh *bench.Shoal) (int64, error) {
	evs, err := sh.API.Events(ctx, api.EventsQuery{Limit: 1})
	if err != nil {
		return 0, err
	}
	var id int64
	for _, e := range evs {
		id = max(id, e.ID)
	}
	return id, nil
}

// eventsAfter lists the group's events after id, oldest first.
func eventsAfter(ctx context.Context, sh *bench.Shoal, name string, id int64) ([]api.Event, error) {
	var out []api.Event
	for range 100 {
		evs, err := sh.API.Events(ctx, api.EventsQuery{Group: name, After: id, Limit: 10000})
		if err != nil {
			return nil, err
		}
		for _, e := range evs {
			id = max(id, e.ID)
		}
		out = append(out, evs...)
		if len(evs) < 10000 {
			break
		}
	}
	return out, nil
}

// countEvents counts instance.launched and instance.launch_failed events,
// and keeps the failures' messages.
func countEvents(evs []api.Event) (launched, failed int, reasons []string) {
	for _, e := range evs {
		switch e.Rule + "." + string(e.Code) {
		case "instance.launched":
			launched++
		case "instance.launch_failed":
			failed++
			reasons = append(reasons, e.Reason)
		}
	}
	return launched, failed, reasons
}

// backoffConfig is the bad group (its template exiting at once unless
// working) and others groups of stand-ins.
func backoffConfig(port int, stateDir, standin string, bad, others int, working bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: 127.0.0.1:%d\nstate_dir: %s\nmetrics:\n  interval: 1s\ngroups:\n", port, stateDir)
	grp := func(name string, max int, prefix bool, command string) {
		fmt.Fprintf(&b, `  - name: %s
    min_size: 0
    max_size: %d
    cooldown: {up: 0s, down: 0s}
    drain_timeout: 2s
    health: {path: /healthz, interval: 2s, rise: 2, fall: 3, timeout: 1s, grace: 60s}
    template:
      command: %s
      env: {GOMAXPROCS: "1"}
      stop_timeout: 2s
`, name, max, command)
		if prefix {
			fmt.Fprintf(&b, "    path_prefixes: [/%s]\n", name)
		}
	}
	works := fmt.Sprintf("[%q, \"127.0.0.1:{{.Port}}\"]", standin)
	for i := 1; i <= others; i++ {
		grp(group(i), perOther, i > 1, works)
	}
	cmd := works
	if !working {
		// No address: the stand-in prints its usage and exits 2.
		cmd = fmt.Sprintf("[%q]", standin)
	}
	grp(badGroup, bad, true, cmd)
	return b.String()
}

func (r *backoffRun) figures() []bench.Figure {
	f, b := r.Fault, r.Base
	at := fmt.Sprintf(" (group of %d, %d other groups)", r.Bad, r.Others)
	return []bench.Figure{
		{Name: "shoal CPU while the group backs off" + at, Unit: "% of one core", Value: bench.Num(f.CPU),
			Baseline: fmt.Sprintf("its template working, its %d at rest", r.Bad), BaselineValue: bench.Num(b.CPU), Ratio: bench.RatioOf(bench.Num(f.CPU), bench.Num(b.CPU)),
			Goal: "≤ the baseline's + 1", Verdict: bench.Verdict(bench.Num(f.CPU), func(v float64) bool { return v <= b.CPU+1 }),
			Note: fmt.Sprintf("over %.0f s after the first pass; the first pass (%d launched at once, all failed) took %.1f s and %.1f s of shoal's CPU (the baseline's, until all %d in service: %.1f s, %.1f s of CPU)",
				r.WindowS, f.FirstPassLaunches, f.FirstPassS, f.FirstPassCPUS, r.Bad, b.FirstPassS, b.FirstPassCPUS)},
		{Name: "launches while the group backs off" + at, Unit: "instances", Value: bench.Num(float64(f.Launches)),
			Goal: fmt.Sprintf("≤ %d (one probe a 60 s back-off)", int(r.WindowS/60)+2), Verdict: bench.Verdict(bench.Num(float64(f.Launches)), func(v float64) bool { return v <= r.WindowS/60+2 }),
			Note: fmt.Sprintf("instance.launched events of the group over %.0f s after the first pass", r.WindowS)},
		{Name: "failure reports, first pass" + at, Unit: "events", Value: bench.Num(float64(f.FirstPassReports)),
			Goal: "1", Verdict: bench.Verdict(bench.Num(float64(f.FirstPassReports)), func(v float64) bool { return v == 1 }),
			Note: fmt.Sprintf("instance.launch_failed events for %d instances failed; \"instance failed\" warnings in shoal's log: %d", f.FirstPassLaunches, f.FirstPassWarnings)},
		{Name: "failure reports while the group backs off" + at, Unit: "events", Value: bench.Num(float64(f.Reports)),
			Goal: fmt.Sprintf("1 to %d (one a 60 s back-off)", int(r.WindowS/60)+2), Verdict: bench.Verdict(bench.Num(float64(f.Reports)), func(v float64) bool { return v >= 1 && v <= r.WindowS/60+2 }),
			Note: fmt.Sprintf("instance.launch_failed events over %.0f s; \"instance failed\" warnings: %d", r.WindowS, f.Warnings)},
		{Name: "another group's scale 10 → 20 while the group backs off" + at, Unit: "s", Value: bench.Num(f.ScaleUpS),
			Baseline: "the bad group's template working, at rest", BaselineValue: bench.Num(b.ScaleUpS), Ratio: bench.RatioOf(bench.Num(f.ScaleUpS), bench.Num(b.ScaleUpS)),
			Goal: "≤ 1.5× the baseline", Verdict: bench.Verdict(bench.Num(f.ScaleUpS), func(v float64) bool { return v <= 1.5*b.ScaleUpS }),
			Note: fmt.Sprintf("a job to 20 until all in service; then 20 → 10: %.2f s (baseline %.2f s)", f.ScaleDownS, b.ScaleDownS)},
	}
}

func (r *backoffRun) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## A group of %d whose template cannot start\n\n", r.Bad)
	b.WriteString("| template | first pass | its CPU | launched | launch_failed | warnings | window CPU | window launched | window launch_failed | window warnings | other group 10→20 | 20→10 |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range []backoffPhase{r.Fault, r.Base} {
		fmt.Fprintf(&b, "| %s | %.1f s | %.1f s | %d | %d | %d | %.2f %% | %d | %d | %d | %.2f s | %.2f s |\n", p.Template, p.FirstPassS, p.FirstPassCPUS,
			p.FirstPassLaunches, p.FirstPassReports, p.FirstPassWarnings, p.CPU, p.Launches, p.Reports, p.Warnings, p.ScaleUpS, p.ScaleDownS)
	}
	if len(r.Fault.Reasons) > 0 {
		b.WriteString("\nThe reports while it backed off:\n\n")
		for _, s := range r.Fault.Reasons {
			fmt.Fprintf(&b, "- %s\n", s)
		}
	}
	b.WriteString("\n")
	return b.String()
}
