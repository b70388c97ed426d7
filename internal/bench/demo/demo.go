package demo

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/loadgen"

	"github.com/shoal-lb/shoal/internal/bench"
)

// demo is `make demo`: shoal on examples/demo/shoal.yaml, whose group is
// scaled by its autoscale policy alone while open-loop load on the demo
// backend's CPU-heavy endpoint rises in steps and falls. Once a second it
// prints the group's size, CPU p90, requests/s, p99 latency and the newest
// policy decision; at the end a summary of requests, failures and every
// scale event with its reason. It writes no report.
var Command = &bench.Command{
	Name:    "demo",
	Summary: "make demo: load rises and falls, the group scales out and in by its policy (no report)",
	Run:     runDemo,
}

// demoSteps is the load: RATE:DURATION of /work?ms=10 (10 ms of CPU each),
// so 90/s keeps 0.9 of a core busy. With the demo's target of 30 % CPU
// per instance that wants 2 → 3 → 4 instances and back.
const demoSteps = "15:15s,45:25s,90:25s,120:30s,45:25s,15:30s"

func runDemo(ctx context.Context, env *bench.Env, fs *flag.FlagSet, args []string) (*bench.Report, error) {
	cfgPath := fs.String("config", "examples/demo/shoal.yaml", "shoal config with an autoscale policy")
	groupName := fs.String("group", "web", "the group to watch")
	var bins bench.BinFlags
	bins.RegisterShoal(fs)
	steps := fs.String("steps", demoSteps, "open-loop load, RATE:DURATION,... in requests/s")
	workMS := fs.Int("work-ms", 10, "CPU milliseconds per request (/work?ms=N)")
	settle := fs.Duration("settle", 45*time.Second, "after the load, how long to wait for the group to scale back in")
	if err := bench.Parse(fs, args); err != nil {
		return nil, err
	}
	schedule, err := loadgen.ParseSteps(*steps)
	if err != nil {
		return nil, bench.BadUsage("-steps: %v", err)
	}
	if *workMS < 1 || *settle < 0 {
		return nil, bench.BadUsage("-work-ms >= 1 and -settle >= 0 please")
	}
	out := os.Stdout
	bin, err := filepath.Abs(bins.Shoal)
	if err != nil {
		return nil, err
	}

	fmt.Fprintf(out, "== starting shoal on %s (log: %s)\n", *cfgPath, filepath.Join(env.Work, "shoal.log"))
	sh, err := env.StartShoalFile(bin, *cfgPath)
	if err != nil {
		return nil, err
	}
	var minSize int
	found := false
	for _, g := range sh.Cfg.Groups {
		if g.Name == *groupName {
			minSize, found = g.MinSize, true
			if g.Autoscale == nil {
				return nil, bench.BadUsage("group %q in %s has no autoscale: policy", *groupName, *cfgPath)
			}
		}
	}
	if !found {
		return nil, bench.BadUsage("no group %q in %s", *groupName, *cfgPath)
	}
	if err := sh.WaitInService(ctx, *groupName, max(1, minSize), 60*time.Second, bench.PollEvery); err != nil {
		return nil, err
	}
	url := sh.URL(fmt.Sprintf("/work?ms=%d", *workMS))
	fmt.Fprintf(out, "== %d instances in service; open-loop load on %s: %s (req/s:duration)\n", max(1, minSize), url, *steps)
	fmt.Fprintln(out, "   the policy alone scales the group; shoal's view once a second:")

	mon := &bench.Monitor{API: sh.API, Group: *groupName, Window: 2 * time.Second}
	var mu sync.Mutex
	var lastSec loadgen.Second
	load := bench.StartOpenLoad(ctx, loadgen.OpenOptions{
		URL: url, Schedule: schedule, Timeout: 10 * time.Second,
		Progress: func(s loadgen.Second) { mu.Lock(); lastSec = s; mu.Unlock() },
	})
	defer load.Stop()

	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var (
		loadDone = load.Done() // nil once the load has ended
		res      *loadgen.OpenResult
		endedAt  time.Time
		rows     int
	)
	for {
		select {
		case <-ctx.Done():
			load.Stop()
			return nil, ctx.Err()
		case <-loadDone:
			r, err := load.Wait()
			res, endedAt, loadDone = &r, time.Now(), nil
			if err != nil {
				return nil, fmt.Errorf("load: %w", err)
			}
			fmt.Fprintln(out, "== load finished; waiting for the group to scale back in")
			continue
		case <-tick.C:
		}
		v := mon.Poll(ctx)
		mu.Lock()
		s := lastSec
		mu.Unlock()
		if rows%20 == 0 {
			fmt.Fprintf(out, "%5s %7s %6s %7s %8s %8s %8s  %s\n", "t", "load/s", "size", "cpu.p90", "req/s", "p99", "p99(lb)", "last decision")
		}
		rows++
		printDemoRow(out, time.Since(start), res == nil, s, v, mon)
		if res != nil && (v.Err == "" && v.Desired <= minSize && v.InService <= minSize || time.Since(endedAt) > *settle) {
			break
		}
	}
	return nil, demoSummary(out, *res, mon, *settle)
}

func printDemoRow(w io.Writer, t time.Duration, loading bool, s loadgen.Second, v bench.View, mon *bench.Monitor) {
	rate, p99 := "-", "-"
	if loading && s.Scheduled > 0 {
		rate, p99 = fmt.Sprint(s.Scheduled), fmt.Sprintf("%.0fms", bench.Msf(s.P99))
	}
	size := fmt.Sprint(v.InService)
	if v.Desired != v.InService {
		size += fmt.Sprintf("→%d", v.Desired)
	}
	lb := "-"
	if v.P99ms != nil {
		lb = fmt.Sprintf("%.0fms", *v.P99ms)
	}
	last := ""
	if e, ok := mon.Last(); ok {
		last = bench.Describe(e)
	}
	if v.Err != "" {
		last = "(shoal: " + v.Err + ")"
	}
	fmt.Fprintf(w, "%4.0fs %7s %6s %7s %8s %8s %8s  %s\n", t.Seconds(), rate, size, bench.Pct(v.CPUP90), bench.F1(v.RPS), p99, lb, last)
}

// demoSummary prints the totals and every scale event, and fails the demo
// when a request failed or the policy scaled nothing.
func demoSummary(w io.Writer, res loadgen.OpenResult, mon *bench.Monitor, settle time.Duration) error {
	fmt.Fprintf(w, "\n== summary\nrequests: %d scheduled, %d sent, %d ok, %d failed, %d late (not sent: too many in flight)\n",
		res.Scheduled, res.Sent, res.Completed, res.Errors, res.Late)
	fmt.Fprintf(w, "latency from the scheduled instant: p50 %.1f ms, p90 %.1f ms, p99 %.1f ms, max %.1f ms\n",
		bench.Msf(res.P50), bench.Msf(res.P90), bench.Msf(res.P99), bench.Msf(res.Max))
	var per []string
	for _, n := range slices.Sorted(maps.Keys(res.ByInstance)) {
		per = append(per, fmt.Sprintf("%s %d", n, res.ByInstance[n]))
	}
	fmt.Fprintf(w, "served by: %s\n", strings.Join(per, ", "))
	for _, f := range res.FailureSamples {
		fmt.Fprintf(w, "  failure: %s\n", f)
	}
	fmt.Fprintf(w, "scale events (%d of %d policy decisions recorded):\n", len(mon.Scaled), len(mon.Events))
	for _, e := range mon.Scaled {
		fmt.Fprintf(w, "  %s\n      %s\n", bench.Describe(e), e.Reason)
	}
	var errs []error
	if res.Errors > 0 || res.Late > 0 {
		errs = append(errs, fmt.Errorf("%d requests failed and %d were late", res.Errors, res.Late))
	}
	up, down := false, false
	for _, e := range mon.Scaled {
		up = up || e.Recommendation > e.Current
		down = down || e.Recommendation < e.Current
	}
	if !up || !down {
		errs = append(errs, fmt.Errorf("the policy did not scale out and back in within the load and %v after it (out: %v, in: %v)", settle, up, down))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintln(w, "== 0 failed requests while the policy scaled the group out and back in")
	return nil
}
