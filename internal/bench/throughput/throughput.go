package throughput

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/bench"
)

// throughput measures what shoal's HAProxy configuration costs. It loads the
// demo page (GET /) three ways:
//
//	(a) direct   one demo-backend, no proxy;
//	(b) haproxy  a minimal hand-written haproxy.cfg over two static demo-backends;
//	(c) shoal    shoal's own HAProxy over the two instances of a shoal group.
//
// (c)/(b) is the cost of shoal's configuration; the goal is >= 0.97. The
// machine's speed drifts between rounds, so the targets are measured back to
// back in every round, in alternating order (a b c, then c b a), and the
// ratio is the median of the per-round ratios of (c) to (b). Then it scales
// the group to 5 and samples shoal's own idle CPU and RSS.
var Command = &bench.Command{
	Name:    "throughput",
	Summary: "req/s and latency through shoal's HAProxy vs a minimal haproxy.cfg vs direct; shoal idle CPU",
	Run:     runThroughput,
}

const throughputRatioGoal = 0.97

type target struct {
	Key    string         `json:"key"`
	Label  string         `json:"label"`
	Status string         `json:"status"` // "ok" or why it was not measured
	URL    string         `json:"-"`
	Rounds []bench.Sample `json:"rounds"`
	// Medians over the rounds.
	RPS    *float64 `json:"rps"`
	P50ms  *float64 `json:"p50_ms"`
	P99ms  *float64 `json:"p99_ms"`
	Errors int64    `json:"errors"`
}

type throughputDetails struct {
	Targets     []*target `json:"targets"`
	RoundRatios []float64 `json:"round_ratios_shoal_haproxy"`
	PageBytes   int       `json:"page_bytes"`
	Idle        struct {
		Status    string   `json:"status"`
		Instances int      `json:"instances"`
		Seconds   float64  `json:"seconds"`
		CPU       *float64 `json:"cpu_percent_of_one_core"`
		RSSKiB    *float64 `json:"rss_kib"`
	} `json:"shoal_idle"`
}

func runThroughput(ctx context.Context, env *bench.Env, fs *flag.FlagSet, args []string) (*bench.Report, error) {
	rounds := fs.Int("rounds", 7, "rounds per target")
	seconds := fs.Duration("seconds", 6*time.Second, "length of a round")
	conns := fs.Int("conns", 32, "connections")
	idle := fs.Duration("idle", 20*time.Second, "how long to sample shoal's idle CPU (0: skip)")
	nbthread := fs.Int("nbthread", 0, "nbthread for both HAProxies (0: HAProxy's default, which shoal uses unless told otherwise)")
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
	det := &throughputDetails{}
	direct := &target{Key: "direct", Label: "(a) demo-backend, direct"}
	haproxy := &target{Key: "haproxy", Label: "(b) minimal haproxy.cfg, 2 servers"}
	shoalT := &target{Key: "shoal", Label: "(c) shoal's HAProxy, 2 instances"}
	det.Targets = []*target{direct, haproxy, shoalT}
	rep.Details = det

	// (a), and the two static backends of (b).
	var backendPorts []int
	for _, name := range []string{"bench-a", "bench-b"} {
		_, port, err := env.StartBackend(ctx, backend, name)
		if err != nil {
			return nil, err
		}
		backendPorts = append(backendPorts, port)
	}
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
	}

	// (c)
	var sh *bench.Shoal
	if hap == "" {
		shoalT.Status = "haproxy not installed"
	} else {
		sh, err = startShoalGroup(ctx, env, sbin, backend, *nbthread, shoalT)
		if err != nil {
			shoalT.Status = err.Error()
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
	for r := 1; r <= *rounds; r++ {
		order := []*target{direct, haproxy, shoalT}
		if r%2 == 0 {
			order = []*target{shoalT, haproxy, direct}
		}
		for _, t := range order {
			if t.Status != "ok" {
				continue
			}
			s, err := tool.Measure(ctx, t.URL, *seconds)
			if err == nil {
				err = ctx.Err() // interrupted: a cut-short round is no sample
			}
			if err != nil {
				return nil, fmt.Errorf("round %d of %s: %w", r, t.Key, err)
			}
			env.Log.Info("round", "n", r, "of", *rounds, "target", t.Key, "rps", math.Round(s.RPS), "p50_ms", s.P50ms, "p99_ms", s.P99ms, "errors", s.Errors)
			t.Rounds = append(t.Rounds, s)
		}
	}
	for _, t := range det.Targets {
		var rps, p50, p99 []float64
		for _, s := range t.Rounds {
			rps, p50, p99 = append(rps, s.RPS), append(p50, s.P50ms), append(p99, s.P99ms)
			t.Errors += s.Errors
		}
		t.RPS, t.P50ms, t.P99ms = bench.Num(bench.Median(rps)), bench.Num(bench.Median(p50)), bench.Num(bench.Median(p99))
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

	// Figures: shoal against the minimal HAProxy of the same run.
	if len(shoalT.Rounds) > 0 && len(haproxy.Rounds) == len(shoalT.Rounds) {
		for i := range shoalT.Rounds {
			det.RoundRatios = append(det.RoundRatios, shoalT.Rounds[i].RPS/haproxy.Rounds[i].RPS)
		}
	}
	ratio := bench.Num(bench.Median(det.RoundRatios))
	var ratioOfMedians *float64
	if shoalT.RPS != nil && haproxy.RPS != nil {
		ratioOfMedians = bench.Num(*shoalT.RPS / *haproxy.RPS)
	}
	rep.Figures = []bench.Figure{{
		Name: "(c) shoal req/s", Unit: "req/s", Value: shoalT.RPS,
		Baseline: "(b) minimal haproxy.cfg", BaselineValue: haproxy.RPS, Ratio: ratio,
		Goal: fmt.Sprintf(">= %.2f", throughputRatioGoal), Verdict: bench.Verdict(ratio, func(v float64) bool { return v >= throughputRatioGoal }),
		Note: fmt.Sprintf("ratio is the median of the per-round ratios (%s); ratio of the medians: %s",
			bench.JoinFloats(det.RoundRatios, "%.3f"), bench.FmtNum(ratioOfMedians)),
	}, {
		Name: "(c) shoal p50", Unit: "ms", Value: shoalT.P50ms,
		Baseline: "(b) minimal haproxy.cfg", BaselineValue: haproxy.P50ms, Ratio: bench.RatioOf(shoalT.P50ms, haproxy.P50ms),
	}, {
		Name: "(c) shoal p99", Unit: "ms", Value: shoalT.P99ms,
		Baseline: "(b) minimal haproxy.cfg", BaselineValue: haproxy.P99ms, Ratio: bench.RatioOf(shoalT.P99ms, haproxy.P99ms),
	}, {
		Name: "(b) minimal haproxy.cfg req/s", Unit: "req/s", Value: haproxy.RPS,
		Baseline: "(a) direct", BaselineValue: direct.RPS, Ratio: bench.RatioOf(haproxy.RPS, direct.RPS),
		Note: "what any HAProxy in front costs on this machine, for scale",
	}, {
		Name: "shoal idle CPU, 5 instances", Unit: "% of one core", Value: det.Idle.CPU,
		Note: idleNote(det),
	}}

	rep.Settings = []bench.Setting{
		{Name: "load", Value: fmt.Sprintf("%s, GET / (%d-byte page), %d rounds per target in alternating order, medians shown", tool.Desc, det.PageBytes, *rounds)},
		{Name: "HAProxy nbthread", Value: nbthreadDesc(*nbthread)},
	}
	if tool.Note != "" {
		rep.Settings = append(rep.Settings, bench.Setting{Name: "load tool", Value: tool.Note})
	}
	var md strings.Builder
	md.WriteString("| target | req/s | p50 | p99 | errors | req/s per round |\n|---|---:|---:|---:|---:|---|\n")
	for _, t := range det.Targets {
		if t.Status != "ok" {
			fmt.Fprintf(&md, "| %s | %s | | | | |\n", t.Label, t.Status)
			continue
		}
		var per []float64
		for _, s := range t.Rounds {
			per = append(per, s.RPS)
		}
		fmt.Fprintf(&md, "| %s | %s | %s ms | %s ms | %d | %s |\n", t.Label, bench.FmtNum(t.RPS), bench.FmtNum(t.P50ms), bench.FmtNum(t.P99ms), t.Errors, bench.JoinFloats(per, "%.0f"))
	}
	rep.Markdown = md.String()
	return rep, nil
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
	if _, err := bench.StartHAProxyConfig(ctx, env, hap, "haproxy", cfg.String(), t.URL); err != nil {
		return err
	}
	t.Status = "ok"
	return nil
}

func startShoalGroup(ctx context.Context, env *bench.Env, bin, backend string, nbthread int, t *target) (*bench.Shoal, error) {
	render := func(port int) string {
		var cfg strings.Builder
		fmt.Fprintf(&cfg, "listen: 127.0.0.1:%d\nstate_dir: %s\n", port, filepath.Join(env.Work, "state"))
		if nbthread > 0 {
			fmt.Fprintf(&cfg, "haproxy:\n  global: [\"nbthread %d\"]\n", nbthread)
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
		return cfg.String()
	}
	env.Log.Info("starting shoal")
	sh, err := env.StartShoalOn(bin, render)
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
