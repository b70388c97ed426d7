// Package hostdrain is the host-drain benchmark (issue 39): emptying a host
// of N instances with `shoal hosts drain`, against the same moves done by
// hand with the CLI an operator has.
package hostdrain

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/loadgen"

	"github.com/shoal-lb/shoal/internal/bench"
)

// Command empties an SSH test host of N instances of a group (N = 4, 12
// by default), under open-loop GET load over keep-alive connections, two
// ways, one after the other on the same shoal:
//
//   - by hand, as an operator does it with the CLI there is: `shoal hosts
//     cordon X`, `shoal scale web --size 2N --sync` (the N new ones go to
//     the other host), `shoal instances drain NAME --no-replace --sync` of
//     each of X's instances (out of rotation, requests finished; a scale-in
//     takes such an instance first), then `shoal scale web --size N
//     --sync`. A scale-in alone cannot name the instances: it takes from
//     the most loaded host first, which, once both hosts hold N, need not
//     be X.
//   - `shoal hosts drain Y` of the host that now holds them: one replace
//     job per instance, launch before terminate, within the disruption
//     budget (max_unavailable 1).
//
// Each is timed from its first command to the host empty and the group
// whole again (N in service, N instances), polled every 100 ms; the failed
// requests and shoal's CPU (utime+stime from /proc) over that time are
// reported beside it.
var Command = &bench.Command{
	Name:    "hostdrain",
	Summary: "a host drain of N = 4, 12 SSH instances vs the same moves by hand (scale out, drain --no-replace, scale in)",
	Run:     run,
}

// way is one way of emptying a host, measured.
type way struct {
	Way      string   `json:"way"`
	Host     string   `json:"host"`
	Seconds  *float64 `json:"seconds"` // first command → host empty, group whole
	Requests int64    `json:"requests"`
	Failed   int64    `json:"failed"`
	Failures []string `json:"failures,omitempty"`
	// ShoalCPUS is the shoal process's utime+stime over the run, in seconds.
	ShoalCPUS *float64 `json:"shoal_cpu_s"`
	// Steps are the by-hand commands' own times.
	Steps []step `json:"steps,omitempty"`
}

type step struct {
	Command string  `json:"command"`
	Seconds float64 `json:"seconds"`
}

type round struct {
	N      int `json:"n"`
	ByHand way `json:"by_hand"`
	Drain  way `json:"host_drain"`
}

type details struct {
	Rounds []round `json:"rounds"`
}

func run(ctx context.Context, env *bench.Env, fs *flag.FlagSet, args []string) (*bench.Report, error) {
	ns := fs.String("n", "4,12", "instances on the drained host, a comma list")
	rate := fs.Float64("rate", 50, "GET/s of open-loop load during each way")
	conns := fs.Int("conns", 8, "keep-alive connections the load uses at most")
	timeout := fs.Duration("timeout", 5*time.Minute, "longest one way may take")
	var bins bench.BinFlags
	bins.Register(fs)
	if err := bench.Parse(fs, args); err != nil {
		return nil, err
	}
	var sizes []int
	for f := range strings.SplitSeq(*ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 50 {
			return nil, bench.BadUsage("-n must be a comma list of sizes from 1 to 50, got %q", *ns)
		}
		sizes = append(sizes, n)
	}
	if *rate <= 0 || *conns < 1 || *timeout < time.Second {
		return nil, bench.BadUsage("-rate > 0, -conns >= 1 and -timeout >= 1s please")
	}
	backend, sbin, err := bins.Resolve()
	if err != nil {
		return nil, err
	}
	lab, err := bench.TestHosts(ctx, env, 2)
	if err != nil {
		return nil, err
	}
	defer lab.Close()

	sh, err := env.StartShoalOn(sbin, func(port int) string {
		return bench.HostsConfig(port, filepath.Join(env.Work, "state"), backend, 1, 2*slices.Max(sizes)+1,
			bench.SSHProviderYAML(lab, filepath.Join(env.Work, "remote"), 0), groupYAML)
	})
	if err != nil {
		return nil, err
	}
	defer env.Stop(sh.Proc)
	if err := sh.WaitInService(ctx, "web", 1, *timeout, bench.PollEvery); err != nil {
		return nil, err
	}
	r := runner{env: env, sh: sh, rate: *rate, conns: *conns, timeout: *timeout}
	det := &details{}
	for _, n := range sizes {
		rd, err := r.round(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("N = %d: %w", n, err)
		}
		det.Rounds = append(det.Rounds, rd)
	}

	rep := &bench.Report{Date: time.Now(), Machine: bench.NewMachine(), Details: det}
	for _, rd := range det.Rounds {
		d, h := rd.Drain, rd.ByHand
		rep.Figures = append(rep.Figures, bench.Figure{
			Name: fmt.Sprintf("N = %d: host empty and group whole again", rd.N), Unit: "s", Value: d.Seconds,
			Baseline: "the same moves by hand", BaselineValue: h.Seconds, Ratio: bench.RatioOf(d.Seconds, h.Seconds),
			Note: fmt.Sprintf("`shoal hosts drain`: %d replace jobs one at a time; by hand: cordon, scale out to %d, %d × `instances drain --no-replace`, scale in to %d (each command's time below)", rd.N, 2*rd.N, rd.N, rd.N),
		}, bench.Figure{
			Name: fmt.Sprintf("N = %d: failed requests", rd.N), Value: bench.Num(float64(d.Failed)),
			Baseline: "by hand", BaselineValue: bench.Num(float64(h.Failed)),
			Goal: "0", Verdict: bench.Verdict(bench.Num(float64(d.Failed)), func(v float64) bool { return v == 0 }),
			Note: fmt.Sprintf("%d and %d requests at %.0f GET/s", d.Requests, h.Requests, *rate),
		}, bench.Figure{
			Name: fmt.Sprintf("N = %d: shoal's CPU over the move", rd.N), Unit: "s of CPU", Value: d.ShoalCPUS,
			Baseline: "by hand", BaselineValue: h.ShoalCPUS, Ratio: bench.RatioOf(d.ShoalCPUS, h.ShoalCPUS),
			Note: "utime+stime of the shoal process (/proc/PID/stat) from the first command to the end; the CLI's own processes are not counted",
		})
	}
	rep.Settings = []bench.Setting{
		{Name: "hosts", Value: "2 network namespaces on this machine, each with Debian's sshd on its own veth address; HAProxy and shoal in the root namespace"},
		{Name: "group", Value: fmt.Sprintf("demo-backend (GOMAXPROCS=1) on {{.Host}}:{{.Port}}, ssh provider, placement pack (all on one host), hosts without capacity bounds, max_size %d, disruption max_unavailable 1, drain_timeout 5s; health every 500 ms, rise 2, fall 2, passive layer 4", 2*slices.Max(sizes)+1)},
		{Name: "load", Value: fmt.Sprintf("open-loop GET / at %.0f/s over at most %d keep-alive connections, during each way only", *rate, *conns)},
		{Name: "order", Value: "for each N: the group scaled to N (all on one host), by hand first (that host emptied onto the other), then `shoal hosts drain` of the other (back again); each host uncordoned after"},
	}
	var md strings.Builder
	md.WriteString("By hand, each command's time (the CLI with `--sync`):\n\n")
	for _, rd := range det.Rounds {
		fmt.Fprintf(&md, "- N = %d: %s\n", rd.N, stepList(rd.ByHand.Steps))
	}
	fmt.Fprintf(&md, "\nFailures sampled:")
	for _, rd := range det.Rounds {
		fmt.Fprintf(&md, " N = %d host drain %v, by hand %v;", rd.N, rd.Drain.Failures, rd.ByHand.Failures)
	}
	md.WriteString("\n")
	rep.Markdown = md.String()
	return rep, nil
}

type runner struct {
	env     *bench.Env
	sh      *bench.Shoal
	rate    float64
	conns   int
	timeout time.Duration
}

// round scales the group to n, all on one host, and empties that host by
// hand, then the other with a host drain.
func (r runner) round(ctx context.Context, n int) (round, error) {
	rd := round{N: n}
	if err := r.size(ctx, n); err != nil {
		return rd, err
	}
	x, err := r.soleHost(ctx, n)
	if err != nil {
		return rd, err
	}
	rd.ByHand, err = r.measure(ctx, "by hand", x, n, func(w *way) error { return r.byHand(ctx, w, x, n) })
	if err != nil {
		return rd, fmt.Errorf("by hand: %w", err)
	}
	if _, err := r.sh.API.HostAct(ctx, "uncordon", x, ""); err != nil {
		return rd, err
	}
	y, err := r.soleHost(ctx, n)
	if err != nil {
		return rd, err
	}
	rd.Drain, err = r.measure(ctx, "host drain", y, n, func(*way) error {
		_, err := r.sh.API.HostAct(ctx, "drain", y, "")
		return err
	})
	if err != nil {
		return rd, fmt.Errorf("host drain: %w", err)
	}
	if ds, err := r.sh.API.HostDrains(ctx); err != nil || len(ds) == 0 || ds[0].State != "done" {
		return rd, fmt.Errorf("the drain of %s did not end done: %+v %v", y, ds, err)
	}
	if _, err := r.sh.API.HostAct(ctx, "uncordon", y, ""); err != nil {
		return rd, err
	}
	return rd, nil
}

// measure runs do under load and times it until host has no instance and
// the group n in service and n instances.
func (r runner) measure(ctx context.Context, name, host string, n int, do func(*way) error) (way, error) {
	w := way{Way: name, Host: host}
	load := bench.StartOpenLoad(ctx, loadgen.OpenOptions{URL: r.sh.URL("/"), Timeout: 10 * time.Second, MaxConns: r.conns,
		Schedule: []loadgen.Segment{{Rate: r.rate, Duration: time.Hour}}})
	defer load.Stop()
	time.Sleep(time.Second) // the connections open before the clock starts
	t0, err := bench.CPUTicks(r.sh.Proc.Pid())
	if err != nil {
		return w, err
	}
	start := time.Now()
	if err := do(&w); err != nil {
		return w, err
	}
	deadline := start.Add(r.timeout)
	for {
		if time.Now().After(deadline) {
			return w, fmt.Errorf("%s not empty or the group not whole after %s: %s", host, r.timeout, r.sh.LogTail(5))
		}
		st, err := r.sh.API.Group(ctx, "web")
		if err == nil {
			there := 0
			for _, in := range st.Instances {
				if bench.HostOf(in.Addr) == host {
					there++
				}
			}
			if there == 0 && st.InService == n && len(st.Instances) == n {
				break
			}
		}
		select {
		case <-ctx.Done():
			return w, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	w.Seconds = bench.Num(time.Since(start).Seconds())
	if t1, err := bench.CPUTicks(r.sh.Proc.Pid()); err == nil {
		w.ShoalCPUS = bench.Num(float64(t1-t0) / bench.ClockTicks)
	}
	res, err := load.Stop()
	if err != nil {
		return w, err
	}
	w.Requests, w.Failed, w.Failures = res.Sent, res.Errors, res.FailureSamples
	r.env.Log.Info("host emptied", "way", name, "n", n, "host", host, "seconds", bench.FmtNum(w.Seconds), "requests", res.Sent, "failed", res.Errors, "shoal_cpu_s", bench.FmtNum(w.ShoalCPUS))
	return w, nil
}

// byHand empties x of its n instances with the CLI.
func (r runner) byHand(ctx context.Context, w *way, x string, n int) error {
	st, err := r.sh.API.Group(ctx, "web")
	if err != nil {
		return err
	}
	var names []string
	for _, in := range st.Instances {
		if bench.HostOf(in.Addr) == x {
			names = append(names, in.Name)
		}
	}
	cmds := [][]string{{"hosts", "cordon", x}, {"scale", "web", "--size", strconv.Itoa(2 * n), "--sync"}}
	for _, name := range names {
		cmds = append(cmds, []string{"instances", "drain", name, "--no-replace", "--sync"})
	}
	cmds = append(cmds, []string{"scale", "web", "--size", strconv.Itoa(n), "--sync"})
	for _, c := range cmds {
		t := time.Now()
		if _, err := r.sh.CLI(ctx, r.timeout, c...); err != nil {
			return err
		}
		w.Steps = append(w.Steps, step{Command: "shoal " + strings.Join(c, " "), Seconds: bench.Round2(time.Since(t).Seconds())})
	}
	return nil
}

// size scales the group to n and waits until n serve.
func (r runner) size(ctx context.Context, n int) error {
	if _, err := r.sh.API.Scale(ctx, "web", api.ScaleRequest{Size: &n, Source: "shoal-bench"}); err != nil {
		return err
	}
	deadline := time.Now().Add(r.timeout)
	for {
		st, err := r.sh.API.Group(ctx, "web")
		if err == nil && st.InService == n && len(st.Instances) == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the group not at %d after %s: %s", n, r.timeout, r.sh.LogTail(5))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(bench.PollEvery):
		}
	}
}

// soleHost returns the host every one of the group's n instances is on.
func (r runner) soleHost(ctx context.Context, n int) (string, error) {
	st, err := r.sh.API.Group(ctx, "web")
	if err != nil {
		return "", err
	}
	per := map[string]int{}
	for _, in := range st.Instances {
		per[bench.HostOf(in.Addr)]++
	}
	for h, c := range per {
		if c == n && len(per) == 1 {
			return h, nil
		}
	}
	return "", fmt.Errorf("the group's %d instances are not on one host: %v", n, per)
}

func stepList(steps []step) string {
	parts := make([]string, len(steps))
	for i, s := range steps {
		parts[i] = fmt.Sprintf("`%s` %.2f s", s.Command, s.Seconds)
	}
	return strings.Join(parts, ", ")
}

// groupYAML places the group's instances on the ssh provider, all on one
// host, and replaces them one at a time.
const groupYAML = `provider: rack
placement: {strategy: pack}
disruption: {max_unavailable: 1}
`
