// Package spike is the benchmark of issue 42, "own the baseline, rent the
// spike": one group across the operator's own hosts and a cloud, against
// the same group all in the cloud and on the hosts alone.
//
// It runs in two parts on the same policy and the same calibrated model:
//
//   - The day, in the simulator (sim.Run with Providers): the World Cup 1998
//     window (-from, -to), scaled so that its peak needs more instances than
//     the hosts hold, through four setups: hosts only (their capacity bounds
//     the group), hosts then cloud with a 3.5-minute start, hosts then cloud
//     with a 20-second start (a warm pool, modelled as a cloud provider whose
//     start delay is 20 s: the warm-pool code is not used), and all-cloud.
//   - A live replay of a slice of it (-live-from, -live-to) compressed K
//     times, with the real shoal binary and HAProxy: the hosts are local
//     demo-backend processes (the local provider with max: HOSTS), the cloud
//     is the exec provider's test cloud (fakecloud.sh, its servers
//     demo-backend processes on 127.0.1xx.y) whose servers stay
//     "provisioning" for the cloud's start delay divided by K. The
//     simulator's figures for the same compressed slice, at the start delays
//     shoal measured per provider, stand beside the live ones.
//
// Cost: instance-hours times the provider entry's cost_per_hour; the own
// hosts' marginal cost is 0 (they are paid for whether they serve or not).
package spike

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/loadgen"
	"github.com/shoal-lb/shoal/internal/sim"
	"github.com/shoal-lb/shoal/internal/trace"

	"github.com/shoal-lb/shoal/internal/bench"
)

var Command = &bench.Command{
	Name:    "spike",
	Summary: "own hosts + cloud vs all-cloud vs hosts only, on the World Cup day: simulated, and a compressed live replay",
	Run:     runSpike,
}

// Provider names in the reports and the live configs.
const (
	hostsName = "local" // the live hosts are the local provider
	cloudName = "cloud"
	groupName = "web"
)

// setup is one way to run the group.
type setup struct {
	Name string `json:"name"`
	// Hosts is the hosts' capacity (0: none); Cloud the cloud's start
	// delay (0: no cloud).
	Hosts int           `json:"hosts"`
	Cloud time.Duration `json:"cloud_start_delay_ns"`
}

// outcome is one setup's figures.
type outcome struct {
	Setup setup `json:"setup"`
	// Seconds are instance-seconds by provider.
	Seconds   map[string]float64 `json:"instance_seconds"`
	Cost      float64            `json:"cost"`
	Violation float64            `json:"slo_violation_seconds"`
	MaxSize   int                `json:"max_size"`
	Scales    int                `json:"scale_events"`
}

// liveOutcome is a live setup's figures, with the simulator's for the
// same compressed slice.
type liveOutcome struct {
	outcome
	Requests int64 `json:"requests"`
	// Failed are requests that failed (an error or no answer within 10 s);
	// Unsent those the generator could not send because 2,000 were in
	// flight (an overloaded group: they count in the violation seconds).
	Failed int64 `json:"failed"`
	Unsent int64 `json:"unsent"`
	// Initial is the group's size after the settling load, where the
	// simulated twin starts.
	Initial   int            `json:"initial_size"`
	InitialBy map[string]int `json:"initial_by_provider"`
	ShoalCPU  float64        `json:"shoal_cpu_percent_of_a_core"`
	// StartDelays are shoal's measured start delays per provider, which
	// the simulated twin uses.
	StartDelays map[string]time.Duration `json:"start_delay_ns"`
	// Measured says which of StartDelays shoal measured (the others are
	// the nominal ones: no instance went into service there).
	Measured  map[string]bool `json:"start_delay_measured"`
	Simulated outcome         `json:"simulated"`
	Failures  []string        `json:"failure_samples,omitempty"`
}

func runSpike(ctx context.Context, env *bench.Env, fs *flag.FlagSet, args []string) (*bench.Report, error) {
	var trc bench.TraceFlags
	trc.Register(fs)
	liveFrom := fs.String("live-from", "1998-06-30T20:00", "live slice start, UTC")
	liveTo := fs.String("live-to", "1998-06-30T22:30", "live slice end, UTC")
	speedup := fs.Float64("speedup", 30, "K: a trace minute of the live slice lasts 1m/K; its delays and the policy's windows are divided by K too")
	peak := fs.Int("peak", 6, "the day's peak needs this many instances at 90% of their capacity (sets the scale)")
	hosts := fs.Int("hosts", 4, "the own hosts' capacity, instances")
	cloudDelay := fs.Duration("cloud-delay", sim.CloudStartDelay, "the cloud's start delay (the seeds' server creation)")
	warmDelay := fs.Duration("warm-delay", 20*time.Second, "the start delay of a server from a warm pool")
	hostDelay := fs.Duration("host-delay", sim.LocalStartDelay, "an instance's start delay on the hosts (simulated day)")
	cost := fs.Float64("cloud-cost", 0.10, "the cloud's cost_per_hour per instance (the hosts': 0, their marginal cost)")
	target := fs.Float64("target", 0.5, "the policy's target: requests/s per instance as a share of the calibrated capacity")
	settle := fs.Duration("settle", 30*time.Second, "live: the slice's first rate for this long before the replay, the group settling to it")
	maxSize := fs.Int("max", 16, "the group's max_size (hosts only: the hosts' capacity)")
	live := fs.String("live", "hosts+cloud,hosts+warm,all-cloud", "live setups, comma-separated, of hosts+cloud, hosts+warm, all-cloud, hosts-only ('' for none)")
	workMS := fs.Int("ms", 1, "CPU per request: GET /work?ms=M")
	waitMS := fs.Int("wait", 9, "waiting (I/O) per request after its CPU: &wait=W")
	slo := bench.SLOFlag(fs)
	calib := fs.Duration("calibrate", 5*time.Second, "how long to calibrate an instance's capacity")
	var bins bench.BinFlags
	bins.Register(fs)
	if err := bench.Parse(fs, args); err != nil {
		return nil, err
	}
	if !(*speedup >= 1) || *peak <= *hosts || *hosts < 1 || *maxSize < *peak || *maxSize > bench.GroupCap || !(*target > 0 && *target < 1) ||
		*cloudDelay <= 0 || *warmDelay <= 0 || *hostDelay < 0 || *cost < 0 || *workMS < 1 || *waitMS < 0 || *slo <= 0 || *calib < time.Second {
		return nil, bench.BadUsage("-speedup >= 1, -hosts >= 1, -peak > -hosts, -peak <= -max <= %d, 0 < -target < 1, delays > 0, -cloud-cost >= 0, -ms >= 1, -wait >= 0, -slo > 0 and -calibrate >= 1s please", bench.GroupCap)
	}
	setups := map[string]setup{
		"hosts-only":  {Name: "hosts only", Hosts: *hosts},
		"hosts+cloud": {Name: "hosts + cloud", Hosts: *hosts, Cloud: *cloudDelay},
		"hosts+warm":  {Name: "hosts + cloud from a warm pool", Hosts: *hosts, Cloud: *warmDelay},
		"all-cloud":   {Name: "all-cloud", Cloud: *cloudDelay},
	}
	var liveSetups []setup
	if *live != "" {
		for n := range strings.SplitSeq(*live, ",") {
			s, ok := setups[strings.TrimSpace(n)]
			if !ok {
				return nil, bench.BadUsage("-live: unknown setup %q (hosts+cloud, hosts+warm, all-cloud, hosts-only)", n)
			}
			liveSetups = append(liveSetups, s)
		}
	}
	tw, err := trc.Read()
	if err != nil {
		return nil, err
	}
	lf, err := trace.ParseTime(*liveFrom)
	if err != nil {
		return nil, bench.BadUsage("-live-from: %v", err)
	}
	lt, err := trace.ParseTime(*liveTo)
	if err != nil {
		return nil, bench.BadUsage("-live-to: %v", err)
	}
	slice, err := tw.Series.Window(lf, lt)
	if err != nil {
		return nil, bench.BadUsage("-live-from, -live-to: %v", err)
	}
	step := time.Duration(float64(time.Minute) / *speedup)
	if step < time.Second || step%time.Second != 0 {
		return nil, bench.BadUsage("-speedup %g: a trace minute must last whole seconds (60/K)", *speedup)
	}
	backend, sbin, err := bins.Resolve()
	if err != nil {
		return nil, err
	}
	machine := bench.NewMachine() // its load average before the run

	// 1. Calibrate one instance: the model of both parts.
	query := fmt.Sprintf("/work?ms=%d&wait=%d", *workMS, *waitMS)
	cal, err := bench.Calibrate(ctx, env, backend, query, *calib)
	if err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	env.Log.Info("calibrated", "capacity_rps", cal.Capacity, "base_p99", cal.P99, "service_cv", cal.ServiceCV)
	model := sim.Model{Capacity: cal.Capacity, BaseP99: cal.P99, ServiceCV: cal.ServiceCV, SaturatedCPU: cal.SaturatedCPU}
	scale, err := tw.Window.ScaleFor(float64(*peak) * 0.9 * cal.Capacity)
	if err != nil {
		return nil, err
	}
	pol := policy{target: *target * cal.Capacity, maxSize: *maxSize, cost: *cost}

	// 2. The day in the simulator.
	dayPol, err := pol.load(env, 1)
	if err != nil {
		return nil, err
	}
	var day []outcome
	for _, key := range []string{"hosts-only", "hosts+cloud", "hosts+warm", "all-cloud"} {
		s := setups[key]
		o, err := simulate(dayPol, s, model, *slo, tw.From, tw.Window.Rates(scale), time.Minute, *cost,
			map[string]time.Duration{hostsName: *hostDelay, cloudName: s.Cloud}, 0)
		if err != nil {
			return nil, fmt.Errorf("simulate %s: %w", s.Name, err)
		}
		env.Log.Info("day simulated", "setup", s.Name, "instance_seconds", o.Seconds, "cost", o.Cost, "violation_s", o.Violation)
		day = append(day, o)
	}

	// 3. The compressed slice, live and simulated.
	livePol, err := pol.load(env, *speedup)
	if err != nil {
		return nil, err
	}
	var lives []liveOutcome
	for _, s := range liveSetups {
		lo, err := runLive(ctx, env, livePol, s, liveRun{backend: backend, shoal: sbin, query: query, speedup: *speedup, scale: scale,
			slice: slice, slo: *slo, model: model, cost: *cost, policy: pol, settle: *settle})
		if err != nil {
			return nil, fmt.Errorf("live %s: %w", s.Name, err)
		}
		env.Log.Info("live replayed", "setup", s.Name, "instance_seconds", lo.Seconds, "failed", lo.Failed, "violation_s", lo.Violation,
			"simulated_instance_seconds", lo.Simulated.Seconds, "simulated_violation_s", lo.Simulated.Violation)
		lives = append(lives, lo)
	}

	rep := &bench.Report{Date: time.Now(), Machine: machine}
	boot := scaledBoot(*cloudDelay, *speedup)
	rep.Settings = []bench.Setting{
		{Name: "day (simulated)", Value: fmt.Sprintf("%s, %s to %s, a rate per trace minute", filepath.Base(tw.Path), tw.From.Format("2006-01-02 15:04"), tw.To.Format("2006-01-02 15:04 UTC"))},
		{Name: "scale", Value: fmt.Sprintf("%.5g: req/s = requests per minute × %.5g / 60; the day's peak, %.0f req/s, needs %d instances at 90%% of their capacity (more than the %d the hosts hold)",
			scale, scale, slices.Max(tw.Window.Rates(scale)), *peak, *hosts)},
		{Name: "instance", Value: fmt.Sprintf("demo-backend --workers 1, GET %s: %.1f req/s each (calibrated, serial requests for %s), base p99 %s, service time CV %.2f",
			query, cal.Capacity, *calib, cal.P99.Round(10*time.Microsecond), cal.ServiceCV)},
		{Name: "policy", Value: fmt.Sprintf("target requests_per_second_per_instance %.1f (%.0f%% of the capacity), scale_in_stabilization 2m, max_step up 100%% down 1, period 1m, start_delay auto; cooldown down 30s; metrics every 1s, warmup 30s; min 1, max %d (hosts only: %d). Not a CPU metric: the exec cloud's servers have no CPU shoal can read",
			pol.target, 100**target, *maxSize, *hosts)},
		{Name: "setups", Value: fmt.Sprintf("hosts only: capacity %d, start %s; hosts + cloud: the hosts first, then the cloud, start %s; hosts + warm pool: the cloud's start %s (a warm pool modelled as a cloud provider with a 20 s start delay, not the warm-pool code); all-cloud: start %s",
			*hosts, *hostDelay, *cloudDelay, *warmDelay, *cloudDelay)},
		{Name: "cost", Value: fmt.Sprintf("%.2f per cloud instance-hour; the hosts' marginal cost is 0 (owned, paid whether they serve or not)", *cost)},
		{Name: "SLO", Value: fmt.Sprintf("p99 %s per second (live: a second with a failed request counts as over)", *slo)},
		{Name: "live slice", Value: fmt.Sprintf("%s to %s compressed K = %g times (a trace minute lasts %s): %d minutes in %s; the policy's windows divided by K (stabilization %s, cooldown down %s, period %s, warmup %s); before it, the slice's first rate for %s so that the group settles to it (the simulated twin starts at the size it reached, the hosts filled first); open loop, each request timed from its scheduled instant, 10 s timeout; failed: an error or timeout; unsent: due while 2,000 were in flight (an overloaded group), counted in the violation seconds",
			lf.Format("2006-01-02 15:04"), lt.Format("15:04 UTC"), *speedup, step, len(slice.Rates(1)), time.Duration(len(slice.Rates(1)))*step,
			livePol.g.Autoscale.Target.ScaleInStabilization, livePol.g.Cooldown.Down, livePol.g.Autoscale.Target.Period, livePol.warmup, *settle)},
		{Name: "live hosts and cloud", Value: fmt.Sprintf("hosts: the local provider, max %d (demo-backend processes; health check every 500 ms, rise 1); cloud: the exec provider on its test cloud (internal/provider/cloud/exec/testdata/fakecloud.sh; servers are demo-backend processes on 127.0.1xx.y), listed every 500 ms, each server \"provisioning\" for %s (the cloud's %s / K, in whole seconds; a warm pool's %s / K rounds to %s); the simulated twin uses the start delays shoal measured per provider",
			*hosts, boot, *cloudDelay, *warmDelay, scaledBoot(*warmDelay, *speedup))},
	}
	rep.Figures = figures(day, lives)
	rep.Markdown = markdown(day, lives, *speedup)
	rep.Details = map[string]any{"scale": scale, "speedup": *speedup, "capacity_rps": cal.Capacity, "day": day, "live": lives}
	return rep, nil
}

// policy is the group's policy, the same in every setup.
type policy struct {
	target  float64 // requests/s per instance
	maxSize int
	cost    float64
}

// loaded is the policy loaded through shoal's config, its windows divided
// by k.
type loaded struct {
	g                config.Group
	interval, warmup time.Duration
	k                float64
}

// div divides d by k, to whole seconds, at least 1 s.
func div(d time.Duration, k float64) time.Duration {
	return max(time.Second, time.Duration(float64(d)/k).Round(time.Second))
}

// groupYAML renders the group: providers is its providers line, template
// its template and health lines (both indented as fields of the group).
func (p policy) groupYAML(k float64, providers, rest string, maxSize int) string {
	return fmt.Sprintf(`  - name: %s
    min_size: 1
    max_size: %d
    %s
    cooldown: {up: 0s, down: %s}
    drain_timeout: 5s
%s    autoscale:
      target:
        metric: requests_per_second_per_instance
        value: %.2f
        scale_in_stabilization: %s
        max_step: {up: 100%%, down: 1}
        period: %s
        start_delay: auto
`, groupName, maxSize, providers, div(30*time.Second, k), rest, p.target, div(2*time.Minute, k), div(time.Minute, k))
}

func (p policy) metricsYAML(k float64) string {
	return fmt.Sprintf("metrics: {interval: 1s, warmup: %s}\n", div(30*time.Second, k))
}

// load loads the policy's group as shoal's config loader reads it (the
// simulator's input).
func (p policy) load(env *bench.Env, k float64) (loaded, error) {
	cfg := fmt.Sprintf("listen: 127.0.0.1:1\nstate_dir: %s\n%sgroups:\n%s", filepath.Join(env.Work, "policy-state"), p.metricsYAML(k),
		p.groupYAML(k, "provider: local", "    template: {command: [\"true\"]}\n", p.maxSize))
	path := filepath.Join(env.Work, fmt.Sprintf("policy-k%g.yaml", k))
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return loaded{}, err
	}
	pl, err := sim.LoadPolicy(path, groupName)
	if err != nil {
		return loaded{}, fmt.Errorf("the benchmark's policy: %w", err)
	}
	return loaded{g: pl.Group, interval: pl.Interval, warmup: pl.Warmup, k: k}, nil
}

// simProviders are s's providers in order, with delays by provider name.
func simProviders(s setup, delays map[string]time.Duration) []sim.Provider {
	var ps []sim.Provider
	if s.Hosts > 0 {
		ps = append(ps, sim.Provider{Name: hostsName, Capacity: s.Hosts, StartDelay: delays[hostsName]})
	}
	if s.Cloud > 0 {
		ps = append(ps, sim.Provider{Name: cloudName, StartDelay: delays[cloudName]})
	}
	return ps
}

// simulate runs s through the simulator: rates a step each from start.
func simulate(l loaded, s setup, model sim.Model, slo time.Duration, start time.Time, rates []float64, step time.Duration, cost float64,
	delays map[string]time.Duration, initial int) (outcome, error) {
	g := l.g
	if s.Cloud == 0 {
		g.MaxSize = min(g.MaxSize, s.Hosts) // the hosts' capacity bounds the group
	}
	res, err := sim.Simulate(sim.Run{Group: g, Model: model, SLO: slo, Providers: simProviders(s, delays), Interval: l.interval,
		Warmup: l.warmup, Start: start, Rates: rates, Step: step, Initial: initial})
	if err != nil {
		return outcome{}, err
	}
	o := outcome{Setup: s, Seconds: res.ProviderSeconds, Violation: res.ViolationSeconds, MaxSize: res.MaxSize, Scales: res.ScaleEvents}
	o.Cost = o.Seconds[cloudName] / 3600 * cost
	return o, nil
}

// liveRun is what every live setup shares.
type liveRun struct {
	backend, shoal, query string
	speedup, scale        float64
	slice                 trace.Series
	slo                   time.Duration
	model                 sim.Model
	cost                  float64
	policy                policy
	settle                time.Duration
}

// scaledBoot is a cloud start delay divided by k, in the whole seconds the
// test cloud counts (at least 1).
func scaledBoot(d time.Duration, k float64) time.Duration {
	return max(time.Second, time.Duration(float64(d)/k).Round(time.Second))
}

// runLive replays the compressed slice against a fresh shoal running s.
func runLive(ctx context.Context, env *bench.Env, l loaded, s setup, r liveRun) (liveOutcome, error) {
	lo := liveOutcome{outcome: outcome{Setup: s}}
	tag := strings.NewReplacer(" ", "-", "+", "").Replace(s.Name)
	dir := filepath.Join(env.Work, "cloud-"+tag)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return lo, err
	}
	defer killCloud(dir)
	var providers, entries []string
	if s.Hosts > 0 {
		providers = append(providers, fmt.Sprintf("{name: %s, max: %d}", hostsName, s.Hosts))
	}
	if s.Cloud > 0 {
		entry, err := cloudEntry(env, dir, r.backend, scaledBoot(s.Cloud, r.speedup))
		if err != nil {
			return lo, err
		}
		entries = append(entries, entry)
		providers = append(providers, fmt.Sprintf("{name: %s, cost_per_hour: %g}", cloudName, r.cost))
	}
	maxSize := r.policy.maxSize
	if s.Cloud == 0 {
		maxSize = s.Hosts
	}
	port, err := env.FreePort()
	if err != nil {
		return lo, err
	}
	rest := "    health: {path: /healthz, interval: 500ms, rise: 1, fall: 3, timeout: 1s, grace: 30s}\n"
	if s.Hosts > 0 { // a cloud's servers run what its start command makes
		rest += fmt.Sprintf("    template:\n      command: [%q, \"--listen\", \"127.0.0.1:{{.Port}}\", \"--name\", \"{{.Name}}\", \"--workers\", \"1\"]\n      stop_timeout: 5s\n", r.backend)
	}
	cfg := fmt.Sprintf("listen: 127.0.0.1:%d\nstate_dir: %s\n%s", port, filepath.Join(env.Work, "state-"+tag), r.policy.metricsYAML(l.k))
	if len(entries) > 0 {
		cfg += "providers:\n" + strings.Join(entries, "")
	}
	cfg += "groups:\n" + r.policy.groupYAML(l.k, "providers: ["+strings.Join(providers, ", ")+"]", rest, maxSize)
	sh, err := env.StartShoalNamed("shoal-"+tag, r.shoal, cfg)
	if err != nil {
		return lo, err
	}
	defer env.Stop(sh.Proc)
	if err := sh.WaitInService(ctx, groupName, 1, 2*time.Minute, bench.PollEvery); err != nil {
		return lo, fmt.Errorf("shoal: %w", err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d%s", port, r.query)
	if err := bench.WaitHTTP(ctx, url, sh.Proc, 10*time.Second); err != nil {
		return lo, err
	}
	schedule, err := r.slice.Schedule(r.speedup, r.scale)
	if err != nil {
		return lo, err
	}
	// The slice's first rate for r.settle first: the group grows to the
	// size the policy holds at that load, where the simulated twin starts
	// too (a replay from one instance would measure its own start-up).
	env.Log.Info("settling", "setup", s.Name, "rate", schedule[0].Rate, "for", r.settle)
	if _, err := loadgen.RunOpen(ctx, loadgen.OpenOptions{URL: url, Schedule: []loadgen.Segment{{Rate: schedule[0].Rate, Duration: r.settle}},
		Timeout: 10 * time.Second, MaxConns: loadgen.DefaultMaxConns}); err != nil {
		return lo, err
	}
	if err := ctx.Err(); err != nil {
		return lo, err
	}
	st, err := sh.API.Group(ctx, groupName)
	if err != nil {
		return lo, err
	}
	lo.InitialBy = map[string]int{}
	for _, in := range st.Instances {
		lo.InitialBy[in.Provider]++
	}
	lo.Initial = len(st.Instances)
	segs := make([]loadgen.Segment, len(schedule))
	for i, sg := range schedule {
		segs[i] = loadgen.Segment{Rate: sg.Rate, Duration: sg.Duration}
	}
	var smp sampler
	sctx, stopSampling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		smp.run(sctx, sh)
	}()
	t0, err := bench.CPUTicks(sh.Proc.Pid())
	if err != nil {
		stopSampling()
		wg.Wait()
		return lo, err
	}
	start := time.Now()
	env.Log.Info("replaying", "setup", s.Name, "minutes", len(schedule), "speedup", r.speedup, "url", url)
	res, err := loadgen.RunOpen(ctx, loadgen.OpenOptions{URL: url, Schedule: segs, Timeout: 10 * time.Second, MaxConns: loadgen.DefaultMaxConns})
	elapsed := time.Since(start)
	t1, cerr := bench.CPUTicks(sh.Proc.Pid())
	stopSampling()
	wg.Wait()
	if err != nil {
		return lo, err
	}
	if err := ctx.Err(); err != nil {
		return lo, err
	}
	if cerr != nil {
		return lo, fmt.Errorf("shoal's CPU: %w", cerr)
	}
	lo.ShoalCPU = 100 * float64(t1-t0) / bench.ClockTicks / elapsed.Seconds()
	lo.Requests, lo.Failed, lo.Unsent, lo.Failures = res.Sent, res.Errors, res.Late, res.FailureSamples
	for _, sec := range res.Seconds {
		if sec.P99 > r.slo || sec.Errors+sec.Late > 0 {
			lo.Violation++
		}
	}
	lo.Seconds, lo.MaxSize = smp.instanceSeconds(start, start.Add(res.Duration))
	lo.Cost = lo.Seconds[cloudName] * r.speedup / 3600 * r.cost
	if jobs, err := sh.API.Jobs(ctx, groupName, 1000); err == nil {
		for _, j := range jobs {
			if strings.HasPrefix(j.Source, "policy:") && !j.CreatedAt.Before(start) && j.From != j.Target {
				lo.Scales++
			}
		}
	}

	// The simulator on the same compressed slice, at the start delays
	// shoal measured (the nominal ones where it measured none).
	lo.StartDelays, lo.Measured = map[string]time.Duration{}, map[string]bool{}
	if s.Hosts > 0 {
		lo.StartDelays[hostsName] = sim.LocalStartDelay
	}
	if s.Cloud > 0 {
		lo.StartDelays[cloudName] = scaledBoot(s.Cloud, r.speedup)
	}
	if st, err := sh.API.Group(ctx, groupName); err == nil {
		for _, p := range st.Providers {
			if p.StartDelay != nil && p.StartDelay.Samples > 0 {
				lo.StartDelays[p.Name], lo.Measured[p.Name] = p.StartDelay.Median, true
			}
		}
		// A group on one provider has its measured delay on the group.
		if len(st.Providers) == 1 && !lo.Measured[st.Providers[0].Name] && st.StartDelay != nil && st.StartDelay.Samples > 0 {
			lo.StartDelays[st.Providers[0].Name], lo.Measured[st.Providers[0].Name] = st.StartDelay.Median, true
		}
	}
	step := time.Duration(float64(time.Minute) / r.speedup)
	so, err := simulate(l, s, r.model, r.slo, r.slice.Start, r.slice.Rates(r.scale), step, r.cost, lo.StartDelays, lo.Initial)
	if err != nil {
		return lo, fmt.Errorf("simulate: %w", err)
	}
	so.Cost = so.Seconds[cloudName] * r.speedup / 3600 * r.cost
	lo.Simulated = so
	return lo, nil
}

// cloudEntry writes the test cloud's files in dir and returns its
// providers entry: servers are demo-backends with one worker, each
// "provisioning" for boot.
func cloudEntry(env *bench.Env, dir, backend string, boot time.Duration) (string, error) {
	script, err := filepath.Abs("internal/provider/cloud/exec/testdata/fakecloud.sh")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(script); err != nil {
		return "", fmt.Errorf("the exec test cloud: %w (run from the repository root)", err)
	}
	// fakecloud.sh runs DIR/backend with --listen and --name: a wrapper
	// adds the one worker the hosts' instances have.
	wrapper := filepath.Join(dir, "demo-backend-1")
	if err := os.WriteFile(wrapper, []byte(fmt.Sprintf("#!/bin/sh\nexec %q --workers 1 \"$@\"\n", backend)), 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "backend"), []byte(wrapper), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "boot"), []byte(strconv.Itoa(int(boot/time.Second))), 0o644); err != nil {
		return "", err
	}
	port, err := env.FreePort()
	if err != nil {
		return "", err
	}
	argv := func(args ...string) string {
		q := []string{strconv.Quote("sh"), strconv.Quote(script), strconv.Quote(dir)}
		for _, a := range args {
			q = append(q, strconv.Quote(a))
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	return fmt.Sprintf("  - name: %s\n    type: exec\n    port: %d\n    interval: 500ms\n    boot_timeout: 2m\n    timeout: 30s\n    start: %s\n    stop: %s\n    list: %s\n",
		cloudName, port, argv("start", "{{.Name}}", "{{.Port}}"), argv("stop", "{{.ID}}"), argv("list", "{{.Owner}}")), nil
}

// killCloud kills the test cloud's servers left in dir: they are the
// cloud's, and outlive shoal.
func killCloud(dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "servers", "*.json"))
	var pids []int
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		_, rest, ok := strings.Cut(string(data), `"pid":`)
		if !ok {
			continue
		}
		rest = strings.TrimSpace(rest)
		end := strings.IndexAny(rest, ",}\n ")
		if end < 0 {
			continue
		}
		if pid, err := strconv.Atoi(rest[:end]); err == nil && pid > 1 {
			pids = append(pids, pid)
		}
	}
	bench.KillAll(pids)
}

// sampler counts the group's instances per provider (all states: each
// costs) once a second through the API.
type sampler struct {
	mu      sync.Mutex
	samples []sample
}

type sample struct {
	t     time.Time
	count map[string]int
}

func (s *sampler) run(ctx context.Context, sh *bench.Shoal) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if st, err := sh.API.Group(ctx, groupName); err == nil {
			c := map[string]int{}
			for _, in := range st.Instances {
				c[in.Provider]++
			}
			s.mu.Lock()
			s.samples = append(s.samples, sample{time.Now(), c})
			s.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// instanceSeconds integrates the samples over [from, to) by provider, each
// holding until the next, and returns the largest size seen.
func (s *sampler) instanceSeconds(from, to time.Time) (map[string]float64, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]float64{}
	most := 0
	for i := 1; i < len(s.samples); i++ {
		a, b := s.samples[i-1].t, s.samples[i].t
		if a.Before(from) {
			a = from
		}
		if b.After(to) {
			b = to
		}
		if !b.After(a) {
			continue
		}
		n := 0
		for p, c := range s.samples[i-1].count {
			out[p] += float64(c) * b.Sub(a).Seconds()
			n += c
		}
		most = max(most, n)
	}
	return out, most
}

func hours(o outcome, prov string) float64 { return o.Seconds[prov] / 3600 }

// figures are the headline numbers: each mixed setup against all-cloud
// (cost) and hosts only (violations), the live ones against their
// simulated twin.
func figures(day []outcome, lives []liveOutcome) []bench.Figure {
	by := map[string]outcome{}
	for _, o := range day {
		by[o.Setup.Name] = o
	}
	allCloud, hostsOnly := by["all-cloud"], by["hosts only"]
	var fs []bench.Figure
	for _, name := range []string{"hosts + cloud", "hosts + cloud from a warm pool"} {
		o := by[name]
		fs = append(fs, bench.Figure{Name: "day, " + name + ": cost", Value: bench.Num(o.Cost), Baseline: "all-cloud", BaselineValue: bench.Num(allCloud.Cost),
			Ratio: bench.RatioOf(bench.Num(o.Cost), bench.Num(allCloud.Cost)), Goal: "< all-cloud",
			Verdict: bench.Verdict(bench.Num(o.Cost), func(v float64) bool { return v < allCloud.Cost }),
			Note:    fmt.Sprintf("%.1f instance-hours on the hosts, %.1f in the cloud", hours(o, hostsName), hours(o, cloudName))},
			bench.Figure{Name: "day, " + name + ": SLO-violation seconds", Unit: "s", Value: bench.Num(o.Violation), Baseline: "hosts only", BaselineValue: bench.Num(hostsOnly.Violation),
				Goal: "< hosts only", Verdict: bench.Verdict(bench.Num(o.Violation), func(v float64) bool { return v < hostsOnly.Violation }),
				Note: fmt.Sprintf("all-cloud: %.0f s", allCloud.Violation)})
	}
	liveBy := map[string]liveOutcome{}
	for _, l := range lives {
		liveBy[l.Setup.Name] = l
		fs = append(fs, bench.Figure{Name: "live, " + l.Setup.Name + ": failed requests", Value: bench.Num(float64(l.Failed)), Goal: "0",
			Verdict: bench.Verdict(bench.Num(float64(l.Failed)), func(v float64) bool { return v == 0 }),
			Note:    fmt.Sprintf("of %d sent; %d more not sent while 2,000 were in flight (overload; in the violation seconds)", l.Requests, l.Unsent)},
			bench.Figure{Name: "live, " + l.Setup.Name + ": SLO-violation seconds", Unit: "s", Value: bench.Num(l.Violation), Baseline: "simulated", BaselineValue: bench.Num(l.Simulated.Violation)},
			bench.Figure{Name: "live, " + l.Setup.Name + ": cloud instance-seconds", Unit: "s", Value: bench.Num(l.Seconds[cloudName]), Baseline: "simulated",
				BaselineValue: bench.Num(l.Simulated.Seconds[cloudName]), Ratio: bench.RatioOf(bench.Num(l.Seconds[cloudName]), bench.Num(l.Simulated.Seconds[cloudName])),
				Note: fmt.Sprintf("hosts: %.0f s live, %.0f s simulated", l.Seconds[hostsName], l.Simulated.Seconds[hostsName])},
			bench.Figure{Name: "live, " + l.Setup.Name + ": shoal's CPU", Unit: "% of a core", Value: bench.Num(l.ShoalCPU), Note: "utime+stime of the shoal process over the replay, /proc"})
	}
	if mixed, ok := liveBy["hosts + cloud"]; ok {
		if ac, ok := liveBy["all-cloud"]; ok {
			fs = append(fs, bench.Figure{Name: "live, hosts + cloud: cloud instance-seconds", Unit: "s", Value: bench.Num(mixed.Seconds[cloudName]), Baseline: "all-cloud",
				BaselineValue: bench.Num(ac.Seconds[cloudName]), Ratio: bench.RatioOf(bench.Num(mixed.Seconds[cloudName]), bench.Num(ac.Seconds[cloudName])), Goal: "< all-cloud",
				Verdict: bench.Verdict(bench.Num(mixed.Seconds[cloudName]), func(v float64) bool { return v < ac.Seconds[cloudName] })})
		}
	}
	return fs
}

// delayOf words l's start delay on prov for the table.
func delayOf(l liveOutcome, prov string) string {
	d, ok := l.StartDelays[prov]
	switch {
	case !ok:
		return "-"
	case l.Measured[prov]:
		return d.Round(100*time.Millisecond).String() + " measured"
	default:
		return d.String() + " nominal"
	}
}

func markdown(day []outcome, lives []liveOutcome, k float64) string {
	var b strings.Builder
	b.WriteString("## The day, simulated\n\n| setup | instance-hours, hosts | instance-hours, cloud | cost | SLO-violation seconds | largest size | scale events |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, o := range day {
		fmt.Fprintf(&b, "| %s | %.1f | %.1f | %.2f | %.0f | %d | %d |\n", o.Setup.Name, hours(o, hostsName), hours(o, cloudName), o.Cost, o.Violation, o.MaxSize, o.Scales)
	}
	if len(lives) == 0 {
		return b.String()
	}
	fmt.Fprintf(&b, "\n## The compressed slice, live and simulated\n\nInstance-seconds and violation seconds on the replay's clock (K = %g); cost at the trace's clock (cloud instance-seconds × K).\n\n", k)
	b.WriteString("| setup | | instance-s, hosts | instance-s, cloud | cost | SLO-violation s | failed / sent (unsent) | start size (hosts + cloud) | largest size | scale events | shoal CPU | start delays (hosts / cloud) |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, l := range lives {
		fmt.Fprintf(&b, "| %s | live | %.0f | %.0f | %.3f | %.0f | %d / %d (%d) | %d (%d + %d) | %d | %d | %.1f%% | %s / %s |\n", l.Setup.Name, l.Seconds[hostsName], l.Seconds[cloudName], l.Cost,
			l.Violation, l.Failed, l.Requests, l.Unsent, l.Initial, l.InitialBy[hostsName], l.InitialBy[cloudName], l.MaxSize, l.Scales, l.ShoalCPU, delayOf(l, hostsName), delayOf(l, cloudName))
		s := l.Simulated
		fmt.Fprintf(&b, "| | simulated | %.0f | %.0f | %.3f | %.0f | | %d | %d | %d | | |\n", s.Seconds[hostsName], s.Seconds[cloudName], s.Cost, s.Violation, l.Initial, s.MaxSize, s.Scales)
	}
	for _, l := range lives {
		if len(l.Failures) > 0 {
			fmt.Fprintf(&b, "\n%s: failures (samples): %s\n", l.Setup.Name, strings.Join(l.Failures, "; "))
		}
	}
	return b.String()
}
