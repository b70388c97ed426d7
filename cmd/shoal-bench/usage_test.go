package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestUsage(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	for _, args := range [][]string{
		{"nosuch"},
		{"throughput", "-rounds", "0"},
		{"throughput", "-tool", "ab"},
		{"throughput", "extra"},
		{"throughput", "-bogus"},
	} {
		err := run(context.Background(), args, io.Discard, io.Discard)
		if !errors.Is(err, errUsage) {
			t.Errorf("run %q = %v, want a usage error", args, err)
		}
	}
	if kept, _ := filepath.Glob(filepath.Join(os.TempDir(), "shoal-bench.*")); len(kept) > 0 {
		t.Errorf("usage errors left scratch directories: %v", kept)
	}
	if err := run(context.Background(), nil, io.Discard, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("run without arguments = %v, want the subcommand list", err)
	}
}

func TestAutoscaleUsage(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	for _, args := range [][]string{
		{"reaction", "-runs", "0"},
		{"reaction", "-rate", "10", "-work-ms", "1", "-threshold", "50"}, // step below the threshold
		{"collection", "-sizes", "200,20"},
		{"collection", "-sizes", "x"},
		{"overload", "-policies", "hpa"},
		{"overload", "-minutes", "0"},
		{"demo", "-steps", "fast"},
	} {
		if err := run(context.Background(), args, io.Discard, io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("run %q = %v, want a usage error", args, err)
		}
	}
}

func TestChaosUsage(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	for _, args := range [][]string{
		{"chaos", "-events", "explode"},
		{"chaos", "-events", "kill:0"},
		{"chaos", "-posts", "200"},
		{"chaos", "-requests", "0"},
		{"chaos", "-quiet", "0s"},
	} {
		if err := run(context.Background(), args, io.Discard, io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("run %q = %v, want a usage error", args, err)
		}
	}
}
