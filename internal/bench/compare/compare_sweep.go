package compare

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/sim"
)

// sweepResult is the reactive twin at every swept target and stabilization,
// and the predictive policy at every swept target.
type sweepResult struct {
	Reactive   []sim.Point `json:"reactive"`
	Predictive []sweepRow  `json:"predictive"`
}

// sweepRow is the predictive policy at one target, next to the best reactive
// setting that uses no more instance-seconds (nil: none does).
type sweepRow struct {
	Target float64 `json:"target"`
	sim.Point
	BestReactive *sim.Point `json:"best_reactive_within,omitempty"`
}

func (r sweepRow) beats() bool {
	return r.BestReactive != nil && r.ViolationSeconds < r.BestReactive.ViolationSeconds
}

// wins counts the swept targets where predictive beats the reactive sweep.
func (s sweepResult) wins() (wins, n int) {
	for _, r := range s.Predictive {
		if r.beats() {
			wins++
		}
	}
	return wins, len(s.Predictive)
}

// sweep simulates the sweep's settings on base, spread over the CPUs (each
// simulation is independent and deterministic).
func sweep(ctx context.Context, base sim.Run, pols []sim.Policy) (sweepResult, error) {
	var twin, pred sim.Policy
	for _, p := range pols {
		switch p.Name {
		case twinKey:
			twin = p
		case predictiveKey:
			pred = p
		}
	}
	if twin.Group.Autoscale == nil || pred.Group.Autoscale == nil || pred.Group.Autoscale.Target == nil {
		return sweepResult{}, errors.New("compare: the sweep needs the reactive twin and the predictive policy, each with a target")
	}
	type job struct {
		p      sim.Policy
		target float64
		pred   bool
	}
	var jobs []job
	for _, t := range sweepTargets {
		for _, st := range sweepStabilizations {
			p, err := sim.WithTarget(twin, t, st)
			if err != nil {
				return sweepResult{}, err
			}
			p.Name = fmt.Sprintf("reactive %g %% / %s", t, fmtStab(st))
			jobs = append(jobs, job{p: p, target: t})
		}
		p, err := sim.WithTarget(pred, t, pred.Group.Autoscale.Target.ScaleInStabilization)
		if err != nil {
			return sweepResult{}, err
		}
		p.Name = fmt.Sprintf("predictive %g %%", t)
		jobs = append(jobs, job{p: p, target: t, pred: true})
	}

	runs := make([]simJob, len(jobs))
	for i, j := range jobs {
		runs[i] = simJob{p: j.p}
	}
	points, err := simulateAll(ctx, base, runs)
	if err != nil {
		return sweepResult{}, err
	}

	var out sweepResult
	for i, j := range jobs {
		if !j.pred {
			out.Reactive = append(out.Reactive, points[i])
		}
	}
	for i, j := range jobs {
		if j.pred {
			row := sweepRow{Target: j.target, Point: points[i]}
			if best, ok := sim.BestWithin(out.Reactive, points[i].InstanceSeconds); ok {
				row.BestReactive = &best
			}
			out.Predictive = append(out.Predictive, row)
		}
	}
	return out, nil
}

func fmtStab(d time.Duration) string {
	if d == 0 {
		return "no stabilization"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	return s + " stabilization"
}

// writeTradeoff plots the sweep: every reactive and predictive setting, the
// best trade-off line of each, and the compared policies as squares.
func writeTradeoff(run compareRun, title string) error {
	var pred []sim.Point
	for _, r := range run.Sweep.Predictive {
		pred = append(pred, r.Point)
	}
	var marks []sim.Point
	for _, r := range run.Rows {
		if strings.HasPrefix(r.Policy, "static") {
			continue // far to the right: it would squash the rest
		}
		marks = append(marks, sim.Point{Name: r.Policy, InstanceSeconds: r.InstanceSeconds, ViolationSeconds: r.ViolationSeconds})
	}
	f, err := os.Create(run.SweepPlot)
	if err != nil {
		return err
	}
	sets := []sim.FrontierSet{
		{Name: "reactive target tracking (target × stabilization)", Points: run.Sweep.Reactive},
		{Name: "with the forecast floor (target)", Points: pred},
	}
	return errors.Join(sim.WriteFrontierSVG(f, title+": instance-seconds vs SLO violations", sets, marks), f.Close())
}

// writeSweepMarkdown adds the sweep to the report: the predictive policy at
// each target against the best reactive setting within its instance-seconds.
func writeSweepMarkdown(md *strings.Builder, run compareRun) {
	wins, n := run.Sweep.wins()
	fmt.Fprintf(md, "### Predictive against every reactive setting\n\nPlot: `%s`\n\n", filepath.Base(run.SweepPlot))
	fmt.Fprintf(md, "The reactive twin swept over %d targets × %d stabilizations (%d settings), and the predictive policy over the same targets "+
		"(its horizon and stabilization unchanged). Predictive beats the best reactive setting within its instance-seconds at **%d of %d** targets.\n\n",
		len(sweepTargets), len(sweepStabilizations), len(run.Sweep.Reactive), wins, n)
	md.WriteString("| target | predictive instance-s | predictive violation s | best reactive within | its instance-s | its violation s | fewer? |\n|---:|---:|---:|---|---:|---:|---|\n")
	for _, r := range run.Sweep.Predictive {
		if r.BestReactive == nil {
			fmt.Fprintf(md, "| %g %% | %.0f | %.0f | none uses as few | | | no |\n", r.Target, r.InstanceSeconds, r.ViolationSeconds)
			continue
		}
		yes := "no"
		if r.beats() {
			yes = "yes"
		}
		fmt.Fprintf(md, "| %g %% | %.0f | %.0f | %s | %.0f | %.0f | %s |\n", r.Target, r.InstanceSeconds, r.ViolationSeconds,
			r.BestReactive.Name, r.BestReactive.InstanceSeconds, r.BestReactive.ViolationSeconds, yes)
	}
	md.WriteString("\n")
}

// simJob is one policy to simulate on a shared run, at its metrics'
// resolution (0: per interval).
type simJob struct {
	p   sim.Policy
	res time.Duration
}

// simulateAll simulates each job on base, spread over the CPUs (each
// simulation is independent and deterministic), and returns their points in
// the jobs' order.
func simulateAll(ctx context.Context, base sim.Run, jobs []simJob) ([]sim.Point, error) {
	points := make([]sim.Point, len(jobs))
	errs := make([]error, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				r := base
				p := jobs[i].p
				r.Group, r.Interval, r.Warmup, r.Initial, r.Resolution = p.Group, p.Interval, p.Warmup, p.Group.MinSize, jobs[i].res
				res, err := sim.Simulate(r)
				if err != nil {
					errs[i] = fmt.Errorf("%s: %w", p.Name, err)
					continue
				}
				points[i] = sim.Point{Name: p.Name, InstanceSeconds: res.InstanceSeconds, ViolationSeconds: res.ViolationSeconds}
			}
		}()
	}
	for i := range jobs {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(append(errs, ctx.Err())...); err != nil {
		return nil, err
	}
	return points, nil
}
