package bench

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/shoal-lb/shoal/internal/trace"
)

// The flags more than one subcommand has are registered here, each once:
// commonFlags on every subcommand by run, the others by the subcommands
// that take them.

// UsageError wraps a flag problem found after parsing.
type UsageError struct{ Err error }

func (u UsageError) Error() string { return u.Err.Error() }

// BadUsage returns a usage error (exit status 2).
func BadUsage(format string, a ...any) error { return UsageError{fmt.Errorf(format, a...)} }

// Parse parses a subcommand's flags, turning flag errors into usage errors.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return UsageError{err}
	}
	if fs.NArg() > 0 {
		return BadUsage("unexpected arguments %q", fs.Args())
	}
	return nil
}

// BinFlags locate the binaries a benchmark starts: -bin, the directory
// with demo-backend, and -shoal.
type BinFlags struct {
	dir, Shoal string
}

func (b *BinFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&b.dir, "bin", "bin", "directory with demo-backend")
	b.RegisterShoal(fs)
}

// RegisterShoal registers -shoal alone, for a benchmark that starts no
// demo-backend of its own.
func (b *BinFlags) RegisterShoal(fs *flag.FlagSet) {
	fs.StringVar(&b.Shoal, "shoal", "bin/shoal", "the shoal binary")
}

// Resolve returns the absolute paths of demo-backend and shoal.
func (b *BinFlags) Resolve() (backend, shoal string, err error) {
	backend, err = filepath.Abs(filepath.Join(b.dir, "demo-backend"))
	if err != nil {
		return "", "", err
	}
	if _, err := os.Stat(backend); err != nil {
		return "", "", fmt.Errorf("demo-backend: %w (run make build)", err)
	}
	shoal, err = filepath.Abs(b.Shoal)
	return backend, shoal, err
}

// SLOFlag registers -slo, the p99 latency a second may have.
func SLOFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("slo", 100*time.Millisecond, "p99 latency SLO")
}

// TraceFlags choose a window of a per-minute trace: -trace, -from, -to.
type TraceFlags struct {
	path, from, to string
}

func (t *TraceFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&t.path, "trace", "", "per-minute trace (default: ../shared/traces/worldcup98_requests_per_minute.csv)")
	fs.StringVar(&t.from, "from", "1998-06-30T08:00", "window start, UTC")
	fs.StringVar(&t.to, "to", "1998-07-01T08:00", "window end, UTC")
}

// TraceWindow is the window TraceFlags chose.
type TraceWindow struct {
	Path     string // the file read
	From, To time.Time
	Series   trace.Series // the whole trace: the history before the window too
	Window   trace.Series // its minutes from From to To
}

// Read reads the trace (the World Cup 1998 trace when -trace is empty) and
// cuts the window; its errors are usage errors.
func (t *TraceFlags) Read() (TraceWindow, error) {
	tw := TraceWindow{Path: t.path}
	var err error
	if tw.From, err = trace.ParseTime(t.from); err != nil {
		return tw, BadUsage("-from: %v", err)
	}
	if tw.To, err = trace.ParseTime(t.to); err != nil {
		return tw, BadUsage("-to: %v", err)
	}
	if tw.Path == "" {
		if tw.Path = trace.WorldCup98Path(); tw.Path == "" {
			return tw, BadUsage("-trace: not given and the World Cup 1998 trace was not found")
		}
	}
	if tw.Series, err = trace.ReadFile(tw.Path); err != nil {
		return tw, BadUsage("%v", err)
	}
	if tw.Window, err = tw.Series.Window(tw.From, tw.To); err != nil {
		return tw, BadUsage("%v", err)
	}
	return tw, nil
}
