package scale

import (
	"path/filepath"
	"testing"

	"github.com/shoal-lb/shoal/internal/config"
)

// TestConfig checks that the config the benchmark renders is one shoal
// accepts, and that the reload's changes one group only.
func TestConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "scale.yaml")
	cfg, err := config.Parse(path, []byte(renderConfig(18081, 18082, "scale-bench-token-0123456789abcdef", filepath.Join(dir, "s"), "/bin/standin", 50, "")))
	if err != nil {
		t.Fatal(err)
	}
	changed, err := config.Parse(path, []byte(renderConfig(18081, 18082, "scale-bench-token-0123456789abcdef", filepath.Join(dir, "s"), "/bin/standin", 50, group(50))))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Groups) != 50 || cfg.Metrics.Interval.Seconds() != 1 {
		t.Fatalf("%d groups at %v, want 50 at 1s", len(cfg.Groups), cfg.Metrics.Interval)
	}
	for i, g := range cfg.Groups {
		c := changed.Groups[i]
		if g.MaxSize != perGroup || g.MinSize != 0 || g.Autoscale != nil {
			t.Errorf("%s: %d..%d, autoscale %v", g.Name, g.MinSize, g.MaxSize, g.Autoscale)
		}
		if differs := g.DrainTimeout != c.DrainTimeout; differs != (g.Name == group(50)) {
			t.Errorf("%s: drain_timeout %v, after the reload %v", g.Name, g.DrainTimeout, c.DrainTimeout)
		}
	}
}
