package docgen

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/shoal-lb/shoal/internal/cli"
	"github.com/shoal-lb/shoal/internal/config"
)

const root = "../.."

// TestDocsUpToDate fails when a generated page of docs/ is not what the
// code says: a key, command, flag or metric changed without `make docs`.
func TestDocsUpToDate(t *testing.T) {
	stale, err := Stale(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range stale {
		t.Errorf("%s is stale: run make docs", p)
	}
}

// TestConfigSchemaCompiles fails when the generated schema is not one an
// editor can compile.
func TestConfigSchemaCompiles(t *testing.T) {
	s, _, err := configSchema(root)
	if err != nil {
		t.Fatal(err)
	}
	b, err := renderSchema(s)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(config.SchemaID, doc); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compile(config.SchemaID); err != nil {
		t.Fatalf("the generated schema does not compile: %v", err)
	}
}

// TestConfigReferenceComplete fails when the walk misses sections.
func TestConfigReferenceComplete(t *testing.T) {
	_, rows, err := configSchema(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) < 150 {
		t.Errorf("%d keys in the reference; the walk missed sections", len(rows))
	}
}

// TestCLIReference checks that the page has every visible command with
// its usage and flags, and no hidden one.
func TestCLIReference(t *testing.T) {
	page := cliReference(cli.Root())
	for _, want := range []string{
		"### shoal scale\n", "shoal scale GROUP", "--sync",
		"### shoal policy simulate\n", "### shoal completion bash\n",
		"## Global flags", "-c, --config string",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the CLI reference lacks %q", want)
		}
	}
	if strings.Contains(page, "### shoal man") {
		t.Error("the CLI reference lists the hidden man command")
	}
}

// TestMetricsReference checks rows of each kind of collector: a vector, a
// histogram, a counter func, a collector of promexp's own, core's, and
// those of notify and gslb.
func TestMetricsReference(t *testing.T) {
	page, err := metricsReference()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| `shoal_jobs_total` | counter | `group`, `source`, `state` |",
		"| `shoal_scale_latency_seconds` | histogram | `group` |",
		"| `shoal_haproxy_restarts_total` | counter |  |",
		"| `shoal_group_size` | gauge | `group` |",
		"| `shoal_instance_cpu_seconds_total` | counter | `group`, `instance` |",
		"| `shoal_tls_certificate_expiry_seconds` | gauge | `frontend`, `site`, `name` |",
		"| `shoal_notifications_dropped_total` | counter | `target`, `reason` |",
		"| `shoal_gslb_site_up` | gauge | `record`, `address` |",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the metrics reference lacks %q", want)
		}
	}
	if strings.Contains(page, "go_goroutines") {
		t.Error("the metrics reference lists the Go runtime's metrics")
	}
}

// TestWriteThenFresh writes the pages into a copy of docs/ and finds none
// stale there.
func TestWriteThenFresh(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The config reference reads the doc comments from the source.
	if err := os.Symlink(filepath.Join(must(filepath.Abs(root)), "internal"), filepath.Join(dir, "internal")); err != nil {
		t.Fatal(err)
	}
	if err := Write(dir); err != nil {
		t.Fatal(err)
	}
	stale, err := Stale(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) > 0 {
		t.Errorf("stale right after Write: %v", stale)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
