package throughput

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/bench"
)

// throughput measures what shoal's HAProxy configuration costs. It loads the
// demo page (GET /) six ways:
//
//	(a) direct       one demo-backend, no proxy;
//	(b) haproxy      a minimal hand-written haproxy.cfg over two static demo-backends;
//	(c) shoal        shoal's own HAProxy, its defaults, over a group's two
//	                 instances (no policy reads latency: no access log);
//	(f) shoal-log    (c) with access_log.sample: auto (the log always on);
//	(d) shoal-off    (c) with the optional features off (access_log.sample: 0,
//	                 forwarded_headers: false);
//	(e) shoal-retry  (c) with the group's retries: idempotent (layer-7 retries).
//
// Each shoal against (b) in requests/s and in HAProxy's CPU per request
// (utime+stime of the HAProxy processes over a slice of load, divided by its
// requests) is the cost of shoal's configuration: the goals are >= 0.97x
// and <= 1.10x for (c), parity (>= 0.99x, <= 1.03x) for (d). A feature's
// price is one shoal's ratio over another's, round by round: the forwarded
// headers (c) over (d), the access log's sampling (f) over (c), layer-7
// retries (e) over (c). The instances' CPU per request, measured alike, is
// what the configuration costs the application (the forwarded headers are
// two more headers to parse): requests/s falls with the sum.
//
// This machine's speed drifts within seconds, so every shoal's slice is
// bracketed by two of (b)'s and compared with their mean; the shoals' order
// alternates between rounds, and each ratio is the median over the rounds.
// Every process compared is started by this one process, in one session
// (the scheduler shares CPU per session). Then it scales (c)'s group to 5
// and samples shoal's own idle CPU and RSS.
var Command = &bench.Command{
	Name:    "throughput",
	Summary: "req/s and latency through shoal's HAProxy vs a minimal haproxy.cfg vs direct; shoal idle CPU",
	Run:     runThroughput,
}

// The goals against (b): shoal's defaults, and with the optional features
// off (parity, within what this machine can tell apart).
const (
	throughputRatioGoal = 0.97
	cpuRatioGoal        = 1.10
	parityRatioGoal     = 0.99
	parityCPUGoal       = 1.03
)

type target struct {
	Key    string         `json:"key"`
	Label  string         `json:"label"`
	Status string         `json:"status"` // "ok" or why it was not measured
	URL    string         `json:"-"`
	Rounds []bench.Sample `json:"rounds"`
	// CPUus is HAProxy's CPU per request in each slice, in µs (proxies only).
	CPUus []float64 `json:"cpu_us_per_request,omitempty"`
	// BackendUS is the instances' CPU per request in each slice, in µs.
	BackendUS []float64 `json:"backend_cpu_us_per_request,omitempty"`
	// pids lists the processes whose CPU is the target's (nil: not a proxy);
	// backends, those of the instances it sends requests to.
	pids, backends func() []int
	// before indexes, for each of a shoal's slices, (b)'s slice just before
	// it; (b)'s next slice is just after it.
	before []int
	// Medians over the rounds.
	RPS   *float64 `json:"rps"`
	P50ms *float64 `json:"p50_ms"`
	P99ms *float64 `json:"p99_ms"`
	CPU   *float64 `json:"cpu_us_per_request_median,omitempty"`
	// BackendCPU is the median of BackendUS.
	BackendCPU *float64 `json:"backend_cpu_us_per_request_median,omitempty"`
	Errors     int64    `json:"errors"`
}

type throughputDetails struct {
	Targets []*target `json:"targets"`
	// Per-round ratios of each shoal target to (b): requests/s and CPU per
	// request, by target key.
	RoundRatios    map[string][]float64 `json:"round_ratios_rps"`
	RoundCPURatios map[string][]float64 `json:"round_ratios_cpu_per_request"`
	PageBytes      int                  `json:"page_bytes"`
	Idle           struct {
		Status    string   `json:"status"`
		Instances int      `json:"instances"`
		Seconds   float64  `json:"seconds"`
		CPU       *float64 `json:"cpu_percent_of_one_core"`
		RSSKiB    *float64 `json:"rss_kib"`
	} `json:"shoal_idle"`
}

func runThroughput(ctx context.Context, env *bench.Env, fs *flag.FlagSet, args []string) (*bench.Report, error) {
	rounds := fs.Int("rounds", 21, "rounds (each measures every target once, and (b) before each shoal)")
	seconds := fs.Duration("seconds", 2*time.Second, "length of a slice (one target's load)")
	conns := fs.Int("conns", 32, "connections")
	idle := fs.Duration("idle", 20*time.Second, "how long to sample shoal's idle CPU (0: skip)")
	nbthread := fs.Int("nbthread", 0, "nbthread for every HAProxy (0: HAProxy's default, which shoal uses unless told otherwise)")
	var bins bench.BinFlags
	bins.Register(fs)
	toolName := fs.String("tool", "wrk", "wrk, or loadgen (also the fallback without wrk)")
	if err := bench.Parse(fs, args); err != nil {
		return nil, err
	}
	if *rounds < 1 || *seconds < time.Second || *conns < 1 || *idle < 0 || *nbthread < 0 {
		return nil, bench.BadUsage("-rounds >= 1, -seconds >= 1s, -conns >= 1, -idle >= 0 and -nbthread >= 0 please")
	}
	tool, err := bench.NewTool(*toolName, *conns, *seconds)
	if err != nil {
		return nil, err
	}
	backend, sbin, err := bins.Resolve()
	if err != nil {
		return nil, err
	}

	rep := &bench.Report{Date: time.Now(), Machine: bench.NewMachine()}
	det := &throughputDetails{RoundRatios: map[string][]float64{}, RoundCPURatios: map[string][]float64{}}
	direct := &target{Key: "direct", Label: "(a) demo-backend, direct"}
	haproxy := &target{Key: "haproxy", Label: "(b) minimal haproxy.cfg, 2 servers"}
	shoalT := &target{Key: "shoal", Label: "(c) shoal's HAProxy, defaults, 2 instances"}
	offT := &target{Key: "shoal-off", Label: "(d) shoal, optional features off (access_log.sample: 0, forwarded_headers: false)"}
	retryT := &target{Key: "shoal-retry", Label: "(e) shoal, retries: idempotent"}
	logT := &target{Key: "shoal-log", Label: "(f) shoal, access_log.sample: auto"}
	shoals := []*target{shoalT, logT, offT, retryT}
	det.Targets = []*target{direct, haproxy, shoalT, logT, offT, retryT}
	rep.Details = det

	// (a), and the two static backends of (b).
	var backendPorts, backendPids []int
	for _, name := range []string{"bench-a", "bench-b"} {
		p, port, err := env.StartBackend(ctx, backend, name)
		if err != nil {
			return nil, err
		}
		backendPorts, backendPids = append(backendPorts, port), append(backendPids, p.Pid())
	}
	direct.backends = func() []int { return backendPids[:1] }
	direct.URL, direct.Status = fmt.Sprintf("http://127.0.0.1:%d/", backendPorts[0]), "ok"
	det.PageBytes, err = pageBytes(direct.URL)
	if err != nil {
		return nil, err
	}

	// (b)
	hap := bench.HAProxyPath()
	if hap == "" {
		haproxy.Status = "haproxy not installed (scripts/install-deps.sh haproxy)"
	} else if err := startMinimalHAProxy(ctx, env, hap, backendPorts, *nbthread, haproxy); err != nil {
		haproxy.Status = err.Error()
	} else {
		haproxy.backends = func() []int { return backendPids }
	}

	// (c), (d), (e): three shoals side by side, each with its own state.
	var sh *bench.Shoal
	for _, t := range shoals {
		if hap == "" {
			t.Status = "haproxy not installed"
			continue
		}
		s, err := startShoalGroup(ctx, env, sbin, backend, *nbthread, t)
		if err != nil {
			t.Status = err.Error()
			continue
		}
		if t == shoalT {
			sh = s
		}
	}

	// Rounds.
	for _, t := range det.Targets {
		if t.Status == "ok" {
			env.Log.Info("warming up", "target", t.Key)
			if _, err := tool.Measure(ctx, t.URL, time.Second); err != nil {
				return nil, fmt.Errorf("warm-up of %s: %w", t.Key, err)
			}
		}
	}
	measure := func(r int, t *target) error {
		cpu0, back0 := cpuTicks(t.pids), cpuTicks(t.backends)
		s, err := tool.Measure(ctx, t.URL, *seconds)
		if err == nil {
			err = ctx.Err() // interrupted: a cut-short slice is no sample
		}
		if err != nil {
			return fmt.Errorf("round %d of %s: %w", r, t.Key, err)
		}
		// The slice's requests: wrk's rate over the slice's length.
		perRequest := func(ticks float64) float64 {
			return ticks / bench.ClockTicks / (s.RPS * seconds.Seconds()) * 1e6
		}
		var us, back float64
		if t.pids != nil {
			us = perRequest(cpuTicks(t.pids) - cpu0)
			t.CPUus = append(t.CPUus, us)
		}
		if t.backends != nil {
			back = perRequest(cpuTicks(t.backends) - back0)
			t.BackendUS = append(t.BackendUS, back)
		}
		env.Log.Info("slice", "round", r, "of", *rounds, "target", t.Key, "rps", math.Round(s.RPS), "cpu_us", bench.Round2(us), "backend_cpu_us", bench.Round2(back), "p50_ms", s.P50ms, "p99_ms", s.P99ms, "errors", s.Errors)
		t.Rounds = append(t.Rounds, s)
		return nil
	}
	// (b) runs before every shoal's slice and once more at the end, so each
	// shoal is compared with (b) just before and just after it: this
	// machine's speed drifts within seconds, which a bracket cancels and a
	// comparison across a round does not. The shoals' order alternates.
	for r := 1; r <= *rounds; r++ {
		if direct.Status == "ok" {
			if err := measure(r, direct); err != nil {
				return nil, err
			}
		}
		order := slices.Clone(shoals)
		if r%2 == 0 {
			slices.Reverse(order)
		}
		for _, t := range order {
			if t.Status != "ok" {
				continue
			}
			if haproxy.Status == "ok" {
				if err := measure(r, haproxy); err != nil {
					return nil, err
				}
				t.before = append(t.before, len(haproxy.Rounds)-1)
			}
			if err := measure(r, t); err != nil {
				return nil, err
			}
		}
	}
	if haproxy.Status == "ok" {
		if err := measure(*rounds, haproxy); err != nil {
			return nil, err
		}
	}
	for _, t := range det.Targets {
		var rps, p50, p99 []float64
		for _, s := range t.Rounds {
			rps, p50, p99 = append(rps, s.RPS), append(p50, s.P50ms), append(p99, s.P99ms)
			t.Errors += s.Errors
		}
		t.RPS, t.P50ms, t.P99ms = bench.Num(bench.Median(rps)), bench.Num(bench.Median(p50)), bench.Num(bench.Median(p99))
		if cpu := finite(t.CPUus); len(cpu) > 0 {
			t.CPU = bench.Num(bench.Median(cpu))
		}
		if cpu := finite(t.BackendUS); len(cpu) > 0 {
			t.BackendCPU = bench.Num(bench.Median(cpu))
		}
	}

	// Idle CPU with 5 instances.
	det.Idle.Instances, det.Idle.Seconds = 5, idle.Seconds()
	switch {
	case *idle == 0:
		det.Idle.Status = "skipped (-idle 0)"
	case sh == nil:
		det.Idle.Status = "not measured: " + shoalT.Status
	default:
		cpu, rss, err := idleCPU(ctx, env, sh, 5, *idle)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			det.Idle.Status = "not measured: " + err.Error()
		} else {
			det.Idle.Status, det.Idle.CPU, det.Idle.RSSKiB = "ok", bench.Num(cpu), bench.Num(rss)
		}
	}

	// Figures: each shoal against the minimal HAProxy around it.
	for _, t := range shoals {
		det.RoundRatios[t.Key], det.RoundCPURatios[t.Key] = bracketed(t, haproxy)
	}
	goals := map[string][2]float64{shoalT.Key: {throughputRatioGoal, cpuRatioGoal}, offT.Key: {parityRatioGoal, parityCPUGoal}}
	for _, t := range shoals {
		rr, cr := det.RoundRatios[t.Key], finite(det.RoundCPURatios[t.Key])
		var ratio, cpuRatio *float64
		if len(rr) > 0 {
			ratio = bench.Num(bench.Median(rr))
		}
		if len(cr) > 0 {
			cpuRatio = bench.Num(bench.Median(cr))
		}
		rpsFig := bench.Figure{
			Name: t.Label + " req/s", Unit: "req/s", Value: t.RPS,
			Baseline: haproxy.Label, BaselineValue: haproxy.RPS, Ratio: ratio,
			Note: fmt.Sprintf("median of the per-round ratios to (b)'s mean just before and after (%s); ratio of the medians: %s",
				bench.JoinFloats(rr, "%.3f"), bench.FmtNum(bench.RatioOf(t.RPS, haproxy.RPS))),
		}
		cpuFig := bench.Figure{
			Name: t.Label + " HAProxy CPU per request", Unit: "µs", Value: t.CPU,
			Baseline: haproxy.Label, BaselineValue: haproxy.CPU, Ratio: cpuRatio,
			Note: fmt.Sprintf("utime+stime of the HAProxy processes over a slice / its requests; median of the per-round ratios to (b)'s mean just before and after (%s)",
				bench.JoinFloats(cr, "%.3f")),
		}
		if g, ok := goals[t.Key]; ok {
			rpsFig.Goal = fmt.Sprintf(">= %.2f", g[0])
			rpsFig.Verdict = bench.Verdict(ratio, func(v float64) bool { return v >= g[0] })
			cpuFig.Goal = fmt.Sprintf("<= %.2f", g[1])
			cpuFig.Verdict = bench.Verdict(cpuRatio, func(v float64) bool { return v <= g[1] })
		} else if t == retryT {
			rpsFig.Note = "the price of the opt-in; " + rpsFig.Note
		}
		if t.Status != "ok" {
			rpsFig.Note, cpuFig.Note = t.Status, t.Status
		}
		rep.Figures = append(rep.Figures, rpsFig, cpuFig)
	}
	for _, p := range []struct {
		name      string
		with, off *target
	}{
		{"the forwarded headers: (c) against (d)", shoalT, offT},
		{"the access log's sampling: (f) against (c)", logT, shoalT},
		{"retries: idempotent: (e) against (c)", retryT, shoalT},
	} {
		rr := ratios(det.RoundRatios[p.with.Key], det.RoundRatios[p.off.Key])
		cr := finite(ratios(det.RoundCPURatios[p.with.Key], det.RoundCPURatios[p.off.Key]))
		fig := func(what string, vs []float64) bench.Figure {
			f := bench.Figure{Name: "price of " + p.name + ", " + what, Unit: "ratio",
				Note: fmt.Sprintf("median of the per-round ratios of their ratios to (b) (%s)", bench.JoinFloats(vs, "%.3f"))}
			if len(vs) > 0 {
				f.Value = bench.Num(bench.Median(vs))
			}
			return f
		}
		rep.Figures = append(rep.Figures, fig("req/s", rr), fig("HAProxy CPU per request", cr))
	}
	rep.Figures = append(rep.Figures, bench.Figure{
		Name: "(c) shoal p50", Unit: "ms", Value: shoalT.P50ms,
		Baseline: haproxy.Label, BaselineValue: haproxy.P50ms, Ratio: bench.RatioOf(shoalT.P50ms, haproxy.P50ms),
	}, bench.Figure{
		Name: "(c) shoal p99", Unit: "ms", Value: shoalT.P99ms,
		Baseline: haproxy.Label, BaselineValue: haproxy.P99ms, Ratio: bench.RatioOf(shoalT.P99ms, haproxy.P99ms),
	}, bench.Figure{
		Name: "(c) shoal, the instances' CPU per request", Unit: "µs", Value: shoalT.BackendCPU,
		Baseline: haproxy.Label, BaselineValue: haproxy.BackendCPU, Ratio: bench.RatioOf(shoalT.BackendCPU, haproxy.BackendCPU),
		Note: "utime+stime of the instances over a slice / its requests, medians: what the configuration costs the application",
	}, bench.Figure{
		Name: "(d) shoal, the instances' CPU per request", Unit: "µs", Value: offT.BackendCPU,
		Baseline: haproxy.Label, BaselineValue: haproxy.BackendCPU, Ratio: bench.RatioOf(offT.BackendCPU, haproxy.BackendCPU),
		Note: "as for (c)",
	}, bench.Figure{
		Name: "(b) minimal haproxy.cfg req/s", Unit: "req/s", Value: haproxy.RPS,
		Baseline: "(a) direct", BaselineValue: direct.RPS, Ratio: bench.RatioOf(haproxy.RPS, direct.RPS),
		Note: "what any HAProxy in front costs on this machine, for scale",
	}, bench.Figure{
		Name: "shoal idle CPU, 5 instances", Unit: "% of one core", Value: det.Idle.CPU,
		Note: idleNote(det),
	})

	rep.Settings = []bench.Setting{
		{Name: "load", Value: fmt.Sprintf("%s, GET / (%d-byte page), %d rounds: (a), then (b) before each shoal in alternating order, (b) once more at the end; medians shown", tool.Desc, det.PageBytes, *rounds)},
		{Name: "HAProxy nbthread", Value: nbthreadDesc(*nbthread)},
		{Name: "processes", Value: "every compared process started by shoal-bench, in one session"},
	}
	if tool.Note != "" {
		rep.Settings = append(rep.Settings, bench.Setting{Name: "load tool", Value: tool.Note})
	}
	var md strings.Builder
	md.WriteString("| target | req/s | HAProxy CPU per request | instances' CPU per request | p50 | p99 | errors | req/s per round | µs per round |\n|---|---:|---:|---:|---:|---:|---:|---|---|\n")
	for _, t := range det.Targets {
		if t.Status != "ok" {
			fmt.Fprintf(&md, "| %s | %s | | | | | | | |\n", t.Label, t.Status)
			continue
		}
		var per []float64
		for _, s := range t.Rounds {
			per = append(per, s.RPS)
		}
		cpu, back := "", ""
		if t.CPU != nil {
			cpu = bench.FmtNum(t.CPU) + " µs"
		}
		if t.BackendCPU != nil {
			back = bench.FmtNum(t.BackendCPU) + " µs"
		}
		perRPS, perUS := bench.JoinFloats(per, "%.0f"), bench.JoinFloats(t.CPUus, "%.1f")
		if len(per) > *rounds { // (b): one slice per shoal and round; the JSON has them
			perRPS, perUS = spread(per, "%.0f"), spread(t.CPUus, "%.1f")
		}
		fmt.Fprintf(&md, "| %s | %s | %s | %s | %s ms | %s ms | %d | %s | %s |\n", t.Label, bench.FmtNum(t.RPS), cpu, back, bench.FmtNum(t.P50ms), bench.FmtNum(t.P99ms), t.Errors, perRPS, perUS)
	}
	rep.Markdown = md.String()
	return rep, nil
}

// bracketed returns, for each of t's slices, its requests/s and HAProxy CPU
// per request as ratios to the mean of b's slices just before and after it.
func bracketed(t, b *target) (rps, cpu []float64) {
	for i, k := range t.before {
		if i >= len(t.Rounds) || k+1 >= len(b.Rounds) {
			break
		}
		rps = append(rps, t.Rounds[i].RPS/((b.Rounds[k].RPS+b.Rounds[k+1].RPS)/2))
		if i < len(t.CPUus) && k+1 < len(b.CPUus) {
			cpu = append(cpu, t.CPUus[i]/((b.CPUus[k]+b.CPUus[k+1])/2))
		}
	}
	return rps, cpu
}

// spread says how many values vs has and their range.
func spread(vs []float64, format string) string {
	if len(vs) == 0 {
		return ""
	}
	return fmt.Sprintf("%d slices, "+format+"–"+format, len(vs), slices.Min(vs), slices.Max(vs))
}

// ratios divides a by b element by element, as far as both go.
func ratios(a, b []float64) []float64 {
	out := make([]float64, 0, min(len(a), len(b)))
	for i := range min(len(a), len(b)) {
		out = append(out, a[i]/b[i])
	}
	return out
}

// cpuTicks sums utime+stime of the processes pids lists: 0 without a list,
// NaN when one cannot be read (it exited mid-round), so that such a round
// shows no figure rather than a wrong one.
func cpuTicks(pids func() []int) float64 {
	if pids == nil {
		return 0
	}
	ps := pids()
	if len(ps) == 0 {
		return math.NaN()
	}
	var sum int64
	for _, p := range ps {
		t, err := bench.CPUTicks(p)
		if err != nil {
			return math.NaN()
		}
		sum += t
	}
	return float64(sum)
}

// finite drops the rounds whose CPU could not be read.
func finite(vs []float64) []float64 {
	return slices.DeleteFunc(slices.Clone(vs), func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) })
}

// below returns the processes below pid whose command is comm: shoal's
// HAProxy master and worker, or its instances.
func below(pid int, comm string) []int {
	var out []int
	for _, p := range bench.Descendants(pid) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/comm")
		if err == nil && strings.TrimSpace(string(b)) == comm {
			out = append(out, p)
		}
	}
	return out
}

func nbthreadDesc(n int) string {
	if n == 0 {
		return "default (not set)"
	}
	return strconv.Itoa(n)
}

func idleNote(det *throughputDetails) string {
	if det.Idle.Status != "ok" {
		return det.Idle.Status
	}
	return fmt.Sprintf("utime+stime of the shoal process over %.0fs with %d instances in service; RSS %.1f MiB",
		det.Idle.Seconds, det.Idle.Instances, *det.Idle.RSSKiB/1024)
}

// pageBytes returns the size of the page at url.
func pageBytes(url string) (int, error) {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}
	defer client.CloseIdleConnections()
	resp, err := client.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	return int(n), err
}

func startMinimalHAProxy(ctx context.Context, env *bench.Env, hap string, backendPorts []int, nbthread int, t *target) error {
	port, err := env.FreePort()
	if err != nil {
		return err
	}
	var cfg strings.Builder
	cfg.WriteString("global\n")
	if nbthread > 0 {
		fmt.Fprintf(&cfg, "    nbthread %d\n", nbthread)
	}
	fmt.Fprintf(&cfg, `defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s

frontend fe
    bind 127.0.0.1:%d
    default_backend be

backend be
    balance roundrobin
    server s1 127.0.0.1:%d
    server s2 127.0.0.1:%d
`, port, backendPorts[0], backendPorts[1])
	t.URL = fmt.Sprintf("http://127.0.0.1:%d/", port)
	p, err := bench.StartHAProxyConfig(ctx, env, hap, "haproxy", cfg.String(), t.URL)
	if err != nil {
		return err
	}
	t.pids = func() []int { return []int{p.Pid()} }
	t.Status = "ok"
	return nil
}

// startShoalGroup starts a shoal named t.Key with group web of 2 instances:
// its defaults for (c), with the access log always on for (f), the optional
// features off for (d), layer-7 retries for (e).
func startShoalGroup(ctx context.Context, env *bench.Env, bin, backend string, nbthread int, t *target) (*bench.Shoal, error) {
	port, err := env.FreePort()
	if err != nil {
		return nil, err
	}
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "state_dir: %s\n", filepath.Join(env.Work, t.Key))
	if nbthread > 0 {
		fmt.Fprintf(&cfg, "haproxy:\n  global: [\"nbthread %d\"]\n", nbthread)
	}
	switch t.Key {
	case "shoal-off":
		cfg.WriteString("access_log: {sample: 0}\n")
	case "shoal-log":
		cfg.WriteString("access_log: {sample: auto}\n")
	}
	if t.Key == "shoal-off" {
		// The listen shorthand's frontend, without forwarded headers.
		fmt.Fprintf(&cfg, "frontends:\n  - {name: shoal, bind: [\"127.0.0.1:%d\"], routes: [{group: web}], forwarded_headers: false}\n", port)
	} else {
		fmt.Fprintf(&cfg, "listen: 127.0.0.1:%d\n", port)
	}
	fmt.Fprintf(&cfg, `groups:
  - name: web
    min_size: 2
    max_size: 5
    cooldown: {up: 1s, down: 1s} # so the scale to 5 is not held back
    health:
      path: /healthz
    template:
      command: [%q, "--listen", "127.0.0.1:{{.Port}}", "--name", "{{.Name}}"]
`, backend)
	if t.Key == "shoal-retry" {
		cfg.WriteString("    retries: idempotent\n")
	}
	env.Log.Info("starting shoal", "target", t.Key)
	sh, err := env.StartShoalNamed(t.Key, bin, cfg.String())
	if err != nil {
		return nil, err
	}
	t.URL = sh.URL("/")
	if err := sh.WaitInService(ctx, "web", 2, 60*time.Second, bench.PollEvery); err != nil {
		return nil, fmt.Errorf("shoal did not get 2 instances in service: %w", err)
	}
	if err := bench.WaitHTTP(ctx, t.URL, sh.Proc, 10*time.Second); err != nil {
		return nil, err
	}
	t.pids = func() []int { return below(sh.Proc.Pid(), "haproxy") }
	comm := filepath.Base(backend)[:min(len(filepath.Base(backend)), 15)] // /proc's comm keeps 15 bytes
	t.backends = func() []int { return below(sh.Proc.Pid(), comm) }
	t.Status = "ok"
	return sh, nil
}

// idleCPU scales group web to n, waits until it is in service and samples
// shoal's CPU (% of one core) over d, and its RSS.
func idleCPU(ctx context.Context, env *bench.Env, sh *bench.Shoal, n int, d time.Duration) (cpu, rssKiB float64, err error) {
	env.Log.Info("scaling web", "size", n)
	if _, err := sh.CLI(ctx, 180*time.Second, "scale", "web", "--size", strconv.Itoa(n), "--sync"); err != nil {
		return 0, 0, err
	}
	if err := sh.WaitInService(ctx, "web", n, 60*time.Second, bench.PollEvery); err != nil {
		return 0, 0, err
	}
	select { // let the scale-up's own work settle
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	case <-time.After(2 * time.Second):
	}
	env.Log.Info("sampling shoal's idle CPU", "seconds", d.Seconds())
	return bench.ProcessCPU(ctx, sh.Proc.Pid(), d)
}
