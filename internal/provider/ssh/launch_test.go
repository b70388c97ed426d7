package ssh

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/testhost"
)

// hangAfterLaunch is sshd's ForceCommand on a test host that hangs after
// starting an instance: the first launch of instance $2 in shoal's
// long-lived shell runs (the process starts), but nothing the shell prints
// from then on reaches shoal, so the launch times out. $1 is a file made
// when it happens; sessions after it, and every other session, run as
// asked. (mawk reads a pipe a block at a time unless -W interactive;
// gawk ignores that option.)
const hangAfterLaunch = `#!/bin/sh
flag=$1 name=$2
if [ "$SSH_ORIGINAL_COMMAND" != "exec sh" ] || [ -e "$flag" ]; then
	exec sh -c "$SSH_ORIGINAL_COMMAND"
fi
sentinel=shoal-test-hang-$$
while IFS= read -r line; do
	case $line in
	*"SHOAL_INSTANCE=$name"*)
		if [ ! -e "$flag" ]; then
			: >"$flag"
			printf 'echo %s\n' "$sentinel"
		fi ;;
	esac
	printf '%s\n' "$line"
done | sh | awk -W interactive -v s="$sentinel" '$0 == s { hang = 1 } !hang { print; fflush() }'
`

// hangingLaunch makes lab host h hang after starting instance name, and
// returns the file made when it does and a template whose process writes
// its pid to the returned pid file.
func hangingLaunch(t *testing.T, h *testhost.Host, name string) (flag, pidFile string, tmpl config.Template) {
	t.Helper()
	dir := t.TempDir()
	wrapper := filepath.Join(dir, "hang-after-launch")
	if err := os.WriteFile(wrapper, []byte(hangAfterLaunch), 0o755); err != nil {
		t.Fatal(err)
	}
	flag, pidFile = filepath.Join(dir, "hung"), filepath.Join(dir, "pid")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.ForceCommand(ctx, wrapper+" "+flag+" "+name); err != nil {
		t.Fatal(err)
	}
	tmpl, err := config.NewTemplate([]string{"/bin/sh", "-c", `echo $$ >"$0"; exec sleep 600`, pidFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.Dir, tmpl.StopTimeout = dir, time.Second
	return flag, pidFile, tmpl
}

// launchedPID waits for the pid the instance's process wrote.
func launchedPID(t *testing.T, pidFile string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(pidFile)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatal("the instance's process never started: the test host did not hang after starting it")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// markedAs lists the processes (hosts share this machine's pid space)
// carrying owner's marker and instance name's, as a sweep finds them.
func markedAs(owner, name string) []int {
	var pids []int
	files, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		vars := bytes.Split(b, []byte{0})
		has := func(kv string) bool {
			for _, v := range vars {
				if string(v) == kv {
					return true
				}
			}
			return false
		}
		if has(envOwner+"="+owner) && has(envInstance+"="+name) {
			if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil && !zombie(pid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// alive reports whether pid runs (not a zombie).
func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil && !zombie(pid)
}

// waitUp waits until p is connected to host addr: the host's sshd has just
// restarted, and a start before that finds no host to take it.
func waitUp(t *testing.T, p *Provider, addr string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for hostStatus(p, addr).State != provider.HostUp {
		if time.Now().After(deadline) {
			t.Fatalf("host %s not up: %+v", addr, hostStatus(p, addr))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// abandonedOn reports whether p still notes a failed launch of name on
// host addr.
func abandonedOn(p *Provider, addr, name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.hosts[addr]
	return h != nil && h.abandoned[name] != nil
}

// TestLaunchTimeoutStopsProcess: a host hangs after the launch started the
// instance's process (setsid ran, its answer never comes), so the launch
// times out. The process it started is stopped by its marker, and nothing
// marked as the instance is left on the host.
func TestLaunchTimeoutStopsProcess(t *testing.T) {
	t.Parallel() // its own lab (namespaces, sshd, /30s), owner, state and remote dirs
	l := newLab(t, 1)
	h := l.Hosts[0]
	flag, pidFile, tmpl := hangingLaunch(t, h, "web-001")
	cfg := labConfig(t, l)
	// Not marked down (and held off) for its hang: it is placed on again
	// at the end.
	cfg.HostDownAfter = time.Minute
	p := runProvider(t, cfg, Options{StateDir: t.TempDir()})
	waitUp(t, p, h.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	began := time.Now()
	_, err := p.Start(ctx, spec("web", 1, tmpl))
	if err == nil {
		t.Fatal("the launch on a host that hangs succeeded")
	}
	t.Logf("start failed after %s: %v", time.Since(began).Round(time.Millisecond), err)
	if _, serr := os.Stat(flag); serr != nil {
		t.Fatalf("the host did not hang after the launch (%v); the start failed otherwise: %v", serr, err)
	}
	pid := launchedPID(t, pidFile)
	failed := time.Now()
	deadline := failed.Add(20 * time.Second)
	for alive(pid) || len(markedAs(p.owner, "web-001")) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("20s after the failed launch, its process %d runs (alive %v) and processes marked web-001 are left: %v", pid, alive(pid), markedAs(p.owner, "web-001"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the process the failed launch started was stopped %s after the failure", time.Since(failed).Round(time.Millisecond))
	deadline = time.Now().Add(5 * time.Second)
	for abandonedOn(p, h.Addr, "web-001") {
		if time.Now().After(deadline) {
			t.Fatal("the failed launch is still noted although nothing of it is left")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The host works again, and the name is free for a new start.
	in := start(t, p, spec("web", 1, tmpl))
	if !running(in.Record()) || in.Record().Host != h.Addr {
		t.Fatalf("a new start after the failed one: %+v", in.Record())
	}
}

// TestLaunchTimeoutHostUnreachable: the host hangs after starting the
// process and is then cut off, so the process cannot be stopped at once:
// the failed launch stays noted ("to be stopped") while the host is
// unreachable, and its process is stopped when the host is back. The host
// is not down long enough to be marked down, and no sweep ran: only the
// noted launch stops the process.
func TestLaunchTimeoutHostUnreachable(t *testing.T) {
	t.Parallel() // its own lab (namespaces, sshd, /30s), owner, state and remote dirs
	l := newLab(t, 1)
	h := l.Hosts[0]
	flag, pidFile, tmpl := hangingLaunch(t, h, "web-001")
	cfg := labConfig(t, l)
	cfg.HostDownAfter = time.Minute
	p := runProvider(t, cfg, Options{StateDir: t.TempDir()})
	waitUp(t, p, h.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		// Cut off as soon as it hangs, before the launch times out.
		for ctx.Err() == nil {
			if _, err := os.Stat(flag); err == nil {
				linkDown(t, ctx, h)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	_, err := p.Start(ctx, spec("web", 1, tmpl))
	if err == nil {
		t.Fatal("the launch on a host that hangs succeeded")
	}
	t.Logf("start failed: %v", err)
	pid := launchedPID(t, pidFile)
	time.Sleep(3 * time.Second) // polls and reconnections fail meanwhile
	if !alive(pid) {
		t.Fatal("the process died while its host was cut off")
	}
	if !abandonedOn(p, h.Addr, "web-001") {
		t.Fatal("the failed launch whose process could not be stopped is forgotten")
	}
	if err := h.LinkUp(ctx); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	deadline := back.Add(45 * time.Second) // reconnection back-off included
	for alive(pid) || len(markedAs(p.owner, "web-001")) > 0 || abandonedOn(p, h.Addr, "web-001") {
		if time.Now().After(deadline) {
			t.Fatalf("45s after the host is back, the failed launch's process %d runs (alive %v), marked: %v, noted: %v",
				pid, alive(pid), markedAs(p.owner, "web-001"), abandonedOn(p, h.Addr, "web-001"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("stopped %s after the host was back", time.Since(back).Round(time.Millisecond))
}

// hangFirstStop is sshd's ForceCommand on a test host whose first stop
// command hangs without running (a host that takes the session and never
// answers it) while everything else, the polls included, runs as asked.
// $1 is a file made when it happens.
const hangFirstStop = `#!/bin/sh
flag=$1
case $SSH_ORIGINAL_COMMAND in
*"kill -TERM"*) if [ ! -e "$flag" ]; then : >"$flag"; exec sleep 3600; fi ;;
esac
exec sh -c "$SSH_ORIGINAL_COMMAND"
`

// TestStopHungRetried: a stop whose command hangs on a host that keeps
// answering its polls (no reconnection follows) fails as unreachable and
// ends the instance; the process it left running is stopped by a retry
// while the host answers, not left untracked until a reconnection that
// never comes.
func TestStopHungRetried(t *testing.T) {
	t.Parallel() // its own lab (namespaces, sshd, /30s), owner, state and remote dirs
	l := newLab(t, 1)
	h := l.Hosts[0]
	dir := t.TempDir()
	wrapper, flag := filepath.Join(dir, "hang-first-stop"), filepath.Join(dir, "hung")
	if err := os.WriteFile(wrapper, []byte(hangFirstStop), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h.ForceCommand(ctx, wrapper+" "+flag); err != nil {
		t.Fatal(err)
	}
	cfg := labConfig(t, l)
	cfg.HostDownAfter = time.Minute
	p := runProvider(t, cfg, Options{StateDir: t.TempDir()})
	waitUp(t, p, h.Addr)
	in := start(t, p, spec("web", 1, demoTemplate(t)))
	rec := in.Record()
	err := in.Stop(ctx)
	if err == nil {
		t.Fatal("a stop whose command hung succeeded")
	}
	if _, serr := os.Stat(flag); serr != nil {
		t.Fatalf("the stop did not hang (%v); it failed otherwise: %v", serr, err)
	}
	t.Logf("stop failed: %v; instance: %s", err, in.ExitReason())
	failed := time.Now()
	deadline := failed.Add(30 * time.Second)
	for running(rec) || len(markedAs(p.owner, rec.Name)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("30s after its stop hung, the instance's process runs (%v), marked: %v; host %+v", running(rec), markedAs(p.owner, rec.Name), hostStatus(p, h.Addr))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("stopped %s after the failed stop; host %s", time.Since(failed).Round(time.Millisecond), hostStatus(p, h.Addr).State)
}
