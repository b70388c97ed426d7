package main

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPublicSurface keeps the harness a client of shoal's public surface:
// the API's Go client and the shoal binary, plus the packages that are
// tools of their own (load generation, traces, the simulator, config
// parsing, the test hosts of the ssh benchmark). A benchmark that read
// shoal's internals would measure what an operator cannot see.
func TestPublicSurface(t *testing.T) {
	// testhost and testmoto make test hosts and run an emulator (moto) for
	// the hosts and clouds benchmarks, dashboard/tour drives a browser
	// through the dashboard's page, and forecast's backtest scores the
	// seasonal forecast on a trace as the simulator does: tools, not shoal.
	allowed := map[string]bool{"dashboard/tour": true, "api": true, "config": true, "forecast": true, "loadgen": true, "sim": true, "testhost": true, "testmoto": true, "trace": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	const internal = "github.com/shoal-lb/shoal/internal/"
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if pkg, ok := strings.CutPrefix(path, internal); ok && !allowed[pkg] {
				t.Errorf("%s imports %s: use the API client or the shoal binary instead", name, path)
			}
		}
	}
}
