package replay

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/shoal-lb/shoal/internal/loadgen"
	"github.com/shoal-lb/shoal/internal/sim"

	"github.com/shoal-lb/shoal/internal/bench"
)

// replay runs `shoal serve` with a policy on the demo backend and replays a
// trace window against it, compressed K times, open loop; then simulates the
// same policy on the same compressed window and states the simulator's error.
//
// The request mix is GET /work?ms=M&wait=W on demo-backends with one worker
// (--workers 1): M ms of CPU, then W ms of waiting (I/O), one request at a
// time, the rest queued. An instance's capacity is then 1 / service time
// whatever the machine (5 saturated instances need well under a core, so a
// shared 2-core machine can run the replay), and an overloaded instance
// queues as a real one does. Calibration on one demo-backend measures the
// capacity (serial requests) and the CPU a saturated instance uses, which
// becomes template.cpus, so that the instances' CPU reads 100 % at capacity
// and CPU policies see utilisation as they would on dedicated cores.
var Command = &bench.Command{
	Name:    "replay",
	Summary: "replay a trace window against shoal serve with a policy on the demo backend; compare with the simulator",
	Run:     runReplay,
}

type replayMinute struct {
	Minute    int     `json:"minute"`
	Requests  int64   `json:"requests"`
	Failed    int64   `json:"failed"`
	P99ms     float64 `json:"worst_second_p99_ms"`
	Instances float64 `json:"mean_instances"`
	OverSLO   int     `json:"seconds_over_slo"`
	// The simulator's figures for the same minute.
	SimInstances float64 `json:"simulated_mean_instances"`
	SimOverSLO   float64 `json:"simulated_seconds_over_slo"`
}

type replayEvent struct {
	At     float64 `json:"at_seconds"`
	Kind   string  `json:"kind"`
	From   int     `json:"from"`
	To     int     `json:"to"`
	Source string  `json:"source"`
	State  string  `json:"state"`
	// Took is how long the job ran (a scale-out: until in service).
	Took float64 `json:"took_seconds"`
}

func runReplay(ctx context.Context, env *bench.Env, fs *flag.FlagSet, args []string) (*bench.Report, error) {
	policyPath := fs.String("policy", "examples/recommended.yaml", "shoal config whose first autoscaled group's policy is replayed")
	var trc bench.TraceFlags
	trc.Register(fs)
	speedup := fs.Float64("speedup", 60, "K: a trace minute lasts 1m/K")
	scale := fs.Float64("scale", 0, "S: req/s = requests per minute × S / 60 (default: the peak needs 5 calibrated instances)")
	workMS := fs.Int("ms", 1, "CPU per request: GET /work?ms=M")
	waitMS := fs.Int("wait", 9, "waiting (I/O) per request after its CPU: &wait=W")
	slo := bench.SLOFlag(fs)
	calib := fs.Duration("calibrate", 5*time.Second, "how long to calibrate an instance's capacity")
	var bins bench.BinFlags
	bins.Register(fs)
	if err := bench.Parse(fs, args); err != nil {
		return nil, err
	}
	if !(*speedup >= 1) || *scale < 0 || *workMS < 1 || *waitMS < 0 || *slo <= 0 || *calib < time.Second {
		return nil, bench.BadUsage("-speedup >= 1, -scale >= 0, -ms >= 1, -wait >= 0, -slo > 0 and -calibrate >= 1s please")
	}
	query := fmt.Sprintf("/work?ms=%d&wait=%d", *workMS, *waitMS)
	tw, err := trc.Read()
	if err != nil {
		return nil, err
	}
	fromT, toT, w := tw.From, tw.To, tw.Window
	pol, err := sim.LoadPolicy(*policyPath, "")
	if err != nil {
		return nil, bench.BadUsage("-policy: %v", err)
	}
	backend, sbin, err := bins.Resolve()
	if err != nil {
		return nil, err
	}

	// 1. Calibrate one instance.
	cal, err := bench.Calibrate(ctx, env, backend, query, *calib)
	if err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	capacity, cpus, baseP99 := cal.Capacity, cal.CPUs, cal.P99
	env.Log.Info("calibrated", "capacity_rps", capacity, "cpus", cpus, "base_p99", baseP99, "service_cv", cal.ServiceCV, "saturated_cpu", cal.SaturatedCPU)
	if *scale == 0 {
		if *scale, err = sim.DefaultScale(w, capacity); err != nil {
			return nil, err
		}
	}
	schedule, err := w.Schedule(*speedup, *scale)
	if err != nil {
		return nil, bench.BadUsage("%v", err)
	}

	// 2. shoal with the policy's group on the demo backend.
	port, err := env.FreePort()
	if err != nil {
		return nil, err
	}
	cfg, err := replayConfig(*policyPath, pol.Group.Name, port, filepath.Join(env.Work, "state"), backend, cpus)
	if err != nil {
		return nil, err
	}
	sh, err := env.StartShoal(sbin, cfg)
	if err != nil {
		return nil, err
	}
	if err := sh.WaitInService(ctx, pol.Group.Name, pol.Group.MinSize, 60*time.Second, bench.PollEvery); err != nil {
		return nil, fmt.Errorf("shoal: %w", err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d%s", port, query)
	if err := bench.WaitHTTP(ctx, url, sh.Proc, 10*time.Second); err != nil {
		return nil, err
	}
	// The simulator starts with warm instances; live ones are out of the
	// aggregates (and the policy blind) for metrics.warmup after they enter
	// service.
	env.Log.Info("waiting for the instances' warmup", "warmup", pol.Warmup)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(pol.Warmup + 3*time.Second):
	}

	// 3. Replay, counting the group's instances every second.
	segs := make([]loadgen.Segment, len(schedule))
	for i, s := range schedule {
		segs[i] = loadgen.Segment{Rate: s.Rate, Duration: s.Duration}
	}
	sizes := &sizeSampler{}
	sctx, stopSampling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sizes.run(sctx, sh, pol.Group.Name)
	}()
	start := time.Now()
	env.Log.Info("replaying", "minutes", len(schedule), "speedup", *speedup, "scale", *scale, "url", url)
	res, err := loadgen.RunOpen(ctx, loadgen.OpenOptions{URL: url, Schedule: segs, Timeout: 10 * time.Second, MaxConns: loadgen.DefaultMaxConns})
	stopSampling()
	wg.Wait()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	events, err := replayEvents(ctx, sh, pol.Group.Name, start)
	if err != nil {
		return nil, err
	}

	// 4. What the replay measured.
	var minutes []replayMinute
	overSLO := 0
	for _, s := range res.Seconds {
		m := s.Second / 60
		for len(minutes) <= m {
			minutes = append(minutes, replayMinute{Minute: len(minutes)})
		}
		rm := &minutes[m]
		rm.Requests += s.Sent
		rm.Failed += s.Errors + s.Late
		rm.P99ms = max(rm.P99ms, float64(s.P99)/float64(time.Millisecond))
		if s.P99 > *slo || s.Errors+s.Late > 0 {
			rm.OverSLO++
			overSLO++
		}
	}
	instSecs := sizes.instanceSeconds(start, start.Add(res.Duration))
	for i := range minutes {
		minutes[i].Instances = sizes.mean(start.Add(time.Duration(i)*time.Minute), start.Add(time.Duration(i+1)*time.Minute))
	}

	// 5. The simulator on the same compressed window.
	step := time.Duration(float64(time.Minute) / *speedup)
	model := sim.Model{Capacity: capacity, BaseP99: baseP99, ServiceCV: cal.ServiceCV, SaturatedCPU: cal.SaturatedCPU}
	interval := pol.Interval
	if step%interval != 0 {
		interval = step
	}
	startDelay := medianTook(events, sim.LocalStartDelay)
	simRes, err := sim.Simulate(sim.Run{Group: pol.Group, Model: model, SLO: *slo, StartDelay: startDelay, Interval: interval,
		Warmup: pol.Warmup, Initial: pol.Group.MinSize, Start: fromT, Rates: w.Rates(*scale), Step: step})
	if err != nil {
		return nil, fmt.Errorf("simulate: %w", err)
	}
	// The simulator ran on the replay's clock, a step (a trace minute) per
	// minute / K: fold its steps into the replay's minutes.
	for _, sm := range simRes.Minutes {
		m := int(sm.T.Sub(fromT) / time.Minute)
		if m < len(minutes) {
			minutes[m].SimInstances += sm.Instances * step.Seconds() / time.Minute.Seconds()
			minutes[m].SimOverSLO += sm.ViolationSeconds
		}
	}
	ups := 0
	for _, e := range events {
		if e.To > e.From {
			ups++
		}
	}

	rep := &bench.Report{Date: time.Now(), Machine: bench.NewMachine()}
	rep.Settings = []bench.Setting{
		{Name: "policy", Value: *policyPath + " (group " + pol.Group.Name + ")"},
		{Name: "window", Value: fmt.Sprintf("%s, %s to %s", filepath.Base(tw.Path), fromT.Format("2006-01-02 15:04"), toT.Format("2006-01-02 15:04 UTC"))},
		{Name: "K (speedup)", Value: fmt.Sprintf("%g: a trace minute lasts %s; %d minutes in %s", *speedup, step, len(schedule), res.Duration.Round(time.Second))},
		{Name: "S (scale)", Value: fmt.Sprintf("%.5g: req/s = requests per minute × S / 60 (peak %.0f req/s)", *scale, slices.Max(w.Rates(*scale)))},
		{Name: "request mix", Value: fmt.Sprintf("GET %s on demo-backend --workers 1", query)},
		{Name: "calibrated capacity", Value: fmt.Sprintf("%.1f req/s per instance (serial requests for %s) at %.3f core, its template.cpus; base p99 %s; service time CV %.2f; with requests queued for it (%d clients for %s) it shows %.0f %% CPU",
			capacity, *calib, cpus, baseP99.Round(10*time.Microsecond), cal.ServiceCV, bench.SaturatingClients, *calib, cal.SaturatedCPU)},
		{Name: "SLO", Value: fmt.Sprintf("p99 %s per second (a second with errors counts as over)", *slo)},
		{Name: "simulator start delay", Value: fmt.Sprintf("%s (median of the replay's scale-out jobs)", startDelay)},
	}
	errPct := func(simV, real float64) float64 {
		if real == 0 {
			return math.NaN()
		}
		return 100 * (simV - real) / real
	}
	rep.Figures = []bench.Figure{
		{Name: "requests", Value: bench.Num(float64(res.Sent)), Note: fmt.Sprintf("%d scheduled, %d completed", res.Scheduled, res.Completed)},
		{Name: "failed", Value: bench.Num(float64(res.Errors + res.Late)), Goal: "0", Verdict: bench.Verdict(bench.Num(float64(res.Errors+res.Late)), func(v float64) bool { return v == 0 })},
		{Name: "p99 over the run", Unit: "ms", Value: bench.Num(float64(res.P99) / float64(time.Millisecond))},
		{Name: "instance-seconds", Unit: "s", Value: bench.Num(instSecs), Baseline: "simulated", BaselineValue: bench.Num(simRes.InstanceSeconds),
			Ratio: bench.Num(simRes.InstanceSeconds / instSecs), Note: fmt.Sprintf("simulator error %+.1f%%", errPct(simRes.InstanceSeconds, instSecs))},
		{Name: "seconds over the SLO", Unit: "s", Value: bench.Num(float64(overSLO)), Baseline: "simulated", BaselineValue: bench.Num(simRes.ViolationSeconds),
			Note: violationNote(simRes.ViolationSeconds, float64(overSLO))},
		{Name: "scale events", Value: bench.Num(float64(len(events))), Baseline: "simulated", BaselineValue: bench.Num(float64(simRes.ScaleEvents)),
			Note: fmt.Sprintf("%d up, %d down", ups, len(events)-ups)},
	}
	var md strings.Builder
	md.WriteString("## Per minute of the replay\n\n| minute | requests | failed | worst 1-s p99 (ms) | mean instances | seconds over SLO | simulated: mean instances | simulated: seconds over SLO |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, m := range minutes {
		fmt.Fprintf(&md, "| %d | %d | %d | %.1f | %.2f | %d | %.2f | %.0f |\n", m.Minute, m.Requests, m.Failed, m.P99ms, m.Instances, m.OverSLO, m.SimInstances, m.SimOverSLO)
	}
	md.WriteString("\n## Scale events\n\n| at (s) | kind | from | to | took (s) | state | source |\n|---:|---|---:|---:|---:|---|---|\n")
	for _, e := range events {
		fmt.Fprintf(&md, "| %.0f | %s | %d | %d | %.1f | %s | %s |\n", e.At, e.Kind, e.From, e.To, e.Took, e.State, e.Source)
	}
	rep.Markdown = md.String()
	rep.Details = map[string]any{"speedup": *speedup, "scale": *scale, "capacity_rps": capacity, "minutes": minutes, "events": events,
		"timeline": res.Timeline(), "simulated": map[string]any{"instance_seconds": simRes.InstanceSeconds, "violation_seconds": simRes.ViolationSeconds,
			"scale_events": simRes.ScaleEvents}}
	return rep, nil
}

func violationNote(simV, real float64) string {
	if real == 0 {
		return fmt.Sprintf("the replay had none, the simulator %.0f s", simV)
	}
	return fmt.Sprintf("simulator error %+.1f%%", 100*(simV-real)/real)
}

// replayConfig rewrites the policy file for the replay: its listen address,
// state directory and the group's template (the demo backend, allotted cpus)
// and health check are the benchmark's; everything else, the policy, min/max,
// plans and cooldowns included, is the file's.
func replayConfig(path, group string, port int, stateDir, backend string, cpus float64) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return "", fmt.Errorf("%s: not a YAML mapping: %v", path, err)
	}
	root := doc.Content[0]
	setKey(root, "listen", scalar(fmt.Sprintf("127.0.0.1:%d", port)))
	setKey(root, "state_dir", scalar(stateDir))
	groups := getKey(root, "groups")
	if groups == nil || groups.Kind != yaml.SequenceNode {
		return "", fmt.Errorf("%s: no groups", path)
	}
	var kept []*yaml.Node
	for _, g := range groups.Content {
		if n := getKey(g, "name"); n != nil && n.Value == group {
			var tmpl yaml.Node
			src := fmt.Sprintf("{command: [%q, \"--listen\", \"127.0.0.1:{{.Port}}\", \"--name\", \"{{.Name}}\", \"--workers\", \"1\"], cpus: %g}", backend, cpus)
			if err := yaml.Unmarshal([]byte(src), &tmpl); err != nil {
				return "", err
			}
			setKey(g, "template", tmpl.Content[0])
			var health yaml.Node
			if err := yaml.Unmarshal([]byte("{path: /healthz}"), &health); err != nil {
				return "", err
			}
			setKey(g, "health", health.Content[0])
			kept = append(kept, g)
		}
	}
	groups.Content = kept
	out, err := yaml.Marshal(&doc)
	return string(out), err
}

func scalar(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: v} }

func getKey(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func setKey(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, scalar(key), v)
}

// sizeSampler counts a group's instances (all states: each costs) once a
// second through the API.
type sizeSampler struct {
	mu      sync.Mutex
	samples []sizeSample
}

type sizeSample struct {
	t time.Time
	n int
}

func (s *sizeSampler) run(ctx context.Context, sh *bench.Shoal, group string) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if n, err := sh.API.Instances(ctx, group); err == nil {
			s.mu.Lock()
			s.samples = append(s.samples, sizeSample{time.Now(), n})
			s.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// instanceSeconds integrates the samples over [from, to), each holding
// until the next.
func (s *sizeSampler) instanceSeconds(from, to time.Time) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	total := 0.0
	for i := 1; i < len(s.samples); i++ {
		a, b := s.samples[i-1].t, s.samples[i].t
		if a.Before(from) {
			a = from
		}
		if b.After(to) {
			b = to
		}
		if b.After(a) {
			total += float64(s.samples[i-1].n) * b.Sub(a).Seconds()
		}
	}
	return total
}

func (s *sizeSampler) mean(from, to time.Time) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum, n := 0, 0
	for _, x := range s.samples {
		if !x.t.Before(from) && x.t.Before(to) {
			sum += x.n
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return float64(sum) / float64(n)
}

// replayEvents lists the policy's jobs since start.
func replayEvents(ctx context.Context, sh *bench.Shoal, group string, start time.Time) ([]replayEvent, error) {
	jobs, err := sh.API.Jobs(ctx, group, 1000)
	if err != nil {
		return nil, fmt.Errorf("jobs of %s: %w", group, err)
	}
	var evs []replayEvent
	for _, j := range jobs {
		if !strings.HasPrefix(j.Source, "policy:") || j.CreatedAt.Before(start) || j.From == j.Target {
			continue
		}
		e := replayEvent{At: j.CreatedAt.Sub(start).Seconds(), Kind: string(j.Kind), From: j.From, To: j.Target, Source: j.Source, State: string(j.State)}
		if j.StartedAt != nil && j.FinishedAt != nil {
			e.Took = j.FinishedAt.Sub(*j.StartedAt).Seconds()
		}
		evs = append(evs, e)
	}
	slices.SortFunc(evs, func(a, b replayEvent) int { return int(math.Copysign(1, a.At-b.At)) })
	return evs, nil
}

// medianTook is the median duration of the scale-out jobs, def without any.
func medianTook(evs []replayEvent, def time.Duration) time.Duration {
	var took []float64
	for _, e := range evs {
		if e.To > e.From && e.Took > 0 {
			took = append(took, e.Took)
		}
	}
	if len(took) == 0 {
		return def
	}
	return time.Duration(bench.Median(took) * float64(time.Second)).Round(100 * time.Millisecond)
}
