// Package testmoto runs moto, an emulator of AWS APIs (PyPI moto[server]),
// on 127.0.0.1 for tests and benchmarks of the ec2 driver. `make test-deps`
// installs it in a virtualenv (scripts/install-moto.sh).
//
// Moto invents its instances' addresses: nothing may ever be sent to them.
// Only the emulator's own endpoint, on 127.0.0.1, is talked to.
package testmoto

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/testport"
)

// EnvBinary names the moto_server to run when it is neither in the
// virtualenv that scripts/install-moto.sh makes nor on PATH.
const EnvBinary = "SHOAL_MOTO_SERVER"

// ErrMissing reports that moto_server is not installed.
var ErrMissing = errors.New("moto_server is not installed (make test-deps installs it in ~/.cache/shoal-venv)")

// Binary finds moto_server: $SHOAL_MOTO_SERVER, the virtualenv
// ~/.cache/shoal-venv, or PATH.
func Binary() (string, error) {
	if b := os.Getenv(EnvBinary); b != "" {
		return b, nil
	}
	if home, err := os.UserHomeDir(); err == nil {
		b := filepath.Join(home, ".cache/shoal-venv/bin/moto_server")
		if _, err := os.Stat(b); err == nil {
			return b, nil
		}
	}
	if b, err := exec.LookPath("moto_server"); err == nil {
		return b, nil
	}
	return "", ErrMissing
}

// Server is a running moto_server.
type Server struct {
	// Endpoint is its URL, http://127.0.0.1:PORT.
	Endpoint string
	cmd      *exec.Cmd
	out      *limitedBuffer
	done     chan struct{}
}

// startTimeout bounds moto's start (about 5 s on a busy machine: it is
// Python importing every AWS service's model).
const startTimeout = 60 * time.Second

// Start runs moto_server on a free port of 127.0.0.1 and returns once it
// answers. Close stops it.
func Start(ctx context.Context) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &Server{
		Endpoint: "http://127.0.0.1:" + strconv.Itoa(port),
		out:      &limitedBuffer{max: 64 << 10},
		done:     make(chan struct{}),
	}
	s.cmd = exec.Command(bin, "-H", "127.0.0.1", "-p", strconv.Itoa(port))
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	// RunInstances with an AMI that does not exist fails, as on AWS.
	s.cmd.Env = append(os.Environ(), "MOTO_ENABLE_AMI_VALIDATION=true")
	// Its own process group: Close stops moto and whatever it forked.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start moto_server: %w", err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := s.waitReady(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("moto_server on port %d: %w; its output: %s", port, err, s.out.String())
	}
	return s, nil
}

// waitReady polls moto's own API until it answers.
func (s *Server) waitReady(ctx context.Context) error {
	c := &http.Client{Timeout: time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.Endpoint+"/moto-api/", nil)
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.done:
			return errors.New("exited before answering")
		case <-ctx.Done():
			return fmt.Errorf("no answer: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Close stops moto: SIGTERM to its process group, SIGKILL if it lingers.
func (s *Server) Close() {
	pgid := -s.cmd.Process.Pid
	syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		syscall.Kill(pgid, syscall.SIGKILL)
		<-s.done
	}
}

// ForTest starts moto for t and stops it when t ends. Without moto the
// test is skipped, except in CI (CI set), where .ci/run installs it and a
// skip would hide a broken driver.
func ForTest(t testing.TB) *Server {
	t.Helper()
	s := startFor(t)
	t.Cleanup(s.Close)
	return s
}

// startFor starts moto for t, skipping t (failing it in CI) without moto.
func startFor(t testing.TB) *Server {
	t.Helper()
	s, err := Start(context.Background())
	if errors.Is(err, ErrMissing) {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v; CI must have it", err)
		}
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// shared is Shared's moto: one per test binary, held by one test at a time.
var shared struct {
	mu  sync.Mutex // held by the test that has the server
	srv *Server
}

// Shared returns the test binary's own moto, started on the first call,
// with its state reset (moto makes its default VPC, subnets and images
// again), held by t until t ends: a test that takes it never runs beside
// another that does. Starting moto costs about 4 CPU-seconds (Python
// importing every AWS service's model); the ec2 driver's tests, one after
// the other, share one instead of starting eleven. Without moto the test
// is skipped, or fails in CI, as with ForTest. CloseShared stops it.
func Shared(t testing.TB) *Server {
	t.Helper()
	shared.mu.Lock()
	t.Cleanup(shared.mu.Unlock)
	if shared.srv != nil {
		select {
		case <-shared.srv.done: // died: start another
			shared.srv = nil
		default:
		}
	}
	if shared.srv == nil {
		shared.srv = startFor(t)
		return shared.srv
	}
	if err := shared.srv.reset(t.Context()); err != nil {
		t.Fatal(err)
	}
	return shared.srv
}

// CloseShared stops Shared's moto, if one runs: a package whose tests take
// it calls this once they are done (testbin.Main's after).
func CloseShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv != nil {
		shared.srv.Close()
		shared.srv = nil
	}
}

// reset empties every service of moto's (moto-api/reset).
func (s *Server) reset(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.Endpoint+"/moto-api/reset", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("reset moto: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("reset moto: %s", resp.Status)
	}
	return nil
}

// freePort returns a port of 127.0.0.1 that nothing listens on now.
func freePort() (int, error) { return testport.Next() }

// limitedBuffer keeps the first max bytes of moto's output, for errors.
type limitedBuffer struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := l.max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
