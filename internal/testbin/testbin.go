// Package testbin holds what the tests of several packages share to run
// real instances: the repository's demo-backend built once per test binary,
// a GET that only ever goes to loopback, and a writer safe to read while a
// process or goroutine writes it.
package testbin

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	dir  string
	demo = sync.OnceValues(func() (string, error) {
		d, err := os.MkdirTemp("", "shoal-testbin")
		if err != nil {
			return "", err
		}
		dir = d
		bin := filepath.Join(d, "demo-backend")
		if out, err := exec.Command("go", "build", "-o", bin, "github.com/shoal-lb/shoal/cmd/demo-backend").CombinedOutput(); err != nil {
			return "", fmt.Errorf("build demo-backend: %w\n%s", err, out)
		}
		return bin, nil
	})
)

// Main runs a package's tests and removes what was built for them: a
// package that uses DemoBackend calls it from TestMain. after runs once
// the tests are done (stopping what they shared).
func Main(m *testing.M, after ...func()) {
	code := m.Run()
	for _, f := range after {
		f()
	}
	if dir != "" {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// DemoBackend returns the path of cmd/demo-backend built from this checkout,
// building it on the first call.
func DemoBackend(t testing.TB) string {
	t.Helper()
	bin, err := demo()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// Get asks addr for / and returns who answered (demo-backend's X-Instance
// header), retrying for up to 5 s while it starts. addr must be on
// 127.0.0.0/8: emulators invent addresses that no test may send to.
func Get(t testing.TB, addr string) string {
	t.Helper()
	host, _, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		t.Fatalf("refusing to send traffic to %s: not loopback", addr)
	}
	var last error
	for range 50 {
		resp, err := http.Get("http://" + addr + "/")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.Header.Get("X-Instance")
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("GET %s: %v", addr, last)
	return ""
}

// Buffer is a strings.Builder that may be written and read concurrently.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *Buffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *Buffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
