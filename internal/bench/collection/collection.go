package collection

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/bench"
)

// collection measures what metrics collection costs shoal: its own CPU
// (utime+stime of the shoal process from /proc/PID/stat, HAProxy and the
// instances not counted) with idle instances at a 1 s metrics interval.
// One shoal runs throughout; its groups (max_size is at most 100, so 200
// instances need two) start empty, which is the baseline, and are scaled to
// each size in turn. The instances are demo-backends that only answer
// HAProxy's health checks.
var Command = &bench.Command{
	Name:    "collection",
	Summary: "shoal's own CPU with 20 and 200 idle instances at a 1 s metrics interval vs none",
	Run:     runCollection,
}

// collectionGoals are the goals, % of one core, by instance count.
var collectionGoals = map[int]float64{20: 2, 200: 10}

type collectionLevel struct {
	Instances int      `json:"instances"`
	CPU       *float64 `json:"cpu_percent_of_one_core"`
	RSSKiB    *float64 `json:"rss_kib"`
	Seconds   float64  `json:"seconds"`
	StartS    float64  `json:"scale_seconds"` // how long the scale-out took
}

func runCollection(ctx context.Context, env *bench.Env, fs *flag.FlagSet, args []string) (*bench.Report, error) {
	sizesFlag := fs.String("sizes", "20,200", "instance counts to measure, ascending")
	sample := fs.Duration("seconds", 60*time.Second, "how long to sample shoal's CPU at each size")
	settle := fs.Duration("settle", 10*time.Second, "wait after a scale-out before sampling")
	interval := fs.Duration("interval", time.Second, "metrics.interval")
	var bins bench.BinFlags
	bins.Register(fs)
	if err := bench.Parse(fs, args); err != nil {
		return nil, err
	}
	var sizes []int
	for f := range strings.SplitSeq(*sizesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || (len(sizes) > 0 && n <= sizes[len(sizes)-1]) {
			return nil, bench.BadUsage("-sizes %q: want ascending instance counts >= 1, e.g. 20,200", *sizesFlag)
		}
		sizes = append(sizes, n)
	}
	if *sample < time.Second || *settle < 0 {
		return nil, bench.BadUsage("-seconds >= 1s and -settle >= 0 please")
	}
	backend, sbin, err := bins.Resolve()
	if err != nil {
		return nil, err
	}
	largest := sizes[len(sizes)-1]
	ngroups := (largest + bench.GroupCap - 1) / bench.GroupCap
	sh, err := env.StartShoalOn(sbin, func(port int) string {
		return collectionConfig(port, filepath.Join(env.Work, "state"), backend, ngroups, *interval)
	})
	if err != nil {
		return nil, err
	}
	// With no instances, waiting for 0 in service waits for the API.
	if err := sh.WaitInService(ctx, "idle1", 0, 30*time.Second, bench.PollEvery); err != nil {
		return nil, err
	}

	rep := &bench.Report{Date: time.Now(), Machine: bench.NewMachine()}
	var levels []*collectionLevel
	rep.Details = &levels
	measure := func(n int) error {
		l := &collectionLevel{Instances: n, Seconds: sample.Seconds()}
		t0 := time.Now()
		left := n
		for i := range ngroups {
			size := min(left, bench.GroupCap)
			left -= size
			g := fmt.Sprintf("idle%d", i+1)
			st, err := sh.API.Group(ctx, g)
			if err != nil {
				return err
			}
			if st.Desired == size {
				continue
			}
			if err := sh.API.Size(ctx, g, size, 10*time.Minute); err != nil {
				return err
			}
			if err := sh.WaitInService(ctx, g, size, 5*time.Minute, bench.PollEvery); err != nil {
				return err
			}
		}
		l.StartS = time.Since(t0).Seconds()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(*settle):
		}
		// The figure means something only if shoal collects every instance.
		if n > 0 {
			d, err := sh.API.Metrics(ctx, "idle1", 5*time.Second, "")
			if err != nil {
				return fmt.Errorf("shoal's metrics: %w", err)
			}
			if want := min(n, bench.GroupCap); d.Size != want {
				return fmt.Errorf("shoal's metrics of idle1 list %d instances, want %d", d.Size, want)
			}
		}
		env.Log.Info("sampling shoal's CPU", "instances", n, "seconds", sample.Seconds())
		cpu, rss, err := bench.ProcessCPU(ctx, sh.Proc.Pid(), *sample)
		if err != nil {
			return err
		}
		l.CPU, l.RSSKiB = bench.Num(cpu), bench.Num(rss)
		env.Log.Info("measured", "instances", n, "cpu_percent", bench.Round2(cpu), "rss_mib", bench.Round2(rss/1024))
		levels = append(levels, l)
		return nil
	}
	if err := measure(0); err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	for _, n := range sizes {
		if err := measure(n); err != nil {
			return nil, fmt.Errorf("%d instances: %w: %s", n, err, sh.LogTail(5))
		}
	}

	base := levels[0]
	for _, l := range levels[1:] {
		f := bench.Figure{
			Name: fmt.Sprintf("shoal CPU, %d idle instances", l.Instances), Unit: "% of one core", Value: l.CPU,
			Baseline: "same shoal, 0 instances", BaselineValue: base.CPU, Ratio: bench.RatioOf(l.CPU, base.CPU),
			Note: fmt.Sprintf("RSS %s MiB; above the baseline by %s points", bench.FmtNum(bench.Num(*l.RSSKiB/1024)), bench.FmtNum(bench.Diff(l.CPU, base.CPU))),
		}
		if g, ok := collectionGoals[l.Instances]; ok {
			f.Goal = fmt.Sprintf("< %g %%", g)
			f.Verdict = bench.Verdict(l.CPU, func(v float64) bool { return v < g })
		}
		rep.Figures = append(rep.Figures, f)
	}
	rep.Settings = []bench.Setting{
		{Name: "metrics.interval", Value: interval.String()},
		{Name: "instances", Value: fmt.Sprintf("idle demo-backends in %d group(s) of at most %d, HAProxy health check every 2 s", ngroups, bench.GroupCap)},
		{Name: "sample", Value: fmt.Sprintf("utime+stime of the shoal process over %v per size, after %v of settling", *sample, *settle)},
	}
	var md strings.Builder
	md.WriteString("| instances | shoal CPU | RSS | scale-out took |\n|---:|---:|---:|---:|\n")
	for _, l := range levels {
		fmt.Fprintf(&md, "| %d | %s %% | %s MiB | %.1f s |\n", l.Instances, bench.FmtNum(l.CPU), bench.FmtNum(bench.Num(*l.RSSKiB/1024)), l.StartS)
	}
	rep.Markdown = md.String()
	return rep, nil
}

// collectionConfig is ngroups empty groups of up to bench.GroupCap instances.
func collectionConfig(port int, stateDir, backend string, ngroups int, interval time.Duration) string {
	var groups []string
	for i := range ngroups {
		extra := "cooldown: {up: 0s, down: 0s}\n"
		if i > 0 { // one default backend; the others are routed by path
			extra += fmt.Sprintf("path_prefixes: [/idle%d]\n", i+1)
		}
		groups = append(groups, bench.GroupYAML(fmt.Sprintf("idle%d", i+1), backend, 0, bench.GroupCap, "2s", extra))
	}
	return bench.BenchConfig(port, stateDir, fmt.Sprintf("interval: %s\n", interval), groups...)
}
