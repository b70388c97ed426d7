package core

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/config"
)

func TestReloadable(t *testing.T) {
	old := &config.Config{StateDir: "/var/lib/shoal", Admin: config.Admin{Socket: "/var/lib/shoal/shoal.sock"}, Listen: "127.0.0.1:80"}
	same := *old
	same.Listen = "127.0.0.1:81" // HAProxy's: a reload applies it
	same.Shutdown = config.ShutdownStop
	if err := reloadable(old, &same); err != nil {
		t.Fatalf("listen and shutdown changes refused: %v", err)
	}
	moved := *old
	moved.StateDir = "/srv/shoal"
	moved.Admin.Socket = "/srv/shoal/shoal.sock"
	err := reloadable(old, &moved)
	if !errors.Is(err, api.ErrNotReloadable) || !strings.Contains(err.Error(), "state_dir, admin changed") || !strings.Contains(err.Error(), "--keep-running") {
		t.Fatalf("state_dir and admin changes: %v", err)
	}
	dns := *old
	dns.GSLB = &config.GSLB{Listen: []string{"127.0.0.1:53"}, Zone: "example.org."}
	if err := reloadable(old, &dns); !errors.Is(err, api.ErrNotReloadable) || !strings.Contains(err.Error(), "gslb changed") {
		t.Fatalf("a gslb section added: %v", err)
	}
	pair := *old
	pair.HA = &config.HA{Node: "a", Priority: 100, Lease: 2 * time.Second}
	other := pair
	other.HA = &config.HA{Node: "a", Priority: 90, Lease: 2 * time.Second}
	if err := reloadable(&pair, &other); !errors.Is(err, api.ErrNotReloadable) || !strings.Contains(err.Error(), "ha changed") {
		t.Fatalf("a changed ha priority: %v", err)
	}
	same = pair
	same.HA = &config.HA{Node: "a", Priority: 100, Lease: 2 * time.Second}
	if err := reloadable(&pair, &same); err != nil {
		t.Fatalf("an unchanged ha section refused: %v", err)
	}
}

// TestReloadableProvider: a running group's provider cannot change under
// its instances; the error says what to do instead.
func TestReloadableProvider(t *testing.T) {
	old := &config.Config{Groups: []config.Group{{Name: "web", Provider: config.ProviderLocal}, {Name: "api", Provider: "rack"}}}
	added := &config.Config{Groups: []config.Group{{Name: "web", Provider: config.ProviderLocal}, {Name: "api", Provider: "rack"}, {Name: "new", Provider: "rack"}}}
	if err := reloadable(old, added); err != nil {
		t.Fatalf("a group added on a provider refused: %v", err)
	}
	moved := &config.Config{Groups: []config.Group{{Name: "web", Provider: "rack"}, {Name: "api", Provider: "rack"}}}
	err := reloadable(old, moved)
	if !errors.Is(err, api.ErrNotReloadable) || !strings.HasPrefix(err.Error(), "group web: provider changed from local to rack") {
		t.Fatalf("a group moved to another provider: %v", err)
	}
}

// TestSameGroup: two loads of one group compare equal although each compiled
// its own templates; a changed template or size does not.
func TestSameGroup(t *testing.T) {
	load := func(cmd string, minSize int) config.Group {
		t.Helper()
		text := "listen: 127.0.0.1:8080\ngroups:\n  - name: web\n    min_size: " + string(rune('0'+minSize)) +
			"\n    max_size: 5\n    template: {command: [" + cmd + ", \"{{.Port}}\"], dir: /}\n"
		cfg, err := config.Parse("shoal.yaml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Groups[0]
	}
	a, b := load("/bin/app", 2), load("/bin/app", 2)
	if !sameGroup(a, b) {
		t.Fatal("two loads of the same group differ")
	}
	if sameGroup(a, load("/bin/app2", 2)) {
		t.Fatal("a changed template command was not seen")
	}
	if sameGroup(a, load("/bin/app", 3)) {
		t.Fatal("a changed min_size was not seen")
	}
	c := b
	c.DrainTimeout += time.Second
	if sameGroup(a, c) {
		t.Fatal("a changed drain_timeout was not seen")
	}
}
