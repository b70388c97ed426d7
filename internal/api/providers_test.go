package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/testbin"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/provider/local"
)

// localLogs serves the logs of instances a real local provider started;
// one name stands for an instance whose host is down.
type localLogs struct {
	p    *local.Provider
	recs map[string]provider.Record
}

func (l *localLogs) Hosts() []provider.HostStatus { return nil }

func (l *localLogs) PreflightProviders(context.Context) []provider.PreflightResult { return nil }

func (l *localLogs) InstanceLogs(ctx context.Context, name string, opts provider.LogOptions, w io.Writer) error {
	if name == "rack-001" {
		return fmt.Errorf("instance rack-001 on 10.0.0.2: %w: connection refused", provider.ErrHostDown)
	}
	rec, ok := l.recs[name]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownInstance, name)
	}
	return l.p.Logs(ctx, rec, opts, w)
}

// serveUnix serves h on a unix socket and returns a client for it.
func serveUnix(t *testing.T, h http.Handler) *Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return NewClient(sock)
}

// TestInstanceLogs: GET /v1/instances/{name}/logs through the client, on a
// real process's log: the newest lines, following as it writes, 404 for an
// unknown instance and 503 with the reason for one whose host is down.
func TestInstanceLogs(t *testing.T) {
	stateDir := t.TempDir()
	p := local.New(stateDir, nil)
	tmpl, err := config.NewTemplate([]string{"/bin/sh", "-c", `i=0; while :; do i=$((i+1)); echo "line $i"; sleep 0.01; done`}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.StopTimeout = 5 * time.Second
	inst, err := p.Start(context.Background(), provider.Spec{Group: "web", Name: "web-001", Index: 1, Template: tmpl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := inst.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	h := NewHandler(nil, nil, slog.New(slog.DiscardHandler), "",
		WithProviders(&localLogs{p: p, recs: map[string]provider.Record{"web-001": inst.Record()}}))
	c := serveUnix(t, h)
	ctx := context.Background()

	deadline := time.Now().Add(5 * time.Second)
	var out strings.Builder
	for {
		out.Reset()
		if err := c.Logs(ctx, "web-001", provider.LogOptions{Lines: 5}, &out); err != nil {
			t.Fatal(err)
		}
		if strings.Count(out.String(), "\n") == 5 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 5 || !strings.HasPrefix(lines[0], "line ") {
		t.Fatalf("lines=5 gave %q", out.String())
	}

	// Following: what is written after the request arrives too.
	fctx, cancel := context.WithCancel(ctx)
	var followed testbin.Buffer
	done := make(chan error, 1)
	go func() { done <- c.Logs(fctx, "web-001", provider.LogOptions{Lines: 1, Follow: true}, &followed) }()
	time.Sleep(time.Second)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("follow ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow did not end with its context")
	}
	if n := strings.Count(followed.String(), "\n"); n < 20 {
		t.Fatalf("followed %d lines in 1 s of a process writing 100 a second: %q", n, followed.String())
	}

	for _, tc := range []struct {
		name   string
		status int
		msg    string
	}{
		{"web-404", http.StatusNotFound, `unknown instance "web-404"`},
		{"rack-001", http.StatusServiceUnavailable, "instance rack-001 on 10.0.0.2: host is down: connection refused"},
	} {
		err := c.Logs(ctx, tc.name, provider.LogOptions{}, io.Discard)
		var ae *Error
		if !errors.As(err, &ae) || ae.Status != tc.status || ae.ErrorResponse.Error != tc.msg {
			t.Errorf("logs of %s: %v; want %d %q", tc.name, err, tc.status, tc.msg)
		}
	}
	// Bad parameters are refused before anything is read.
	resp, err := c.stream(ctx, "/v1/instances/web-001/logs?lines=-1")
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
		t.Errorf("lines=-1: %v %v; want 400", resp, err)
	}
}
