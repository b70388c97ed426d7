// Package testetcd runs a real single-member etcd for tests: Debian's
// etcd-server (make test-deps installs it), on free ports of 127.0.0.1 with
// its data in the test's temporary directory. Tests of the HA pair elect,
// fence and share state through it as production does through three members.
package testetcd

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/testport"
)

// Binary is where Debian's etcd-server puts the server.
const Binary = "etcd"

// Server is one running etcd member.
type Server struct {
	// Endpoint is its client URL, http://127.0.0.1:PORT.
	Endpoint string
	dir      string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan error // receives cmd's end once
	out    *bytes.Buffer
}

// Args is the command line of a single-member etcd named name, with its data
// in dataDir, serving clients on clientURL and its (unused) peer port on
// peerURL; the e2e lab runs it inside a network namespace with the same.
func Args(name, dataDir, clientURL, peerURL string) []string {
	return []string{
		"--name", name,
		"--data-dir", dataDir,
		"--listen-client-urls", clientURL,
		"--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL,
		"--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", name + "=" + peerURL,
		"--initial-cluster-state", "new",
		"--logger", "zap",
		"--log-level", "warn",
	}
}

// Start starts etcd for t and stops it when t ends. Without the binary the
// test is skipped, unless CI is set: there a missing etcd is a failure.
func Start(t testing.TB) *Server {
	t.Helper()
	path, err := exec.LookPath(Binary)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("etcd missing (CI is set): %v; run make test-deps", err)
		}
		t.Skipf("etcd missing: run make test-deps (Debian etcd-server): %v", err)
	}
	s := &Server{dir: t.TempDir()}
	t.Cleanup(func() {
		s.Kill()
		if t.Failed() {
			s.mu.Lock()
			t.Logf("etcd output:\n%s", s.out)
			s.mu.Unlock()
		}
	})
	// A port found free may be taken before etcd binds it: try again.
	for attempt := 0; ; attempt++ {
		err := s.start(path)
		if err == nil {
			return s
		}
		if attempt == 2 {
			t.Fatalf("start etcd: %v", err)
		}
	}
}

func (s *Server) start(path string) error {
	client, peer := freePort(), freePort()
	if client == 0 || peer == 0 {
		return fmt.Errorf("no free port on 127.0.0.1")
	}
	s.Endpoint = "http://127.0.0.1:" + strconv.Itoa(client)
	data := filepath.Join(s.dir, "data-"+strconv.Itoa(client))
	cmd := exec.Command(path, Args("default", data, s.Endpoint, "http://127.0.0.1:"+strconv.Itoa(peer))...)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = &lockedWriter{s: s, w: out}, &lockedWriter{s: s, w: out}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("run %s: %w", path, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	s.mu.Lock()
	s.cmd, s.out, s.exited = cmd, out, exited
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			s.mu.Lock()
			s.cmd = nil
			msg := out.String()
			s.mu.Unlock()
			return fmt.Errorf("etcd exited (%v) before it served:\n%s", err, msg)
		case <-ctx.Done():
			s.Kill()
			return fmt.Errorf("etcd at %s not healthy within 20s", s.Endpoint)
		case <-tick.C:
			if healthy(ctx, s.Endpoint) {
				return nil
			}
		}
	}
}

// Kill stops etcd at once (SIGKILL), as a crashed or cut-off member, and
// waits for it to exit.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		<-exited
	}
}

func healthy(ctx context.Context, endpoint string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/health", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func freePort() int {
	p, err := testport.Next()
	if err != nil {
		return 0
	}
	return p
}

// lockedWriter serialises etcd's output with reads of it.
type lockedWriter struct {
	s *Server
	w *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.w.Write(p)
}
