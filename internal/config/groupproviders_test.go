package config

import (
	"strings"
	"testing"
)

// multiDoc is providersDoc with a cloud beside the rack, and its group on
// both.
var multiDoc = strings.Replace(strings.Replace(providersDoc, "groups:\n", `  - name: cli
    type: exec
    port: 8080
    start: [mycloud, create, --name, "{{.Name}}"]
    stop: [mycloud, delete, "{{.ID}}"]
    list: [mycloud, list]
groups:
`, 1), "    provider: rack\n", "    providers: [{name: rack}, {name: cli, max: 20, cost_per_hour: 0.05}]\n    max_hourly_cost: 1.5\n", 1)

// TestGroupProviders: providers is decoded in order with each entry's max
// and cost; provider is its one-entry form (one shape after load).
func TestGroupProviders(t *testing.T) {
	cfg, err := Parse("testdata/shoal.yaml", []byte(multiDoc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	g := cfg.Groups[0]
	want := []GroupProvider{{Name: "rack"}, {Name: "cli", Max: 20, CostPerHour: 0.05}}
	if len(g.Providers) != 2 || g.Providers[0] != want[0] || g.Providers[1] != want[1] || g.Provider != "rack" || g.MaxHourlyCost != 1.5 {
		t.Errorf("providers = %+v (provider %q, max_hourly_cost %v), want %+v", g.Providers, g.Provider, g.MaxHourlyCost, want)
	}
	// A group with a host provider keeps its template's command and
	// placement even with a cloud after it.
	if g.Placement.Strategy != PlacePack || len(g.Template.Command) == 0 {
		t.Errorf("placement %+v, command %v", g.Placement, g.Template.Command)
	}
	cfg, err = Parse("testdata/shoal.yaml", []byte(providersDoc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if l := cfg.Groups[0].ProviderList(); len(l) != 1 || l[0] != (GroupProvider{Name: "rack"}) {
		t.Errorf("provider: rack gave providers %+v, want [{rack}]", l)
	}
}

// TestGroupProvidersErrors: what validate refuses in a group's providers,
// at FILE:LINE:COL.
func TestGroupProvidersErrors(t *testing.T) {
	for _, tt := range []struct{ name, old, new, want string }{
		{"unknown", "{name: cli, max", "{name: clu, max",
			`testdata/shoal.yaml:29:38: groups[0].providers[1].name: unknown provider "clu"; the config has local, cli, rack`},
		{"twice", "{name: cli, max", "{name: rack, max",
			`testdata/shoal.yaml:29:38: groups[0].providers[1].name: provider rack is in the list twice (first at line 29): each provider is one entry, with its max`},
		{"max below 0", "max: 20", "max: -1",
			`testdata/shoal.yaml:29:48: groups[0].providers[1].max: must be >= 0 (0: the provider's hosts' capacity, or no bound), got -1`},
		{"negative cost", "cost_per_hour: 0.05", "cost_per_hour: -0.05",
			`testdata/shoal.yaml:29:67: groups[0].providers[1].cost_per_hour: must be >= 0, got -0.05`},
		{"negative budget", "max_hourly_cost: 1.5", "max_hourly_cost: -1",
			`testdata/shoal.yaml:30:22: groups[0].max_hourly_cost: must be >= 0 (0: no budget), got -1`},
		{"both", "    providers:", "    provider: rack\n    providers:",
			`testdata/shoal.yaml:30:16: groups[0].providers: a group has provider or providers, not both: provider rack is the one-entry form of providers: [{name: rack}]`},
		{"empty", "[{name: rack}, {name: cli, max: 20, cost_per_hour: 0.05}]", "[]",
			`testdata/shoal.yaml:29:16: groups[0].providers: must name at least one provider`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := parseEdited(t, multiDoc, tt.old, tt.new)
			if got := err.Error(); got != tt.want {
				t.Errorf("Parse error:\n got: %s\nwant: %s", got, tt.want)
			}
		})
	}
}

// TestWarmPoolOnHosts: an ssh provider keeps a running pool (its
// instances out of rotation), not a stopped one, nor one of an image;
// in a group with a cloud too, the cloud keeps the pool.
func TestWarmPoolOnHosts(t *testing.T) {
	const group = "    provider: rack\n"
	running := strings.Replace(providersDoc, group, group+"    warm_pool: {size: 2, state: running, reuse_on_scale_in: true}\n", 1)
	cfg, err := Parse("testdata/shoal.yaml", []byte(running))
	if err != nil {
		t.Fatalf("a running pool on ssh hosts: %v", err)
	}
	if w := cfg.Groups[0].WarmPool; w == nil || *w != (WarmPool{Size: 2, State: WarmRunning, ReuseOnScaleIn: true, Provider: "rack"}) {
		t.Errorf("warm_pool = %+v, kept by rack", w)
	}
	_, err = Parse("testdata/shoal.yaml", []byte(strings.Replace(providersDoc, group, group+"    warm_pool: {size: 2}\n", 1)))
	want := "groups[0].warm_pool.state: provider rack (type ssh) can keep pool servers only running, not stopped (an ssh provider's pool is instances started and health-checked on its hosts, out of rotation)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a stopped pool on ssh hosts: %v, want %q", err, want)
	}
	cfg, err = Parse("testdata/shoal.yaml", []byte(strings.Replace(multiDoc, "    max_hourly_cost: 1.5\n", "    max_hourly_cost: 1.5\n    warm_pool: {size: 1, state: running}\n", 1)))
	if err != nil {
		t.Fatalf("a pool in a group of hosts and a cloud: %v", err)
	}
	if w := cfg.Groups[0].WarmPool; w == nil || w.Provider != "cli" {
		t.Errorf("warm_pool = %+v, want it kept by the cloud, cli", w)
	}
}
