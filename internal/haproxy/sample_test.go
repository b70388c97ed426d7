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

// TestRenderAccessLogWhenNeeded: the default access log renders neither the
// log nor the sampling rules while nothing reads latency, and both once a
// group's outlier check does.
func TestRenderAccessLogWhenNeeded(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir, "127.0.0.1:8080")
	cfg.AccessLog = config.AccessLog{Enabled: true, Sample: 1, Adaptive: true, WhenNeeded: true}
	p := PathsFor(dir)
	got, err := Render(cfg, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range append([]string{"log unix@", "log-format"}, sampleLines...) {
		if strings.Contains(got, l) {
			t.Fatalf("nothing reads latency, yet the config has %q:\n%s", l, got)
		}
	}
	cfg.Groups[1].Outliers = &config.Outliers{Latency: &config.LatencyOutlier{}}
	if got, err = Render(cfg, p); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "    log unix@"+p.LogSocket+" format raw local0\n") {
		t.Fatalf("outliers.latency reads the log, yet the config has no log line:\n%s", got)
	}
	for _, g := range []string{"web", "api", "static"} {
		if sec := backendSection(t, got, g); !strings.Contains(sec, sampleLines[0]) {
			t.Fatalf("backend %s lacks its sampling rules:\n%s", g, sec)
		}
	}
	haproxyCheck(t, dir, got)
}
