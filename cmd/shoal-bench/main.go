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
// relative to it). Each benchmark is a package under internal/bench (its
// Command listed in commands below), the pieces they share are package
// internal/bench; `shoal-bench` without arguments lists them. Everything a
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

	"github.com/shoal-lb/shoal/internal/bench"
	"github.com/shoal-lb/shoal/internal/bench/canary"
	"github.com/shoal-lb/shoal/internal/bench/chaos"
	"github.com/shoal-lb/shoal/internal/bench/clouds"
	"github.com/shoal-lb/shoal/internal/bench/collection"
	"github.com/shoal-lb/shoal/internal/bench/compare"
	"github.com/shoal-lb/shoal/internal/bench/dashboard"
	"github.com/shoal-lb/shoal/internal/bench/demo"
	"github.com/shoal-lb/shoal/internal/bench/gslb"
	"github.com/shoal-lb/shoal/internal/bench/hostdrain"
	"github.com/shoal-lb/shoal/internal/bench/hosts"
	"github.com/shoal-lb/shoal/internal/bench/iobound"
	"github.com/shoal-lb/shoal/internal/bench/overload"
	"github.com/shoal-lb/shoal/internal/bench/reaction"
	"github.com/shoal-lb/shoal/internal/bench/replay"
	"github.com/shoal-lb/shoal/internal/bench/scale"
	"github.com/shoal-lb/shoal/internal/bench/scalefaults"
	"github.com/shoal-lb/shoal/internal/bench/spike"
	"github.com/shoal-lb/shoal/internal/bench/throughput"
	"github.com/shoal-lb/shoal/internal/bench/tlsbench"
	"github.com/shoal-lb/shoal/internal/bench/zero"
)

// commands are the benchmarks, by name.
var commands = index(chaos.Command, clouds.Command, collection.Command, compare.Command, dashboard.Command, demo.Command,
	canary.Command, gslb.Command, hostdrain.Command, hosts.Command, iobound.Command, overload.Command, reaction.Command, replay.Command, scale.Command, scalefaults.Command, spike.Command, throughput.Command, tlsbench.Command, zero.Command)

// index maps the benchmarks by name; a name given twice is a programming error.
func index(cs ...*bench.Command) map[string]*bench.Command {
	m := make(map[string]*bench.Command, len(cs))
	for _, c := range cs {
		if _, dup := m[c.Name]; dup {
			panic("shoal-bench: subcommand registered twice: " + c.Name)
		}
		m[c.Name] = c
	}
	return m
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
		fmt.Fprintf(w, "  %-12s %s\n", name, commands[name].Summary)
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
	fs := flag.NewFlagSet("shoal-bench "+c.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var common commonFlags
	common.register(fs)

	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	env, err := bench.NewEnv(log)
	if err != nil {
		return err
	}
	rep, err := c.Run(ctx, env, fs, args[1:])
	var ue bench.UsageError
	usageErr := errors.Is(err, flag.ErrHelp) || errors.As(err, &ue)
	// A failed measurement keeps its logs; bad flags have none worth keeping.
	if cerr := env.Close(err != nil && !usageErr); err == nil && cerr != nil {
		err = cerr
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		return err
	case usageErr:
		return fmt.Errorf("%w: %s: %v", errUsage, c.Name, ue.Err)
	case err != nil:
		return fmt.Errorf("%s: %w", c.Name, err)
	}
	if rep == nil { // the demo: its output is the terminal
		return nil
	}
	rep.Name = c.Name
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

// commonFlags are the flags every subcommand has.
type commonFlags struct {
	out   string
	smoke bool
}

func (c *commonFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.out, "out", "bench/results", "directory for the TIMESTAMP-NAME.json and .md reports")
	fs.BoolVar(&c.smoke, "smoke", false, "mark the report as a smoke run (proves the harness works; not a measurement)")
}
