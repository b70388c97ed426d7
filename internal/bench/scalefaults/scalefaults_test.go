package scalefaults

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/testhost"
)

// TestConfigs checks that the configs the benchmark renders are ones shoal
// accepts: a group of 500 beside the others, and the ssh provider's hosts
// with their capacities.
func TestConfigs(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "scalefaults.yaml")
	for _, working := range []bool{false, true} {
		cfg, err := config.Parse(path, []byte(backoffConfig(18081, filepath.Join(dir, "s"), "/bin/standin", 500, 10, working)))
		if err != nil {
			t.Fatal(err)
		}
		bad := cfg.Groups[len(cfg.Groups)-1]
		if len(cfg.Groups) != 11 || bad.Name != badGroup || bad.MaxSize != 500 || len(bad.Template.Command) != map[bool]int{false: 1, true: 2}[working] {
			t.Fatalf("working %v: %d groups, the last %s of %d running %q", working, len(cfg.Groups), bad.Name, bad.MaxSize, bad.Template.Command)
		}
	}
	key, known := filepath.Join(dir, "id"), filepath.Join(dir, "known_hosts")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key).CombinedOutput(); err != nil {
		t.Skipf("ssh-keygen: %v: %s", err, out)
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	// Any key will do: the config's check wants one for each host.
	var kh []byte
	for _, a := range []string{"10.1.0.2", "10.3.0.2", "10.4.0.2"} {
		kh = append(kh, a+" "...)
		kh = append(kh, pub...)
	}
	if err := os.WriteFile(known, kh, 0o600); err != nil {
		t.Fatal(err)
	}
	lab := &testhost.Lab{User: "root", KeyFile: key, KnownHosts: known}
	dies, a, b := &testhost.Host{Addr: "10.1.0.2"}, &testhost.Host{Addr: "10.3.0.2"}, &testhost.Host{Addr: "10.4.0.2"}
	cfg, err := config.Parse(path, []byte(hostConfig(18081, filepath.Join(dir, "s"), filepath.Join(dir, "r"), "/bin/standin", lab,
		dies, []*testhost.Host{a, b}, map[string]int{dies.Addr: 100, a.Addr: 50, b.Addr: 30}, 100)))
	if err != nil {
		t.Fatal(err)
	}
	if g := cfg.Groups[0]; g.MaxSize != 100 || g.Placement.Strategy != config.PlacePack {
		t.Fatalf("group %+v", g)
	}
}
