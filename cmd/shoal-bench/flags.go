package main

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

// usageError wraps a flag problem found after parsing.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }

// badUsage returns a usage error (exit status 2).
func badUsage(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// parse parses a subcommand's flags, turning flag errors into usage errors.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return badUsage("unexpected arguments %q", fs.Args())
	}
	return nil
}

// commonFlags are the flags every subcommand has.
type commonFlags struct {
	out   string
	smoke bool
}

func (c *commonFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.out, "out", "bench/results", "directory for the TIMESTAMP-NAME.json and .md reports")
	fs.BoolVar(&c.smoke, "smoke", false, "mark the report as a smoke run (proves the harness works; not a measurement)")
}

// binFlags locate the binaries a benchmark starts: -bin, the directory
// with demo-backend, and -shoal.
type binFlags struct {
	dir, shoal string
}

func (b *binFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&b.dir, "bin", "bin", "directory with demo-backend")
	b.registerShoal(fs)
}

// registerShoal registers -shoal alone, for a benchmark that starts no
// demo-backend of its own.
func (b *binFlags) registerShoal(fs *flag.FlagSet) {
	fs.StringVar(&b.shoal, "shoal", "bin/shoal", "the shoal binary")
}

// resolve returns the absolute paths of demo-backend and shoal.
func (b *binFlags) resolve() (backend, shoal string, err error) {
	backend, err = filepath.Abs(filepath.Join(b.dir, "demo-backend"))
	if err != nil {
		return "", "", err
	}
	if _, err := os.Stat(backend); err != nil {
		return "", "", fmt.Errorf("demo-backend: %w (run make build)", err)
	}
	shoal, err = filepath.Abs(b.shoal)
	return backend, shoal, err
}

// sloFlag registers -slo, the p99 latency a second may have.
func sloFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("slo", 100*time.Millisecond, "p99 latency SLO")
}

// traceFlags choose a window of a per-minute trace: -trace, -from, -to.
type traceFlags struct {
	path, from, to string
}

func (t *traceFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.path, "trace", "", "per-minute trace (default: ../shared/traces/worldcup98_requests_per_minute.csv)")
	fs.StringVar(&t.from, "from", "1998-06-30T08:00", "window start, UTC")
	fs.StringVar(&t.to, "to", "1998-07-01T08:00", "window end, UTC")
}

// traceWindow is the window traceFlags chose.
type traceWindow struct {
	Path     string // the file read
	From, To time.Time
	Series   trace.Series // the whole trace: the history before the window too
	Window   trace.Series // its minutes from From to To
}

// read reads the trace (the World Cup 1998 trace when -trace is empty) and
// cuts the window; its errors are usage errors.
func (t *traceFlags) read() (traceWindow, error) {
	tw := traceWindow{Path: t.path}
	var err error
	if tw.From, err = trace.ParseTime(t.from); err != nil {
		return tw, badUsage("-from: %v", err)
	}
	if tw.To, err = trace.ParseTime(t.to); err != nil {
		return tw, badUsage("-to: %v", err)
	}
	if tw.Path == "" {
		if tw.Path = trace.WorldCup98Path(); tw.Path == "" {
			return tw, badUsage("-trace: not given and the World Cup 1998 trace was not found")
		}
	}
	if tw.Series, err = trace.ReadFile(tw.Path); err != nil {
		return tw, badUsage("%v", err)
	}
	if tw.Window, err = tw.Series.Window(tw.From, tw.To); err != nil {
		return tw, badUsage("%v", err)
	}
	return tw, nil
}
