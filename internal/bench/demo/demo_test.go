package demo

import (
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/loadgen"
	"testing"
	"time"
)

// TestDemoConfig checks the demo's own config: an autoscale policy on a
// group whose instances each get one core.
func TestDemoConfig(t *testing.T) {
	cfg, err := config.Load("../../../examples/demo/shoal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.Groups[0]
	if g.Autoscale == nil || g.Autoscale.Target == nil || g.Template.Env["GOMAXPROCS"] != "1" {
		t.Errorf("demo group %s: autoscale %+v, env %v", g.Name, g.Autoscale, g.Template.Env)
	}
	steps, err := loadgen.ParseSteps(demoSteps)
	if err != nil {
		t.Fatal(err)
	}
	var total time.Duration
	for _, s := range steps {
		total += s.Duration
	}
	if total > 160*time.Second {
		t.Errorf("demo load lasts %v; with start and scale-in it must fit in ~3 minutes", total)
	}
}
