package e2e

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/accesslog"
	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/loadgen"
	"github.com/shoal-lb/shoal/internal/proc"
	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/provider/ssh"
	"github.com/shoal-lb/shoal/internal/testhost"
)

// The ssh provider's tests run instances on test hosts: network namespaces
// with a real sshd each (internal/testhost), reached over their veth as
// servers on a LAN. The hosts share this machine's file system and PID
// space, so the demo-backend binary the harness built runs there as it is,
// and the test finds a host's processes by its namespace and their markers.

// newLab makes n test hosts that live until the test ends (and are swept
// with the suite's other processes if it times out). Where namespaces
// cannot be made the test is skipped with the reason, except in CI, which
// must have them.
func newLab(t *testing.T, n int) *testhost.Lab {
	t.Helper()
	return keepLab(t, time.Minute, func(ctx context.Context) (*testhost.Lab, error) {
		return testhost.New(ctx, t.TempDir(), n)
	})
}

// keepLab makes a lab with open (bounded by within) and keeps it until the
// test ends, registered for the suite's watchdog.
func keepLab(t *testing.T, within time.Duration, open func(context.Context) (*testhost.Lab, error)) *testhost.Lab {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	l, err := open(ctx)
	if errors.Is(err, testhost.ErrUnsupported) {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v; CI must have them (run as root after make test-deps)", err)
		}
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	live.Lock()
	if live.labs == nil {
		live.labs = map[*testhost.Lab]bool{}
	}
	live.labs[l] = true
	live.Unlock()
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("close the lab: %v", err)
		}
		live.Lock()
		delete(live.labs, l)
		live.Unlock()
	})
	return l
}

// sshHost is one host entry of a test's ssh provider; empty fields take
// the lab's key and known_hosts.
type sshHost struct {
	h          *testhost.Host
	keyFile    string
	knownHosts string
	ports      string // default "20000-20999"
	extra      string // more keys of the entry, as a YAML flow mapping's inside
}

// sshProviders renders the providers section: name → hosts, with the
// short timeouts a test wants. Instances log under remoteDir.
func sshProviders(l *testhost.Lab, remoteDir string, providers map[string][]sshHost) string {
	var b strings.Builder
	b.WriteString("providers:\n")
	for _, name := range slices.Sorted(maps.Keys(providers)) {
		fmt.Fprintf(&b, "  - name: %s\n    type: ssh\n    host_down_after: 3s\n    connect_timeout: 2s\n    reconnect_max: 1s\n    remote_dir: %s\n    hosts:\n", name, remoteDir)
		for _, h := range providers[name] {
			key, known, ports := h.keyFile, h.knownHosts, h.ports
			if key == "" {
				key = l.KeyFile
			}
			if known == "" {
				known = l.KnownHosts
			}
			if ports == "" {
				ports = "20000-20999"
			}
			fmt.Fprintf(&b, "      - {address: %q, user: %s, key_file: %q, known_hosts: %q, ports: %q", h.h.Addr, l.User, key, known, ports)
			if h.extra != "" {
				b.WriteString(", " + h.extra)
			}
			b.WriteString("}\n")
		}
	}
	return b.String()
}

// sshGroup is a group of demo-backends on provider, serving on the host's
// address. Its checks take a dead instance out of rotation in about a
// second: every 500 ms whatever the state, two failures, short timeouts.
// Passive layer-4 checks take a server out at its first refused
// connection: a dead host's servers die together and sit side by side in
// the round robin (they were added together), so without it a GET sent in
// the check's second could be refused by all four of its tries (2 runs of
// 5 failed 2 and 3 GETs that way).
func sshGroup(name, provider string, min, max int, extra string) groupSpec {
	return groupSpec{
		Name: name, Min: min, Max: max,
		Command: fmt.Sprintf(`[%q, "--listen", "{{.Host}}:{{.Port}}", "--name", "{{.Name}}"]`, filepath.Join(binDir, "demo-backend")),
		Health:  "{path: /healthz, interval: 500ms, fastinter: 500ms, downinter: 500ms, rise: 1, fall: 2, timeout: 500ms, grace: 15s, passive: {observe: layer4, error_limit: 1, on_error: mark-down}}",
		Extra:   fmt.Sprintf("    provider: %s\n%s", provider, extra),
	}
}

// calmSSH gives sshProviders' providers the SSH timeouts of a machine
// where no host dies (10 s to connect, down after 20 s): the suite's short
// ones (2 s, 3 s) are for the tests that kill a host, and a shoal
// restarted under busy loops took longer than 2 s for its handshakes.
func calmSSH(providers string) string {
	return strings.NewReplacer("connect_timeout: 2s", "connect_timeout: 10s", "host_down_after: 3s", "host_down_after: 20s").Replace(providers)
}

// sshTimeouts goes right after the harness's haproxy.global line (hence
// its indentation): a connection to a host that drops packets fails in
// 500 ms and is redispatched, and a request it swallowed is retried after
// 2 s (retry-on response-timeout) instead of 30.
const sshTimeouts = "  timeouts: {connect: 500ms, server: 2s}\n"

// hostStatuses reads GET /v1/hosts: every host of every provider.
func (e *shoalEnv) hostStatuses() map[string]provider.HostStatus {
	e.t.Helper()
	r, err := e.client().Hosts(context.Background())
	if err != nil {
		e.t.Fatalf("GET /v1/hosts: %v", err)
	}
	out := map[string]provider.HostStatus{}
	for _, h := range r.Hosts {
		out[h.Name] = h
	}
	return out
}

// waitHostsUp waits until every host is up, none held off from placement.
func (e *shoalEnv) waitHostsUp(timeout time.Duration) {
	e.t.Helper()
	e.eventually("every host up", timeout, func() error {
		for _, h := range e.hostStatuses() {
			if h.State != provider.HostUp {
				return fmt.Errorf("host %s is %s (held off until %v): %s", h.Name, h.State, h.HeldOffUntil, h.LastError)
			}
		}
		return nil
	})
}

// perHost counts group's instances by the host part of their address.
func (e *shoalEnv) perHost(group string) map[string]int {
	e.t.Helper()
	out := map[string]int{}
	for _, in := range groupOf(e.t, e.status(), group).Instances {
		host, _, _ := net.SplitHostPort(in.Addr)
		out[host]++
	}
	return out
}

// hostInstances lists the processes on h that carry this env's owner
// marker, pid → SHOAL_INSTANCE: what shoal started there and did not stop.
func (e *shoalEnv) hostInstances(h *testhost.Host) map[int]string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pids, err := h.PIDs(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	owner := "SHOAL_OWNER=" + ssh.OwnerID(e.stateDir())
	out := map[int]string{}
	for _, pid := range pids {
		env, err := proc.Environ(pid)
		if err != nil || !slices.Contains(env, owner) || !alive(pid) {
			continue
		}
		name := "?"
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, "SHOAL_INSTANCE="); ok {
				name = v
			}
		}
		out[pid] = name
	}
	return out
}

// sshRun runs a command on h with OpenSSH's client (the lab's key, host
// key checked) and returns its output.
func sshRun(t *testing.T, l *testhost.Lab, h *testhost.Host, command string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ssh", "-i", l.KeyFile, "-o", "UserKnownHostsFile="+l.KnownHosts,
		"-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", l.User+"@"+h.Addr, command).CombinedOutput()
	if err != nil {
		t.Fatalf("ssh %s %q: %v: %s", h.Addr, command, err, out)
	}
	return strings.TrimSpace(string(out))
}

// checkServedOnce asserts that HAProxy has each of group's instances once,
// that they are the desired number and that status and HAProxy agree.
func (e *shoalEnv) checkServedOnce(group string, want int) {
	e.t.Helper()
	servers := e.haproxyServers(group)
	addrs := map[string]string{}
	for name, addr := range servers {
		if other, dup := addrs[addr]; dup {
			e.t.Fatalf("HAProxy serves %s twice: as %s and %s", addr, other, name)
		}
		addrs[addr] = name
	}
	st := groupOf(e.t, e.status(), group)
	if len(servers) != want || st.Desired != want || len(st.Instances) != want {
		e.t.Fatalf("HAProxy has %d servers, shoal %d instances, desired %d; want %d\nHAProxy: %v\nshoal: %v", len(servers), len(st.Instances), st.Desired, want, servers, st.Instances)
	}
	e.checkInSync(group)
}

// accessLogFailures returns the access log's lines of requests that did
// not end normally (5xx answers, responses cut short), for a failure's
// message: which server HAProxy tried last and how the request ended (the
// termination state). Under load the log is sampled, so some may be missing.
func (e *shoalEnv) accessLogFailures() string {
	b, err := os.ReadFile(filepath.Join(e.stateDir(), "logs", "access.log"))
	if err != nil {
		return err.Error()
	}
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if en, err := accesslog.Parse(line); err == nil && (en.Status >= 500 || en.Termination != "----") {
			out = append(out, line)
		}
	}
	return "access log, requests that did not end normally:\n" + strings.Join(out, "\n")
}

// waitServedOnce gives HAProxy's server list up to timeout to settle to
// group's instances, then checks it as checkServedOnce does.
func (e *shoalEnv) waitServedOnce(group string, want int, timeout time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && len(e.haproxyServers(group)) != want {
		time.Sleep(200 * time.Millisecond)
	}
	e.checkServedOnce(group, want)
}

// abortWatch samples a group's servers in HAProxy every 50 ms, from
// before a host fails until finish: their srv_abrt counts the responses
// each cut short after they had begun, which no retry can replay (a
// process killed while it answered). A dead host's servers are deleted
// once out of rotation, with their counters: theirs is the last sample
// taken before that.
type abortWatch struct {
	base map[string]int64 // srv_abrt by server when the watch began
	stop chan struct{}
	done chan struct{}
	once sync.Once

	mu   sync.Mutex
	last map[string]haproxy.ServerStat // each server's latest sample, deleted ones too
	err  error                         // the first failed read
}

// watchAborts starts an abortWatch of group, stopped at the latest when
// the test ends.
func (e *shoalEnv) watchAborts(group string) *abortWatch {
	e.t.Helper()
	c := haproxy.Client{Socket: filepath.Join(e.stateDir(), "haproxy", "admin.sock")}
	w := &abortWatch{base: map[string]int64{}, last: map[string]haproxy.ServerStat{}, stop: make(chan struct{}), done: make(chan struct{})}
	sample := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stats, err := c.Stats(ctx, group)
		w.mu.Lock()
		defer w.mu.Unlock()
		if err != nil {
			w.err = cmp.Or(w.err, err)
			return
		}
		for _, s := range stats {
			w.last[s.Name] = s
		}
	}
	sample()
	if w.err != nil {
		e.t.Fatalf("read HAProxy stats: %v", w.err)
	}
	for name, s := range w.last {
		w.base[name] = s.ServerAborts
	}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				sample() // the servers that remain, after the load
				return
			case <-tick.C:
				sample()
			}
		}
	}()
	e.t.Cleanup(func() { w.once.Do(func() { close(w.stop) }); <-w.done })
	return w
}

// checkAborts ends w after a host's failure and asserts the issue's
// promise: the failed GETs (res) are at most the responses that the dead
// host's servers (dead, by name) cut short, and no other server, before or
// since (replacements), cut any short. It returns the dead host's count.
func (e *shoalEnv) checkAborts(w *abortWatch, dead []string, what string, res loadgen.Result) int64 {
	e.t.Helper()
	w.once.Do(func() { close(w.stop) })
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		e.t.Fatalf("read HAProxy stats during %s: %v", what, w.err)
	}
	var cutShort int64
	var there, elsewhere []string
	for _, name := range slices.Sorted(maps.Keys(w.last)) {
		s := w.last[name]
		n := s.ServerAborts - w.base[name]
		if slices.Contains(dead, name) {
			cutShort += n
			there = append(there, fmt.Sprintf("%s: %d (last seen %s, %d sessions)", name, n, s.Status, s.Sessions))
		} else if n != 0 {
			elsewhere = append(elsewhere, fmt.Sprintf("%s: %d", name, n))
		}
	}
	if len(elsewhere) > 0 {
		e.t.Fatalf("across %s, servers not on that host cut responses short: %v\n%s", what, elsewhere, e.accessLogFailures())
	}
	if res.Failures > cutShort {
		e.t.Fatalf("%d GETs failed across %s, want at most the %d responses its servers cut short %v: %v\n%s",
			res.Failures, what, cutShort, there, res.FailureSamples, e.accessLogFailures())
	}
	return cutShort
}

// instanceOnHost is an instance as a host failure sees it.
type instanceOnHost struct {
	name, host string
	pid        int
}

// instancesOnHosts lists group's instances with their hosts.
func (e *shoalEnv) instancesOnHosts(group string) []instanceOnHost {
	e.t.Helper()
	var out []instanceOnHost
	for _, in := range groupOf(e.t, e.status(), group).Instances {
		host, _, _ := net.SplitHostPort(in.Addr)
		out = append(out, instanceOnHost{name: in.Name, host: host, pid: in.PID})
	}
	return out
}

// waitReplaced waits until group has want instances in service, none on
// host, and returns how long that took.
func (e *shoalEnv) waitReplaced(group, host string, want int, timeout time.Duration) time.Duration {
	e.t.Helper()
	start := time.Now()
	e.eventually(fmt.Sprintf("%s's instances on %s are replaced on the other hosts", group, host), timeout, func() error {
		st, err := e.client().Group(context.Background(), group)
		if err != nil {
			return err
		}
		on := 0
		for _, in := range st.Instances {
			if h, _, _ := net.SplitHostPort(in.Addr); h == host {
				on++
			}
		}
		if on > 0 || st.InService != want || len(st.Instances) != want {
			return fmt.Errorf("%d instances, %d in service, %d still on %s", len(st.Instances), st.InService, on, host)
		}
		return nil
	})
	return time.Since(start)
}

// waitOutOfRotation waits until HAProxy serves none of names (DOWN, in
// maintenance or deleted) and returns how long that took.
func (e *shoalEnv) waitOutOfRotation(group string, names []string, timeout time.Duration) time.Duration {
	e.t.Helper()
	start := time.Now()
	e.eventually(fmt.Sprintf("%v leave rotation", names), timeout, func() error {
		st, err := e.client().Group(context.Background(), group)
		if err != nil {
			return err
		}
		for _, in := range st.Instances {
			if slices.Contains(names, in.Name) && in.Health.IsUp() {
				return fmt.Errorf("%s is %s", in.Name, in.Health)
			}
		}
		return nil
	})
	return time.Since(start)
}

// hookLines are a template's pre_start and pre_stop hooks (indented for
// groupSpec.Template) that write "HOOK on ADDRESS 22" to dir/NAME.HOOK and
// to the instance's log, ADDRESS being the sshd that ran it
// (SSH_CONNECTION's server end): the host the hook ran on.
func hookLines(dir string) string {
	cmd := fmt.Sprintf(`["sh", "-c", %q, "sh", %q]`, `echo "$SHOAL_HOOK on ${SSH_CONNECTION#* * }" | tee "$1/$SHOAL_INSTANCE.$SHOAL_HOOK"`, dir)
	return fmt.Sprintf("      pre_start: {command: %s, timeout: 10s}\n      pre_stop: {command: %s, timeout: 10s}\n", cmd, cmd)
}

// checkHook reports whether hook (of hookLines, writing to hooks) ran on
// host for instance name before the instance wrote mark to its log: the
// hook's file names the host's sshd, and in the instance's log on the host
// (under remote, the provider's remote_dir) shoal's line of the hook's
// successful end comes before mark.
func (e *shoalEnv) checkHook(remote, hooks, hook, name, host, mark string) error {
	b, err := os.ReadFile(filepath.Join(hooks, name+"."+hook))
	if err != nil {
		return fmt.Errorf("%s of %s wrote nothing: %w", hook, name, err)
	}
	if got, want := strings.TrimSpace(string(b)), hook+" on "+host+" 22"; got != want {
		return fmt.Errorf("%s of %s wrote %q, want %q: it did not run on %s", hook, name, got, want, host)
	}
	logPath := filepath.Join(remote, ssh.OwnerID(e.stateDir()), "logs", name+".log")
	lb, err := os.ReadFile(logPath)
	if err != nil {
		return err
	}
	// The lab's hosts share one filesystem, so an instance name used again on
	// another host (after its first host was cut off) appends to the same
	// log, and the old one's lines may come after the new one's start: the
	// last hook success and the last mark are the newest instance's.
	log := string(lb)
	done, at := strings.LastIndex(log, "shoal: "+hook+": exit status 0"), strings.LastIndex(log, mark)
	if done < 0 || at < 0 || done > at {
		return fmt.Errorf("%s: want shoal's line of %s's success before %q:\n%s", logPath, hook, mark, log)
	}
	return nil
}

// sshLoad is keep-alive GET load through the frontend, bounded in time.
func sshLoad(t *testing.T, e *shoalEnv) func() loadgen.Result {
	t.Helper()
	stop, err := loadgen.Start(context.Background(), loadgen.Options{URL: "http://" + e.listen + "/", Concurrency: loadConcurrency, Timeout: 10 * time.Second, Duration: 90 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop() })
	return stop
}

// TestSSHHostsScaleFailRecover runs a group on three hosts over SSH under
// keep-alive load: it scales 2 → 12 spread 4/4/4; a host that dies (sshd
// and instances killed) leaves rotation in about a second and its
// instances are replaced on the other two, with no failed GET beyond
// those in flight there (cut short by its servers, none by the others); a host cut off by its link (processes alive) is
// replaced too, and when it comes back its stale instances are stopped,
// nothing served twice. A kill -9 of the core then leaves every remote
// instance running: the restarted core adopts them all (same names and
// pids) and stops a stray planted on a host with this state dir's marker.
// Its pre_start hook runs on each instance's host before the instance
// starts, and pre_stop before a scale-in stops one.
func TestSSHHostsScaleFailRecover(t *testing.T) {
	parallel(t)
	lab := newLab(t, 3)
	ctx := context.Background()
	var hosts []sshHost
	for _, h := range lab.Hosts {
		hosts = append(hosts, sshHost{h: h, extra: "capacity: {instances: 12}"})
	}
	g := sshGroup("web", "rack", 2, 12, "    placement: {strategy: spread}\n")
	remote, hooks := t.TempDir(), t.TempDir()
	g.Template = hookLines(hooks)
	// The access log names the server and end of a failed request (accessLogFailures).
	e := newEnv(t, sshTimeouts+"access_log: {sample: auto}\n"+sshProviders(lab, remote, map[string][]sshHost{"rack": hosts}), g)
	e.start()
	e.waitInService("web", 2)

	stop := sshLoad(t, e)
	scaleSync(t, e, "--size", "12")
	e.waitInService("web", 12)
	spread := e.perHost("web")
	hs := e.hostStatuses()
	for _, h := range lab.Hosts {
		if spread[h.Addr] != 4 || hs[h.Addr].Instances != 4 || hs[h.Addr].State != provider.HostUp {
			t.Fatalf("after 2 → 12: instances by address %v, host %s is %+v; want 4 on each host, up", spread, h.Addr, hs[h.Addr])
		}
	}
	e.checkServedOnce("web", 12)
	// pre_start ran on each instance's host before the instance started.
	for _, in := range e.instancesOnHosts("web") {
		e.eventually("pre_start ran on "+in.host+" before "+in.name+" started", 5*time.Second, func() error {
			return e.checkHook(remote, hooks, "pre_start", in.name, in.host, "serving")
		})
	}
	// Each placement is an event with its reason.
	placed := 0
	for _, ev := range e.events(api.EventsQuery{Group: "web", Limit: 100}) {
		if ev.Outcome == "placement" && strings.Contains(ev.Reason, "spread") {
			placed++
		}
	}
	if placed < 12 {
		t.Fatalf("%d placement events with a spread reason for 12 instances placed", placed)
	}

	// A host dies: its instances leave rotation, then are replaced.
	dead := lab.Hosts[2]
	before := e.instancesOnHosts("web")
	var doomed []string
	for _, in := range before {
		if in.host == dead.Addr {
			doomed = append(doomed, in.name)
		}
	}
	aborts := e.watchAborts("web")
	if err := dead.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	out := e.waitOutOfRotation("web", doomed, 10*time.Second)
	replaced := e.waitReplaced("web", dead.Addr, 12, 30*time.Second)
	res := stop()
	cutShort := e.checkAborts(aborts, doomed, "the host's death", res)
	t.Logf("host %s killed: out of rotation after %v, replaced after %v; %d requests, %d failed (%d responses cut short by its servers) %v",
		dead.Addr, out.Round(time.Millisecond), replaced.Round(time.Millisecond), res.Requests, res.Failures, cutShort, res.FailureSamples)
	if res.Requests < 100 {
		t.Fatalf("only %d requests went through", res.Requests)
	}
	if got := e.hostStatuses()[dead.Addr]; got.State != provider.HostDown || got.LastError == "" {
		t.Fatalf("the dead host shows %+v, want down with its last error", got)
	}
	if out, _, _ := e.cli("status"); !strings.Contains(out, dead.Addr) || !strings.Contains(out, provider.HostDown) {
		t.Fatalf("shoal status does not show the dead host %s as down:\n%s", dead.Addr, out)
	}
	if spread := e.perHost("web"); spread[lab.Hosts[0].Addr]+spread[lab.Hosts[1].Addr] != 12 {
		t.Fatalf("replacements not on the other two hosts: %v", spread)
	}
	e.checkServedOnce("web", 12)

	// It comes back with nothing running (Kill killed it all): shoal
	// reconnects and serves nothing there twice.
	if err := dead.StartSSHD(ctx); err != nil {
		t.Fatal(err)
	}
	e.eventually("the host is back", 30*time.Second, func() error {
		if s := e.hostStatuses()[dead.Addr].State; s != provider.HostUp && s != provider.HostHeldOff {
			return fmt.Errorf("host %s is %s", dead.Addr, s)
		}
		return nil
	})
	e.checkServedOnce("web", 12)

	// A host cut off by its link keeps its processes: they are replaced,
	// and stopped when the link is back, never serving beside their
	// replacements.
	cut := lab.Hosts[1]
	before = e.instancesOnHosts("web")
	stale := e.hostInstances(cut)
	if len(stale) == 0 {
		t.Fatalf("no instance runs on %s before its link goes down: %+v", cut.Addr, before)
	}
	doomed = nil
	for _, in := range before {
		if in.host == cut.Addr {
			doomed = append(doomed, in.name)
		}
	}
	stop = sshLoad(t, e)
	aborts = e.watchAborts("web")
	if err := cut.LinkDown(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cut.LinkUp(context.Background()) })
	replaced = e.waitReplaced("web", cut.Addr, 12, 30*time.Second)
	res = stop()
	cutShort = e.checkAborts(aborts, doomed, "the link's loss", res)
	t.Logf("host %s cut off: replaced after %v; %d requests, %d failed (%d responses cut short by its servers) %v",
		cut.Addr, replaced.Round(time.Millisecond), res.Requests, res.Failures, cutShort, res.FailureSamples)
	if err := cut.LinkUp(ctx); err != nil {
		t.Fatal(err)
	}
	e.eventually("the stale instances on the host that came back are stopped", 30*time.Second, func() error {
		if left := e.hostInstances(cut); len(left) > 0 {
			return fmt.Errorf("still running there: %v", left)
		}
		return nil
	})
	e.waitServedOnce("web", 12, 20*time.Second)

	// kill -9 the core; plant a stray; the restarted core adopts every
	// instance and stops the stray.
	adopted := map[string]int{}
	for _, in := range e.instancesOnHosts("web") {
		adopted[in.name] = in.pid
	}
	e.kill9()
	host := lab.Hosts[0]
	strayOut := sshRun(t, lab, host, fmt.Sprintf("SHOAL_OWNER=%s SHOAL_HOST=%s SHOAL_INSTANCE=web-099 setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!",
		ssh.OwnerID(e.stateDir()), host.Addr))
	stray, err := strconv.Atoi(strayOut)
	if err != nil || !alive(stray) {
		t.Fatalf("the stray did not start: %q", strayOut)
	}
	e.start()
	e.waitInService("web", 12)
	e.eventually("the stray is stopped", 20*time.Second, func() error {
		if alive(stray) {
			return fmt.Errorf("pid %d alive", stray)
		}
		return nil
	})
	after := map[string]int{}
	for _, in := range e.instancesOnHosts("web") {
		after[in.name] = in.pid
	}
	if fmt.Sprint(after) != fmt.Sprint(adopted) {
		t.Fatalf("instances were not adopted: before the kill -9 %v, after the restart %v", adopted, after)
	}
	e.checkServedOnce("web", 12)

	// A scale-in runs pre_stop on the retired instance's host before the
	// instance stops.
	serving := e.instancesOnHosts("web")
	scaleSync(t, e, "--size", "11")
	kept := map[string]bool{}
	for _, in := range e.instancesOnHosts("web") {
		kept[in.name] = true
	}
	var retired []instanceOnHost
	for _, in := range serving {
		if !kept[in.name] {
			retired = append(retired, in)
		}
	}
	if len(retired) != 1 {
		t.Fatalf("scale 12 → 11 retired %v", retired)
	}
	in := retired[0]
	e.eventually("pre_stop ran on "+in.host+" before "+in.name+" stopped", 10*time.Second, func() error {
		return e.checkHook(remote, hooks, "pre_stop", in.name, in.host, "shutting down")
	})
	e.checkServedOnce("web", 11)

	// SIGINT stops every instance on every host.
	e.stop()
	for _, h := range lab.Hosts {
		if left := e.hostInstances(h); len(left) > 0 {
			t.Fatalf("instances left on %s after shoal stopped: %v", h.Addr, left)
		}
	}
}

// TestSSHLogs: `shoal logs` prints a remote instance's output, read on its
// host; with -f it follows what the instance writes next (here, its
// shutdown when a scale-in retires it).
func TestSSHLogs(t *testing.T) {
	parallel(t)
	lab := newLab(t, 1)
	e := newEnv(t, sshProviders(lab, t.TempDir(), map[string][]sshHost{"rack": {{h: lab.Hosts[0]}}}), sshGroup("web", "rack", 1, 2, ""))
	e.start()
	e.waitInService("web", 1)
	scaleSync(t, e, "--size", "2")
	st := groupOf(t, e.status(), "web")
	first, newest := st.Instances[0], st.Instances[len(st.Instances)-1]
	out, stderr, code := e.cliWithin(15*time.Second, "logs", first.Name)
	if code != 0 || !strings.Contains(out, "serving") || !strings.Contains(out, first.Addr) {
		t.Fatalf("shoal logs %s: exit %d, want its startup line with %s:\n%s%s", first.Name, code, first.Addr, out, stderr)
	}
	if _, stderr, code := e.cliWithin(15*time.Second, "logs", "web-999"); code == 0 || !strings.Contains(stderr, "web-999") {
		t.Fatalf("shoal logs of no instance: exit %d, stderr %q; want an error naming it", code, stderr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	follow := exec.CommandContext(ctx, filepath.Join(binDir, "shoal"), "logs", "-f", newest.Name, "-c", e.cfgPath)
	var fout syncBuffer
	follow.Stdout, follow.Stderr = &fout, &fout
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = follow.Process.Kill(); _ = follow.Wait() }()
	e.eventually("shoal logs -f prints what is there", 10*time.Second, func() error {
		if !strings.Contains(fout.String(), "serving") {
			return errors.New(fout.String())
		}
		return nil
	})
	// Retire the newest instance: its shutdown lines reach the follower.
	scaleSync(t, e, "--size", "1")
	e.eventually("shoal logs -f prints the instance's shutdown", 15*time.Second, func() error {
		if !strings.Contains(fout.String(), "shutting down") {
			return fmt.Errorf("followed so far: %q", fout.String())
		}
		return nil
	})
}

// TestSSHProvidersCheckBadInput: each way a host can be wrong is named, per
// host, by `shoal providers check` and on the instances it fails to start
// (status's recent failures), within bounded time; the reconciler is never
// stuck (a later scale of a good group answers) and a scale on a hung host
// fails in bounded time. `shoal validate` refuses a key file that is no key
// and a host that known_hosts does not list, without touching the hosts;
// `shoal providers check` names a host taken out of known_hosts since.
func TestSSHProvidersCheckBadInput(t *testing.T) {
	parallel(t) // it mostly waits out connect timeouts
	lab := newLab(t, 7)
	ctx := context.Background()
	dir := t.TempDir()
	// One fault per host.
	hb := struct{ good, wrongHostKey, wrongKey, noPort, hung, unknownKey, hungAfterLogin *testhost.Host }{
		lab.Hosts[0], lab.Hosts[1], lab.Hosts[2], lab.Hosts[3], lab.Hosts[4], lab.Hosts[5], lab.Hosts[6]}

	// Unknown host key: known_hosts lists the address with another key.
	known, err := os.ReadFile(lab.KnownHosts)
	if err != nil {
		t.Fatal(err)
	}
	var otherKey string
	for line := range strings.SplitSeq(strings.TrimSpace(string(known)), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == hb.good.Addr {
			otherKey = f[1] + " " + f[2]
		}
	}
	wrongKnown := filepath.Join(dir, "known_hosts_wrong")
	if err := os.WriteFile(wrongKnown, []byte(hb.wrongHostKey.Addr+" "+otherKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Wrong key file: a key no host accepts.
	strangerKey := filepath.Join(dir, "id_stranger")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", strangerKey).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}
	// No free port: the host's one port is taken by a listener there.
	taker := exec.Command("ip", "netns", "exec", hb.noPort.Name, filepath.Join(binDir, "demo-backend"), "--listen", hb.noPort.Addr+":20000", "--name", "taker")
	taker.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := taker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-taker.Process.Pid, syscall.SIGKILL); _ = taker.Wait() })
	// Unknown host key: a known_hosts that lists the host at the start
	// (validate refuses one that does not) and loses it while shoal runs.
	unknownKnown := filepath.Join(dir, "known_hosts_unknown")
	if err := os.WriteFile(unknownKnown, known, 0o600); err != nil {
		t.Fatal(err)
	}
	// A host that accepts the login, then runs nothing it is asked to.
	if err := hb.hungAfterLogin.HangAfterLogin(ctx); err != nil {
		t.Fatal(err)
	}
	// A hung host: its sshd accepts connections (the kernel does) but
	// never speaks.
	pids, err := hb.hung.PIDs(ctx)
	if err != nil || len(pids) == 0 {
		t.Fatalf("the hung host's sshd: %v %v", pids, err)
	}
	for _, pid := range pids {
		// A session sshd forked for an earlier connection may have ended
		// since the listing: gone is as good as stopped.
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Fatal(err)
		}
	}

	providers := sshProviders(lab, filepath.Join(dir, "remote"), map[string][]sshHost{
		"good":    {{h: hb.good}},
		"hostkey": {{h: hb.wrongHostKey, knownHosts: wrongKnown}},
		"userkey": {{h: hb.wrongKey, keyFile: strangerKey}},
		"noport":  {{h: hb.noPort, ports: "20000-20000"}},
		"hung":    {{h: hb.hung}},
		"unknown": {{h: hb.unknownKey, knownHosts: unknownKnown}},
		"stuck":   {{h: hb.hungAfterLogin}},
	})
	// Each group but web routes by a path of its own.
	routed := func(name, provider string) groupSpec {
		return sshGroup(name, provider, 1, 2, "    path_prefixes: [/"+name+"]\n")
	}
	missing := routed("nobin", "good")
	missing.Command = `["/opt/shoal-test-missing/app", "--port", "{{.Port}}"]`
	e := newEnv(t, providers,
		sshGroup("web", "good", 1, 3, ""),
		routed("hostkey", "hostkey"),
		routed("userkey", "userkey"),
		routed("noport", "noport"),
		routed("hung", "hung"),
		routed("stuck", "stuck"),
		missing,
	)

	e.start()
	e.waitInService("web", 1)
	var kept []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(known)), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] != hb.unknownKey.Addr {
			kept = append(kept, line)
		}
	}
	if err := os.WriteFile(unknownKnown, []byte(strings.Join(kept, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// Each fault, named per host, in a time bounded by connect_timeout (2s)
	// rather than by the hung host.
	want := map[string][]string{ // host → what its result must say
		hb.good.Addr:           {"/opt/shoal-test-missing/app"},
		hb.wrongHostKey.Addr:   {"host key"},
		hb.wrongKey.Addr:       {"refused the key"},
		hb.noPort.Addr:         {"port"},
		hb.hung.Addr:           {"timeout"},
		hb.unknownKey.Addr:     {"host key", "is not in " + unknownKnown, "ssh-keyscan"},
		hb.hungAfterLogin.Addr: {"runs no command", "no answer"},
	}
	start := time.Now()
	out, stderr, code := e.cliWithin(30*time.Second, "providers", "check")
	took := time.Since(start)
	t.Logf("shoal providers check took %v:\n%s%s", took.Round(time.Millisecond), out, stderr)
	if code == 0 {
		t.Fatalf("shoal providers check exited 0 with every fault there")
	}
	if took > 10*time.Second {
		t.Errorf("shoal providers check took %v with connect_timeout 2s", took)
	}
	checkPerHost(t, "shoal providers check", out+stderr, want)

	// Each group's start fails on the instance with the reason, and the
	// core keeps answering.
	for group, says := range map[string]string{"hostkey": "host key", "userkey": "refused the key", "noport": "port", "hung": "timeout", "stuck": "no answer", "nobin": "/opt/shoal-test-missing/app"} {
		e.eventually(group+"'s start fails with the reason", 30*time.Second, func() error {
			st := groupOf(t, e.status(), group)
			for _, f := range st.LastFailures {
				if strings.Contains(strings.ToLower(f.Reason), strings.ToLower(says)) {
					return nil
				}
			}
			return fmt.Errorf("recent failures %+v, want one saying %q", st.LastFailures, says)
		})
	}
	hs := e.hostStatuses()
	for _, h := range []*testhost.Host{hb.wrongHostKey, hb.wrongKey, hb.hung, hb.hungAfterLogin} {
		if hs[h.Addr].State == provider.HostUp || hs[h.Addr].LastError == "" {
			t.Errorf("host %s shows %+v, want not up, with its last error", h.Addr, hs[h.Addr])
		}
	}
	// The reconciler is not stuck behind the hung host: a scale answers.
	if out, stderr, code := e.cliWithin(30*time.Second, "scale", "web", "--size", "2", "--sync"); code != 0 {
		t.Fatalf("scale web to 2 beside the bad hosts: exit %d:\n%s%s", code, out, stderr)
	}
	e.waitInService("web", 2)
	// A scale of the groups on the hung hosts ends in bounded time too,
	// failed, with the reason.
	for g, h := range map[string]*testhost.Host{"hung": hb.hung, "stuck": hb.hungAfterLogin} {
		out, stderr, code = e.cliWithin(30*time.Second, "scale", g, "--size", "2", "--sync")
		t.Logf("scale of the group on the hung host: exit %d: %s%s", code, out, stderr)
		if code == 0 || !strings.Contains(out+stderr, "failed") || !strings.Contains(out+stderr, h.Addr) {
			t.Fatalf("scale %s --size 2 --sync: exit %d; want a failed job naming host %s:\n%s%s", g, code, h.Addr, out, stderr)
		}
	}
	if _, _, code := e.cliWithin(10*time.Second, "status"); code != 0 {
		t.Fatal("shoal status fails after the bad scale")
	}

	// validate: no host is touched, and the config's own faults are named.
	garbage := filepath.Join(dir, "not_a_key")
	if err := os.WriteFile(garbage, []byte("this is no key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	emptyKnown := filepath.Join(dir, "known_hosts_empty")
	if err := os.WriteFile(emptyKnown, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host sshHost
		says []string
	}{
		{sshHost{h: hb.good, keyFile: garbage}, []string{garbage}},
		{sshHost{h: hb.good, keyFile: filepath.Join(dir, "no_such_key")}, []string{"no_such_key"}},
		{sshHost{h: hb.good, knownHosts: emptyKnown}, []string{hb.good.Addr, emptyKnown}},
	} {
		v := newEnv(t, sshProviders(lab, filepath.Join(dir, "remote"), map[string][]sshHost{"rack": {c.host}}), sshGroup("web", "rack", 1, 2, ""))
		out, stderr, code := v.cliWithin(10*time.Second, "validate")
		if code == 0 {
			t.Errorf("shoal validate accepted %+v:\n%s", c.host, out)
			continue
		}
		for _, s := range c.says {
			if !strings.Contains(stderr+out, s) {
				t.Errorf("shoal validate with %+v: exit %d, the error does not name %q:\n%s%s", c.host, code, s, out, stderr)
			}
		}
	}
}

// checkPerHost asserts that what output says of each host (its lines from
// the first naming it to the first naming another) names what is wrong.
func checkPerHost(t *testing.T, what, output string, want map[string][]string) {
	t.Helper()
	lines := strings.Split(output, "\n")
	// An address is matched whole: 10.0.0.2 is in "10.0.0.22" as a string.
	whole := map[string]*regexp.Regexp{}
	for h := range want {
		whole[h] = regexp.MustCompile(`(^|[^0-9.])` + regexp.QuoteMeta(h) + `($|[^0-9])`)
	}
	hostOf := func(line string) string {
		for h, re := range whole {
			if re.MatchString(line) {
				return h
			}
		}
		return ""
	}
	for host, says := range want {
		var about []string
		in := false
		for _, line := range lines {
			if h := hostOf(line); h != "" {
				in = h == host
			}
			if in {
				about = append(about, line)
			}
		}
		text := strings.ToLower(strings.Join(about, "\n"))
		for _, s := range says {
			if !strings.Contains(text, strings.ToLower(s)) {
				t.Errorf("%s: what it says of host %s does not name %q:\n%s", what, host, s, strings.Join(about, "\n"))
			}
		}
	}
}

// TestSSHExampleValidates: examples/ssh-hosts.yaml passes `shoal validate`
// once its key file and known_hosts are in place (generated here, as its
// comments tell an operator to), without any of its hosts reachable:
// validate checks the ssh settings without connecting, and the template's
// program lives on the hosts, not here.
func TestSSHExampleValidates(t *testing.T) {
	parallel(t) // runs validate, no load
	src, err := os.ReadFile("../../examples/ssh-hosts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "ssh-hosts.yaml")
	if err := os.WriteFile(cfg, src, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "ssh", "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key).CombinedOutput(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("ssh-keygen: %v: %s; CI must have it (make test-deps)", err, out)
		}
		t.Skipf("ssh-keygen: %v: %s (apt-get install openssh-client)", err, out)
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	hostKey := strings.Join(strings.Fields(string(pub))[:2], " ")
	// Every address of the example, as ssh-keyscan would write it.
	var known strings.Builder
	for line := range strings.SplitSeq(string(src), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "-" || f[1] != "address:" {
			continue
		}
		addr := f[2]
		if h, p, err := net.SplitHostPort(addr); err == nil {
			addr = "[" + h + "]:" + p
		}
		fmt.Fprintf(&known, "%s %s\n", addr, hostKey)
	}
	if known.Len() == 0 {
		t.Fatal("no host address found in the example")
	}
	if err := os.WriteFile(filepath.Join(dir, "ssh", "known_hosts"), []byte(known.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(binDir, "shoal"), "validate", "-c", cfg).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OK") {
		t.Fatalf("shoal validate -c examples/ssh-hosts.yaml: %v\n%s", err, out)
	}
}
