// Package scale is `shoal-bench scale`: what shoal costs as it grows, N
// instances over G groups (N = 100, 300, 1,000 by default; 20 a group).
//
// What is real: shoal serve, its local provider starting one process per
// instance, HAProxy health-checking every instance, the metrics collector
// reading every instance's /proc each second, metrics.db, the API, the CLI
// and the dashboard's stream. What is stood in: the instances are
// internal/testbin/standin (a 4 MB program answering every request with
// 200), so that 1,000 of them fit on a small machine.
//
// Each size runs its own shoal (a fresh state dir). The baseline, in the
// same run and the same shoal, is the same G groups with no instance.
package scale

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/bench"
	"github.com/shoal-lb/shoal/internal/loadgen"
)

var Command = &bench.Command{
	Name:    "scale",
	Summary: "shoal's cost at 100, 300 and 1,000 instances in 5, 15 and 50 groups: CPU, RSS, bursts, restart, reload, metrics.db, API times",
	Run:     run,
}

// perGroup is how many instances each group has at full size.
const perGroup = 20

// The goals at 1,000 instances (checked at every size: they hold
// below it if they hold at it).
const (
	goalCPU      = 10.0  // % of one core at rest
	goalRSSMiB   = 300.0 // shoal's resident memory
	goalAdoptS   = 15.0  // kill -9 to every instance adopted
	goalAPIms    = 200.0 // every API answer
	goalDBMiB    = 1024  // metrics.db once the default retention holds
	loadRate     = 100.0 // requests/s to each of two groups during bursts
	loadConns    = 32
	checkEvery   = "2s" // HAProxy's health check of every instance
	stopTimeout  = "2s"
	drainTimeout = "2s"
)

// level is what one size measured.
type level struct {
	Instances int `json:"instances"`
	Groups    int `json:"groups"`
	// At rest, baseline (no instance) and at N.
	BaseCPU     float64 `json:"baseline_shoal_cpu_percent"`
	BaseRSSKiB  float64 `json:"baseline_shoal_rss_kib"`
	BaseHAPCPU  float64 `json:"baseline_haproxy_cpu_percent"`
	CPU         float64 `json:"shoal_cpu_percent"`
	RSSKiB      float64 `json:"shoal_rss_kib"`
	HAPCPU      float64 `json:"haproxy_cpu_percent"`
	RestSeconds float64 `json:"rest_seconds"`
	// Bursts, seconds, and requests failed during them.
	UpHalfS    float64 `json:"burst_0_to_half_seconds"`
	UpFullS    float64 `json:"burst_half_to_n_seconds"`
	DownHalfS  float64 `json:"burst_n_to_half_seconds"`
	LoadSent   int64   `json:"load_requests"`
	LoadFailed int64   `json:"load_failed"`
	// Restart after kill -9: socket answering, then every instance adopted
	// and every group's reconciler idle.
	AdoptS    float64 `json:"adopt_seconds"`
	Adopted   int     `json:"adopted_same_pid"`
	ReloadS   float64 `json:"reload_seconds"`
	Untouched bool    `json:"reload_others_untouched"`
	// metrics.db over the rest window.
	DBBytes     int64    `json:"metrics_db_bytes"`
	DBGrowthDay float64  `json:"metrics_db_growth_bytes_per_day"`
	DB          dbSteady `json:"metrics_db"`
	APIms       apiTimes `json:"api_ms"`
}

// apiTimes are the median response times of the operator's surfaces.
type apiTimes struct {
	Status float64 `json:"shoal_status"`
	Events float64 `json:"shoal_events"`
	Prom   float64 `json:"metrics"`
	Stream float64 `json:"ui_stream_first_message"`
	// The same answers without the CLI's process start, which a loaded
	// machine stretches most.
	StatusAPI float64 `json:"get_v1_status"`
	EventsAPI float64 `json:"get_v1_events"`
}

func run(ctx context.Context, env *bench.Env, fs *flag.FlagSet, args []string) (*bench.Report, error) {
	sizesFlag := fs.String("sizes", "100,300,1000", "instance counts, each a multiple of 20 (groups of 20)")
	rest := fs.Duration("rest", 60*time.Second, "how long to sample CPU at rest (and metrics.db's growth)")
	settle := fs.Duration("settle", 10*time.Second, "wait after the bursts before sampling")
	profDir := fs.String("pprof", "", "a directory: run shoal with --pprof and save its CPU profile over the rest window and its heap after it, as N-cpu.pprof and N-heap.pprof (the profiler's own cost is then in the CPU figure)")
	var bins bench.BinFlags
	bins.RegisterShoal(fs)
	if err := bench.Parse(fs, args); err != nil {
		return nil, err
	}
	var sizes []int
	for f := range strings.SplitSeq(*sizesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < perGroup || n%perGroup != 0 || n > 50*bench.GroupCap {
			return nil, bench.BadUsage("-sizes %q: want multiples of %d, e.g. 100,300,1000", *sizesFlag, perGroup)
		}
		sizes = append(sizes, n)
	}
	if *rest < 5*time.Second || *settle < 0 {
		return nil, bench.BadUsage("-rest >= 5s and -settle >= 0 please")
	}
	sbin, err := filepath.Abs(bins.Shoal)
	if err != nil {
		return nil, err
	}
	standin := filepath.Join(env.Work, "standin")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", standin, "./internal/testbin/standin").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build the stand-in instance (run from the repository root): %w: %s", err, out)
	}

	rep := &bench.Report{Date: time.Now(), Machine: bench.NewMachine()}
	var levels []*level
	rep.Details = &levels
	var failed []bench.Figure
	for _, n := range sizes {
		l, err := measure(ctx, env, sbin, standin, n, *rest, *settle, *profDir)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			// The sizes measured stand; the one that failed is a finding.
			env.Log.Error("size failed", "instances", n, "err", err)
			failed = append(failed, bench.Figure{Name: fmt.Sprintf("run at N = %d", n), Verdict: "FAIL", Note: err.Error()})
			break
		}
		levels = append(levels, l)
	}
	for _, l := range levels {
		rep.Figures = append(rep.Figures, figures(l)...)
	}
	rep.Figures = append(rep.Figures, failed...)
	rep.Settings = []bench.Setting{
		{Name: "instances", Value: fmt.Sprintf("internal/testbin/standin processes (local provider), %d a group, HAProxy health check every %s", perGroup, checkEvery)},
		{Name: "metrics.interval", Value: "1s"},
		{Name: "baseline", Value: "the same shoal with the same groups and no instance, sampled just before"},
		{Name: "rest", Value: fmt.Sprintf("utime+stime over %v after %v of settling", *rest, *settle)},
		{Name: "load", Value: fmt.Sprintf("open loop, %g req/s to each of the first two groups during N/2 → N and N → N/2", loadRate)},
	}
	rep.Markdown = markdown(levels)
	return rep, nil
}

// measure runs one size in a shoal of its own.
func measure(ctx context.Context, env *bench.Env, sbin, standin string, n int, rest, settle time.Duration, profDir string) (*level, error) {
	g := n / perGroup
	l := &level{Instances: n, Groups: g, RestSeconds: rest.Seconds()}
	adminPort, err := env.FreePort()
	if err != nil {
		return nil, err
	}
	token := "scale-bench-token-0123456789abcdef"
	stateDir := filepath.Join(env.Work, fmt.Sprintf("state-%d", n))
	port, err := env.FreePort()
	if err != nil {
		return nil, err
	}
	cfgText := renderConfig(port, adminPort, token, stateDir, standin, g, "")
	var serveArgs []string
	if profDir != "" {
		serveArgs = append(serveArgs, "--pprof")
	}
	sh, err := env.StartShoalNamed(fmt.Sprintf("shoal-%d", n), sbin, cfgText, serveArgs...)
	if err != nil {
		return nil, err
	}
	sh.Proc.Grace = 2 * time.Minute      // SIGINT stops N instances
	defer func() { env.Stop(sh.Proc) }() // the restarted one, by then
	if err := sh.WaitInService(ctx, group(1), 0, 60*time.Second, bench.PollEvery); err != nil {
		return nil, err
	}
	hap := func() int { return haproxyPID(stateDir) }
	env.Log.Info("baseline at rest", "groups", g)
	if l.BaseCPU, l.BaseRSSKiB, l.BaseHAPCPU, err = atRest(ctx, sh.Proc.Pid(), hap(), min(rest, 30*time.Second)); err != nil {
		return l, err
	}

	// Bursts: 0 → N/2, then under load (a group with none answers 503)
	// N/2 → N in service.
	t0 := time.Now()
	if err := sizeAll(ctx, sh, g, perGroup/2); err != nil {
		return l, err
	}
	l.UpHalfS = time.Since(t0).Seconds()
	loads := []*loadRun{startLoad(ctx, sh.URL("/")), startLoad(ctx, sh.URL("/"+group(2)+"/"))}
	t0 = time.Now()
	if err := sizeAll(ctx, sh, g, perGroup); err != nil {
		return l, err
	}
	l.UpFullS = time.Since(t0).Seconds()
	env.Log.Info("in service", "instances", n, "0→N/2 s", bench.Round2(l.UpHalfS), "N/2→N s", bench.Round2(l.UpFullS))
	if err := stopLoads(loads, l); err != nil {
		return l, err
	}

	select {
	case <-ctx.Done():
		return l, ctx.Err()
	case <-time.After(settle):
	}
	dbPath := filepath.Join(stateDir, "metrics.db")
	db0 := dbSize(dbPath)
	env.Log.Info("at rest", "instances", n, "seconds", rest.Seconds())
	t0 = time.Now()
	var prof <-chan error
	if profDir != "" {
		prof = saveProfile(ctx, sh, fmt.Sprintf("debug/pprof/profile?seconds=%d", int(rest.Seconds())), filepath.Join(profDir, fmt.Sprintf("%d-cpu.pprof", n)))
	}
	if l.CPU, l.RSSKiB, l.HAPCPU, err = atRest(ctx, sh.Proc.Pid(), hap(), rest); err != nil {
		return l, err
	}
	if prof != nil {
		if err := errors.Join(<-prof, <-saveProfile(ctx, sh, "debug/pprof/heap", filepath.Join(profDir, fmt.Sprintf("%d-heap.pprof", n)))); err != nil {
			return l, err
		}
	}
	l.DBBytes = dbSize(dbPath)
	l.DBGrowthDay = float64(l.DBBytes-db0) / time.Since(t0).Seconds() * 86400
	if l.DB, err = estimateDB(ctx, dbPath); err != nil {
		return l, err
	}
	env.Log.Info("measured", "instances", n, "shoal_cpu", bench.Round2(l.CPU), "rss_mib", bench.Round2(l.RSSKiB/1024), "haproxy_cpu", bench.Round2(l.HAPCPU))

	if l.APIms, err = apiTimesOf(ctx, sh, adminPort, token); err != nil {
		return l, err
	}

	// A reload that changes one group: the others' servers stay as they were.
	before, err := servers(ctx, sh)
	if err != nil {
		return l, err
	}
	if err := os.WriteFile(sh.Config, []byte(renderConfig(port, adminPort, token, stateDir, standin, g, group(g))), 0o600); err != nil {
		return l, err
	}
	t0 = time.Now()
	if _, err := sh.CLI(ctx, 2*time.Minute, "reload"); err != nil {
		return l, err
	}
	l.ReloadS = time.Since(t0).Seconds()
	after, err := servers(ctx, sh)
	if err != nil {
		return l, err
	}
	delete(before, group(g))
	delete(after, group(g))
	l.Untouched = fmt.Sprint(before) == fmt.Sprint(after)

	// kill -9 and restart: every instance adopted, every reconciler idle.
	pids, err := instancePIDs(ctx, sh)
	if err != nil {
		return l, err
	}
	sh.Proc.Cmd.Process.Kill()
	<-sh.Proc.Done
	env.Stop(sh.Proc)
	t0 = time.Now()
	p, err := env.StartServe(fmt.Sprintf("shoal-%d-restarted", n), sbin, sh.Config)
	if err != nil {
		return l, err
	}
	p.Grace = 2 * time.Minute // SIGINT stops N instances
	sh.Proc = p
	if err := waitIdle(ctx, sh, g, perGroup, 3*time.Minute); err != nil {
		return l, err
	}
	l.AdoptS = time.Since(t0).Seconds()
	now, err := instancePIDs(ctx, sh)
	if err != nil {
		return l, err
	}
	for name, pid := range pids {
		if now[name] == pid {
			l.Adopted++
		}
	}
	env.Log.Info("restarted", "adopted", l.Adopted, "seconds", bench.Round2(l.AdoptS))

	// N → N/2 out, under load.
	loads = []*loadRun{startLoad(ctx, sh.URL("/")), startLoad(ctx, sh.URL("/"+group(2)+"/"))}
	t0 = time.Now()
	if err := sizeAll(ctx, sh, g, perGroup/2); err != nil {
		return l, err
	}
	l.DownHalfS = time.Since(t0).Seconds()
	if err := stopLoads(loads, l); err != nil {
		return l, err
	}
	return l, nil
}

// saveProfile saves one of shoal's profiles (serve --pprof) to path; its
// channel gets the outcome.
func saveProfile(ctx context.Context, sh *bench.Shoal, what, path string) <-chan error {
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", sh.Cfg.Admin.Socket)
			}}}
			defer c.CloseIdleConnections()
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://shoal/"+what, nil)
			resp, err := c.Do(req)
			if err != nil {
				return fmt.Errorf("profile %s: %w", what, err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("profile %s: HTTP %d", what, resp.StatusCode)
			}
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			f, err := os.Create(path)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, resp.Body); err != nil {
				f.Close()
				return fmt.Errorf("profile %s: %w", what, err)
			}
			return f.Close()
		}()
	}()
	return done
}

// group names group i (1-based).
func group(i int) string { return fmt.Sprintf("g%02d", i) }

// renderConfig renders g groups of up to perGroup stand-ins; changed names the
// group a reload changes (its drain_timeout), "" for none.
func renderConfig(port, adminPort int, token, stateDir, standin string, g int, changed string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: 127.0.0.1:%d\nstate_dir: %s\nadmin:\n  listen: 127.0.0.1:%d\n  token: %s\nmetrics:\n  interval: 1s\ngroups:\n", port, stateDir, adminPort, token)
	for i := 1; i <= g; i++ {
		drain := drainTimeout
		if group(i) == changed {
			drain = "3s"
		}
		fmt.Fprintf(&b, `  - name: %s
    min_size: 0
    max_size: %d
    cooldown: {up: 0s, down: 0s}
    drain_timeout: %s
    health: {path: /healthz, interval: %s, rise: 2, fall: 3, timeout: 1s, grace: 60s}
    template:
      command: [%q, "127.0.0.1:{{.Port}}"]
      env: {GOMAXPROCS: "1"}
      stop_timeout: %s
`, group(i), perGroup, drain, checkEvery, standin, stopTimeout)
		if i > 1 {
			fmt.Fprintf(&b, "    path_prefixes: [/%s]\n", group(i))
		}
	}
	return b.String()
}

// atRest samples shoal's CPU and RSS and HAProxy's CPU (master and
// workers) over d.
func atRest(ctx context.Context, shoal, hap int, d time.Duration) (cpu, rss, hapCPU float64, err error) {
	haps := append([]int{hap}, bench.Descendants(hap)...)
	h0 := ticks(haps)
	t0 := time.Now()
	cpu, rss, err = bench.ProcessCPU(ctx, shoal, d)
	if err != nil {
		return 0, 0, 0, err
	}
	hapCPU = 100 * float64(ticks(haps)-h0) / bench.ClockTicks / time.Since(t0).Seconds()
	return cpu, rss, hapCPU, nil
}

func ticks(pids []int) int64 {
	var sum int64
	for _, p := range pids {
		t, _ := bench.CPUTicks(p)
		sum += t
	}
	return sum
}

// haproxyPID reads the HAProxy master's pid shoal records.
func haproxyPID(stateDir string) int {
	b, _ := os.ReadFile(filepath.Join(stateDir, "haproxy", "master.json"))
	s := string(b)
	i := strings.Index(s, `"pid":`)
	if i < 0 {
		return 0
	}
	s = strings.TrimLeft(s[i+6:], " ")
	j := strings.IndexAny(s, ",}")
	if j < 0 {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(s[:j]))
	return pid
}

// sizeAll scales every group to size at once (a job each, side by side),
// and waits until all are idle at it.
func sizeAll(ctx context.Context, sh *bench.Shoal, g, size int) error {
	var wg sync.WaitGroup
	errs := make([]error, g)
	for i := 1; i <= g; i++ {
		wg.Go(func() { errs[i-1] = sh.API.Size(ctx, group(i), size, 5*time.Minute) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return waitIdle(ctx, sh, g, size, 5*time.Minute)
}

// waitIdle polls shoal's status until every group has size instances, all
// in service, none starting or draining: the reconcilers have nothing to do.
func waitIdle(ctx context.Context, sh *bench.Shoal, g, size int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st, err := sh.API.Status(ctx)
		busy := ""
		if err != nil {
			busy = err.Error()
		} else if len(st.Groups) != g {
			busy = fmt.Sprintf("%d groups", len(st.Groups))
		} else {
			for _, gr := range st.Groups {
				if gr.Desired != size || gr.InService != size || len(gr.Instances) != size {
					busy = fmt.Sprintf("%s: %d desired, %d in service, %d instances", gr.Name, gr.Desired, gr.InService, len(gr.Instances))
					break
				}
			}
		}
		if busy == "" {
			return nil
		}
		if !sh.Proc.Alive() {
			return fmt.Errorf("shoal exited: %s", sh.LogTail(5))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not idle at %d a group after %v: %s: %s", size, timeout, busy, sh.LogTail(5))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(bench.PollEvery):
		}
	}
}

// instancePIDs maps every instance to its pid, from shoal's status.
func instancePIDs(ctx context.Context, sh *bench.Shoal) (map[string]int, error) {
	st, err := sh.API.Status(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, g := range st.Groups {
		for _, in := range g.Instances {
			out[in.Name] = in.PID
		}
	}
	return out, nil
}

// servers maps each group to its instances (name@address pid), sorted:
// what a reload must leave alone in the groups it did not change.
func servers(ctx context.Context, sh *bench.Shoal) (map[string]string, error) {
	st, err := sh.API.Status(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, g := range st.Groups {
		var s []string
		for _, in := range g.Instances {
			s = append(s, fmt.Sprintf("%s@%s/%d/%s", in.Name, in.Addr, in.PID, in.State))
		}
		slices.Sort(s)
		out[g.Name] = strings.Join(s, " ")
	}
	return out, nil
}

// dbSize is metrics.db with its WAL.
func dbSize(path string) int64 {
	var sum int64
	for _, p := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			sum += fi.Size()
		}
	}
	return sum
}

// loadRun is open-loop load on one group while its size changes.
type loadRun struct {
	stop func() (loadgen.OpenResult, error)
}

func startLoad(ctx context.Context, u string) *loadRun {
	l := bench.StartOpenLoad(ctx, loadgen.OpenOptions{URL: u, Schedule: []loadgen.Segment{{Rate: loadRate, Duration: time.Hour}}, Timeout: 10 * time.Second, MaxConns: loadConns})
	return &loadRun{stop: l.Stop}
}

func stopLoads(ls []*loadRun, l *level) error {
	var errs []error
	for _, r := range ls {
		res, err := r.stop()
		if err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, err)
		}
		l.LoadSent += res.Completed
		l.LoadFailed += res.Errors
		if res.Errors > 0 {
			errs = append(errs, fmt.Errorf("%d requests failed: %v", res.Errors, res.FailureSamples))
		}
	}
	return errors.Join(errs...)
}

// apiTimesOf times each surface 5 times and keeps the medians.
func apiTimesOf(ctx context.Context, sh *bench.Shoal, adminPort int, token string) (apiTimes, error) {
	var t apiTimes
	unix := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sh.Cfg.Admin.Socket)
	}}}
	defer unix.CloseIdleConnections()
	base := fmt.Sprintf("http://127.0.0.1:%d", adminPort)
	web, session, err := login(base, token)
	if err != nil {
		return t, err
	}
	for _, m := range []struct {
		out *float64
		f   func() error
	}{
		{&t.Status, func() error { _, err := sh.CLI(ctx, 30*time.Second, "status"); return err }},
		{&t.Events, func() error { _, err := sh.CLI(ctx, 30*time.Second, "events"); return err }},
		{&t.Prom, func() error { return get(ctx, unix, "http://shoal/metrics", nil, false) }},
		{&t.StatusAPI, func() error { return get(ctx, unix, "http://shoal/v1/status", nil, false) }},
		{&t.EventsAPI, func() error { return get(ctx, unix, "http://shoal/v1/events", nil, false) }},
		{&t.Stream, func() error {
			return get(ctx, web, base+"/ui/stream?group="+group(1), session, true)
		}},
	} {
		var ms []float64
		for range 5 {
			t0 := time.Now()
			if err := m.f(); err != nil {
				return t, err
			}
			ms = append(ms, bench.Msf(time.Since(t0)))
		}
		*m.out = bench.Round2(bench.Median(ms))
	}
	return t, nil
}

// get reads u to its end, or (firstEvent) to the first server-sent event.
func get(ctx context.Context, c *http.Client, u string, cookie *http.Cookie, firstEvent bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
	if cookie != nil {
		req.AddCookie(cookie)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d", u, resp.StatusCode)
	}
	if !firstEvent {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("GET %s: %w before the first message", u, err)
		}
		if strings.HasPrefix(line, "data:") {
			return nil
		}
	}
}

// login logs in to the dashboard as its form does.
func login(base, token string) (*http.Client, *http.Cookie, error) {
	c := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{Proxy: nil}}
	req, _ := http.NewRequest("POST", base+"/ui/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("dashboard login: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) == 0 {
		return nil, nil, fmt.Errorf("dashboard login: HTTP %d, want 303 and a session", resp.StatusCode)
	}
	return c, resp.Cookies()[0], nil
}

// figures are a level's headline numbers against its baseline and goals.
func figures(l *level) []bench.Figure {
	at := fmt.Sprintf(" (N = %d, G = %d)", l.Instances, l.Groups)
	lt := func(g float64) func(float64) bool { return func(v float64) bool { return v < g } }
	fs := []bench.Figure{
		{Name: "shoal CPU at rest" + at, Unit: "% of one core", Value: bench.Num(l.CPU), Baseline: "same shoal, same groups, 0 instances",
			BaselineValue: bench.Num(l.BaseCPU), Ratio: bench.RatioOf(bench.Num(l.CPU), bench.Num(l.BaseCPU)),
			Goal: fmt.Sprintf("< %g %%", goalCPU), Verdict: bench.Verdict(bench.Num(l.CPU), lt(goalCPU))},
		{Name: "shoal RSS at rest" + at, Unit: "MiB", Value: bench.Num(l.RSSKiB / 1024), Baseline: "0 instances", BaselineValue: bench.Num(l.BaseRSSKiB / 1024),
			Goal: fmt.Sprintf("< %g MiB", goalRSSMiB), Verdict: bench.Verdict(bench.Num(l.RSSKiB/1024), lt(goalRSSMiB))},
		{Name: "HAProxy CPU at rest (checks, stats)" + at, Unit: "% of one core", Value: bench.Num(l.HAPCPU), Baseline: "0 instances", BaselineValue: bench.Num(l.BaseHAPCPU)},
		{Name: "burst 0 → N/2 → N in service" + at, Unit: "s", Value: bench.Num(l.UpHalfS + l.UpFullS),
			Note: fmt.Sprintf("0 → N/2 %.1f s, N/2 → N %.1f s", l.UpHalfS, l.UpFullS)},
		{Name: "burst N → N/2 out" + at, Unit: "s", Value: bench.Num(l.DownHalfS)},
		{Name: "failed requests under load during the bursts" + at, Unit: "requests", Value: bench.Num(float64(l.LoadFailed)),
			Goal: "0", Verdict: bench.Verdict(bench.Num(float64(l.LoadFailed)), func(v float64) bool { return v == 0 }), Note: fmt.Sprintf("of %d", l.LoadSent)},
		{Name: "kill -9 → every instance adopted, reconcilers idle" + at, Unit: "s", Value: bench.Num(l.AdoptS),
			Goal: fmt.Sprintf("< %g s", goalAdoptS), Verdict: bench.Verdict(bench.Num(l.AdoptS), lt(goalAdoptS)),
			Note: fmt.Sprintf("%d of %d adopted with the same pid", l.Adopted, l.Instances)},
		{Name: "reload changing one group" + at, Unit: "s", Value: bench.Num(l.ReloadS), Note: fmt.Sprintf("other groups' servers untouched: %v", l.Untouched),
			Verdict: map[bool]string{true: "PASS", false: "FAIL"}[l.Untouched]},
		{Name: "metrics.db once its retention holds" + at, Unit: "MiB", Value: bench.Num(l.DB.SteadyMiB), Goal: "< 1 GiB at N = 1,000",
			Verdict: bench.Verdict(bench.Num(l.DB.SteadyMiB), lt(goalDBMiB)),
			Note: fmt.Sprintf("%d instance series × 12 h of 1 m roll-ups + %d group series × (12 h of 10 s + 7 days of 1 m + 30 days of 1 h) = %d rows at %.0f bytes a row (the file's now: %d rows; a young file's bytes a row overestimate, TestDefaultRetentionBound measures 37)",
				l.DB.InstanceSeries, l.DB.GroupSeries, l.DB.SteadyRows, l.DB.BytesPerRow, l.DB.Rows)},
		{Name: "metrics.db growth at this rate" + at, Unit: "MiB/day", Value: bench.Num(l.DBGrowthDay / (1 << 20)),
			Note: fmt.Sprintf("%.1f MiB after the run, growth over the rest window; the file levels off at the retention's rows (the figure above)", float64(l.DBBytes)/(1<<20))},
	}
	for _, a := range []struct {
		name string
		v    float64
		note string
	}{
		{"`shoal status`", l.APIms.Status, "median of 5 runs of the CLI, its process start included"},
		{"`shoal events`", l.APIms.Events, "median of 5 runs of the CLI, its process start included"},
		{"GET /v1/status", l.APIms.StatusAPI, "median of 5, over the admin socket (`shoal status` without its process start)"},
		{"GET /v1/events", l.APIms.EventsAPI, "median of 5, over the admin socket (`shoal events` without its process start)"},
		{"GET /metrics", l.APIms.Prom, "median of 5, over the admin socket"},
		{"dashboard stream, first message", l.APIms.Stream, "median of 5, logged in over the admin TCP listener"},
	} {
		fs = append(fs, bench.Figure{Name: a.name + " response time" + at, Unit: "ms", Value: bench.Num(a.v),
			Goal: fmt.Sprintf("< %g ms", goalAPIms), Verdict: bench.Verdict(bench.Num(a.v), lt(goalAPIms)), Note: a.note})
	}
	return fs
}

func markdown(levels []*level) string {
	var b strings.Builder
	b.WriteString("| N | G | shoal CPU (base) | RSS | HAProxy CPU (base) | 0→N/2→N | N→N/2 | failed | adopt | reload | metrics.db/day | metrics.db steady | status | events | /metrics | stream |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, l := range levels {
		fmt.Fprintf(&b, "| %d | %d | %.2f %% (%.2f) | %.0f MiB | %.2f %% (%.2f) | %.1f+%.1f s | %.1f s | %d/%d | %.1f s | %.2f s | %.1f MiB | %.1f MiB | %.0f ms | %.0f ms | %.0f ms | %.0f ms |\n",
			l.Instances, l.Groups, l.CPU, l.BaseCPU, l.RSSKiB/1024, l.HAPCPU, l.BaseHAPCPU, l.UpHalfS, l.UpFullS, l.DownHalfS,
			l.LoadFailed, l.LoadSent, l.AdoptS, l.ReloadS, l.DBGrowthDay/(1<<20), l.DB.SteadyMiB, l.APIms.Status, l.APIms.Events, l.APIms.Prom, l.APIms.Stream)
	}
	return b.String()
}
