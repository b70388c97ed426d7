package core

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider/cloud"
	"github.com/shoal-lb/shoal/internal/provider/local"
)

// A provider type of this test only, registered as a provider package
// registers its own: adding a type needs nothing outside its folder but
// the import that links it in.
const testCloudType = "testcloud"

// testCloudSpec is the testcloud entry's own keys.
type testCloudSpec struct {
	Zone string `yaml:"zone" required:"true"`
}

// testCloudDriver is a cloud with no servers that records its listings.
type testCloudDriver struct {
	zone   string
	mu     sync.Mutex
	owners []string
}

func (d *testCloudDriver) Create(context.Context, cloud.CreateRequest) (cloud.Server, error) {
	return cloud.Server{}, errors.New("testcloud creates nothing")
}

func (d *testCloudDriver) Delete(context.Context, string) error { return nil }

func (d *testCloudDriver) List(_ context.Context, owner string) ([]cloud.Server, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.owners = append(d.owners, owner)
	return nil, nil
}

// testCloudDrivers are the drivers built, by zone.
var testCloudDrivers sync.Map

func init() {
	config.RegisterProvider(config.ProviderType{
		Name: testCloudType, Cloud: true, Keys: []any{testCloudSpec{}}, Required: []string{"port"},
		Source: "the zone's image",
		Decode: func(e *config.ProviderEntry, p *config.Provider) {
			s := &testCloudSpec{}
			if zone, n := e.String("zone", ""); n != nil {
				if !strings.HasPrefix(zone, "zone-") {
					e.Errorf(n, e.Field("zone"), "must be zone-NAME, got %q", zone)
				}
				s.Zone = zone
			}
			p.Spec = s
		},
	})
	cloud.RegisterDriver(testCloudType, func(_ context.Context, pc config.Provider, _ *slog.Logger) (cloud.Driver, error) {
		d := &testCloudDriver{zone: pc.Spec.(*testCloudSpec).Zone}
		testCloudDrivers.Store(d.zone, d)
		return d, nil
	})
}

const testCloudDoc = `listen: 127.0.0.1:8080
providers:
  - name: tc
    type: testcloud
    port: 8080
    interval: 100ms
    zone: ZONE
groups:
  - name: web
    provider: tc
    min_size: 0
    max_size: 1
`

// TestRegisteredProviderType: a provider type registered from outside
// config is decoded with errors at FILE:LINE:COL (its own keys, the common
// cloud keys, unknown keys, a group's template), and the core builds it
// from the registry.
func TestRegisteredProviderType(t *testing.T) {
	for _, tt := range []struct{ name, old, new, want string }{
		{"own key checked", "zone: ZONE", "zone: eu", `testdata/shoal.yaml:7:11: providers[0].zone: must be zone-NAME, got "eu"`},
		{"own key required", "    zone: ZONE\n", "", "testdata/shoal.yaml:3:5: providers[0].zone: required"},
		{"cloud key checked", "interval: 100ms", "interval: 1ms", "testdata/shoal.yaml:6:15: providers[0].interval: must be at least 100ms and at most 10m0s, got 1ms"},
		{"other type's key", "    zone: ZONE\n", "    zone: zone-a\n    hosts: []\n", "testdata/shoal.yaml:8:5: providers[0].hosts: unknown field; allowed: name, type, health_grace, port, interval, boot_timeout, create_timeout, delete_timeout, emulator, zone"},
		{"group template refused", "    provider: tc\n", "    provider: tc\n    template: {command: [app]}\n",
			"testdata/shoal.yaml:11:16: groups[0].template.command: provider tc (testcloud) never uses it: each server runs the zone's image, not the group's template; a cloud group's template may have only version (a deploy of a new one replaces every server), or be left out"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			doc := strings.Replace(testCloudDoc, tt.old, tt.new, 1)
			doc = strings.Replace(doc, "ZONE", "zone-a", 1)
			_, err := config.Parse("testdata/shoal.yaml", []byte(doc))
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Parse:\n got %v\nwant %s", err, tt.want)
			}
		})
	}

	cfg, err := config.Parse("testdata/shoal.yaml", []byte(strings.Replace(testCloudDoc, "ZONE", "zone-b", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Groups[0].Health.Grace; got != config.DefaultCloudHealthGrace {
		t.Errorf("group health.grace = %s, want the cloud's %s", got, config.DefaultCloudHealthGrace)
	}
	cfg.StateDir = t.TempDir()
	log := slog.New(slog.DiscardHandler)
	provs, err := newProviders(cfg, local.New(cfg.StateDir, log), log)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := provs.Get("tc"); !ok {
		t.Fatal("provider tc not built")
	} else if _, isCloud := p.(*cloud.Provider); !isCloud {
		t.Fatalf("provider tc = %T, want a cloud provider", p)
	}
	v, ok := testCloudDrivers.Load("zone-b")
	if !ok {
		t.Fatal("the testcloud driver of zone-b was not built")
	}
	provs.start()
	t.Cleanup(provs.stop)
	d := v.(*testCloudDriver)
	deadline := time.Now().Add(10 * time.Second)
	for {
		d.mu.Lock()
		owners := slices.Clone(d.owners)
		d.mu.Unlock()
		if len(owners) > 0 {
			if owners[0] != ownerID(cfg) {
				t.Fatalf("listed owner %q, want %q", owners[0], ownerID(cfg))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the provider's poller never listed the testcloud")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
