package ssh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/testbin"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/proc"
	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/testhost"
)

func TestMain(m *testing.M) { testbin.Main(m) }

// Timing of the tests' providers: short, so host failures show in
// seconds, but with room for a loaded machine (a poll that takes longer
// than the connect timeout drops the connection).
const (
	testInterval    = 200 * time.Millisecond
	testDownAfter   = 3 * time.Second
	testConnTimeout = 2 * time.Second
)

func newLab(t *testing.T, n int) *testhost.Lab {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := testhost.New(ctx, t.TempDir(), n)
	if errors.Is(err, testhost.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// hostConfig is the config of lab host i.
func hostConfig(l *testhost.Lab, i int) Host {
	return Host{Address: l.Hosts[i].Addr, User: l.User, KeyFile: l.KeyFile, KnownHosts: l.KnownHosts, Ports: PortRange{Min: 20000, Max: 20099}}
}

// labConfig is a provider over all of l's hosts, its remote_dir a
// temporary directory (the hosts share this machine's file system).
func labConfig(t *testing.T, l *testhost.Lab) Config {
	cfg := Config{HostDownAfter: testDownAfter, ConnectTimeout: testConnTimeout, RemoteDir: t.TempDir()}
	for i := range l.Hosts {
		cfg.Hosts = append(cfg.Hosts, hostConfig(l, i))
	}
	return cfg
}

// runProvider makes a Provider and runs it until the test ends; its
// instances are stopped then too, by a sweep with nothing kept.
func runProvider(t *testing.T, cfg Config, opts Options) *Provider {
	t.Helper()
	p, stop := startProvider(t, cfg, opts)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		p.StopStrays(ctx, nil)
		stop()
	})
	return p
}

// startProvider makes a Provider and runs it until stop (which the test
// must call), leaving its instances running: a shoal that goes away.
func startProvider(t *testing.T, cfg Config, opts Options) (p *Provider, stop func()) {
	t.Helper()
	if opts.Interval == 0 {
		opts.Interval = testInterval
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	p, err := New("rack", cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx)
	}()
	return p, func() {
		cancel()
		<-done
	}
}

// testLog writes a provider's log to the test's.
type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func demoTemplate(t *testing.T) config.Template {
	t.Helper()
	tmpl, err := config.NewTemplate([]string{testbin.DemoBackend(t), "--listen", "{{.Host}}:{{.Port}}", "--name", "{{.Name}}"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.Dir, tmpl.StopTimeout, tmpl.CPUs = t.TempDir(), 2*time.Second, 1
	return tmpl
}

func spec(group string, i int, tmpl config.Template) provider.Spec {
	return provider.Spec{Group: group, Name: fmt.Sprintf("%s-%03d", group, i), Index: i, Template: tmpl, Placement: config.Placement{Strategy: config.PlaceSpread}}
}

func start(t *testing.T, p *Provider, s provider.Spec) provider.Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	in, err := p.Start(ctx, s)
	if err != nil {
		t.Fatalf("start %s: %v", s.Name, err)
	}
	return in
}

// get fetches http://addr/ and returns the X-Instance header; hosts share
// this machine's pid space but not its network, so this reaches the host.
func get(addr string) (string, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("status %d", resp.StatusCode)
	}
	return resp.Header.Get("X-Instance"), nil
}

// serving waits until the instance answers at its address.
func serving(t *testing.T, in provider.Instance) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		name, err := get(in.Record().Addr)
		if err == nil {
			if name != in.Record().Name {
				t.Fatalf("%s answers as %q", in.Record().Addr, name)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance %s does not serve at %s: %v", in.Record().Name, in.Record().Addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// running reports whether the recorded process runs (hosts share this
// machine's pid space).
func running(rec provider.Record) bool {
	d, err := decode(rec.Data)
	if err != nil {
		return false
	}
	got, err := proc.StartTicks(d.PID)
	return err == nil && got == d.PIDStart && !zombie(d.PID)
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	st, err := proc.ParseStat(b)
	return err != nil || st.Zombie
}

func waitDone(t *testing.T, in provider.Instance, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-in.Done():
		return time.Since(start)
	case <-time.After(within):
		t.Fatalf("instance %s not done after %s", in.Record().Name, within)
		return 0
	}
}

func hostStatus(p *Provider, name string) provider.HostStatus {
	for _, h := range p.Hosts() {
		if h.Name == name {
			return h
		}
	}
	return provider.HostStatus{}
}

// TestStartServeAdoptStop: instances started on two hosts serve HTTP at
// their address from the root namespace, with usage sampled; a new
// Provider on the same state directory (a restarted shoal) adopts them, one
// on another state directory sees none of them as its own; Stop ends them.
func TestStartServeAdoptStop(t *testing.T) {
	t.Parallel() // its own lab (namespaces, sshd, /30s), owner, state and remote dirs
	l := newLab(t, 2)
	state := t.TempDir()
	p1 := runProvider(t, labConfig(t, l), Options{StateDir: state})
	tmpl := demoTemplate(t)
	a := start(t, p1, spec("web", 1, tmpl))
	b := start(t, p1, spec("web", 2, tmpl))
	if a.Record().Host == b.Record().Host {
		t.Errorf("spread put both on %s", a.Record().Host)
	}
	for _, in := range []provider.Instance{a, b} {
		serving(t, in)
		rec := in.Record()
		d, _ := decode(rec.Data)
		if rec.ID != fmt.Sprintf("%s/%d-%d", rec.Host, d.PID, d.PIDStart) || rec.Addr != net.JoinHostPort(rec.Host, strconv.Itoa(d.Port)) || in.PID() != d.PID {
			t.Errorf("record %+v, data %+v", rec, d)
		}
		if !strings.HasPrefix(in.(provider.Placed).Placement(), "spread: 0 of web's instances on "+rec.Host) {
			t.Errorf("placement %q", in.(provider.Placed).Placement())
		}
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		u, ok := a.(provider.Sampler).Usage()
		if ok && u.RSS > 0 && u.CPUSeconds >= 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no usage sample: %+v %v", u, ok)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A restart: a new Provider on the same state directory.
	p2 := runProvider(t, labConfig(t, l), Options{StateDir: state})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a2, err := p2.Adopt(ctx, a.Record(), tmpl)
	if err != nil {
		t.Fatalf("adopt: %v", err)
	}
	if a2.PID() != a.PID() {
		t.Errorf("adopted pid %d, want %d", a2.PID(), a.PID())
	}
	// Another shoal's: none of them is its own.
	p3 := runProvider(t, labConfig(t, l), Options{StateDir: t.TempDir()})
	if _, err := p3.Adopt(ctx, b.Record(), tmpl); !errors.Is(err, provider.ErrGone) {
		t.Errorf("another owner adopted: %v", err)
	}
	if stopped, err := p3.StopStrays(ctx, nil); err != nil || len(stopped) != 0 {
		t.Errorf("another owner swept %v, %v", stopped, err)
	}
	// A record naming a pid that is not (or no longer) the instance.
	bad := b.Record()
	d, _ := decode(bad.Data)
	d.PIDStart++
	bad = d.record(bad.Name)
	if _, err := p2.Adopt(ctx, bad, tmpl); !errors.Is(err, provider.ErrGone) {
		t.Errorf("adopt with a wrong start time: %v", err)
	}

	if err := a2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	waitDone(t, a2, time.Second)
	if running(a.Record()) {
		t.Error("stopped instance still runs")
	}
	if _, err := get(a.Record().Addr); err == nil {
		t.Error("stopped instance still serves")
	}
	// p1 sees its instance exit by polling.
	waitDone(t, a, 2*time.Second)
	if r := a.ExitReason(); r != "exited (on host "+a.Record().Host+")" {
		t.Errorf("exit reason %q", r)
	}
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if running(b.Record()) {
		t.Error("stopped instance still runs")
	}
}

// TestLaunchedDuringPollNotExited: an instance launched while a poll of
// its host was under way (the host listed /proc before its process was
// there) is not taken for an exit; one verified before the poll began
// and missing from it is. Taken for an exit, the instance ran on beside
// its replacement: an HA test under make test's load found web-002 twice
// on its hosts, the poll's answer applied 79 ms after the launch.
func TestLaunchedDuringPollNotExited(t *testing.T) {
	t.Parallel() // its own lab
	l := newLab(t, 1)
	p := runProvider(t, labConfig(t, l), Options{StateDir: t.TempDir(), Interval: time.Hour})
	tmpl := demoTemplate(t)
	began := time.Now()
	in := start(t, p, spec("web", 1, tmpl))
	p.mu.Lock()
	h := p.hosts[in.Record().Host]
	p.mu.Unlock()
	p.polled(h, began, nil) // listed before the launch: nothing of it
	select {
	case <-in.Done():
		t.Fatalf("launched during the poll: %s", in.ExitReason())
	default:
	}
	p.polled(h, time.Now(), nil) // begun after it, and it is missing
	select {
	case <-in.Done():
	default:
		t.Fatal("a poll begun after the launch did not find the instance gone")
	}
}

// TestStopStrays: after a restart, what is neither kept nor adopted is
// stopped; another owner's instance is untouched.
func TestStopStrays(t *testing.T) {
	t.Parallel() // its own lab (namespaces, sshd, /30s), owner, state and remote dirs
	l := newLab(t, 2)
	state := t.TempDir()
	p1 := runProvider(t, labConfig(t, l), Options{StateDir: state})
	tmpl := demoTemplate(t)
	a := start(t, p1, spec("web", 1, tmpl))
	b := start(t, p1, spec("web", 2, tmpl))
	other := runProvider(t, labConfig(t, l), Options{StateDir: t.TempDir()})
	c := start(t, other, spec("web", 3, tmpl))

	p2 := runProvider(t, labConfig(t, l), Options{StateDir: state})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stopped, err := p2.StopStrays(ctx, []provider.Record{a.Record()})
	if err != nil {
		t.Fatal(err)
	}
	if len(stopped) != 1 || stopped[0].ID != b.Record().ID || stopped[0].Name != "web-002" {
		t.Fatalf("stopped %+v, want %s", stopped, b.Record().ID)
	}
	if running(b.Record()) {
		t.Error("stray still runs")
	}
	if !running(a.Record()) || !running(c.Record()) {
		t.Error("kept instance, or another owner's, stopped")
	}
}

// TestArgvQuoting: argv and env elements full of shell syntax arrive
// verbatim, in the instance and in its pre_start hook.
func TestArgvQuoting(t *testing.T) {
	t.Parallel() // its own lab (namespaces, sshd, /30s), owner, state and remote dirs
	l := newLab(t, 1)
	p := runProvider(t, labConfig(t, l), Options{StateDir: t.TempDir()})
	dir := t.TempDir()
	evil := `"$(touch pwned)'x; rm -rf nothing` + "\n`id` $HOME *"
	tmpl, err := config.NewTemplate(
		[]string{"sh", "-c", `printf %s "$1" > arg; printf %s "$EVIL" > env; exec sleep 60`, "sh", evil},
		map[string]string{"EVIL": evil})
	if err != nil {
		t.Fatal(err)
	}
	tmpl.Dir, tmpl.StopTimeout = dir, time.Second
	tmpl.PreStart = &config.Hook{Command: []string{"sh", "-c", `printf %s "$1" > hookarg`, "sh", evil}, Timeout: 5 * time.Second}
	tmpl.PreStop = &config.Hook{Command: []string{"sh", "-c", `printf %s "$1:$SHOAL_HOOK" > prestop`, "sh", "{{.Name}}"}, Timeout: 5 * time.Second}
	in := start(t, p, spec("q", 1, tmpl))
	deadline := time.Now().Add(5 * time.Second)
	for _, f := range []string{"hookarg", "arg", "env"} {
		for {
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err == nil && string(b) == evil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %q, %v; want %q", f, b, err, evil)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
		t.Error("a $() in an argument ran")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Its output and the hook's notes are in its log, read over SSH.
	var log strings.Builder
	if err := p.Logs(ctx, in.Record(), provider.LogOptions{}, &log); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "shoal: pre_start: exit status 0") {
		t.Errorf("log %q lacks the hook's note", log.String())
	}
	if err := in.PreStop(ctx); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "prestop")); string(b) != "q-001:pre_stop" {
		t.Errorf("pre_stop wrote %q, %v", b, err)
	}
	if err := in.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// A hook that fails, or overruns its timeout, fails the start.
	for _, c := range []struct {
		hook []string
		want string
	}{
		{[]string{"false"}, "pre_start on host " + l.Hosts[0].Addr + ": exit status 1"},
		{[]string{"sleep", "10"}, "pre_start on host " + l.Hosts[0].Addr + ": timed out after 1s; killed"},
	} {
		bad := tmpl
		bad.PreStart = &config.Hook{Command: c.hook, Timeout: time.Second}
		if _, err := p.Start(ctx, spec("q", 2, bad)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("start with pre_start %q: %v, want %q", c.hook, err, c.want)
		}
	}
}

// TestPlacement: spread over three hosts, pack, labels, and the error when
// no host can take an instance, with the counts Hosts reports.
func TestPlacement(t *testing.T) {
	t.Parallel() // its own lab (namespaces, sshd, /30s), owner, state and remote dirs
	l := newLab(t, 3)
	cfg := labConfig(t, l)
	// In the order of their names, as placement breaks ties.
	slices.SortFunc(cfg.Hosts, func(a, b Host) int { return strings.Compare(a.Address, b.Address) })
	for i := range cfg.Hosts {
		cfg.Hosts[i].Capacity.Instances = 2
		cfg.Hosts[i].Labels = map[string]string{"zone": []string{"a", "b", "b"}[i]}
	}
	p := runProvider(t, cfg, Options{StateDir: t.TempDir()})
	tmpl := demoTemplate(t)
	names := func() []string {
		var out []string
		for _, h := range p.Hosts() {
			out = append(out, h.Name)
		}
		return out
	}()
	var on []string
	for i := range 3 {
		on = append(on, start(t, p, spec("web", i+1, tmpl)).Record().Host)
	}
	if slices.Sort(on); !slices.Equal(on, names) {
		t.Errorf("spread placed on %v, want one on each of %v", on, names)
	}
	pack := spec("batch", 1, tmpl)
	pack.Placement.Strategy = config.PlacePack
	first := start(t, p, pack)
	if first.Record().Host != names[0] {
		t.Errorf("pack on %s, want %s (all equal: by name)", first.Record().Host, names[0])
	}
	pack.Name = "batch-002"
	second := start(t, p, pack) // names[0] is full: the next most used
	if second.Record().Host != names[1] || !strings.HasPrefix(second.(provider.Placed).Placement(), "pack: "+names[1]) {
		t.Errorf("pack on %s (%s), want %s", second.Record().Host, second.(provider.Placed).Placement(), names[1])
	}
	for i, h := range p.Hosts() {
		if want := []int{2, 2, 1}[i]; h.Instances != want || h.CapacityInstances != 2 || h.State != provider.HostUp || h.Cores != float64(want) {
			t.Errorf("host %s: %+v, want %d instances", h.Name, h, want)
		}
	}
	zoned := spec("zoned", 1, tmpl)
	zoned.Placement.Labels = map[string]string{"zone": "b"}
	if in := start(t, p, zoned); in.Record().Host != names[2] {
		t.Errorf("label zone=b placed on %s, want %s", in.Record().Host, names[2])
	}
	zoned.Name = "zoned-002"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := p.Start(ctx, zoned)
	want := fmt.Sprintf("%s: label zone=a, want b; %s: capacity 2/2 instances; %s: capacity 2/2 instances", names[0], names[1], names[2])
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("start with every host refusing: %v, want %q", err, want)
	}
	if h := hostStatus(p, names[2]); h.Instances != 2 {
		t.Errorf("a failed start left a reservation: %+v", h)
	}
}

// TestHostKilled: a host whose sshd and processes die is down after
// host_down_after, its instance Done with the reason; back, it is held off.
func TestHostKilled(t *testing.T) {
	t.Parallel() // its own lab (namespaces, sshd, /30s), owner, state and remote dirs
	l := newLab(t, 2)
	p := runProvider(t, labConfig(t, l), Options{StateDir: t.TempDir()})
	in := start(t, p, spec("web", 1, demoTemplate(t)))
	h := l.Hosts[slices.IndexFunc(l.Hosts, func(h *testhost.Host) bool { return h.Addr == in.Record().Host })]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	took := waitDone(t, in, testDownAfter+time.Second)
	if r := in.ExitReason(); !strings.HasPrefix(r, "host "+h.Addr+" down: ssh: ") || !strings.Contains(r, "checks failing since") {
		t.Errorf("exit reason %q", r)
	}
	t.Logf("down %s after the kill: %s", took, in.ExitReason())
	if st := hostStatus(p, h.Addr); st.State != provider.HostDown || st.LastError == "" || st.Instances != 0 {
		t.Errorf("host status %+v", st)
	}
	// Placement avoids it.
	if in2 := start(t, p, spec("web", 2, demoTemplate(t))); in2.Record().Host == h.Addr {
		t.Error("placed on a down host")
	}
	if err := h.StartSSHD(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for hostStatus(p, h.Addr).State != provider.HostHeldOff {
		if time.Now().After(deadline) {
			t.Fatalf("host back: %+v, want held-off", hostStatus(p, h.Addr))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st := hostStatus(p, h.Addr); st.HeldOffUntil.Sub(st.Since) < 29*time.Second {
		t.Errorf("held off %+v, want 30s", st)
	}
}

// TestLinkDownReclaim: a host cut off (packets dropped) is down after
// host_down_after; back with its instance still running, Reclaim is asked
// about it, says no, and it is stopped. An instance stopped while the host
// was cut off is stopped there when it is back.
func TestLinkDownReclaim(t *testing.T) {
	t.Parallel() // its own lab (namespaces, sshd, /30s), owner, state and remote dirs
	l := newLab(t, 1)
	var mu sync.Mutex
	var (
		asked  []provider.Record
		states []string // what HostState was told
	)
	p := runProvider(t, labConfig(t, l), Options{StateDir: t.TempDir(), Reclaim: func(ctx context.Context, rec provider.Record) bool {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, rec)
		return false
	}, HostState: func(host string, down bool, reason string) {
		mu.Lock()
		defer mu.Unlock()
		states = append(states, fmt.Sprintf("%s down=%t: %s", host, down, reason))
	}})
	tmpl := demoTemplate(t)
	a := start(t, p, spec("web", 1, tmpl))
	b := start(t, p, spec("web", 2, tmpl))
	h := l.Hosts[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	linkDown(t, ctx, h)
	// b's stop cannot reach the host: an error at once, wrapping ErrHostDown.
	time.Sleep(testConnTimeout + 2*testInterval) // the poll notices
	began := time.Now()
	err := b.Stop(ctx)
	if !errors.Is(err, provider.ErrHostDown) || time.Since(began) > testConnTimeout+500*time.Millisecond {
		t.Errorf("stop on an unreachable host: %v after %s", err, time.Since(began))
	}
	waitDone(t, a, testDownAfter+time.Second)
	if r := a.ExitReason(); !strings.Contains(r, "host "+h.Addr+" down: ") {
		t.Errorf("exit reason %q", r)
	}
	if !running(a.Record()) || !running(b.Record()) {
		t.Fatal("a cut-off host's processes died")
	}
	if err := h.LinkUp(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for running(a.Record()) || running(b.Record()) {
		if time.Now().After(deadline) {
			t.Fatalf("back: a running %v, b running %v", running(a.Record()), running(b.Record()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 1 || asked[0].ID != a.Record().ID || asked[0].Addr != a.Record().Addr {
		t.Errorf("Reclaim asked about %+v, want a only", asked)
	}
	if len(states) != 2 || !strings.HasPrefix(states[0], h.Addr+" down=true: host "+h.Addr+" down: ") ||
		!strings.HasPrefix(states[1], h.Addr+" down=false: host "+h.Addr+" is back") {
		t.Errorf("HostState told %q; want down, then back", states)
	}
}

// linkDown cuts h off until LinkUp or the end of the test.
func linkDown(t *testing.T, ctx context.Context, h *testhost.Host) {
	t.Helper()
	if err := h.LinkDown(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.LinkUp(context.Background()) })
}

// TestReclaimAdopts: Reclaim saying yes (adopting it) keeps the instance.
func TestReclaimAdopts(t *testing.T) {
	t.Parallel() // its own lab (namespaces, sshd, /30s), owner, state and remote dirs
	l := newLab(t, 1)
	var p *Provider
	tmpl := demoTemplate(t)
	adopted := make(chan provider.Instance, 1)
	p = runProvider(t, labConfig(t, l), Options{StateDir: t.TempDir(), Reclaim: func(ctx context.Context, rec provider.Record) bool {
		in, err := p.Adopt(ctx, rec, tmpl)
		if err != nil {
			t.Errorf("adopt on reclaim: %v", err)
			return false
		}
		adopted <- in
		return true
	}})
	a := start(t, p, spec("web", 1, tmpl))
	h := l.Hosts[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	linkDown(t, ctx, h)
	waitDone(t, a, testDownAfter+time.Second)
	if err := h.LinkUp(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case in := <-adopted:
		serving(t, in)
		if hostStatus(p, h.Addr).Instances != 1 {
			t.Errorf("host status %+v", hostStatus(p, h.Addr))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not reclaimed")
	}
}

// TestBadInput: each bad host is a clear error within connect_timeout and
// some slack, from Start and from Check.
func TestBadInput(t *testing.T) {
	// Not parallel: it times handshakes against a 2 s connect_timeout,
	// which sshd missed with the package's other labs busy beside it.
	l := newLab(t, 2)
	dir := t.TempDir()
	tmpl := demoTemplate(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// known_hosts with only host 1's key, for host 0.
	b, err := os.ReadFile(l.KnownHosts)
	if err != nil {
		t.Fatal(err)
	}
	otherKnown := filepath.Join(dir, "known_hosts_other")
	var lines []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, l.Hosts[1].Addr+" ") {
			lines = append(lines, line)
		}
	}
	os.WriteFile(otherKnown, []byte(strings.Join(lines, "\n")+"\n"), 0o600)
	// known_hosts with host 1's key under host 0's address: a changed key.
	changedKnown := filepath.Join(dir, "known_hosts_changed")
	os.WriteFile(changedKnown, []byte(strings.Replace(strings.Join(lines, "\n"), l.Hosts[1].Addr, l.Hosts[0].Addr, 1)+"\n"), 0o600)
	// A key no host accepts.
	strange := filepath.Join(dir, "strange_key")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", strange).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}
	// A host that accepts TCP and never speaks.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()

	unknownKey := hostConfig(l, 0)
	unknownKey.KnownHosts = otherKnown
	changedKey := hostConfig(l, 0)
	changedKey.KnownHosts = changedKnown
	wrongKey := hostConfig(l, 0)
	wrongKey.KeyFile = strange
	hung := hostConfig(l, 0)
	hung.Address = silent.Addr().String()
	// Host 1 with one port, taken by a listener there.
	noPort := hostConfig(l, 1)
	noPort.Ports = PortRange{Min: 20500, Max: 20500}
	listener := exec.Command("ip", "netns", "exec", l.Hosts[1].Name, testbin.DemoBackend(t), "--listen", l.Hosts[1].Addr+":20500")
	if err := listener.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { listener.Process.Kill(); listener.Wait() }()
	for {
		if _, err := get(l.Hosts[1].Addr + ":20500"); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
		if ctx.Err() != nil {
			t.Fatal("listener does not serve")
		}
	}

	noDir := tmpl
	noDir.Dir = "/nonexistent/shoal-test-dir"
	missing := tmpl
	missing.Command = []string{"/nonexistent/shoal-test-prog"}
	missing, _ = config.NewTemplate(missing.Command, nil)
	missing.Dir = tmpl.Dir

	for _, c := range []struct {
		name string
		host Host
		tmpl config.Template
		want string
	}{
		{"unknown host key", unknownKey, tmpl, "is not in " + otherKnown + ": check its fingerprint, then add it with `ssh-keyscan"},
		{"changed host key", changedKey, tmpl, "host key of " + l.Hosts[0].Addr + ":22 CHANGED"},
		{"wrong key", wrongKey, tmpl, "refused the key " + wrongKey.KeyFile + " for user " + wrongKey.User},
		{"hangs", hung, tmpl, fmt.Sprintf("did not complete the SSH handshake within %s", testConnTimeout)},
		{"no free port", noPort, tmpl, "no free port in 20500-20500 (1 in use)"},
		{"working directory missing", hostConfig(l, 1), noDir, "working directory /nonexistent/shoal-test-dir not found on host " + l.Hosts[1].Addr},
		{"command missing", hostConfig(l, 1), missing, "command /nonexistent/shoal-test-prog not found on host " + l.Hosts[1].Addr},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			cfg := labConfig(t, l)
			cfg.Hosts = []Host{c.host}
			p := runProvider(t, cfg, Options{StateDir: t.TempDir()})
			began := time.Now()
			_, err := p.Start(ctx, spec("web", 1, c.tmpl))
			took := time.Since(began)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("start: %v, want %q", err, c.want)
			}
			if took > testConnTimeout+time.Second {
				t.Errorf("start failed after %s", took)
			}
			began = time.Now()
			res := p.Preflight(ctx, map[string]config.Template{"web": c.tmpl})
			if took := time.Since(began); took > 3*testConnTimeout+time.Second {
				t.Errorf("check took %s", took)
			}
			if len(res) != 1 || res[0].OK || !strings.Contains(strings.Join(res[0].Problems, "\n"), c.want) {
				t.Errorf("check: %+v, want a problem %q", res, c.want)
			}
			t.Logf("start: %v (%s); check: %q", err, took.Round(time.Millisecond), res[0].Problems)
		})
	}
}

// TestPreflightOK: a good host passes, with notes.
func TestPreflightOK(t *testing.T) {
	t.Parallel() // its own lab (namespaces, sshd, /30s), owner, state and remote dirs
	l := newLab(t, 1)
	p := runProvider(t, labConfig(t, l), Options{StateDir: t.TempDir()})
	res := p.Preflight(context.Background(), map[string]config.Template{"web": demoTemplate(t)})
	if len(res) != 1 || !res[0].OK || len(res[0].Notes) != 4 {
		t.Errorf("check: %+v", res)
	}
}

// TestSSHDStopped: a SIGSTOPped sshd (connections accepted by the kernel,
// never answered) is a timeout, not a stuck call.
func TestSSHDStopped(t *testing.T) {
	t.Parallel() // its own lab (namespaces, sshd, /30s), owner, state and remote dirs
	l := newLab(t, 1)
	h := l.Hosts[0]
	pids, err := h.PIDs(context.Background())
	if err != nil || len(pids) == 0 {
		t.Fatalf("host pids: %v %v", pids, err)
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGSTOP)
	}
	t.Cleanup(func() {
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	p := runProvider(t, labConfig(t, l), Options{StateDir: t.TempDir()})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	began := time.Now()
	_, err = p.Start(ctx, spec("web", 1, demoTemplate(t)))
	if err == nil || !strings.Contains(err.Error(), "did not complete the SSH handshake") || time.Since(began) > testConnTimeout+time.Second {
		t.Errorf("start against a stopped sshd: %v after %s", err, time.Since(began))
	}
}

// TestAdoptUnreachable: after a restart, an instance on a host that cannot
// be reached is adopted unverified (not ErrGone); when the host is back it
// is verified if it runs, Done ("gone while shoal was down") if it does not.
func TestAdoptUnreachable(t *testing.T) {
	t.Parallel() // its own lab (namespaces, sshd, /30s), owner, state and remote dirs
	l := newLab(t, 1)
	state := t.TempDir()
	cfg := labConfig(t, l)
	cfg.HostDownAfter = time.Minute // unreachable, never down, in this test
	p1, stop1 := startProvider(t, cfg, Options{StateDir: state})
	tmpl := demoTemplate(t)
	a := start(t, p1, spec("web", 1, tmpl))
	b := start(t, p1, spec("web", 2, tmpl))
	stop1()
	h := l.Hosts[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	linkDown(t, ctx, h)

	p2 := runProvider(t, cfg, Options{StateDir: state})
	began := time.Now()
	a2, err := p2.Adopt(ctx, a.Record(), tmpl)
	if err != nil {
		t.Fatalf("adopt on an unreachable host: %v", err)
	}
	b2, err := p2.Adopt(ctx, b.Record(), tmpl)
	if err != nil {
		t.Fatalf("adopt on an unreachable host: %v", err)
	}
	if took := time.Since(began); took > 2*(testConnTimeout+time.Second) {
		t.Errorf("adopting took %s", took)
	}
	if st := hostStatus(p2, h.Addr); st.State != provider.HostUnreachable || st.Instances != 2 {
		t.Errorf("host %+v", st)
	}
	// a dies while shoal cannot see it.
	syscall.Kill(a2.PID(), syscall.SIGKILL)
	if err := h.LinkUp(ctx); err != nil {
		t.Fatal(err)
	}
	waitDone(t, a2, 10*time.Second)
	if r := a2.ExitReason(); r != "gone while shoal was down" {
		t.Errorf("exit reason %q", r)
	}
	time.Sleep(4 * testInterval)
	select {
	case <-b2.Done():
		t.Errorf("running instance done: %s", b2.ExitReason())
	default:
	}
	if u, ok := b2.(provider.Sampler).Usage(); !ok || u.RSS == 0 {
		t.Errorf("verified instance not polled: %+v %v", u, ok)
	}
}

// TestLogs: the log is read and followed over SSH (the remote tail ends
// with the read), rotated past its size and expired after its retention.
func TestLogs(t *testing.T) {
	t.Parallel() // its own lab (namespaces, sshd, /30s), owner, state and remote dirs
	l := newLab(t, 1)
	cfg := labConfig(t, l)
	p := runProvider(t, cfg, Options{StateDir: t.TempDir(), Logs: config.InstanceLogs{MaxSize: 4096, Keep: 2, Retention: time.Minute}})
	tmpl, err := config.NewTemplate([]string{"sh", "-c", `i=0; while :; do i=$((i+1)); printf 'line %d %0100d\n' $i 0; sleep 0.02; done`}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.Dir, tmpl.StopTimeout = t.TempDir(), time.Second
	in := start(t, p, spec("log", 1, tmpl))

	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	var buf strings.Builder // written only until Logs returns
	if err := p.Logs(ctx, in.Record(), provider.LogOptions{Lines: 1, Follow: true}, &buf); err != nil {
		t.Fatalf("follow: %v", err)
	}
	if n := strings.Count(buf.String(), "\n"); n < 10 {
		t.Errorf("followed %d lines: %q", n, buf.String())
	}
	logFile := filepath.Join(cfg.RemoteDir, p.owner, "logs", "log-001.log")
	time.Sleep(500 * time.Millisecond) // the remote tail's next write fails
	if tails := tailsOf(logFile); len(tails) > 0 {
		t.Errorf("remote tail still runs: %v", tails)
	}

	// Rotation: the log passes 4 KiB in under a second (~110 bytes every 20 ms).
	deadline := time.Now().Add(10 * time.Second)
	for {
		if fi, err := os.Stat(logFile); err == nil && fi.Size() > 4096 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("log does not grow")
		}
		time.Sleep(100 * time.Millisecond)
	}
	old := filepath.Join(cfg.RemoteDir, p.owner, "logs", "gone-001.log")
	os.WriteFile(old, []byte("old\n"), 0o600)
	os.Chtimes(old, time.Now().Add(-time.Hour), time.Now().Add(-time.Hour))
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	if err := p.rotateLogs(rctx, p.hostOf(l.Hosts[0].Addr)); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(logFile + ".1"); err != nil || fi.Size() <= 4096 {
		t.Errorf("rotated copy: %v, %v", fi, err)
	}
	if fi, err := os.Stat(logFile); err != nil || fi.Size() > 4096 {
		t.Errorf("log after rotation: %v, %v", fi, err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("the log of an instance gone for an hour is kept: %v", err)
	}
}

// tailsOf lists the tail processes reading file.
func tailsOf(file string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.HasPrefix(string(b), "tail\x00") && strings.Contains(string(b), file) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestUpdate: a host removed by a reload takes no new instance and is
// dropped once nothing of ours runs there; a host added is used.
func TestUpdate(t *testing.T) {
	t.Parallel() // its own lab (namespaces, sshd, /30s), owner, state and remote dirs
	l := newLab(t, 2)
	cfg := labConfig(t, l)
	only0 := cfg
	only0.Hosts = cfg.Hosts[:1]
	p := runProvider(t, only0, Options{StateDir: t.TempDir()})
	tmpl := demoTemplate(t)
	a := start(t, p, spec("web", 1, tmpl))
	only1 := cfg
	only1.Hosts = cfg.Hosts[1:]
	if err := p.Update(only1); err != nil {
		t.Fatal(err)
	}
	b := start(t, p, spec("web", 2, tmpl))
	if a.Record().Host != l.Hosts[0].Addr || b.Record().Host != l.Hosts[1].Addr {
		t.Errorf("placed on %s and %s", a.Record().Host, b.Record().Host)
	}
	if st := hostStatus(p, l.Hosts[0].Addr); st.Instances != 1 {
		t.Errorf("removed host with an instance: %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second) // a bound, not a speed: the poll drops it
	for len(p.Hosts()) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("removed host kept: %+v", p.Hosts())
		}
		time.Sleep(50 * time.Millisecond)
	}
	bad := only1
	bad.Hosts = append(slices.Clone(bad.Hosts), Host{Address: "10.255.255.1", User: "root", KeyFile: "/nonexistent"})
	if err := p.Update(bad); err == nil || !strings.Contains(err.Error(), "host 10.255.255.1: key_file") {
		t.Errorf("update with a missing key file: %v", err)
	}
}

// TestUnreachableChecksPassing: a host cut off from shoal whose instances
// still pass their checks (HAProxy reaches them) is unreachable, not down:
// its instances keep serving.
func TestUnreachableChecksPassing(t *testing.T) {
	t.Parallel() // its own lab (namespaces, sshd, /30s), owner, state and remote dirs
	l := newLab(t, 1)
	p := runProvider(t, labConfig(t, l), Options{StateDir: t.TempDir(), Checks: func(provider.Record) (bool, bool) { return true, true }})
	in := start(t, p, spec("web", 1, demoTemplate(t)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	linkDown(t, ctx, l.Hosts[0])
	select {
	case <-in.Done():
		t.Fatalf("instance done: %s", in.ExitReason())
	case <-time.After(testDownAfter + time.Second):
	}
	if st := hostStatus(p, l.Hosts[0].Addr); st.State != provider.HostUnreachable || st.LastError == "" || st.Instances != 1 {
		t.Errorf("host %+v", st)
	}
}

// TestStraysSweptOnConnect: StopStrays finding a host unreachable sweeps
// it when it connects.
func TestStraysSweptOnConnect(t *testing.T) {
	t.Parallel() // its own lab (namespaces, sshd, /30s), owner, state and remote dirs
	l := newLab(t, 1)
	state := t.TempDir()
	cfg := labConfig(t, l)
	cfg.HostDownAfter = time.Minute
	p1, stop1 := startProvider(t, cfg, Options{StateDir: state})
	a := start(t, p1, spec("web", 1, demoTemplate(t)))
	stop1()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	linkDown(t, ctx, l.Hosts[0])
	p2 := runProvider(t, cfg, Options{StateDir: state})
	if stopped, err := p2.StopStrays(ctx, nil); err != nil || len(stopped) != 0 {
		t.Errorf("sweep of an unreachable host: %v, %v", stopped, err)
	}
	if !running(a.Record()) {
		t.Fatal("stray stopped while its host was cut off")
	}
	if err := l.Hosts[0].LinkUp(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for running(a.Record()) {
		if time.Now().After(deadline) {
			t.Fatal("stray not swept when its host connected")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestStraysLeftWhenNotLeading: a node whose Guard refuses (an HA node
// that does not lead, or a deposed leader) stops nothing when a host
// connects: the stray it would have swept runs on.
func TestStraysLeftWhenNotLeading(t *testing.T) {
	t.Parallel() // its own lab (namespaces, sshd, /30s), owner, state and remote dirs
	l := newLab(t, 1)
	state := t.TempDir()
	cfg := labConfig(t, l)
	cfg.HostDownAfter = time.Minute
	p1, stop1 := startProvider(t, cfg, Options{StateDir: state})
	a := start(t, p1, spec("web", 1, demoTemplate(t)))
	stop1()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	linkDown(t, ctx, l.Hosts[0])
	var asked atomic.Int32
	refuse := func(context.Context) error {
		asked.Add(1)
		return errors.New("not the leader: refused by the fence")
	}
	p2 := runProvider(t, cfg, Options{StateDir: state, Guard: refuse})
	if _, err := p2.StopStrays(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := l.Hosts[0].LinkUp(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for asked.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the guard was not asked when the host connected")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if !running(a.Record()) {
			t.Fatal("stray stopped although the guard refused")
		}
	}
}
