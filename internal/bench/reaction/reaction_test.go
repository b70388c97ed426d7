package reaction

import (
	"github.com/shoal-lb/shoal/internal/config"
	"path/filepath"
	"testing"
	"time"
)

// TestReactionConfig checks that the config the benchmark renders is one
// shoal accepts, with an autoscale policy on instances held to one core: a
// typo in a rendered policy would otherwise only show after minutes of a run.
func TestReactionConfig(t *testing.T) {
	dir := t.TempDir()
	text := reactionConfig(18080, filepath.Join(dir, "r"), "/usr/local/bin/demo-backend", 40, 2*time.Second)
	cfg, err := config.Parse(filepath.Join(dir, "reaction.yaml"), []byte(text))
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	g := cfg.Groups[0]
	if g.Template.Env["GOMAXPROCS"] != "1" {
		t.Errorf("instances not held to one core: env %v", g.Template.Env)
	}
	if g.Autoscale == nil {
		t.Error("no autoscale policy")
	}
}
