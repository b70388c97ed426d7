package hosts

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/loadgen"
	"github.com/shoal-lb/shoal/internal/testhost"

	"github.com/shoal-lb/shoal/internal/bench"
)

// hosts measures instances on other servers over SSH (the ssh provider) on
// test hosts: network namespaces with a real sshd each, reached over a veth
// (internal/testhost; needs root). It times a burst from 2 to -burst
// instances spread over the hosts until all are in service, under a light
// open-loop GET load whose failures it counts; samples shoal's own CPU
// (utime+stime from /proc) over -seconds while it watches them at a 1 s
// interval; then kills a host (its sshd and instances, SIGKILL) and times
// its instances' leaving rotation in HAProxy (as shoal's API reports
// HAProxy's checks) and their replacements' being in service on the other
// hosts, with the default host_down_after of 15 s. The baselines, measured
// in the same run, are the same burst and the same CPU sample with the
// local provider: processes on this machine.
var Command = &bench.Command{
	Name:    "hosts",
	Summary: "instances on 3 SSH hosts: a 2→30 burst, a host's failure, shoal's CPU; vs the local provider",
	Run:     runHosts,
}

type hostsPhase struct {
	Provider  string   `json:"provider"`
	BurstS    *float64 `json:"burst_s"` // scale request to all in service
	Requests  int64    `json:"requests"`
	Failed    int64    `json:"failed"`
	Failures  []string `json:"failures,omitempty"`
	CPU       *float64 `json:"cpu_percent_of_one_core"`
	RSSKiB    *float64 `json:"rss_kib"`
	PerHost   []int    `json:"instances_per_host,omitempty"`
	CPUSample float64  `json:"cpu_sample_s"`
}

type hostsFailure struct {
	Host          string   `json:"host"`
	Instances     int      `json:"instances"` // on it when killed
	OutOfRotation *float64 `json:"out_of_rotation_s"`
	Replaced      *float64 `json:"replaced_s"`
	MarkedDown    *float64 `json:"marked_down_s"` // the host's state "down" in GET /v1/hosts
	// Reasons are the failures recorded for its instances: what replaced them.
	Reasons  []string `json:"reasons,omitempty"`
	Requests int64    `json:"requests"`
	Failed   int64    `json:"failed"`
	Failures []string `json:"failures,omitempty"`
	// CutShort counts the responses the host's instances cut short (their
	// servers' srv_abrt, sampled until HAProxy deleted them): the requests
	// in flight there that no retry could save. CutShortElsewhere is the
	// same count of every other instance, which must stay 0.
	CutShort          int64 `json:"cut_short_there"`
	CutShortElsewhere int64 `json:"cut_short_elsewhere"`
}

type hostsDetails struct {
	SSH     hostsPhase   `json:"ssh"`
	Local   hostsPhase   `json:"local"`
	Failure hostsFailure `json:"host_failure"`
}

func runHosts(ctx context.Context, env *bench.Env, fs *flag.FlagSet, args []string) (*bench.Report, error) {
	nhosts := fs.Int("hosts", 3, "test hosts (network namespaces with an sshd)")
	burst := fs.Int("burst", 30, "instances to scale to from 2")
	sample := fs.Duration("seconds", 60*time.Second, "how long to sample shoal's CPU")
	settle := fs.Duration("settle", 10*time.Second, "wait after the burst before sampling CPU")
	rate := fs.Float64("rate", 50, "light load during the burst and the failure, GET/s")
	downAfter := fs.Duration("host-down-after", 15*time.Second, "the ssh provider's host_down_after")
	timeout := fs.Duration("timeout", 90*time.Second, "longest a burst or a replacement may take")
	var bins bench.BinFlags
	bins.Register(fs)
	if err := bench.Parse(fs, args); err != nil {
		return nil, err
	}
	if *nhosts < 2 || *burst < 3 || *burst > 100 || *sample < time.Second || *settle < 0 || *rate <= 0 || *downAfter < time.Second {
		return nil, bench.BadUsage("-hosts >= 2, -burst 3..100, -seconds >= 1s, -settle >= 0, -rate > 0 and -host-down-after >= 1s please")
	}
	backend, sbin, err := bins.Resolve()
	if err != nil {
		return nil, err
	}
	lab, err := bench.TestHosts(ctx, env, *nhosts)
	if err != nil {
		return nil, err
	}
	defer lab.Close()

	rep := &bench.Report{Date: time.Now(), Machine: bench.NewMachine()}
	det := &hostsDetails{SSH: hostsPhase{Provider: "ssh"}, Local: hostsPhase{Provider: "local"}}
	rep.Details = det

	// The baseline first: the group on the local provider.
	local, err := env.StartShoalOn(sbin, func(port int) string {
		return hostsConfig(port, filepath.Join(env.Work, "state-local"), backend, *burst, "")
	})
	if err != nil {
		return nil, err
	}
	if err := hostsBurst(ctx, env, local, &det.Local, *burst, *rate, *timeout); err != nil {
		return nil, fmt.Errorf("local burst: %w", err)
	}
	if err := hostsCPU(ctx, env, local, &det.Local, *settle, *sample); err != nil {
		return nil, err
	}
	env.Stop(local.Proc)

	// Then the same on the hosts, and a host's failure.
	sh, err := env.StartShoalOn(sbin, func(port int) string {
		return hostsConfig(port, filepath.Join(env.Work, "state-ssh"), backend, *burst, bench.SSHProviderYAML(lab, filepath.Join(env.Work, "remote"), *downAfter))
	})
	if err != nil {
		return nil, err
	}
	if err := hostsBurst(ctx, env, sh, &det.SSH, *burst, *rate, *timeout); err != nil {
		return nil, fmt.Errorf("ssh burst: %w", err)
	}
	for _, h := range lab.Hosts {
		det.SSH.PerHost = append(det.SSH.PerHost, countOn(ctx, sh, h.Addr))
	}
	if err := hostsCPU(ctx, env, sh, &det.SSH, *settle, *sample); err != nil {
		return nil, err
	}
	if err := hostFailure(ctx, env, sh, lab.Hosts[len(lab.Hosts)-1], &det.Failure, *burst, *rate, *timeout); err != nil {
		return nil, fmt.Errorf("host failure: %w", err)
	}
	env.Stop(sh.Proc)

	s, l, f := det.SSH, det.Local, det.Failure
	rep.Figures = []bench.Figure{{
		Name: fmt.Sprintf("burst 2 → %d instances on %d SSH hosts, until all in service", *burst, *nhosts), Unit: "s", Value: s.BurstS,
		Baseline: "local provider", BaselineValue: l.BurstS, Ratio: bench.RatioOf(s.BurstS, l.BurstS),
		Goal: "≤ 15 s", Verdict: bench.Verdict(s.BurstS, func(v float64) bool { return v <= 15 }),
		Note: fmt.Sprintf("one scale job; instances per host after it: %v", s.PerHost),
	}, {
		Name: "failed requests during the SSH burst", Value: bench.Num(float64(s.Failed)),
		Baseline: "local provider", BaselineValue: bench.Num(float64(l.Failed)),
		Goal: "0", Verdict: bench.Verdict(bench.Num(float64(s.Failed)), func(v float64) bool { return v == 0 }),
		Note: fmt.Sprintf("%d and %d requests at %.0f GET/s", s.Requests, l.Requests, *rate),
	}, {
		Name: "host killed → its instances out of rotation in HAProxy", Unit: "s", Value: f.OutOfRotation,
		Goal: "< 1 s", Verdict: bench.Verdict(f.OutOfRotation, func(v float64) bool { return v < 1 }),
		Note: fmt.Sprintf("%d instances on %s, polled every 50 ms; checks every 500 ms (fastinter, downinter too), fall 2, timeout 500 ms, and passive layer-4 checks (a refused connection takes its server out)", f.Instances, f.Host),
	}, {
		Name: "host killed → replacements in service on the other hosts", Unit: "s", Value: f.Replaced,
		Goal: "< 20 s", Verdict: bench.Verdict(f.Replaced, func(v float64) bool { return v < 20 }),
		Note: "an instance is replaced when it has been DOWN in HAProxy for the group's replace_after (10 s) or its host is marked down, whichever comes first, then started on another host; for context, the seed's MHA failover took < 20 s and an EC2 Auto Scaling replacement about 20 minutes",
	}, {
		Name: "host killed → marked down", Unit: "s", Value: f.MarkedDown,
		Note: fmt.Sprintf("its SSH connection and its instances' checks failing for host_down_after (%s); GET /v1/hosts", *downAfter),
	}, {
		Name: "failed requests across the host's death", Value: bench.Num(float64(f.Failed)),
		Goal: "≤ those in flight there (cut short)", Verdict: bench.Verdict(bench.Num(float64(f.Failed)), func(v float64) bool { return v <= float64(f.CutShort) && f.CutShortElsewhere == 0 }),
		Note: fmt.Sprintf("%d requests; the host's instances cut %d responses short, the others %d (HAProxy's per-server srv_abrt, server_aborts in the API, sampled every 50 ms until their servers were deleted)", f.Requests, f.CutShort, f.CutShortElsewhere),
	}, {
		Name: fmt.Sprintf("shoal's CPU watching %d remote instances at a 1 s interval", *burst), Unit: "% of a core", Value: s.CPU,
		Baseline: fmt.Sprintf("%d local instances", *burst), BaselineValue: l.CPU, Ratio: bench.RatioOf(s.CPU, l.CPU),
		Goal: "< 2 %", Verdict: bench.Verdict(s.CPU, func(v float64) bool { return v < 2 }),
		Note: fmt.Sprintf("utime+stime of the shoal process over %s, no requests; RSS %s KiB (local: %s KiB)", *sample, bench.FmtNum(s.RSSKiB), bench.FmtNum(l.RSSKiB)),
	}}
	rep.Settings = []bench.Setting{
		{Name: "hosts", Value: fmt.Sprintf("%d network namespaces on this machine, each with Debian's sshd on its own veth address; HAProxy and shoal in the root namespace", *nhosts)},
		{Name: "group", Value: fmt.Sprintf("demo-backend (GOMAXPROCS=1) listening on {{.Host}}:{{.Port}}, max_size %d, placement spread; health every 500 ms, rise 2, fall 2, passive layer 4 (error_limit 1, mark-down); HAProxy timeouts connect 500 ms, server 5 s", *burst)},
		{Name: "load", Value: fmt.Sprintf("open-loop GET / at %.0f/s over up to 8 keep-alive connections during the bursts and the failure", *rate)},
		{Name: "metrics", Value: "interval 1 s"},
	}
	var md strings.Builder
	fmt.Fprintf(&md, "Failures sampled: SSH burst %v, local burst %v, host failure %v.\n\nWhat replaced the dead host's instances (their recorded failures):\n\n", s.Failures, l.Failures, f.Failures)
	for _, r := range f.Reasons {
		fmt.Fprintf(&md, "- %s\n", r)
	}
	rep.Markdown = md.String()
	return rep, nil
}

// hostsBurst scales sh's group from 2 to n under light load and times the
// scale request until all n are in service.
func hostsBurst(ctx context.Context, env *bench.Env, sh *bench.Shoal, ph *hostsPhase, n int, rate float64, timeout time.Duration) error {
	if err := sh.WaitInService(ctx, "web", 2, timeout, bench.PollEvery); err != nil {
		return err
	}
	stop := lightLoad(ctx, sh.URL("/"), rate)
	start := time.Now()
	if _, err := sh.API.Scale(ctx, "web", api.ScaleRequest{Size: &n, Source: "shoal-bench"}); err != nil {
		stop()
		return err
	}
	err := sh.WaitInService(ctx, "web", n, timeout, 50*time.Millisecond)
	took := time.Since(start).Seconds()
	res := stop()
	if err != nil {
		return err
	}
	ph.BurstS, ph.Requests, ph.Failed, ph.Failures = bench.Num(took), res.Sent, res.Errors, res.FailureSamples
	env.Log.Info("burst", "provider", ph.Provider, "instances", n, "seconds", bench.Round2(took), "requests", res.Sent, "failed", res.Errors)
	return nil
}

// hostsCPU samples shoal's own CPU with the group idle.
func hostsCPU(ctx context.Context, env *bench.Env, sh *bench.Shoal, ph *hostsPhase, settle, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(settle):
	}
	cpu, rss, err := bench.ProcessCPU(ctx, sh.Proc.Pid(), d)
	if err != nil {
		return fmt.Errorf("sample shoal's CPU: %w", err)
	}
	ph.CPU, ph.RSSKiB, ph.CPUSample = bench.Num(cpu), bench.Num(rss), d.Seconds()
	env.Log.Info("shoal CPU", "provider", ph.Provider, "cpu_percent", bench.Round2(cpu), "rss_kib", rss)
	return nil
}

// hostFailure kills h and times its instances' leaving rotation and their
// replacement elsewhere, polling shoal's API every 50 ms, and counts the
// responses the instances cut short (see abortCount).
func hostFailure(ctx context.Context, env *bench.Env, sh *bench.Shoal, h *testhost.Host, f *hostsFailure, n int, rate float64, timeout time.Duration) error {
	st, err := sh.API.Group(ctx, "web")
	if err != nil {
		return err
	}
	var doomed []string
	aborts := newAbortCount()
	for _, in := range st.Instances {
		if bench.HostOf(in.Addr) == h.Addr {
			doomed = append(doomed, in.Name)
		}
		aborts.see(in.Name, in.Health != "-", in.ServerAborts)
	}
	aborts.begin()
	f.Host, f.Instances = h.Addr, len(doomed)
	if len(doomed) == 0 {
		return fmt.Errorf("no instance on %s to lose", h.Addr)
	}
	stop := lightLoad(ctx, sh.URL("/"), rate)
	defer stop()
	start := time.Now()
	if err := h.Kill(ctx); err != nil {
		return err
	}
	deadline := start.Add(timeout)
	for f.Replaced == nil || f.MarkedDown == nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d instances on %s not replaced, or the host not marked down, within %v: %s", len(doomed), h.Addr, timeout, sh.LogTail(5))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if f.MarkedDown == nil {
			if hs, err := sh.API.Hosts(ctx); err == nil {
				for _, s := range hs.Hosts {
					if s.Name == h.Addr && s.State == "down" {
						f.MarkedDown = bench.Num(time.Since(start).Seconds())
					}
				}
			}
		}
		st, err := sh.API.Group(ctx, "web")
		if err != nil {
			continue
		}
		serving, there := 0, 0
		for _, in := range st.Instances {
			aborts.see(in.Name, in.Health != "-", in.ServerAborts)
			if slices.Contains(doomed, in.Name) && in.Health.IsUp() {
				serving++
			}
			if bench.HostOf(in.Addr) == h.Addr {
				there++
			}
		}
		if f.OutOfRotation == nil && serving == 0 {
			f.OutOfRotation = bench.Num(time.Since(start).Seconds())
		}
		if f.Replaced == nil && there == 0 && st.InService == n && len(st.Instances) == n {
			f.Replaced = bench.Num(time.Since(start).Seconds())
			for _, fl := range st.LastFailures {
				if slices.Contains(doomed, fl.Instance) && !slices.Contains(f.Reasons, fl.Reason) {
					f.Reasons = append(f.Reasons, fl.Reason)
				}
			}
		}
	}
	res := stop()
	if st, err := sh.API.Group(ctx, "web"); err == nil {
		for _, in := range st.Instances { // the servers that remain, after the load
			aborts.see(in.Name, in.Health != "-", in.ServerAborts)
		}
	}
	f.Requests, f.Failed, f.Failures = res.Sent, res.Errors, res.FailureSamples
	f.CutShort, f.CutShortElsewhere = aborts.since(doomed)
	env.Log.Info("host killed", "host", h.Addr, "instances", len(doomed), "out_of_rotation_s", bench.FmtNum(f.OutOfRotation), "replaced_s", bench.FmtNum(f.Replaced), "marked_down_s", bench.FmtNum(f.MarkedDown),
		"failed", res.Errors, "cut_short_there", f.CutShort, "cut_short_elsewhere", f.CutShortElsewhere)
	return nil
}

// abortCount follows the instances' server_aborts (HAProxy's srv_abrt:
// responses a server cut short after they had begun, which no retry can
// save) across a host's failure. A dead instance's server is deleted once
// it is out of rotation, and its count with it: the last one seen before
// then is what it cut short. A failed request beyond those is one the
// failover lost.
type abortCount struct {
	base, last map[string]int64
}

func newAbortCount() *abortCount {
	return &abortCount{base: map[string]int64{}, last: map[string]int64{}}
}

// see takes an instance's count while HAProxy has its server (status
// shows its health "-" once it has none).
func (a *abortCount) see(name string, inHAProxy bool, n int64) {
	if inHAProxy {
		a.last[name] = n
	}
}

// begin makes the counts seen so far those before the failure.
func (a *abortCount) begin() { maps.Copy(a.base, a.last) }

// since returns the responses cut short since the start by the named
// instances and by all others.
func (a *abortCount) since(names []string) (there, elsewhere int64) {
	for name, n := range a.last {
		if slices.Contains(names, name) {
			there += n - a.base[name]
		} else {
			elsewhere += n - a.base[name]
		}
	}
	return there, elsewhere
}

// lightLoad sends GETs at rate until the returned stop is called (again:
// the same result).
func lightLoad(ctx context.Context, url string, rate float64) (stop func() loadgen.OpenResult) {
	load := bench.StartOpenLoad(ctx, loadgen.OpenOptions{URL: url, Timeout: 10 * time.Second, MaxConns: 8,
		Schedule: []loadgen.Segment{{Rate: rate, Duration: time.Hour}}})
	return func() loadgen.OpenResult {
		res, _ := load.Stop()
		return res
	}
}

// countOn counts the group's instances whose address is on host.
func countOn(ctx context.Context, sh *bench.Shoal, host string) int {
	st, err := sh.API.Group(ctx, "web")
	if err != nil {
		return -1
	}
	n := 0
	for _, in := range st.Instances {
		if bench.HostOf(in.Addr) == host {
			n++
		}
	}
	return n
}

// hostsConfig is the group of demo-backends on the provider of providers
// (the local one when empty), spread over the hosts.
func hostsConfig(port int, stateDir, backend string, maxSize int, providers string) string {
	group := ""
	if providers != "" {
		group = "provider: rack\nplacement: {strategy: spread}\n"
	}
	return bench.HostsConfig(port, stateDir, backend, 2, maxSize, providers, group)
}
