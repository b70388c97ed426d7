package ssh_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider/ssh"
	// Registers ssh's entry type, as shoal does.
	_ "github.com/shoal-lb/shoal/internal/provider/all"
)

// testdataFile is a config file in config's testdata, whose ssh/ key files
// the documents below name.
const testdataFile = "../../config/testdata/shoal.yaml"

// providersDoc is a config with one ssh provider of two hosts; tests
// replace its markers to break one thing at a time. Paths are relative to
// config's testdata, where Parse is told the file is.
var providersDoc = readDoc("../../config/testdata/providers-ssh.yaml")

func TestParseProviders(t *testing.T) {
	cfg, err := config.Parse(testdataFile, []byte(providersDoc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if len(cfg.Providers) != 1 || ssh.Of(cfg.Providers[0]) == nil {
		t.Fatalf("providers = %+v, want one ssh provider", cfg.Providers)
	}
	p := cfg.Providers[0]
	s := ssh.Of(p)
	if p.Name != "rack" || p.Type != ssh.Type || s.HostDownAfter.Seconds() != 20 || s.ConnectTimeout != ssh.Defaults.ConnectTimeout || s.RemoteDir != ".shoal" || s.ReconnectMax != 30*time.Second {
		t.Errorf("provider = %+v %+v", p, s)
	}
	// reconnect_max: a duration from 250 ms (the back-off's first wait).
	for doc, want := range map[string]string{
		"    reconnect_max: 2s\n":    "",
		"    reconnect_max: 100ms\n": "providers[0].reconnect_max",
	} {
		cfg, err := config.Parse(testdataFile, []byte(strings.Replace(providersDoc, "    hosts:\n", doc+"    hosts:\n", 1)))
		switch {
		case want == "" && (err != nil || ssh.Of(cfg.Providers[0]).ReconnectMax != 2*time.Second):
			t.Errorf("%q: %v", doc, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%q: error %v, want one naming %s", doc, err, want)
		}
	}
	dir, _ := filepath.Abs(filepath.Dir(testdataFile))
	h0, h1 := s.Hosts[0], s.Hosts[1]
	if h0.KeyFile != filepath.Join(dir, "ssh/id_ed25519") || h0.KnownHosts != filepath.Join(dir, "ssh/known_hosts") {
		t.Errorf("host paths = %q, %q; want them relative to the config's directory", h0.KeyFile, h0.KnownHosts)
	}
	if h0.Capacity != (ssh.Capacity{Instances: 8, Cores: 4}) || h0.Labels["zone"] != "a" || h0.Ports != ssh.DefaultPorts {
		t.Errorf("host 0 = %+v", h0)
	}
	if h1.Ports != (ssh.PortRange{30000, 30009}) || h1.DialAddress() != "10.0.0.3:2222" || h0.DialAddress() != "10.0.0.2:22" {
		t.Errorf("host 1 = %+v (dial %s)", h1, h1.DialAddress())
	}
	g := cfg.Groups[0]
	if g.Provider != "rack" || g.Placement.Strategy != config.PlacePack || g.Placement.Labels["zone"] != "b" {
		t.Errorf("group provider %q placement %+v", g.Provider, g.Placement)
	}
}

func TestParseHomeKeyFile(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"id_ed25519", "known_hosts"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(testdataFile), "ssh", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(home, ".ssh", f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	doc := strings.Replace(providersDoc, "        key_file: ssh/id_ed25519\n        known_hosts: ssh/known_hosts\n        capacity", "        key_file: ~/.ssh/id_ed25519\n        capacity", 1)
	cfg, err := config.Parse(testdataFile, []byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	h := ssh.Of(cfg.Providers[0]).Hosts[0]
	if h.KeyFile != filepath.Join(home, ".ssh/id_ed25519") || h.KnownHosts != filepath.Join(home, ".ssh/known_hosts") {
		t.Errorf("key_file %q known_hosts %q; want both in $HOME/.ssh", h.KeyFile, h.KnownHosts)
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
