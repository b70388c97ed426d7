package bench

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
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
	// provider/all is part of the config surface: it registers the types
	// of providers entries, without which config.Load knows none.
	allowed := map[string]bool{"dashboard/tour": true, "api": true, "config": true, "provider/all": true, "forecast": true, "loadgen": true, "sim": true, "testhost": true, "testmoto": true, "trace": true}
	// The benchmarks import the shared package (internal/bench), never each
	// other; only cmd/shoal-bench imports them.
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	benchmarks, err := filepath.Glob("*/*.go")
	if err != nil {
		t.Fatal(err)
	}
	main, err := filepath.Glob("../../cmd/shoal-bench/*.go")
	if err != nil {
		t.Fatal(err)
	}
	if len(benchmarks) == 0 || len(main) == 0 {
		t.Fatalf("no benchmarks (%d files) or no cmd/shoal-bench (%d files) found", len(benchmarks), len(main))
	}
	const internal = "github.com/shoal-lb/shoal/internal/"
	for _, name := range slices.Concat(files, benchmarks, main) {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			pkg, ok := strings.CutPrefix(path, internal)
			switch {
			case !ok || allowed[pkg]:
			case pkg == "bench" && !slices.Contains(files, name):
			case strings.HasPrefix(pkg, "bench/") && slices.Contains(main, name):
			case pkg == "bench" || strings.HasPrefix(pkg, "bench/"):
				t.Errorf("%s imports %s: a benchmark imports internal/bench only, and only cmd/shoal-bench imports the benchmarks", name, path)
			default:
				t.Errorf("%s imports %s: use the API client or the shoal binary instead", name, path)
			}
		}
	}
}
