package replay

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

// TestReplayConfig: the replay keeps the policy file's group and policy and
// swaps in its own listener, state directory, backend and health check; the
// result loads as a valid config.
func TestReplayConfig(t *testing.T) {
	dir := t.TempDir()
	cfg, err := replayConfig("../../../examples/seed-004.yaml", "cdp-sg", 18080, filepath.Join(dir, "state"), "/opt/demo-backend", 0.145)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "shoal.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatalf("%v\n%s", err, cfg)
	}
	g := c.Groups[0]
	if c.Listen != "127.0.0.1:18080" || len(c.Groups) != 1 || g.Name != "cdp-sg" || g.MaxSize != 9 || len(g.Autoscale.Rules) != 2 ||
		g.Template.CPUs != 0.145 || g.Health.Path != "/healthz" || g.Template.Command[0] != "/opt/demo-backend" {
		t.Errorf("got listen %s, group %+v\n%s", c.Listen, g, cfg)
	}
}

func TestInstanceSeconds(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &sizeSampler{samples: []sizeSample{{t0, 2}, {t0.Add(10 * time.Second), 4}, {t0.Add(20 * time.Second), 1}}}
	// [5 s, 15 s): 5 s at 2, 5 s at 4.
	if got := s.instanceSeconds(t0.Add(5*time.Second), t0.Add(15*time.Second)); got != 30 {
		t.Errorf("got %v instance-seconds, want 30", got)
	}
}
