package unixsock

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

func TestListenModeAndCleanup(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "api.sock")
	l, err := Listen(path, 0o600, "")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode = %v, want a 0600 socket", fi.Mode())
	}
	if got := l.Addr().String(); got != path {
		t.Errorf("Addr = %s, want %s", got, path)
	}
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Close()
		}
	}()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("dial the renamed socket: %v", err)
	}
	c.Close()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket file after Close: %v, want it removed", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("left behind in the socket's directory: %v", entries)
	}
}

// TestListenLeavesUmaskAlone: Listen used to set the process umask to 0177
// while it bound the socket, so processes forked at that moment created
// their files with mode 0600 instead of what the original umask gives.
func TestListenLeavesUmaskAlone(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := t.TempDir()

	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Go(func() {
			l, err := Listen(filepath.Join(dir, fmt.Sprintf("s%d.sock", i)), 0o600, "")
			if err != nil {
				errs <- err
				return
			}
			l.Close()
		})
		wg.Go(func() {
			f := filepath.Join(dir, fmt.Sprintf("file%d", i))
			if out, err := exec.Command("/bin/sh", "-c", `: > "$0"`, f).CombinedOutput(); err != nil {
				errs <- fmt.Errorf("create %s: %v: %s", f, err, out)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range n {
		fi, err := os.Stat(filepath.Join(dir, fmt.Sprintf("file%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o644 {
			t.Errorf("file%d has mode %v, want 0644 from umask 022", i, fi.Mode().Perm())
		}
	}
}
