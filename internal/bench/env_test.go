package bench

import (
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestCloseKillsLeftovers: Close kills what a shoal left running from the
// scratch directory (its instances, its HAProxy), which the Env never
// started itself, and nothing else.
func TestCloseKillsLeftovers(t *testing.T) {
	env, err := NewEnv(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	// A program copied into the scratch directory, as the stand-in is,
	// and the same program elsewhere.
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	copyTo := func(dir string) string {
		b, err := os.ReadFile(sleep)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "standin")
		if err := os.WriteFile(path, b, 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	left := exec.Command(copyTo(env.Work), "60")
	other := exec.Command(copyTo(t.TempDir()), "60")
	for _, c := range []*exec.Cmd{left, other} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	exited := make(chan error, 1)
	go func() { exited <- left.Wait() }()

	if err := env.Close(false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = left.Process.Kill()
		t.Fatal("the process running from the scratch directory survived Close")
	}
	if err := other.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("a process outside the scratch directory was killed: %v", err)
	}
}
