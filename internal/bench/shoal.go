package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	// The configs it loads name providers of every type.
	_ "github.com/shoal-lb/shoal/internal/provider/all"
)

// Shoal is a `shoal serve` the benchmark started, driven through its CLI as an
// operator would, or through its API where a benchmark polls. The harness
// knows shoal by these two surfaces alone, never by its internals.
type Shoal struct {
	Bin    string // the shoal binary
	Config string // its config file
	Cfg    *config.Config
	Proc   *Proc
	API    *API
	env    *Env
}

// StartShoalOn picks a free port on 127.0.0.1 for shoal's frontend and
// starts shoal on the config render writes for it (sh.URL is its frontend).
func (e *Env) StartShoalOn(bin string, render func(port int) string) (*Shoal, error) {
	port, err := e.FreePort()
	if err != nil {
		return nil, err
	}
	return e.StartShoal(bin, render(port))
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
	return e.StartShoalFile(bin, path)
}

// StartShoalFile runs `shoal serve` on the config file at path.
func (e *Env) StartShoalFile(bin, path string) (*Shoal, error) {
	return e.startShoalFile("shoal", bin, path)
}

// StartShoalNamed is StartShoal for one of several shoals running side by
// side: its config is WORK/NAME.yaml and its log WORK/NAME.log (each needs
// its own state_dir).
func (e *Env) StartShoalNamed(name, bin, config string, serveArgs ...string) (*Shoal, error) {
	path := filepath.Join(e.Work, name+".yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return nil, err
	}
	return e.startShoalFile(name, bin, path, serveArgs...)
}

func (e *Env) startShoalFile(name, bin, path string, serveArgs ...string) (*Shoal, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	p, err := e.StartServe(name, bin, path, serveArgs...)
	if err != nil {
		return nil, err
	}
	return &Shoal{Bin: bin, Config: path, Cfg: cfg, Proc: p, API: NewAPI(cfg.Admin.Socket), env: e}, nil
}

// URL returns the address of shoal's (first) frontend followed by path.
func (s *Shoal) URL(path string) string { return "http://" + s.Cfg.Frontends[0].Bind[0] + path }

// LogTail returns the last lines of the running core's log, for errors.
func (s *Shoal) LogTail(lines int) string { return s.env.LogTail(s.Proc.Name, lines) }

// StartServe runs `shoal serve -c path` as the process name (its log is
// WORK/NAME.log).
func (e *Env) StartServe(name, bin, path string, args ...string) (*Proc, error) {
	p, err := e.Start(name, append([]string{bin, "serve", "-c", path}, args...)...)
	if err != nil {
		return nil, err
	}
	// SIGINT stops HAProxy and the instances too (SIGTERM would leave them
	// serving); give shoal time before SIGKILL, and stop whatever it leaves.
	p.Grace, p.Descendants, p.StopSignal = 20*time.Second, true, syscall.SIGINT
	return p, nil
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

// PollEvery is how often the harness asks shoal when nothing is timed to
// the answer.
const PollEvery = 200 * time.Millisecond

// WaitInService polls shoal's API every `every` until at least n instances
// of group are in service; n = 0 waits for the API to answer. Its errors
// end with the tail of shoal's log.
func (s *Shoal) WaitInService(ctx context.Context, group string, n int, timeout, every time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		got, err := s.API.InService(ctx, group)
		if err == nil && got >= n {
			return nil
		}
		if !s.Proc.Alive() {
			return fmt.Errorf("shoal exited: %s", s.LogTail(5))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d instances of %s in service after %v (last error: %v): %s", got, n, group, timeout, err, s.LogTail(5))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
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
