package canary

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/bench"
	"github.com/shoal-lb/shoal/internal/loadgen"
)

// canary measures what a canary deploy saves: the requests that a bad
// version (answering -fail of its requests 500, its health check passing)
// answers before it is rolled back, against a rolling deploy of the same
// version (the baseline, measured in the same run), which a health check
// cannot stop; both counted over the same -window from the deploy's start
// under the same closed-loop load. Then the deploy's total time for a good
// version, canary (steps of -step each) against rolling.
var Command = &bench.Command{
	Name:    "canary",
	Summary: "requests a bad version answers before its rollback, canary vs rolling; a good version's deploy time",
	Run:     runCanary,
}

type strategyRun struct {
	Strategy    string  `json:"strategy"`
	Requests    int64   `json:"requests"`
	Bad         int64   `json:"bad_requests"` // 500s of the bad version
	OtherFailed int64   `json:"other_failed"`
	Outcome     string  `json:"outcome"`
	GoodDeploy  float64 `json:"good_deploy_s"`
	RPS         float64 `json:"rps"`
	// ShoalCPU and HAProxyCPU are CPU time per request (µs, utime+stime
	// from /proc) over the bad deploy's window: shoal serve's process and
	// HAProxy's (master and worker).
	ShoalCPU   float64 `json:"shoal_cpu_us_per_request"`
	HAProxyCPU float64 `json:"haproxy_cpu_us_per_request"`
}

type details struct {
	Runs []strategyRun `json:"runs"`
}

func runCanary(ctx context.Context, env *bench.Env, fs *flag.FlagSet, args []string) (*bench.Report, error) {
	instances := fs.Int("instances", 4, "the group's size")
	fail := fs.Float64("fail", 0.03, "share of requests the bad version answers 500")
	window := fs.Duration("window", 60*time.Second, "how long after the deploy's start the bad requests are counted")
	step := fs.Duration("step", 20*time.Second, "each canary step's for (5%, 25%, then 100%)")
	interval := fs.Duration("interval", 5*time.Second, "the canary analysis' interval")
	minRequests := fs.Int("min-requests", 200, "the canary analysis' min_requests")
	conns := fs.Int("conns", 8, "closed-loop load: connections")
	var bins bench.BinFlags
	bins.Register(fs)
	if err := bench.Parse(fs, args); err != nil {
		return nil, err
	}
	if *instances < 2 || *instances > 20 || *fail <= 0 || *fail > 1 || *window < 10*time.Second || *step < time.Second || *interval < time.Second || *minRequests < 1 || *conns < 1 {
		return nil, bench.BadUsage("-instances 2..20, -fail in (0, 1], -window >= 10s, -step and -interval >= 1s, -min-requests >= 1, -conns >= 1 please")
	}
	backend, sbin, err := bins.Resolve()
	if err != nil {
		return nil, err
	}
	rep := &bench.Report{Date: time.Now(), Machine: bench.NewMachine()}
	det := &details{}
	rep.Details = det
	for _, strategy := range []string{"rolling", "canary"} {
		r, err := measure(ctx, env, sbin, backend, strategy, *instances, *fail, *window, *step, *interval, *minRequests, *conns)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", strategy, err)
		}
		env.Log.Info("measured", "strategy", strategy, "requests", r.Requests, "bad", r.Bad, "other_failed", r.OtherFailed, "good_deploy_s", bench.Round2(r.GoodDeploy), "outcome", r.Outcome)
		det.Runs = append(det.Runs, r)
	}
	roll, can := det.Runs[0], det.Runs[1]
	bad, badBase := bench.Num(float64(can.Bad)), bench.Num(float64(roll.Bad))
	ratio := bench.RatioOf(bad, badBase)
	rep.Figures = []bench.Figure{{
		Name: fmt.Sprintf("requests answered 500 by a bad version within %s of the deploy's start", *window), Value: bad,
		Baseline: "rolling deploy", BaselineValue: badBase, Ratio: ratio,
		Goal: "canary at most 1/10 of rolling's", Verdict: bench.Verdict(ratio, func(v float64) bool { return v <= 0.1 }),
		Note: fmt.Sprintf("the bad version answers %g of its requests 500 and passes its health check: a rolling deploy puts it everywhere, a canary is rolled back by its analysis (max_error_rate above 1%%, min_requests %d, interval %s)", *fail, *minRequests, *interval),
	}, {
		Name: "other failed requests (canary)", Value: bench.Num(float64(can.OtherFailed)), Goal: "0",
		Verdict: bench.Verdict(bench.Num(float64(can.OtherFailed)), func(v float64) bool { return v == 0 }),
	}, {
		Name: "a good version's deploy, total time", Unit: "s", Value: bench.Num(can.GoodDeploy),
		Baseline: "rolling deploy", BaselineValue: bench.Num(roll.GoodDeploy), Ratio: bench.RatioOf(bench.Num(can.GoodDeploy), bench.Num(roll.GoodDeploy)),
		Note: fmt.Sprintf("canary steps 5%%, 25%% for %s each, then 100%% and the rolling replacement", *step),
	}, {
		Name: "shoal's CPU per request over the bad deploy's window", Unit: "µs", Value: bench.Num(bench.Round2(can.ShoalCPU)),
		Baseline: "rolling deploy", BaselineValue: bench.Num(bench.Round2(roll.ShoalCPU)), Ratio: bench.RatioOf(bench.Num(can.ShoalCPU), bench.Num(roll.ShoalCPU)),
		Note: fmt.Sprintf("utime+stime of shoal serve (/proc/PID/stat) over the window, per request answered (canary: its analysis's stats reads and weight changes; rolling: its instance replacements); %.0f requests/s canary, %.0f rolling", can.RPS, roll.RPS),
	}, {
		Name: "HAProxy's CPU per request over the bad deploy's window", Unit: "µs", Value: bench.Num(bench.Round2(can.HAProxyCPU)),
		Baseline: "rolling deploy", BaselineValue: bench.Num(bench.Round2(roll.HAProxyCPU)), Ratio: bench.RatioOf(bench.Num(can.HAProxyCPU), bench.Num(roll.HAProxyCPU)),
		Note: "utime+stime of HAProxy's master and worker over the window, per request answered",
	}}
	rep.Settings = []bench.Setting{
		{Name: "group", Value: fmt.Sprintf("%d demo-backends (GOMAXPROCS=1), health every 200 ms; deploy max_surge 1, min_ready 1s", *instances)},
		{Name: "load", Value: fmt.Sprintf("closed loop, %d keep-alive connections, GET / from this process on 127.0.0.1", *conns)},
		{Name: "canary", Value: fmt.Sprintf("steps 5%% for %s, 25%% for %s, 100%%; analysis max_error_rate {above: 1%%, vs_stable: 2x}, min_requests %d, interval %s; bad requests counted for %s from the deploy's start", *step, *step, *minRequests, *interval, *window)},
	}
	var md strings.Builder
	md.WriteString("| strategy | requests in the window | requests/s | shoal CPU/request | HAProxy CPU/request | 500s of the bad version | other failures | bad deploy | good deploy |\n|---|---:|---:|---:|---:|---:|---:|---|---:|\n")
	for _, r := range det.Runs {
		fmt.Fprintf(&md, "| %s | %d | %.0f | %.1f µs | %.1f µs | %d | %d | %s | %.1f s |\n", r.Strategy, r.Requests, r.RPS, r.ShoalCPU, r.HAProxyCPU, r.Bad, r.OtherFailed, r.Outcome, r.GoodDeploy)
	}
	rep.Markdown = md.String()
	return rep, nil
}

// measure starts shoal with one strategy, deploys the bad version under
// load and counts over the window, then deploys a good one and times it.
func measure(ctx context.Context, env *bench.Env, sbin, backend, strategy string, size int, fail float64, window, step, interval time.Duration, minRequests, conns int) (strategyRun, error) {
	r := strategyRun{Strategy: strategy}
	deploy := "{max_surge: 1, min_ready: 1s}"
	if strategy == "canary" {
		deploy = fmt.Sprintf("{strategy: canary, max_surge: 1, min_ready: 1s, canary: {steps: [{weight: 5%%, for: %s}, {weight: 25%%, for: %s}, {weight: 100%%}], analysis: {max_error_rate: {above: 1%%, vs_stable: 2x}, min_requests: %d, interval: %s}}}",
			step, step, minRequests, interval)
	}
	sh, err := env.StartShoalOn(sbin, func(port int) string {
		return bench.BenchConfig(port, filepath.Join(env.Work, "state-"+strategy), "", fmt.Sprintf(`  - name: web
    min_size: %d
    max_size: %d
    drain_timeout: 5s
    health: {path: /healthz, interval: 200ms, rise: 1, fall: 2, timeout: 1s, grace: 30s}
    deploy: %s
    template:
      command: [%q, "--listen", "127.0.0.1:{{.Port}}", "--name", "{{.Name}}", "--fail-share", "{{.Vars.fail}}"]
      vars: {fail: "0", release: "1"}
      env: {GOMAXPROCS: "1", RELEASE: "{{.Vars.release}}"}
      stop_timeout: 5s
`, size, size+2, deploy, backend))
	})
	if err != nil {
		return r, err
	}
	defer env.Stop(sh.Proc)
	if err := sh.WaitInService(ctx, "web", size, 60*time.Second, bench.PollEvery); err != nil {
		return r, err
	}
	stop, err := loadgen.Start(ctx, loadgen.Options{URL: sh.URL("/"), Concurrency: conns, Timeout: 10 * time.Second})
	if err != nil {
		return r, err
	}
	start := time.Now()
	cpu := startCPU(sh.Proc.Pid())
	out, derr := sh.CLI(ctx, window+5*time.Minute, "deploy", "web", "--set", fmt.Sprintf("fail=%g", fail), "--sync")
	r.Outcome = "rolled out"
	if derr != nil {
		r.Outcome = "rolled back"
		if !strings.Contains(string(out), "rolled back") {
			stop()
			return r, fmt.Errorf("bad deploy: %w: %s", derr, out)
		}
	}
	if rest := window - time.Since(start); rest > 0 {
		time.Sleep(rest)
	}
	shoalTicks, hapTicks, cerr := cpu()
	res := stop()
	if cerr != nil {
		return r, cerr
	}
	r.Requests, r.RPS = res.Requests, res.RPS
	if res.Requests > 0 {
		perReq := func(ticks int64) float64 { return 1e6 * float64(ticks) / bench.ClockTicks / float64(res.Requests) }
		r.ShoalCPU, r.HAProxyCPU = perReq(shoalTicks), perReq(hapTicks)
	}
	for kind, n := range res.FailureKinds {
		if kind == "HTTP 500" {
			r.Bad += n
		} else {
			r.OtherFailed += n
		}
	}
	// Back to a good version for the rolling run (the bad one serves),
	// then a good version's deploy, timed, under the same load: a canary
	// step ends only once its analysis has judged min_requests.
	stop, err = loadgen.Start(ctx, loadgen.Options{URL: sh.URL("/"), Concurrency: conns, Timeout: 10 * time.Second})
	if err != nil {
		return r, err
	}
	defer stop()
	t0 := time.Now()
	if _, err := sh.CLI(ctx, 10*time.Minute, "deploy", "web", "--set", "fail=0", "--set", "release=2", "--sync"); err != nil {
		return r, fmt.Errorf("good deploy: %w", err)
	}
	r.GoodDeploy = time.Since(t0).Seconds()
	return r, nil
}

// startCPU reads the CPU ticks of shoal (pid) and of its HAProxy
// processes now; the function it returns reads them again and returns
// what each used since. An HAProxy process started meanwhile counts from
// 0: its whole life lies in between.
func startCPU(pid int) func() (shoal, haproxy int64, err error) {
	s0, err0 := bench.CPUTicks(pid)
	h0 := map[int]int64{}
	for _, p := range haproxies(pid) {
		if t, err := bench.CPUTicks(p); err == nil {
			h0[p] = t
		}
	}
	return func() (int64, int64, error) {
		s1, err1 := bench.CPUTicks(pid)
		if err := errors.Join(err0, err1); err != nil {
			return 0, 0, fmt.Errorf("shoal's CPU: %w", err)
		}
		var h int64
		for _, p := range haproxies(pid) {
			if t, err := bench.CPUTicks(p); err == nil {
				h += t - h0[p]
			}
		}
		if h == 0 && len(h0) == 0 {
			return 0, 0, errors.New("HAProxy's CPU: shoal runs no haproxy process")
		}
		return s1 - s0, h, nil
	}
}

// haproxies lists the haproxy processes below pid.
func haproxies(pid int) []int {
	var out []int
	for _, p := range bench.Descendants(pid) {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/comm"); err == nil && strings.TrimSpace(string(b)) == "haproxy" {
			out = append(out, p)
		}
	}
	return out
}
