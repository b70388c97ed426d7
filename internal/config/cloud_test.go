package config

import (
	_ "embed"
	"strings"
	"testing"
	"time"
)

// execDoc is a config with one exec provider; tests replace its markers
// to break one thing at a time.
//
//go:embed testdata/providers-exec.yaml
var execDoc string

func TestParseExecProviderErrors(t *testing.T) {
	tests := []struct {
		name     string
		old, new string
		want     string
	}{
		{"no port for {{.Port}}", "    port: 8080\n    interval: 2s\n    boot_timeout: 5m\n    start: [mycloud, create,", "    interval: 2s\n    boot_timeout: 5m\n    start: [mycloud, create, --port, \"{{.Port}}\",",
			`testdata/shoal.yaml:7:38: providers[0].start[3]: uses {{.Port}}, but the provider sets no port: set port (where every server serves), or leave {{.Port}} out`},
		{"bad port", "port: 8080", "port: 0",
			`testdata/shoal.yaml:5:11: providers[0].port: must be a port from 1 to 65535 (where every server serves), got 0`},
		{"misspelt field", `"{{.ID}}"`, `"{{.Id}}"`,
			`testdata/shoal.yaml:9:29: providers[0].stop[2]: template: can't evaluate field Id (have .ID, .Name, .Group, .Index, .Plan, .Owner, .Port)`},
		{"shell string", `list: [mycloud, list, --tag, "shoal-owner={{.Owner}}", --json]`, `list: "mycloud list --json"`,
			`testdata/shoal.yaml:10:11: providers[0].list: must be a list of strings (an argv; there is no shell), got "mycloud list --json"`},
		{"empty start", `start: [mycloud, create, --name, "{{.Name}}", --tag, "shoal-owner={{.Owner}}"]`, `start: []`,
			`testdata/shoal.yaml:8:12: providers[0].start: must not be empty`},
		{"interval too short", "interval: 2s", "interval: 10ms",
			`testdata/shoal.yaml:6:15: providers[0].interval: must be at least 100ms and at most 10m0s, got 10ms`},
		{"ssh key on exec", "    timeout: 30s\n", "    timeout: 30s\n    hosts: []\n",
			`testdata/shoal.yaml:12:5: providers[0].hosts: unknown field; allowed: name, type, health_grace, port, interval, boot_timeout, create_timeout, delete_timeout, emulator, start, stop, list, power_off, power_on, timeout`},
		{"stand-in without stand_in", "      stand_in: [demo-backend, --listen, \"127.0.0.1:{{.Port}}\"]\n", "      stand_ins: []\n",
			"testdata/shoal.yaml:13:7: providers[0].emulator.stand_ins: unknown field; allowed: stand_in\n" +
				"testdata/shoal.yaml:13:7: providers[0].emulator.stand_in: required"},
		{"hook on a cloud group", "    provider: cli\n", "    provider: cli\n    template: {pre_stop: {command: [drain]}}\n",
			`testdata/shoal.yaml:19:16: groups[0].template.pre_stop: provider cli runs no hooks: shoal does not log in to cloud servers (a server's image prepares itself at boot; shoal shuts it down before deleting it)`},
		{"negative budget", "    provider: cli\n", "    provider: cli\n    max_hourly_instances: -1\n",
			`testdata/shoal.yaml:19:27: groups[0].max_hourly_instances: must be >= 0 (0: no budget), got -1`},
		{"budget below min_size", "    min_size: 1\n", "    min_size: 2\n    max_hourly_instances: 1\n",
			`testdata/shoal.yaml:17:27: groups[0].max_hourly_instances: must be 0 (no budget) or at least min_size (2), got 1: the group could never run min_size instances`},
		{"placement on a cloud group", "    provider: cli\n", "    provider: cli\n    placement: {strategy: pack}\n",
			`testdata/shoal.yaml:19:16: groups[0].placement: provider cli creates a server for each instance, so there is no host to place it on; leave placement out`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := parseEdited(t, execDoc, tt.old, tt.new)
			if got := err.Error(); got != tt.want {
				t.Errorf("Parse error:\n got: %s\nwant: %s", got, tt.want)
			}
		})
	}
}

// TestCloudGroupNeedsNoTemplate: a group on a cloud needs no template (its
// servers run their image), an exec provider needs no port when its
// commands do not use {{.Port}} (its servers' addresses say host:port),
// and a cloud group's template keys other than version, which nothing
// would use, are refused where they are written.
func TestCloudGroupNeedsNoTemplate(t *testing.T) {
	noPort := strings.Replace(execDoc, "    port: 8080\n", "", 1)
	cfg, err := Parse("testdata/shoal.yaml", []byte(noPort))
	if err != nil {
		t.Fatalf("an exec provider without port, a cloud group without template: %v", err)
	}
	if p, g := cfg.Providers[0], cfg.Groups[0]; p.Cloud.Port != 0 || g.Template.Command != nil {
		t.Errorf("port %d, template %+v; want none", p.Cloud.Port, g.Template)
	}
	versioned := strings.Replace(execDoc, "    provider: cli\n", "    provider: cli\n    template: {version: v2}\n", 1)
	cfg, err = Parse("testdata/shoal.yaml", []byte(versioned))
	if err != nil {
		t.Fatalf("a cloud group's template with only version: %v", err)
	}
	if v := cfg.Groups[0].Template.Version("web"); v != "v2" {
		t.Errorf("version %q, want v2", v)
	}

	for _, tc := range []struct{ name, doc, old, new, want string }{
		{"exec: command", execDoc, "    provider: cli\n", "    provider: cli\n    template:\n      command: [app]\n      env: {A: b}\n",
			"testdata/shoal.yaml:20:7: groups[0].template.command: provider cli (exec) never uses it: each server runs what the provider's start command makes, not the group's template; a cloud group's template may have only version (a deploy of a new one replaces every server), or be left out\n" +
				"testdata/shoal.yaml:21:7: groups[0].template.env: provider cli (exec) never uses it: each server runs what the provider's start command makes, not the group's template; a cloud group's template may have only version (a deploy of a new one replaces every server), or be left out"},
		{"ec2: cpus", ec2Doc, "    provider: aws\n", "    provider: aws\n    template: {cpus: 2, version: v1}\n",
			"testdata/shoal.yaml:21:16: groups[0].template.cpus: provider aws (ec2) never uses it: each server runs the provider's launch_template or ami, not the group's template; a cloud group's template may have only version (a deploy of a new one replaces every server), or be left out"},
		{"sacloud: stop_timeout", sacloudDoc, "    provider: sakura\n", "    provider: sakura\n    template: {stop_timeout: 5s}\n",
			"testdata/shoal.yaml:35:16: groups[0].template.stop_timeout: provider sakura (sacloud) never uses it: each server runs the provider's template, not the group's template; a cloud group's template may have only version (a deploy of a new one replaces every server), or be left out"},
		{"ec2 needs port", ec2Doc, "    port: 8080\n", "", "testdata/shoal.yaml:3:5: providers[0].port: required"},
		{"sacloud needs port", sacloudDoc, "    port: 80\n", "", "testdata/shoal.yaml:3:5: providers[0].port: required"},
		{"local needs a template", execDoc, "    provider: cli\n", "", "testdata/shoal.yaml:15:5: groups[0].template: required"},
		{"local needs a command", execDoc, "    provider: cli\n", "    template: {version: v1}\n", "testdata/shoal.yaml:18:15: groups[0].template.command: required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := parseEdited(t, tc.doc, tc.old, tc.new)
			if got := err.Error(); got != tc.want {
				t.Errorf("Parse error:\n got: %s\nwant: %s", got, tc.want)
			}
		})
	}
}

// TestProviderHealthGrace: a group's health.grace is the provider's
// health_grace unless the group sets its own: 10m by default for a cloud,
// whose servers boot slowly; ssh and local leave the group's.
func TestProviderHealthGrace(t *testing.T) {
	groups := `  - name: web
    min_size: 1
    max_size: 4
    provider: cli
  - name: api
    min_size: 1
    max_size: 4
    provider: cli
    hosts: [api.example.com]
    health: {grace: 20s}
  - name: local
    min_size: 1
    max_size: 4
    hosts: [local.example.com]
    template: {command: [app]}
`
	doc, _, _ := strings.Cut(execDoc, "groups:\n")
	for _, tc := range []struct {
		name, extra string
		web, api    time.Duration
	}{
		{"cloud default", "", DefaultCloudHealthGrace, 20 * time.Second},
		{"cloud set", "    health_grace: 3m\n", 3 * time.Minute, 20 * time.Second},
	} {
		cfg, err := Parse("testdata/shoal.yaml", []byte(doc+tc.extra+"groups:\n"+groups))
		if err != nil {
			t.Fatalf("%s: Parse: %v", tc.name, err)
		}
		if cfg.Providers[0].HealthGrace != tc.web {
			t.Errorf("%s: provider health_grace %v, want %v", tc.name, cfg.Providers[0].HealthGrace, tc.web)
		}
		want := map[string]time.Duration{"web": tc.web, "api": tc.api, "local": DefaultHealth.Grace}
		for _, g := range cfg.Groups {
			if g.Health.Grace != want[g.Name] {
				t.Errorf("%s: group %s health.grace %v, want %v", tc.name, g.Name, g.Health.Grace, want[g.Name])
			}
		}
	}

	// ssh has none: its groups keep theirs, unless it sets one.
	sshDoc := func(extra string) string {
		return strings.Replace(providersDoc, "    host_down_after: 20s\n", "    host_down_after: 20s\n"+extra, 1)
	}
	for extra, want := range map[string]time.Duration{"": DefaultHealth.Grace, "    health_grace: 90s\n": 90 * time.Second} {
		cfg, err := Parse("testdata/shoal.yaml", []byte(sshDoc(extra)))
		if err != nil {
			t.Fatalf("ssh %q: Parse: %v", extra, err)
		}
		if g := cfg.Groups[0].Health.Grace; g != want {
			t.Errorf("ssh provider %q: group health.grace %v, want %v", extra, g, want)
		}
	}

	// Out of range is an error naming the key.
	_, err := Parse("testdata/shoal.yaml", []byte(doc+"    health_grace: 0s\ngroups:\n"+groups))
	if err == nil || !strings.Contains(err.Error(), "providers[0].health_grace: must be at least 1s") {
		t.Errorf("health_grace 0s: %v", err)
	}
}

// TestWarmPoolErrors: a warm pool larger than its group can grow, in a
// state that is not one of the two, or on a provider that cannot keep it
// (not a cloud's, or stopped without power_off and power_on) is refused
// where it is written; a running pool on an exec provider without them,
// and a stopped one with them, are accepted.
func TestWarmPoolErrors(t *testing.T) {
	const prov = "    provider: cli\n"
	power := "    timeout: 30s\n    power_off: [mycloud, stop, \"{{.ID}}\"]\n    power_on: [mycloud, start, \"{{.ID}}\"]\n"
	tests := []struct {
		name     string
		old, new string
		want     string
	}{
		{"above max_size", prov, prov + "    warm_pool: {size: 5, state: running}\n",
			`testdata/shoal.yaml:19:23: groups[0].warm_pool.size: must be at most the group's max_size (4), got 5: a pool larger than the group could ever take from holds servers that never serve`},
		{"no size", prov, prov + "    warm_pool: {state: running}\n",
			`testdata/shoal.yaml:19:16: groups[0].warm_pool.size: required`},
		{"unknown state", prov, prov + "    warm_pool: {size: 2, state: paused}\n",
			`testdata/shoal.yaml:19:33: groups[0].warm_pool.state: must be one of stopped, running (pool servers shut down, or running out of rotation), got "paused"`},
		{"stopped without power commands", prov, prov + "    warm_pool: {size: 2}\n",
			`testdata/shoal.yaml:19:16: groups[0].warm_pool.state: provider cli (type exec) can keep pool servers only running, not stopped: set the provider's power_off and power_on commands to keep them stopped`},
		{"on the local provider", prov, "    warm_pool: {size: 2, state: running}\n    template: {command: [app]}\n",
			`testdata/shoal.yaml:18:16: groups[0].warm_pool: provider local cannot keep a warm pool: only a cloud provider's servers (exec, ec2, sacloud), created ahead of need, or an ssh provider's instances, running out of rotation, can`},
		{"power_off without power_on", "    timeout: 30s\n", "    timeout: 30s\n    power_off: [mycloud, stop, \"{{.ID}}\"]\n",
			`testdata/shoal.yaml:12:16: providers[0].power_on: required with power_off: a server shut down must be booted again, and one booted shut down`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := parseEdited(t, execDoc, tt.old, tt.new)
			if err == nil {
				t.Fatal("accepted")
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("Parse error:\n got: %s\nwant: %s", got, tt.want)
			}
		})
	}
	for _, ok := range []struct {
		power, pool string
		want        WarmPool
	}{
		{"    timeout: 30s\n", "    warm_pool: {size: 2, state: running}\n", WarmPool{Size: 2, State: WarmRunning, Provider: "cli"}},
		{power, "    warm_pool: {size: 4, reuse_on_scale_in: true}\n", WarmPool{Size: 4, State: WarmStopped, ReuseOnScaleIn: true, Provider: "cli"}},
	} {
		doc := strings.Replace(strings.Replace(execDoc, "    timeout: 30s\n", ok.power, 1), prov, prov+ok.pool, 1)
		cfg, err := Parse("testdata/shoal.yaml", []byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", ok.pool, err)
		}
		if w := cfg.Groups[0].WarmPool; w == nil || *w != ok.want {
			t.Errorf("%s: warm_pool = %+v, want %+v", ok.pool, w, ok.want)
		}
	}
}

// TestWarmPoolAcrossProviders: in a group across providers the pool is
// kept by its one cloud provider; two clouds are refused.
func TestWarmPoolAcrossProviders(t *testing.T) {
	const group = "    provider: cli\n"
	mixed := strings.Replace(execDoc, group, "    providers: [{name: local}, {name: cli, max: 3}]\n    template: {command: [app]}\n    warm_pool: {size: 2, state: running}\n", 1)
	cfg, err := Parse("testdata/shoal.yaml", []byte(mixed))
	if err != nil {
		t.Fatalf("a pool in a group of local and one cloud: %v", err)
	}
	if w := cfg.Groups[0].WarmPool; w == nil || w.Size != 2 {
		t.Errorf("warm_pool = %+v", w)
	}
	second := "    timeout: 30s\n  - name: cli2\n    type: exec\n    port: 8080\n    start: [mycloud, create]\n    stop: [mycloud, delete, \"{{.ID}}\"]\n    list: [mycloud, list]\n"
	two := strings.Replace(strings.Replace(execDoc, "    timeout: 30s\n", second, 1), group,
		"    providers: [{name: cli}, {name: cli2}]\n    warm_pool: {size: 2, state: running}\n", 1)
	_, err = Parse("testdata/shoal.yaml", []byte(two))
	want := "groups[0].warm_pool: the group has 2 providers that could keep its warm pool (cli, cli2): a warm pool is kept by one, so the group may name only one"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("two clouds: err = %v, want %q", err, want)
	}
}
