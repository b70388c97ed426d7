package haproxy

import (
	"strings"
	"testing"

	"github.com/shoal-lb/shoal/internal/config"
)

// TestRenderAdaptiveSampling: with sample: auto the log line has no fixed
// sample and every backend chooses its rate from its own request rate.
func TestRenderAdaptiveSampling(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir, "127.0.0.1:8080")
	cfg.AccessLog = config.AccessLog{Sample: 1, Adaptive: true}
	p := PathsFor(dir)
	got, err := Render(cfg, p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "    log unix@"+p.LogSocket+" format raw local0\n") || strings.Contains(got, "sample 1:") {
		t.Fatalf("log line:\n%s", got)
	}
	for _, g := range []string{"web", "api", "static"} {
		sec := backendSection(t, got, g)
		for _, l := range sampleLines {
			if !strings.Contains(sec, "    "+l+"\n") {
				t.Fatalf("backend %s lacks %q:\n%s", g, l, sec)
			}
		}
	}
	haproxyCheck(t, dir, got)
}
