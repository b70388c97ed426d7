package chaos

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shoal-lb/shoal/internal/bench"
)

// chaos puts keep-alive load on a shoal group while an operator and the
// machine do their worst, one event after another: scale 2→6→2, a rolling
// deploy of 4 instances, hitless reloads, restarts of shoal itself (the data
// plane kept, the next `shoal serve` adopting it), SIGKILLs and SIGSTOPs of
// instances (issue 14). Every request is recorded with its start, end and
// outcome and counted against the events it overlapped; a quiet window before
// the first event is the same run's baseline. A run with POSTs sends them to
// the demo backend's /echo, which logs each request id before answering, and
// the instance logs prove no POST reached an instance twice.
var Command = &bench.Command{
	Name:    "chaos",
	Summary: "keep-alive load through scaling, deploys, reloads, shoal restarts, SIGKILLs and SIGSTOPs: failures, p99, recovery times",
	Run:     runChaos,
}

// eventKinds in the order a run performs them.
var eventKinds = []string{"scale", "deploy", "reload", "restart", "kill", "stop"}

// defaultEvents is the run.
const defaultEvents = "scale,deploy,reload:10,restart:5,kill:10,stop:2"

var eventLabels = map[string]string{
	"scale":   "scale 2→6→2",
	"deploy":  "rolling deploy of 4",
	"reload":  "hitless reload",
	"restart": "restart of shoal",
	"kill":    "instance SIGKILL",
	"stop":    "instance SIGSTOP",
}

// parseEvents reads "scale,reload:10,kill:3": each kind at most once, with
// a count (default 1).
func parseEvents(s string) (map[string]int, error) {
	out := map[string]int{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		kind, count, hasCount := strings.Cut(part, ":")
		if !slices.Contains(eventKinds, kind) {
			return nil, fmt.Errorf("event %q: want one of %s", kind, strings.Join(eventKinds, ", "))
		}
		n := 1
		if hasCount {
			var err error
			if n, err = strconv.Atoi(count); err != nil || n < 1 || n > 100 {
				return nil, fmt.Errorf("event %q: want a count from 1 to 100", part)
			}
		}
		if _, dup := out[kind]; dup {
			return nil, fmt.Errorf("event %q given twice", kind)
		}
		out[kind] = n
	}
	if len(out) == 0 {
		return nil, errors.New("no events")
	}
	return out, nil
}

// parsePosts reads the runs' POST percentages, "0,10".
func parsePosts(s string) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 0 || n > 100 {
			return nil, fmt.Errorf("-posts %q: want percentages from 0 to 100, comma-separated", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// chaosRig is the shoal under test and how to drive it.
type chaosRig struct {
	env       *bench.Env
	sh        *bench.Shoal
	stateDir  string
	url       string
	configFor func(serverTimeout string) string
	timeout   string // haproxy.timeouts.server now in the config
	restarts  int
	deploys   int
	hasDeploy bool
}

const chaosGroup = "web"

func runChaos(ctx context.Context, env *bench.Env, fs *flag.FlagSet, args []string) (*bench.Report, error) {
	budget := fs.Int64("requests", 100_000, "requests per run at least: load goes on after the events until this many completed")
	rate := fs.Float64("rate", 600, "requests per second (paced, keep-alive)")
	conns := fs.Int("conns", 16, "connections (workers)")
	events := fs.String("events", defaultEvents, "events in order, KIND[:COUNT] comma-separated, from "+strings.Join(eventKinds, ","))
	posts := fs.String("posts", "0,10", "one run per value: the percentage of requests that are POST /echo")
	quiet := fs.Duration("quiet", 10*time.Second, "the quiet window before the first event: the at-rest baseline")
	gap := fs.Duration("gap", 2*time.Second, "pause between events")
	var bins bench.BinFlags
	bins.Register(fs)
	if err := bench.Parse(fs, args); err != nil {
		return nil, err
	}
	plan, err := parseEvents(*events)
	if err != nil {
		return nil, bench.BadUsage("-events: %v", err)
	}
	postPcts, err := parsePosts(*posts)
	if err != nil {
		return nil, bench.BadUsage("%v", err)
	}
	if *budget < 1 || *rate < 1 || *conns < 1 || *quiet < time.Second || *gap < 0 {
		return nil, bench.BadUsage("-requests >= 1, -rate >= 1, -conns >= 1, -quiet >= 1s and -gap >= 0 please")
	}
	if bench.HAProxyPath() == "" {
		return nil, errors.New("haproxy is not installed (scripts/install-deps.sh haproxy)")
	}
	backend, sbin, err := bins.Resolve()
	if err != nil {
		return nil, err
	}

	rep := &bench.Report{Date: time.Now(), Machine: bench.NewMachine()}
	rig, err := startChaosRig(ctx, env, sbin, backend)
	if err != nil {
		return nil, err
	}
	det := &chaosDetails{Events: *events, Rate: *rate, Conns: *conns, Budget: *budget}
	rep.Details = det
	for i, pct := range postPcts {
		env.Log.Info("chaos run", "n", i+1, "of", len(postPcts), "post_percent", pct)
		run, err := rig.run(ctx, i+1, pct, plan, chaosLoadOptions{rate: *rate, conns: *conns, budget: *budget}, *quiet, *gap)
		if err != nil {
			return nil, fmt.Errorf("run %d (%d%% POST): %w", i+1, pct, err)
		}
		det.Runs = append(det.Runs, run)
	}
	rep.Settings = []bench.Setting{
		{Name: "load", Value: fmt.Sprintf("own keep-alive client in process, %d connections paced at %.0f req/s, GET / (9 KB page) and POST /echo; at least %d requests per run, 60 s timeout per request", *conns, *rate, *budget)},
		{Name: "events", Value: fmt.Sprintf("%s, %v apart, after a %v quiet window (the at-rest baseline)", *events, *gap, *quiet)},
		{Name: "group", Value: "web: demo-backend instances, min 2 max 6, health GET /healthz every 500ms rise 2 fall 2, replace_after 3s, drain_timeout 10s, cooldowns 1s"},
		{Name: "attribution", Value: "a request counts for an event when its lifetime overlaps the event's window: from the action to its end condition (scale/deploy job done, reload answered, new core adopted and 2 in service, the replacement in service) plus 1 s"},
	}
	if !rig.hasDeploy && plan["deploy"] > 0 {
		rep.Settings = append(rep.Settings, bench.Setting{Name: "deploy", Value: "left out: this shoal has no `shoal deploy` yet"})
	}
	rep.Figures, rep.Markdown = chaosFigures(det)
	return rep, nil
}

func startChaosRig(ctx context.Context, env *bench.Env, sbin, backend string) (*chaosRig, error) {
	port, err := env.FreePort()
	if err != nil {
		return nil, err
	}
	state := filepath.Join(env.Work, "state")
	rig := &chaosRig{env: env, stateDir: state, url: fmt.Sprintf("http://127.0.0.1:%d", port), timeout: "30s"}
	// `shoal deploy` is newer than this benchmark's first runs; without it
	// the template declares no variables (an older shoal refuses them).
	rig.hasDeploy = exec.CommandContext(ctx, sbin, "deploy", "--help").Run() == nil
	rig.configFor = func(serverTimeout string) string {
		return chaosConfig(port, state, backend, serverTimeout, rig.hasDeploy)
	}
	env.Log.Info("starting shoal")
	rig.sh, err = env.StartShoal(sbin, rig.configFor(rig.timeout))
	if err != nil {
		return nil, err
	}
	if err := rig.sh.WaitInService(ctx, chaosGroup, 2, 60*time.Second, bench.PollEvery); err != nil {
		return nil, fmt.Errorf("shoal did not get 2 instances in service: %w", err)
	}
	if err := bench.WaitHTTP(ctx, rig.url+"/", rig.sh.Proc, 10*time.Second); err != nil {
		return nil, err
	}
	return rig, nil
}

// chaosConfig is the config of the shoal under test. With deploy, the
// template declares the variable `release` that each deploy sets (an older
// shoal without deploys refuses template variables).
func chaosConfig(port int, state, backend, serverTimeout string, deploy bool) string {
	vars := ""
	if deploy {
		vars = "\n      vars: {release: r0}\n      env: {RELEASE: \"{{.Vars.release}}\"}"
	}
	return fmt.Sprintf(`listen: 127.0.0.1:%d
state_dir: %s
haproxy:
  timeouts: {server: %s}
instance_logs: {max_size: 1GiB}
groups:
  - name: web
    min_size: 2
    max_size: 6
    cooldown: {up: 1s, down: 1s}
    drain_timeout: 10s
    replace_after: 3s
    health: {path: /healthz, interval: 500ms, timeout: 1s, rise: 2, fall: 2, grace: 20s}
    template:
      command: [%q, "--listen", "127.0.0.1:{{.Port}}", "--name", "{{.Name}}"]
      stop_timeout: 5s%s
`, port, state, serverTimeout, backend, vars)
}

// chaosRun is one run's raw results.
type chaosRun struct {
	PostPercent int           `json:"post_percent"`
	Requests    int64         `json:"requests"`
	Seconds     float64       `json:"seconds"`
	Events      []*chaosEvent `json:"events"`
	Rest        chaosWindow   `json:"at_rest"`
	Kinds       []kindStats   `json:"per_event_type"`
	Total       kindStats     `json:"total"`
	Posts       postAudit     `json:"posts"`
	Failures    []failureRec  `json:"failures"`
}

// chaosWindow is a span of the run, in seconds since the load started.
type chaosWindow struct {
	From float64 `json:"from_s"`
	To   float64 `json:"to_s"`
}

// chaosEvent is one occurrence of an event.
type chaosEvent struct {
	Kind   string      `json:"kind"`
	N      int         `json:"n"`
	Window chaosWindow `json:"window"`
	Detail string      `json:"detail,omitempty"`
	// For kills and stops: the instance, and how long after the signal it
	// was out of rotation and a replacement was in service.
	Instance      string   `json:"instance,omitempty"`
	RemovedMS     *float64 `json:"removed_ms,omitempty"`
	ReplacementMS *float64 `json:"replacement_ms,omitempty"`
	Skipped       string   `json:"skipped,omitempty"`
}

// run puts load on the group and performs the plan's events in order.
func (rig *chaosRig) run(ctx context.Context, n, postPct int, plan map[string]int, lo chaosLoadOptions, quiet, gap time.Duration) (*chaosRun, error) {
	lo.url, lo.postPct, lo.runID = rig.url, postPct, n
	load := startChaosLoad(ctx, lo)
	defer load.stop()
	since := func() float64 { return time.Since(load.start).Seconds() }
	sleep := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}
	if err := sleep(quiet); err != nil {
		return nil, err
	}
	run := &chaosRun{PostPercent: postPct, Rest: chaosWindow{From: 1, To: since()}} // the first second warms up connections
	for _, kind := range eventKinds {
		for i := range plan[kind] {
			ev := &chaosEvent{Kind: kind, N: i + 1}
			ev.Window.From = since()
			rig.env.Log.Info("event", "kind", kind, "n", i+1, "of", plan[kind], "requests", load.completed())
			if err := rig.event(ctx, ev, i, since); err != nil {
				return nil, fmt.Errorf("%s %d: %w", kind, i+1, err)
			}
			if ev.Window.To == 0 {
				ev.Window.To = since() + 1
			}
			run.Events = append(run.Events, ev)
			if err := sleep(gap); err != nil {
				return nil, err
			}
		}
	}
	for load.completed() < lo.budget {
		if err := sleep(200 * time.Millisecond); err != nil {
			return nil, err
		}
	}
	recs := load.stop()
	run.Seconds = since()
	// Instances write "seen ID" before answering; give the last ones a moment.
	if err := sleep(500 * time.Millisecond); err != nil {
		return nil, err
	}
	seen, err := countSeen(filepath.Join(rig.stateDir, "logs"), fmt.Sprintf("r%d-", n))
	if err != nil {
		return nil, err
	}
	analyze(run, recs, seen)
	return run, nil
}

// event performs one occurrence of ev.Kind; i counts from 0.
func (rig *chaosRig) event(ctx context.Context, ev *chaosEvent, i int, since func() float64) error {
	switch ev.Kind {
	case "scale":
		for _, size := range []int{6, 2} {
			if err := rig.scaleTo(ctx, size); err != nil {
				return err
			}
		}
		ev.Detail = "scale --size 6 --sync, then --size 2 --sync"
	case "deploy":
		if !rig.hasDeploy {
			ev.Skipped = "shoal has no deploy command"
			return nil
		}
		return rig.deploy(ctx, ev, since)
	case "reload":
		return rig.reload(ctx, ev, i)
	case "restart":
		return rig.restart(ctx, ev, i)
	case "kill", "stop":
		return rig.signal(ctx, ev, i, since)
	}
	return nil
}

// deploy scales to 4, rolls a new version out over the 4 and scales back to
// 2; the event's window covers the deploy alone.
func (rig *chaosRig) deploy(ctx context.Context, ev *chaosEvent, since func() float64) error {
	if err := rig.scaleTo(ctx, 4); err != nil {
		return err
	}
	ev.Window.From = since()
	rig.deploys++
	start := time.Now()
	if _, err := rig.sh.CLI(ctx, 5*time.Minute, "deploy", chaosGroup, "--set", "release=r"+strconv.Itoa(rig.deploys), "--sync"); err != nil {
		return err
	}
	ev.Window.To = since() + 1
	ev.Detail = fmt.Sprintf("scale --size 4, deploy --set release=r%d --sync over the 4 (%.1fs, the window), then scale --size 2", rig.deploys, time.Since(start).Seconds())
	return rig.scaleTo(ctx, 2)
}

// scaleTo runs `shoal scale web --size N --sync`, again while the job is
// ignored (exit status 3: the group's 1 s cooldown or another job).
func (rig *chaosRig) scaleTo(ctx context.Context, size int) error {
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := rig.sh.CLI(ctx, 3*time.Minute, "scale", chaosGroup, "--size", strconv.Itoa(size), "--sync")
		var ee *exec.ExitError
		if err == nil || !errors.As(err, &ee) || ee.ExitCode() != 3 || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// reload runs `shoal reload`; every other one changes timeouts.server so
// that HAProxy itself reloads, the others leave HAProxy's config as it is.
func (rig *chaosRig) reload(ctx context.Context, ev *chaosEvent, i int) error {
	if i%2 == 0 {
		rig.timeout = map[string]string{"30s": "31s", "31s": "30s"}[rig.timeout]
		if err := os.WriteFile(rig.sh.Config, []byte(rig.configFor(rig.timeout)), 0o600); err != nil {
			return err
		}
		ev.Detail = "timeouts.server " + rig.timeout + ": "
	} else {
		ev.Detail = "config unchanged: "
	}
	out, err := rig.sh.CLI(ctx, time.Minute, "reload")
	if err != nil {
		return err
	}
	ev.Detail += strings.Join(strings.Fields(string(out)), " ")
	return nil
}

// restart stops the core keeping HAProxy and the instances serving (`shoal
// stop --keep-running`, every other time SIGTERM as systemd sends it),
// starts a new `shoal serve` and waits until it has adopted them.
func (rig *chaosRig) restart(ctx context.Context, ev *chaosEvent, i int) error {
	start := time.Now()
	old := rig.sh.Proc
	how := "stop --keep-running"
	if i%2 == 0 {
		if _, err := rig.sh.CLI(ctx, time.Minute, "stop", "--keep-running"); err != nil {
			return err
		}
	} else {
		how = "SIGTERM"
		if err := syscall.Kill(old.Pid(), syscall.SIGTERM); err != nil {
			return fmt.Errorf("SIGTERM to shoal: %w", err)
		}
	}
	select {
	case <-old.Done:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("the core still runs 30s after %s", how)
	}
	down := time.Since(start)
	rig.restarts++
	name := fmt.Sprintf("shoal-restart-%d", rig.restarts)
	p, err := rig.env.StartServe(name, rig.sh.Bin, rig.sh.Config)
	if err != nil {
		return err
	}
	rig.sh.Proc = p
	if err := rig.sh.WaitInService(ctx, chaosGroup, 2, time.Minute, bench.PollEvery); err != nil {
		return fmt.Errorf("after the restart: %w", err)
	}
	ev.Detail = fmt.Sprintf("%s: the core was gone after %.2fs; the new core had adopted 2 in service %.2fs after the stop began", how, down.Seconds(), time.Since(start).Seconds())
	return nil
}

// signal sends SIGKILL (kill) or SIGSTOP (stop) to an instance in service
// and times its removal from rotation and a replacement in service.
func (rig *chaosRig) signal(ctx context.Context, ev *chaosEvent, i int, since func() float64) error {
	st, err := rig.sh.API.Group(ctx, chaosGroup)
	if err != nil {
		return err
	}
	type instance struct {
		Name string
		PID  int
	}
	var serving []instance
	for _, in := range st.Instances {
		if in.Serving() && in.PID > 0 {
			serving = append(serving, instance{in.Name, in.PID})
		}
	}
	if len(serving) < st.Desired {
		return fmt.Errorf("%d of %d instances in service before the signal", len(serving), st.Desired)
	}
	victim := serving[i%len(serving)]
	sig := syscall.SIGKILL
	if ev.Kind == "stop" {
		sig = syscall.SIGSTOP
	}
	ev.Instance = victim.Name
	sent := time.Now()
	if err := syscall.Kill(victim.PID, sig); err != nil {
		return fmt.Errorf("signal %s (pid %d): %w", victim.Name, victim.PID, err)
	}
	if sig == syscall.SIGSTOP {
		// Should shoal fail to replace it, let it go on rather than hang
		// the rest of the run's requests.
		defer func() {
			if f, err := bench.StatFields(victim.PID); err == nil && f[0] == "T" {
				syscall.Kill(victim.PID, syscall.SIGCONT)
			}
		}()
	}
	deadline := sent.Add(90 * time.Second)
	for time.Now().Before(deadline) {
		st, err := rig.sh.API.Group(ctx, chaosGroup)
		if err == nil {
			ms := float64(time.Since(sent).Microseconds()) / 1000
			inRotation, replaced := false, 0
			for _, in := range st.Instances {
				up := in.Serving()
				if in.Name == victim.Name && in.PID == victim.PID && up {
					inRotation = true
				} else if up {
					replaced++
				}
			}
			if !inRotation && ev.RemovedMS == nil {
				ev.RemovedMS = bench.Num(ms)
			}
			if ev.RemovedMS != nil && replaced >= st.Desired {
				ev.ReplacementMS = bench.Num(ms)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s (pid %d) was not replaced within 90s", victim.Name, victim.PID)
}
