package exec_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider/cloud/exec"
	// Registers exec's entry type, as shoal does.
	_ "github.com/shoal-lb/shoal/internal/provider/all"
)

// execDoc is a config with one exec provider.
var execDoc = readDoc("../../../config/testdata/providers-exec.yaml")

func TestParseExecProvider(t *testing.T) {
	cfg, err := config.Parse("testdata/shoal.yaml", []byte(execDoc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	p := cfg.Providers[0]
	if p.Type != exec.Type || p.Cloud == nil || exec.Of(p) == nil {
		t.Fatalf("provider = %+v", p)
	}
	c, e := p.Cloud, exec.Of(p)
	if c.Port != 8080 || c.Interval != 2*time.Second || c.BootTimeout != 5*time.Minute ||
		c.CreateTimeout != config.DefaultCloud.CreateTimeout || c.DeleteTimeout != config.DefaultCloud.DeleteTimeout {
		t.Errorf("cloud keys = %+v", c)
	}
	if c.Emulator == nil || len(c.Emulator.StandIn) != 3 {
		t.Errorf("emulator = %+v", c.Emulator)
	}
	if len(e.Start) != 6 || e.Stop[2] != "{{.ID}}" || len(e.List) != 5 || e.Timeout != 30*time.Second {
		t.Errorf("exec keys = %+v", e)
	}
	cmd, err := exec.CompileCommand(e.Stop)
	if err != nil {
		t.Fatal(err)
	}
	argv, err := cmd.Expand(exec.Data{ID: "srv-9"})
	if err != nil || strings.Join(argv, " ") != "mycloud delete srv-9" {
		t.Errorf("stop expands to %q, %v", argv, err)
	}
}

// readDoc reads a config document config's own tests use too (one copy,
// in its testdata). A test binary that cannot read it has nothing to test.
func readDoc(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	return string(b)
}
