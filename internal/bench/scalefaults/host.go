package scalefaults

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/bench"
	"github.com/shoal-lb/shoal/internal/testhost"
)

// hostDownAfter is the ssh provider's host_down_after (its default).
const hostDownAfter = 15 * time.Second

// reportWindow is how long after the replacements the group's reports of
// the instances it could not place are counted: past one 60 s back-off.
const reportWindow = 75 * time.Second

// hostPhase is one host's death.
type hostPhase struct {
	Instances int     `json:"instances"` // on the host that dies: all of the group
	Room      int     `json:"room"`      // on the other two hosts
	Host      string  `json:"host"`
	PlaceS    float64 `json:"placed_seconds"`
	// From the kill: no instance of the host UP in HAProxy (as shoal's API
	// shows its checks), the host marked down, the replacements that fit
	// in service on the other hosts.
	OutOfRotationS *float64 `json:"out_of_rotation_seconds"`
	MarkedDownS    *float64 `json:"marked_down_seconds"`
	ReplacedS      *float64 `json:"replaced_seconds"`
	Replaced       int      `json:"replaced_in_service"`
	// Peak is each other host's most instances seen (GET /v1/hosts and the
	// group's instances by address, every poll) against its capacity.
	Peak     map[string]int `json:"peak_instances"`
	Capacity map[string]int `json:"capacity"`
	Over     int            `json:"most_over_capacity"`
	// What the group said of the instances it could not place, from the
	// kill to reportWindow after the replacements.
	Launches int      `json:"launched_events"`
	Reports  int      `json:"launch_failed_events"`
	Warnings int      `json:"failed_warnings"`
	Reasons  []string `json:"reports,omitempty"`
	Desired  int      `json:"desired_after"`
	Serving  int      `json:"in_service_after"`
}

type hostRun struct {
	Small hostPhase `json:"baseline"`
	Big   hostPhase `json:"measured"`
}

func measureHost(ctx context.Context, env *bench.Env, sbin, standin string, small, big, room int) (*hostRun, error) {
	labDir := filepath.Join(env.Work, "hosts")
	if err := os.Mkdir(labDir, 0o700); err != nil {
		return nil, err
	}
	lab, err := testhost.New(ctx, labDir, 4)
	if err != nil {
		return nil, fmt.Errorf("test hosts: %w", err)
	}
	defer lab.Close()
	// Placement packs by name among equals: the host that dies sorts
	// first of its phase's three, so that it takes the whole group.
	hosts := slices.Clone(lab.Hosts)
	slices.SortFunc(hosts, func(a, b *testhost.Host) int { return strings.Compare(a.Addr, b.Addr) })
	r := &hostRun{}
	if err := hostDeath(ctx, env, lab, sbin, standin, "host-baseline", hosts[0], hosts[2:], small, room, &r.Small); err != nil {
		return nil, fmt.Errorf("host of %d: %w", small, err)
	}
	if err := hostDeath(ctx, env, lab, sbin, standin, "host-measured", hosts[1], hosts[2:], big, room, &r.Big); err != nil {
		return nil, fmt.Errorf("host of %d: %w", big, err)
	}
	return r, nil
}

func hostDeath(ctx context.Context, env *bench.Env, lab *testhost.Lab, sbin, standin, name string, dies *testhost.Host, spares []*testhost.Host, n, room int, ph *hostPhase) error {
	ph.Instances, ph.Room, ph.Host = n, room, dies.Addr
	ph.Capacity = map[string]int{dies.Addr: n, spares[0].Addr: 50, spares[1].Addr: room - 50}
	ph.Peak = map[string]int{}
	port, err := env.FreePort()
	if err != nil {
		return err
	}
	cfg := hostConfig(port, filepath.Join(env.Work, "state-"+name), filepath.Join(env.Work, "remote-"+name), standin, lab, dies, spares, ph.Capacity, n)
	sh, err := env.StartShoalNamed(name, sbin, cfg)
	if err != nil {
		return err
	}
	sh.Proc.Grace = 2 * time.Minute
	defer env.Stop(sh.Proc)
	logPath := filepath.Join(env.Work, name+".log")
	if err := sh.WaitInService(ctx, "web", 0, time.Minute, bench.PollEvery); err != nil {
		return err
	}
	t0 := time.Now()
	if err := sh.API.Size(ctx, "web", n, 10*time.Minute); err != nil {
		return err
	}
	ph.PlaceS = time.Since(t0).Seconds()
	st, err := sh.API.Group(ctx, "web")
	if err != nil {
		return err
	}
	var doomed []string
	for _, in := range st.Instances {
		if hostOf(in.Addr) == dies.Addr {
			doomed = append(doomed, in.Name)
		}
	}
	if len(doomed) != n {
		return fmt.Errorf("%d of %d instances on %s before it dies; want all (pack placement)", len(doomed), n, dies.Addr)
	}
	env.Log.Info("host placed", "host", dies.Addr, "instances", n, "seconds", bench.Round2(ph.PlaceS))
	// Past 30 s in service each has served steadily: its loss is an
	// accident, replaced at once, not the start of a crash loop.
	if err := wait(ctx, 35*time.Second); err != nil {
		return err
	}

	last, err := lastEvent(ctx, sh)
	if err != nil {
		return err
	}
	offset := logSize(logPath)
	start := time.Now()
	// A power loss: everything in it dies, and nothing answers for it
	// (no RST): its checks time out.
	if err := dies.Kill(ctx); err != nil {
		return err
	}
	if err := dies.LinkDown(ctx); err != nil {
		return err
	}
	want := min(n, room)
	deadline := start.Add(4 * time.Minute)
	for ph.ReplacedS == nil || ph.MarkedDownS == nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d instances on %s: not all out of rotation, replaced (%d of %d) or the host marked down within 4 minutes: %s", n, dies.Addr, ph.Replaced, want, sh.LogTail(5))
		}
		if err := wait(ctx, 100*time.Millisecond); err != nil {
			return err
		}
		since := time.Since(start).Seconds()
		if hs, err := sh.API.Hosts(ctx); err == nil {
			for _, h := range hs.Hosts {
				if h.Name == dies.Addr && h.State == "down" && ph.MarkedDownS == nil {
					ph.MarkedDownS = bench.Num(since)
				}
				if h.Name != dies.Addr {
					ph.peak(h.Name, h.Instances)
				}
			}
		}
		st, err := sh.API.Group(ctx, "web")
		if err != nil {
			continue
		}
		// Replacements may take a dead instance's name: the host tells.
		serving, replaced := 0, 0
		on := map[string]int{}
		for _, in := range st.Instances {
			h := hostOf(in.Addr)
			on[h]++
			switch {
			case h == dies.Addr && in.Health.IsUp():
				serving++
			case h != dies.Addr && in.State == "in-service":
				replaced++
			}
		}
		for h, c := range on {
			if h != dies.Addr && h != "" { // "": not placed yet
				ph.peak(h, c)
			}
		}
		if ph.OutOfRotationS == nil && serving == 0 {
			ph.OutOfRotationS = bench.Num(since)
		}
		ph.Replaced = replaced
		if ph.ReplacedS == nil && serving == 0 && replaced >= want {
			ph.ReplacedS = bench.Num(since)
		}
	}
	env.Log.Info("host died", "host", dies.Addr, "instances", n, "out_of_rotation_s", bench.FmtNum(ph.OutOfRotationS),
		"marked_down_s", bench.FmtNum(ph.MarkedDownS), "replaced_s", bench.FmtNum(ph.ReplacedS))
	if n > room {
		// The group cannot place them all: what it says meanwhile.
		for end := time.Now().Add(reportWindow); time.Now().Before(end); {
			if err := wait(ctx, time.Second); err != nil {
				return err
			}
			if hs, err := sh.API.Hosts(ctx); err == nil {
				for _, h := range hs.Hosts {
					if h.Name != dies.Addr {
						ph.peak(h.Name, h.Instances)
					}
				}
			}
		}
	}
	evs, err := eventsAfter(ctx, sh, "web", last)
	if err != nil {
		return err
	}
	ph.Launches, ph.Reports, ph.Reasons = countEvents(evs)
	ph.Warnings = countLog(logPath, offset, `msg="instance failed"`, "group=web", "start failed")
	if st, err := sh.API.Group(ctx, "web"); err == nil {
		ph.Desired, ph.Serving = st.Desired, st.InService
	}
	for h, c := range ph.Peak {
		ph.Over = max(ph.Over, c-ph.Capacity[h])
	}
	env.Log.Info("after", "host", dies.Addr, "launched", ph.Launches, "launch_failed", ph.Reports, "warnings", ph.Warnings, "peaks", ph.Peak, "in_service", ph.Serving, "desired", ph.Desired)
	return nil
}

// peak keeps host's most instances seen.
func (ph *hostPhase) peak(host string, n int) {
	ph.Peak[host] = max(ph.Peak[host], n)
}

func hostOf(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return h
}

// hostConfig is one group of stand-ins, packed on the ssh provider's
// hosts: dies and the spares, with the capacities given.
func hostConfig(port int, stateDir, remoteDir, standin string, lab *testhost.Lab, dies *testhost.Host, spares []*testhost.Host, capacity map[string]int, maxSize int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `listen: 127.0.0.1:%d
state_dir: %s
haproxy:
  timeouts: {connect: 500ms, server: 5s}
metrics: {interval: 1s}
providers:
  - name: rack
    type: ssh
    host_down_after: %s
    connect_timeout: 15s
    remote_dir: %s
    hosts:
`, port, stateDir, hostDownAfter, remoteDir)
	for _, h := range append([]*testhost.Host{dies}, spares...) {
		fmt.Fprintf(&b, "      - {address: %q, user: %s, key_file: %q, known_hosts: %q, capacity: {instances: %d}}\n", h.Addr, lab.User, lab.KeyFile, lab.KnownHosts, capacity[h.Addr])
	}
	fmt.Fprintf(&b, `groups:
  - name: web
    min_size: 0
    max_size: %d
    provider: rack
    placement: {strategy: pack}
    cooldown: {up: 0s, down: 0s}
    drain_timeout: 2s
    health: {path: /healthz, interval: 500ms, fastinter: 500ms, downinter: 500ms, rise: 2, fall: 2, timeout: 500ms, grace: 60s}
    template:
      command: [%q, "{{.Host}}:{{.Port}}"]
      env: {GOMAXPROCS: "1"}
      stop_timeout: 2s
`, maxSize, standin)
	return b.String()
}

func (r *hostRun) figures() []bench.Figure {
	s, b := r.Small, r.Big
	base := fmt.Sprintf("a host of %d dying, same run", s.Instances)
	at := fmt.Sprintf(" (host of %d)", b.Instances)
	fs := []bench.Figure{
		{Name: "host dies → its instances out of HAProxy's rotation" + at, Unit: "s", Value: b.OutOfRotationS,
			Baseline: base, BaselineValue: s.OutOfRotationS, Ratio: bench.RatioOf(b.OutOfRotationS, s.OutOfRotationS),
			Goal: "≤ the baseline's + 1 s", Verdict: bench.Verdict(b.OutOfRotationS, func(v float64) bool { return s.OutOfRotationS != nil && v <= *s.OutOfRotationS+1 }),
			Note: "no instance of the host UP in HAProxy, as shoal's API shows its checks (polled every 100 ms); checks every 500 ms, fall 2, timeout 500 ms; the host's link is down, so each check times out"},
		{Name: "host dies → marked down" + at, Unit: "s", Value: b.MarkedDownS, Baseline: base, BaselineValue: s.MarkedDownS,
			Note: fmt.Sprintf("host_down_after %v: its SSH connection and every instance's checks failing as long", hostDownAfter)},
		{Name: "host dies → the replacements that fit in service on the other hosts" + at, Unit: "s", Value: b.ReplacedS,
			Baseline: base, BaselineValue: s.ReplacedS, Ratio: bench.RatioOf(b.ReplacedS, s.ReplacedS),
			Note: fmt.Sprintf("%d of %d (room for %d on the other hosts); baseline %d of %d", b.Replaced, b.Instances, b.Room, s.Replaced, s.Instances)},
		{Name: "most instances over a host's capacity" + at, Unit: "instances", Value: bench.Num(float64(b.Over)),
			Baseline: base, BaselineValue: bench.Num(float64(s.Over)),
			Goal: "≤ 0", Verdict: bench.Verdict(bench.Num(float64(b.Over)), func(v float64) bool { return v <= 0 && s.Over <= 0 }),
			Note: fmt.Sprintf("peaks %v against capacities %v (GET /v1/hosts and the group's instances by address, every poll)", b.Peak, b.Capacity)},
	}
	if b.Instances > b.Room {
		short := b.Instances - b.Room
		fs = append(fs, bench.Figure{Name: fmt.Sprintf("reports of the %d instances no host has room for", short) + at, Unit: "events", Value: bench.Num(float64(b.Reports)),
			Goal: "≥ 1, once a back-off (not once an instance)", Verdict: bench.Verdict(bench.Num(float64(b.Reports)), func(v float64) bool {
				return v >= 1 && v < float64(short) && len(b.Reasons) > 0 && strings.Contains(b.Reasons[0], "capacity")
			}),
			Note: fmt.Sprintf("instance.launch_failed events from the kill to %v after the replacements; \"instance failed\" warnings: %d; launches %d; the group at %d in service of %d desired",
				reportWindow, b.Warnings, b.Launches, b.Serving, b.Desired)})
	}
	return fs
}

func (r *hostRun) markdown() string {
	var b strings.Builder
	b.WriteString("## An SSH host dies\n\n| host of | placed in | out of rotation | marked down | replaced | replaced in service | peaks (capacity) | launch_failed | warnings | launched |\n|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|\n")
	for _, p := range []hostPhase{r.Small, r.Big} {
		var peaks []string
		for _, h := range slices.Sorted(maps.Keys(p.Peak)) {
			peaks = append(peaks, fmt.Sprintf("%s %d (%d)", h, p.Peak[h], p.Capacity[h]))
		}
		fmt.Fprintf(&b, "| %d | %.1f s | %s s | %s s | %s s | %d | %s | %d | %d | %d |\n", p.Instances, p.PlaceS, bench.FmtNum(p.OutOfRotationS), bench.FmtNum(p.MarkedDownS),
			bench.FmtNum(p.ReplacedS), p.Replaced, strings.Join(peaks, ", "), p.Reports, p.Warnings, p.Launches)
	}
	if len(r.Big.Reasons) > 0 {
		b.WriteString("\nWhat the group reported of the instances it could not place:\n\n")
		for _, s := range r.Big.Reasons {
			fmt.Fprintf(&b, "- %s\n", s)
		}
	}
	b.WriteString("\n")
	return b.String()
}
