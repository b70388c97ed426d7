// Command shoal-bench runs shoal's benchmarks and writes each run's report to
// bench/results/TIMESTAMP-NAME.json and .md, every figure next to its
// baseline measured in the same run (the machine's speed drifts, so a
// figure from another day is no baseline).
//
// Usage:
//
//	shoal-bench SUBCOMMAND [flags]
//	shoal-bench SUBCOMMAND -h
//
// Run it from the repository root (paths such as bin/ and bench/results are
// relative to it). Each subcommand lives in its own file and registers itself
// with register; `shoal-bench` without arguments lists them. Everything a
// benchmark starts listens on 127.0.0.1 only, runs in its own process group
// and is stopped when the benchmark ends, Ctrl-C included. See bench/README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"syscall"
)

// command is one benchmark.
type command struct {
	name    string
	summary string
	// run parses args with fs (whose common flags are already registered)
	// and measures. It returns the report to write, or nil for none.
	run func(ctx context.Context, env *Env, fs *flag.FlagSet, args []string) (*Report, error)
}

var commands = map[string]*command{}

// register adds a subcommand; each benchmark's file calls it from init.
func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("shoal-bench: subcommand registered twice: " + c.name)
	}
	commands[c.name] = c
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "shoal-bench:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "shoal-bench:", err)
		os.Exit(1)
	}
}

// errUsage marks bad command-line input (exit status 2).
var errUsage = errors.New("usage")

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: shoal-bench SUBCOMMAND [flags]\n\nsubcommands:")
	for _, name := range slices.Sorted(maps.Keys(commands)) {
		fmt.Fprintf(w, "  %-12s %s\n", name, commands[name].summary)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		return flag.ErrHelp
	}
	c, ok := commands[args[0]]
	if !ok {
		usage(stderr)
		return fmt.Errorf("%w: unknown subcommand %q", errUsage, args[0])
	}
	fs := flag.NewFlagSet("shoal-bench "+c.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var common commonFlags
	common.register(fs)

	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	env, err := NewEnv(log)
	if err != nil {
		return err
	}
	rep, err := c.run(ctx, env, fs, args[1:])
	var ue usageError
	usageErr := errors.Is(err, flag.ErrHelp) || errors.As(err, &ue)
	// A failed measurement keeps its logs; bad flags have none worth keeping.
	if cerr := env.Close(err != nil && !usageErr); err == nil && cerr != nil {
		err = cerr
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		return err
	case usageErr:
		return fmt.Errorf("%w: %s: %v", errUsage, c.name, ue.err)
	case err != nil:
		return fmt.Errorf("%s: %w", c.name, err)
	}
	if rep == nil { // the demo: its output is the terminal
		return nil
	}
	rep.Name = c.name
	rep.Smoke = common.smoke
	md, js, err := rep.Write(common.out)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(md)
	if err == nil {
		stdout.Write(data)
	}
	log.Info("wrote report", "markdown", md, "json", js)
	return nil
}
