package proc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func startSleep(t *testing.T, script string) *Process {
	t.Helper()
	p, err := Start(Spec{Argv: []string{"/bin/sh", "-c", script}, Env: os.Environ()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-p.PID(), syscall.SIGKILL) })
	return p
}

func TestStartStopKillsWholeGroup(t *testing.T) {
	log := filepath.Join(t.TempDir(), "out.log")
	p, err := Start(Spec{Argv: []string{"/bin/sh", "-c", "echo hello; sleep 60 & wait"}, Env: os.Environ(), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-p.PID(), syscall.SIGKILL) })
	if p.StartTicks() == 0 {
		t.Fatal("no start time recorded")
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if b, _ := os.ReadFile(log); strings.Contains(string(b), "hello") {
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Stop(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if GroupRunning(p.PID()) {
		t.Fatalf("process group %d still has running members", p.PID())
	}
	if b, _ := os.ReadFile(log); !strings.Contains(string(b), "hello") {
		t.Fatalf("log = %q, want hello", b)
	}
}

func TestStopEscalatesToSIGKILL(t *testing.T) {
	p := startSleep(t, "trap '' TERM; while :; do sleep 0.05; done")
	time.Sleep(100 * time.Millisecond) // let the shell install its trap
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := p.Stop(ctx, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("stopped after %v, before the grace period", d)
	}
	if !strings.Contains(p.ExitReason(), "killed") {
		t.Fatalf("exit reason %q, want killed", p.ExitReason())
	}
}

func TestAdoptDetectsExitAndReusedPID(t *testing.T) {
	p := startSleep(t, "sleep 60")
	a, err := Adopt(p.PID(), p.StartTicks())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Adopt(p.PID(), p.StartTicks()+1); !errors.Is(err, ErrGone) {
		t.Fatalf("adopt with wrong start time: %v, want ErrGone", err)
	}
	_ = p.Signal(syscall.SIGKILL)
	select {
	case <-a.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("adopted process exit not detected")
	}
	if _, err := Adopt(p.PID(), p.StartTicks()); !errors.Is(err, ErrGone) {
		t.Fatalf("adopt dead process: %v, want ErrGone", err)
	}
}

// TestEnvironAndCPUTicks also covers a race: Start used to return before the
// kernel had set up the new program's environment, so an immediate read of
// /proc/PID/environ could come back empty and the instance marker look absent.
func TestEnvironAndCPUTicks(t *testing.T) {
	for i := range 50 {
		p, err := Start(Spec{Argv: []string{"/bin/sleep", "60"}, Env: []string{"SHOAL_TEST_MARK=yes"}})
		if err != nil {
			t.Fatal(err)
		}
		env, err := Environ(p.PID())
		_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
		<-p.Done()
		if err != nil {
			t.Fatal(err)
		}
		if len(env) != 1 || env[0] != "SHOAL_TEST_MARK=yes" {
			t.Fatalf("start %d: environ = %q right after Start", i, env)
		}
	}
	if _, err := CPUTicks(os.Getpid()); err != nil {
		t.Fatal(err)
	}
}

func TestStopAfterLeaderExitStopsItsGroup(t *testing.T) {
	p := startSleep(t, "sleep 1000 & exec sleep 0.2")
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("leader did not exit")
	}
	if !GroupRunning(p.PID()) {
		t.Fatal("the leader's child is not running; the test proves nothing")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Stop(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if GroupRunning(p.PID()) {
		t.Fatalf("process group %d still has running members after Stop", p.PID())
	}
}

func TestStopContinuesAStoppedProcess(t *testing.T) {
	p := startSleep(t, "trap 'exit 0' TERM; while :; do sleep 0.05; done")
	time.Sleep(100 * time.Millisecond) // let the shell install its trap
	_ = p.Signal(syscall.SIGSTOP)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := p.Stop(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// SIGCONT lets it act on SIGTERM at once instead of waiting for SIGKILL.
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("stopped process took %v to stop: SIGTERM was not acted on", d)
	}
	if strings.Contains(p.ExitReason(), "killed") {
		t.Fatalf("exit reason %q: it needed SIGKILL", p.ExitReason())
	}
}

func TestAdoptMemberSignalsOnlyThatProcess(t *testing.T) {
	leader := startSleep(t, "sleep 1000 & wait")
	var member int
	for deadline := time.Now().Add(5 * time.Second); member == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		member = groupMember(t, leader.PID())
	}
	if member == 0 {
		t.Fatal("the leader's child did not show up")
	}
	start, err := StartTicks(member)
	if err != nil {
		t.Fatal(err)
	}
	m, err := AdoptMember(member, start)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Stop(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("member did not stop")
	}
	// The shell's wait returns once its child is gone, so the leader may exit
	// by itself; it must not have been signalled.
	<-leader.Done()
	if r := leader.ExitReason(); strings.Contains(r, "signal") {
		t.Fatalf("leader exited with %q: stopping a member signalled its group", r)
	}
}

// groupMember returns a running member of group pgid other than its leader, or 0.
func groupMember(t *testing.T, pgid int) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pgid {
			continue
		}
		if g, err := Pgid(pid); err == nil && g == pgid {
			return pid
		}
	}
	return 0
}
