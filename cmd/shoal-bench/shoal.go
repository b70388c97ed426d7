package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Shoal is a `shoal serve` the benchmark started, driven through its CLI as an
// operator would.
type Shoal struct {
	Bin    string // the shoal binary
	Config string // its config file
	Proc   *Proc
}

// StartShoal writes config to WORK/shoal.yaml and runs `shoal serve` on it.
func (e *Env) StartShoal(bin, config string) (*Shoal, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("shoal binary: %w (run make build)", err)
	}
	path := filepath.Join(e.Work, "shoal.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return nil, err
	}
	p, err := e.Start("shoal", bin, "serve", "-c", path)
	if err != nil {
		return nil, err
	}
	// SIGINT stops HAProxy and the instances too (SIGTERM would leave them
	// serving); give shoal time before SIGKILL, and stop whatever it leaves.
	p.Grace, p.Descendants, p.StopSignal = 20*time.Second, true, syscall.SIGINT
	return &Shoal{Bin: bin, Config: path, Proc: p}, nil
}

// CLI runs `shoal ARGS... -c CONFIG` and returns its standard output.
func (s *Shoal) CLI(ctx context.Context, timeout time.Duration, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.Bin, append(args, "-c", s.Config)...)
	var stderr limitedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("shoal %v: %w: %s", args, err, stderr.String())
	}
	return out, nil
}

// InService returns how many instances of group shoal reports in service.
func (s *Shoal) InService(ctx context.Context, group string) (int, error) {
	out, err := s.CLI(ctx, 10*time.Second, "status", "-o", "json")
	if err != nil {
		return 0, err
	}
	var st struct {
		Groups []struct {
			Name      string `json:"name"`
			Instances []struct {
				State string `json:"state"`
			} `json:"instances"`
		} `json:"groups"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return 0, fmt.Errorf("shoal status: %w", err)
	}
	n := 0
	for _, g := range st.Groups {
		if g.Name != group {
			continue
		}
		for _, in := range g.Instances {
			if in.State == "in-service" {
				n++
			}
		}
	}
	return n, nil
}

// WaitInService waits until at least n instances of group are in service.
func (s *Shoal) WaitInService(ctx context.Context, group string, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		got, err := s.InService(ctx, group)
		if err == nil && got >= n {
			return nil
		}
		if !s.Proc.Alive() {
			return fmt.Errorf("shoal exited")
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d instances of %s in service after %v (last error: %v)", got, n, group, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// limitedBuffer keeps the first 4 KiB written to it, for error messages.
type limitedBuffer struct{ b []byte }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := 4096 - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string { return string(l.b) }
