// Package bench holds what shoal's benchmarks share: starting shoal and
// its instances (Env, Shoal), load (wrk, hey, open-loop), the reports
// written to bench/results as JSON and Markdown, /proc CPU sampling, the
// config templates, the common flags and the numbers. Each benchmark is a
// package under it and imports only this one; cmd/shoal-bench runs them.
package bench

import (
	"context"
	"flag"
)

// Command is one benchmark: cmd/shoal-bench lists them and runs the one named.
type Command struct {
	Name    string
	Summary string
	// Run parses args with fs (whose common flags are already registered)
	// and measures. It returns the report to write, or nil for none.
	Run func(ctx context.Context, env *Env, fs *flag.FlagSet, args []string) (*Report, error)
}
