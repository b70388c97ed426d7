package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Every command's --help has an example.
func TestEveryCommandHasExample(t *testing.T) {
	var out bytes.Buffer
	root := newRoot(&options{stdout: &out, stderr: &out})
	var walk func(c *cobra.Command)
	walked := map[string]bool{}
	walk = func(c *cobra.Command) {
		walked[c.CommandPath()] = true
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%q has no Example", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	for _, path := range []string{"shoal scale", "shoal policy test", "shoal version", "shoal help", "shoal completion bash"} {
		if !walked[path] {
			t.Errorf("the walk did not reach %q", path)
		}
	}
	// And --help shows it.
	if code := Main([]string{"scale", "--help"}, &out, &out); code != 0 || !strings.Contains(out.String(), "Examples:\n  shoal scale web up") {
		t.Errorf("scale --help (exit %d):\n%s", code, out.String())
	}
}

// version writes the module version, the commit with its time and whether
// the tree was modified, the Go version, and what the real haproxy -v says.
func TestWriteVersion(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.0",
		Main:      debug.Module{Path: "github.com/shoal-lb/shoal", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "3f559ffabc"},
			{Key: "vcs.time", Value: "2026-11-25T13:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	var out bytes.Buffer
	writeVersion(context.Background(), &out, stamp{}, bi, "haproxy")
	got := out.String()
	for _, want := range []string{
		"shoal    v1.2.3\n",
		"commit   3f559ffabc (modified) 2026-11-25T13:00:00Z\n",
		"go       go1.26.0\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if !regexp.MustCompile(`(?m)^haproxy  2\.6\.\d+\S*$`).MatchString(got) {
		t.Errorf("no HAProxy 2.6 version in:\n%s", got)
	}

	out.Reset()
	writeVersion(context.Background(), &out, stamp{}, nil, filepath.Join(t.TempDir(), "no-haproxy"))
	if got := out.String(); !strings.Contains(got, "commit   (unknown)") || !strings.Contains(got, "built    (unknown)") || !strings.Contains(got, "haproxy  (unavailable: run ") {
		t.Errorf("without build info or haproxy:\n%s", got)
	}

	// -buildvcs=false leaves no vcs settings and the version (devel): what
	// make build stamps with -ldflags -X is printed instead.
	out.Reset()
	noVCS := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/shoal-lb/shoal", Version: "(devel)"}}
	writeVersion(context.Background(), &out, stamp{"0.0~git20261206.ad48f5e", "ad48f5e", "2026-12-06T07:30:00Z"}, noVCS, "haproxy")
	got = out.String()
	for _, want := range []string{
		"shoal    0.0~git20261206.ad48f5e\n",
		"commit   ad48f5e\n",
		"built    2026-12-06T07:30:00Z\n",
		"go       go1.26.0\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("stamped: missing %q in:\n%s", want, got)
		}
	}
	if !regexp.MustCompile(`(?m)^haproxy  2\.6\.\d+\S*$`).MatchString(got) {
		t.Errorf("stamped: no HAProxy 2.6 version in:\n%s", got)
	}
}

// shoal man writes a page per visible command.
func TestManPages(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	if code := Main([]string{"man", dir}, &out, &out); code != 0 {
		t.Fatalf("shoal man: exit %d: %s", code, out.String())
	}
	for _, page := range []string{"shoal.1", "shoal-scale.1", "shoal-policy-test.1", "shoal-version.1"} {
		b, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil {
			t.Error(err)
			continue
		}
		if !bytes.Contains(b, []byte(".SH EXAMPLE")) {
			t.Errorf("%s has no EXAMPLE section", page)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "shoal-man.1")); err == nil {
		t.Error("the hidden man command has a page")
	}
}
