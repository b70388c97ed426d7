package collection

import (
	"github.com/shoal-lb/shoal/internal/config"
	"path/filepath"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/bench"
)

// TestCollectionConfig checks that the config the benchmark renders is one
// shoal accepts: groups of up to bench.GroupCap idle instances held to one core,
// with no autoscale policy to change their sizes.
func TestCollectionConfig(t *testing.T) {
	dir := t.TempDir()
	text := collectionConfig(18081, filepath.Join(dir, "c"), "/usr/local/bin/demo-backend", 2, time.Second)
	cfg, err := config.Parse(filepath.Join(dir, "collection.yaml"), []byte(text))
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	g := cfg.Groups[0]
	if g.Template.Env["GOMAXPROCS"] != "1" {
		t.Errorf("instances not held to one core: env %v", g.Template.Env)
	}
	if len(cfg.Groups) != 2 || g.MinSize != 0 || g.MaxSize != bench.GroupCap || g.Autoscale != nil {
		t.Errorf("%d groups, first %d..%d, autoscale %v", len(cfg.Groups), g.MinSize, g.MaxSize, g.Autoscale)
	}
}
