package proc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
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

func TestEnvironAndCPUTicks(t *testing.T) {
	p, err := Start(Spec{Argv: []string{"/bin/sleep", "60"}, Env: []string{"SHOAL_TEST_MARK=yes"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-p.PID(), syscall.SIGKILL) })
	env, err := Environ(p.PID())
	if err != nil {
		t.Fatal(err)
	}
	if len(env) != 1 || env[0] != "SHOAL_TEST_MARK=yes" {
		t.Fatalf("environ = %q", env)
	}
	if _, err := CPUTicks(os.Getpid()); err != nil {
		t.Fatal(err)
	}
}
