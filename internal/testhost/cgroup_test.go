package testhost

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestCgroup: processes started in a group are killed together, in a new
// group each round.
func TestCgroup(t *testing.T) {
	for round := range 2 {
		cg, err := NewCgroup(fmt.Sprint("test", round))
		if errors.Is(err, ErrUnsupported) && os.Getenv("CI") == "" {
			t.Skip(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer cg.Close()
		// sh forks a child that the kill must take too.
		cmd := exec.Command("sh", "-c", "sleep 60 & sleep 60")
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cg.FD()}
		out, _ := os.CreateTemp(t.TempDir(), "out")
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			pids, err := cg.PIDs()
			if err != nil {
				t.Fatal(err)
			}
			if len(pids) == 3 {
				break
			}
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(out.Name())
				t.Fatalf("round %d: the group has %v, want sh and its two sleeps (%s)", round, pids, b)
			}
			time.Sleep(10 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := cg.Kill(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		if err := cmd.Wait(); err == nil || cmd.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: sh exited %v, want killed", round, err)
		}
		if pids, _ := cg.PIDs(); len(pids) != 0 {
			t.Fatalf("round %d: %v left", round, pids)
		}
	}
}
