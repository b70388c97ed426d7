// Package iobound is the benchmark of an I/O-bound app and of the queue
// limits.max_conn gives a group (issue 41): what scaling on concurrency buys
// where the CPU says nothing, and where a burst waits with and without the
// queue.
package iobound

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/bench"
	"github.com/shoal-lb/shoal/internal/loadgen"
)

// Command runs both parts:
//
//	scale  an app whose requests wait 200 ms on I/O and use no CPU, with a
//	       fixed pool of workers per instance (as a thread-pool server has),
//	       under a ×4 load step: a target on `concurrency` against the same
//	       target on `cpu.avg`, each on a fresh shoal; SLO-violation seconds
//	       and instance-seconds.
//	burst  500 requests at once onto 2 instances, with limits.max_conn and
//	       without (the baseline), on two shoals started side by side: the
//	       clients' p50/p99 and, from HAProxy's access log of every request,
//	       the time each waited in HAProxy's queue (Tw) apart from the
//	       instance's own time (Tr).
var Command = &bench.Command{
	Name:    "iobound",
	Summary: "an I/O-bound app's load step scaled on concurrency vs CPU; a burst's p99 and instance time with and without max_conn",
	Run:     run,
}

// settings are the flags.
type settings struct {
	parts string
	// scale
	minutes  float64
	rate     float64
	waitMS   int
	workers  int
	maxSize  int
	slo      time.Duration
	policies string
	// burst
	burst    int
	rounds   int
	maxConn  int
	burstCPU int
	burstIO  int
}

func run(ctx context.Context, env *bench.Env, fs *flag.FlagSet, args []string) (*bench.Report, error) {
	var s settings
	fs.StringVar(&s.parts, "parts", "scale,burst", "parts to run, comma-separated: scale, burst")
	fs.Float64Var(&s.minutes, "minutes", 3, "scale: length of each policy's run")
	fs.Float64Var(&s.rate, "rate", 20, "scale: base open-loop rate, requests/s (the step is 4×)")
	fs.IntVar(&s.waitMS, "wait-ms", 200, "scale: I/O milliseconds per request (/work?ms=0&wait=N)")
	fs.IntVar(&s.workers, "workers", 8, "scale: requests an instance serves at once (demo-backend --workers); the rest wait in it")
	fs.IntVar(&s.maxSize, "max-size", 6, "scale: the group's max_size")
	fs.DurationVar(&s.slo, "slo", 400*time.Millisecond, "scale: p99 latency SLO of a second")
	fs.StringVar(&s.policies, "policies", "concurrency,cpu", "scale: policies to run, comma-separated: concurrency, cpu")
	fs.IntVar(&s.burst, "burst", 500, "burst: requests sent at once")
	fs.IntVar(&s.rounds, "rounds", 3, "burst: rounds, each a burst on both shoals (the order alternates)")
	fs.IntVar(&s.maxConn, "max-conn", 4, "burst: limits.max_conn of the queued group")
	fs.IntVar(&s.burstCPU, "burst-cpu-ms", 5, "burst: CPU milliseconds per request")
	fs.IntVar(&s.burstIO, "burst-wait-ms", 20, "burst: I/O milliseconds per request after the CPU")
	var bins bench.BinFlags
	bins.Register(fs)
	if err := bench.Parse(fs, args); err != nil {
		return nil, err
	}
	if s.minutes < 0.5 || s.rate <= 0 || s.waitMS < 1 || s.workers < 1 || s.maxSize < 2 || s.maxSize > bench.GroupCap || s.slo <= 0 ||
		s.burst < 1 || s.burst > 5000 || s.rounds < 1 || s.maxConn < 1 || s.burstCPU < 0 || s.burstIO < 0 {
		return nil, bench.BadUsage("-minutes >= 0.5, -rate > 0, -wait-ms >= 1, -workers >= 1, -max-size 2..%d, -slo > 0, -burst 1..5000, -rounds >= 1, -max-conn >= 1 please", bench.GroupCap)
	}
	parts := map[string]bool{}
	for p := range strings.SplitSeq(s.parts, ",") {
		p = strings.TrimSpace(p)
		if p != "scale" && p != "burst" {
			return nil, bench.BadUsage("-parts: unknown %q (want scale, burst)", p)
		}
		parts[p] = true
	}
	var policies []policy
	for name := range strings.SplitSeq(s.policies, ",") {
		p, ok := policyNamed(strings.TrimSpace(name), s.workers)
		if !ok {
			return nil, bench.BadUsage("-policies: unknown %q (want concurrency, cpu)", name)
		}
		policies = append(policies, p)
	}
	backend, sbin, err := bins.Resolve()
	if err != nil {
		return nil, err
	}

	rep := &bench.Report{Date: time.Now(), Machine: bench.NewMachine()}
	details := &Details{}
	rep.Details = details
	var md strings.Builder
	if parts["scale"] {
		total := time.Duration(s.minutes * float64(time.Minute)).Round(time.Second)
		schedule := stepSchedule(s.rate, total)
		for _, p := range policies {
			env.Log.Info("iobound scale run", "policy", p.Name, "minutes", s.minutes)
			r, err := runScale(ctx, env, p, backend, sbin, s, schedule)
			if err != nil {
				return nil, fmt.Errorf("scale %s: %w", p.Name, err)
			}
			env.Log.Info("iobound scale result", "policy", p.Name, "slo_violation_seconds", r.ViolationSeconds, "instance_seconds", r.InstanceSeconds)
			details.Scale = append(details.Scale, r)
		}
		rep.Figures = append(rep.Figures, scaleFigures(details.Scale)...)
		rep.Settings = append(rep.Settings,
			bench.Setting{Name: "scale: load", Value: fmt.Sprintf("open loop on /work?ms=0&wait=%d (no CPU): %s", s.waitMS, describeSchedule(schedule))},
			bench.Setting{Name: "scale: instance", Value: fmt.Sprintf("demo-backend --workers %d: %d requests at once, the rest wait in it, so %.0f req/s each", s.workers, s.workers, float64(s.workers)*1000/float64(s.waitMS))},
			bench.Setting{Name: "scale: SLO", Value: fmt.Sprintf("p99 of the requests scheduled in a second <= %v (client side, from the scheduled instant); a second with a failed or unsent request violates it too", s.slo)},
			bench.Setting{Name: "scale: group", Value: fmt.Sprintf("min_size 1, max_size %d, 1 s metrics (warmup 10 s), 1 s policy interval, no cooldowns, scale_in_stabilization 30 s", s.maxSize)},
		)
		for _, p := range policies {
			rep.Settings = append(rep.Settings, bench.Setting{Name: "scale: policy " + p.Name, Value: p.Desc})
		}
		md.WriteString(scaleMarkdown(details.Scale))
	}
	if parts["burst"] {
		env.Log.Info("iobound burst", "rounds", s.rounds, "burst", s.burst, "max_conn", s.maxConn)
		rounds, err := runBursts(ctx, env, backend, sbin, s)
		if err != nil {
			return nil, fmt.Errorf("burst: %w", err)
		}
		details.Burst = rounds
		rep.Figures = append(rep.Figures, burstFigures(rounds, s.maxConn)...)
		rep.Settings = append(rep.Settings,
			bench.Setting{Name: "burst: load", Value: fmt.Sprintf("%d requests of /work?ms=%d&wait=%d sent at once (a connection each), %d rounds; the order of the two shoals alternates", s.burst, s.burstCPU, s.burstIO, s.rounds)},
			bench.Setting{Name: "burst: groups", Value: fmt.Sprintf("2 demo-backends each (GOMAXPROCS=1, cpus: 1), roundrobin; queued: limits {max_conn: %d, queue_timeout: 60s}; baseline: no limits. Both shoals run side by side, access_log sample 1", s.maxConn)},
			bench.Setting{Name: "burst: timers", Value: "from HAProxy's access log of every request: Tw (waited in HAProxy's queue), Tr (the instance's time to its response headers, its own latency), Ta (the whole request)"},
		)
		md.WriteString(burstMarkdown(rounds))
	}
	rep.Markdown = md.String()
	return rep, nil
}

// Details is the report's raw data.
type Details struct {
	Scale []*scaleResult `json:"scale,omitempty"`
	Burst []*burstRound  `json:"burst,omitempty"`
}

// stepSchedule is rate for the first fifth of total, 4×rate for half, and
// rate for the rest.
func stepSchedule(rate float64, total time.Duration) []loadgen.Segment {
	first := (total / 5).Round(time.Second)
	high := (total / 2).Round(time.Second)
	return []loadgen.Segment{{Rate: rate, Duration: first}, {Rate: 4 * rate, Duration: high}, {Rate: rate, Duration: total - first - high}}
}

func describeSchedule(segs []loadgen.Segment) string {
	var parts []string
	for _, s := range segs {
		parts = append(parts, fmt.Sprintf("%g req/s for %v", s.Rate, s.Duration))
	}
	return strings.Join(parts, ", ")
}

// stateDir is a shoal's state directory in the scratch directory.
func stateDir(env *bench.Env, name string) string { return filepath.Join(env.Work, "state-"+name) }
