package config

import (
	_ "embed"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// providersDoc is a config with one ssh provider of two hosts; tests
// replace its markers to break one thing at a time. Paths are relative to
// testdata, where Parse is told the file is.
//
//go:embed testdata/providers-ssh.yaml
var providersDoc string

// parseEdited parses doc with its first old replaced by new, which must
// make it invalid, and returns the ErrorList.
func parseEdited(t *testing.T, doc, old, new string) error {
	t.Helper()
	if !strings.Contains(doc, old) {
		t.Fatalf("the document has no %q", old)
	}
	cfg, err := Parse("testdata/shoal.yaml", []byte(strings.Replace(doc, old, new, 1)))
	var list ErrorList
	if cfg != nil || !errors.As(err, &list) {
		t.Fatalf("Parse = %v, %v; want an ErrorList", cfg != nil, err)
	}
	return err
}

// TestRemotePassiveDefault: a group on another provider than local gets a
// passive layer-4 check unless it writes health.passive (on or off); a local
// group gets none.
func TestRemotePassiveDefault(t *testing.T) {
	for _, tc := range []struct {
		name, old, new string
		want           *Passive
	}{
		{"remote, left out", "", "", &defaultRemotePassive},
		{"remote, written", "    provider: rack\n", "    provider: rack\n    health: {passive: {observe: layer7}}\n",
			&Passive{Enabled: true, Observe: "layer7", ErrorLimit: 10, OnError: "mark-down"}},
		{"remote, turned off", "    provider: rack\n", "    provider: rack\n    health: {passive: {enabled: false}}\n", nil},
		{"local", "    provider: rack\n    placement: {strategy: pack, labels: {zone: b}}\n", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := providersDoc
			if tc.old != "" {
				doc = strings.Replace(doc, tc.old, tc.new, 1)
			}
			cfg, err := Parse("testdata/shoal.yaml", []byte(doc))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			got := cfg.Groups[0].Health.Passive
			if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
				t.Errorf("health.passive = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseProviderErrors(t *testing.T) {
	tests := []struct {
		name     string
		old, new string
		want     string
	}{
		{"local is built in", "name: rack\n", "name: local\n",
			"testdata/shoal.yaml:3:11: providers[0].name: \"local\" is the built-in provider (this machine); choose another name\n" +
				`testdata/shoal.yaml:23:15: groups[0].provider: unknown provider "rack"; the config has local`},
		{"unknown type", "type: ssh", "type: gce",
			`testdata/shoal.yaml:4:11: providers[0].type: unknown provider type "gce"; known: ssh, exec, ec2, sacloud`},
		{"no hosts", "    host_down_after: 20s\n    hosts:\n", "    host_down_after: 20s\n    hosts: []\n    old_hosts:\n",
			"testdata/shoal.yaml:6:12: providers[0].hosts: must list at least one host\n" +
				"testdata/shoal.yaml:7:5: providers[0].old_hosts: unknown field; allowed: name, type, health_grace, hosts, host_down_after, connect_timeout, remote_dir, reconnect_max"},
		{"duplicate address", `"10.0.0.3:2222"`, `"10.0.0.2:22"`,
			`testdata/shoal.yaml:13:18: providers[0].hosts[1].address: duplicate host 10.0.0.2:22 (first at line 7)`},
		{"missing key file", "key_file: ssh/id_ed25519\n        known_hosts: ssh/known_hosts\n        capacity", "key_file: ssh/nothing\n        known_hosts: ssh/known_hosts\n        capacity",
			`testdata/shoal.yaml:9:19: providers[0].hosts[0].key_file: stat ` + abs(testdataDir(t), "ssh/nothing") + `: no such file or directory`},
		{"encrypted key", "key_file: ssh/id_ed25519\n        known_hosts: ssh/known_hosts\n        capacity", "key_file: ssh/encrypted\n        known_hosts: ssh/known_hosts\n        capacity",
			`testdata/shoal.yaml:9:19: providers[0].hosts[0].key_file: ` + abs(testdataDir(t), "ssh/encrypted") + ` is encrypted with a passphrase, which shoal cannot type; use a key without one (ssh-keygen -p -N '' -f ` + abs(testdataDir(t), "ssh/encrypted") + ` makes a copy's passphrase empty)`},
		{"not a key", "key_file: ssh/id_ed25519\n        known_hosts: ssh/known_hosts\n        capacity", "key_file: ssh/notakey\n        known_hosts: ssh/known_hosts\n        capacity",
			`testdata/shoal.yaml:9:19: providers[0].hosts[0].key_file: ` + abs(testdataDir(t), "ssh/notakey") + ` is not a private key in PEM or OpenSSH format: ssh: no key found`},
		{"unknown host", "address: 10.0.0.2\n", "address: 10.0.0.9\n",
			`testdata/shoal.yaml:10:22: providers[0].hosts[0].known_hosts: ` + abs(testdataDir(t), "ssh/known_hosts") + ` has no key for 10.0.0.9:22; shoal never connects to a host whose key it does not know: check the host's key, then add it with ssh-keyscan -H 10.0.0.9 >> ` + abs(testdataDir(t), "ssh/known_hosts")},
		{"unknown host on another port", `"10.0.0.3:2222"`, `"10.0.0.3:2200"`,
			`testdata/shoal.yaml:16:22: providers[0].hosts[1].known_hosts: ` + abs(testdataDir(t), "ssh/known_hosts") + ` has no key for 10.0.0.3:2200; shoal never connects to a host whose key it does not know: check the host's key, then add it with ssh-keyscan -H -p 2200 10.0.0.3 >> ` + abs(testdataDir(t), "ssh/known_hosts")},
		{"known_hosts missing", "key_file: ssh/id_ed25519\n        known_hosts: ssh/known_hosts\n        capacity", "key_file: ssh/id_ed25519\n        known_hosts: ssh/none\n        capacity",
			`testdata/shoal.yaml:10:22: providers[0].hosts[0].known_hosts: known_hosts: stat ` + abs(testdataDir(t), "ssh/none") + `: no such file or directory`},
		{"known_hosts does not parse", "key_file: ssh/id_ed25519\n        known_hosts: ssh/known_hosts\n        capacity", "key_file: ssh/id_ed25519\n        known_hosts: ssh/notakey\n        capacity",
			`testdata/shoal.yaml:10:22: providers[0].hosts[0].known_hosts: known_hosts ` + abs(testdataDir(t), "ssh/notakey") + ` does not parse: knownhosts: ` + abs(testdataDir(t), "ssh/notakey") + `: no valid entries, line 1: illegal base64 data at input byte 0`},
		{"bad ports", `"30000-30009"`, `"30009-30000"`,
			`testdata/shoal.yaml:18:16: providers[0].hosts[1].ports: range must go from low to high, got 30009-30000`},
		{"port out of range", `"30000-30009"`, `"30000-70000"`,
			`testdata/shoal.yaml:18:16: providers[0].hosts[1].ports: ports must be from 1 to 65535, got 30000-70000`},
		{"negative capacity", "instances: 8", "instances: -1",
			`testdata/shoal.yaml:11:31: providers[0].hosts[0].capacity.instances: must be >= 0 (0: unbounded), got -1`},
		{"bad address", "address: 10.0.0.2\n", "address: \"10.0.0.2:x\"\n",
			`testdata/shoal.yaml:7:18: providers[0].hosts[0].address: port must be a number from 1 to 65535, got "x"`},
		{"unknown group provider", "provider: rack", "provider: rak",
			`testdata/shoal.yaml:23:15: groups[0].provider: unknown provider "rak"; the config has local, rack`},
		{"unsatisfiable labels", "labels: {zone: b}}", "labels: {zone: c}}",
			`testdata/shoal.yaml:24:41: groups[0].placement.labels: no host of provider rack carries all of {zone: c}, so no instance could be placed`},
		{"bad strategy", "strategy: pack", "strategy: fill",
			`testdata/shoal.yaml:24:27: groups[0].placement.strategy: must be spread or pack, got "fill"`},
		{"consolidation with spread", "strategy: pack", "strategy: spread, consolidation: {max_moves: 2}",
			`testdata/shoal.yaml:24:50: groups[0].placement.consolidation: consolidation empties hosts that pack placement then leaves empty; it needs placement.strategy pack, got spread`},
		{"consolidation max_moves 0", "strategy: pack", "strategy: pack, consolidation: {max_moves: 0}",
			`testdata/shoal.yaml:24:60: groups[0].placement.consolidation.max_moves: must be from 1 to 1000 (the most instances moved to empty one host), got 0`},
		{"consolidation unknown key", "strategy: pack", "strategy: pack, consolidation: {moves: 2}",
			`testdata/shoal.yaml:24:49: groups[0].placement.consolidation.moves: unknown field; allowed: max_moves, after`},
		{"consolidation negative after", "strategy: pack", "strategy: pack, consolidation: {after: -1s}",
			`testdata/shoal.yaml:24:56: groups[0].placement.consolidation.after: must not be negative, got -1s`},
		{"placement on local", "    provider: rack\n", "",
			`testdata/shoal.yaml:23:16: groups[0].placement: the local provider runs every instance on this machine, so there is nothing to place; set provider to a provider with hosts, or leave placement out`},
		{"duplicate provider", "groups:\n", "  - {name: rack, type: ssh, hosts: [{address: 10.0.0.2, user: u, key_file: ssh/id_ed25519, known_hosts: ssh/known_hosts}]}\ngroups:\n",
			`testdata/shoal.yaml:19:12: providers[1].name: duplicate provider name "rack" (first at line 3)`},
		{"host_down_after too short", "host_down_after: 20s", "host_down_after: 1s",
			`testdata/shoal.yaml:5:22: providers[0].host_down_after: must be at least 2s and at most 24h0m0s, got 1s`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := parseEdited(t, providersDoc, tt.old, tt.new)
			if got := err.Error(); got != tt.want {
				t.Errorf("Parse error:\n got: %s\nwant: %s", got, tt.want)
			}
		})
	}
}

// TestConsolidation: placement.consolidation's defaults and keys.
func TestConsolidation(t *testing.T) {
	parseString := func(t *testing.T, doc string) (*Config, error) {
		return Parse("testdata/shoal.yaml", []byte(doc))
	}
	cfg, err := parseString(t, strings.Replace(providersDoc, "strategy: pack", "strategy: pack, consolidation: {}", 1))
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Groups[0].Placement.Consolidation; c == nil || *c != (Consolidation{MaxMoves: 2, After: time.Minute}) {
		t.Fatalf("defaults: %+v", c)
	}
	cfg, err = parseString(t, strings.Replace(providersDoc, "strategy: pack", "strategy: pack, consolidation: {max_moves: 4, after: 5s}", 1))
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Groups[0].Placement.Consolidation; c == nil || *c != (Consolidation{MaxMoves: 4, After: 5 * time.Second}) {
		t.Fatalf("set: %+v", c)
	}
	cfg, err = parseString(t, providersDoc)
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Groups[0].Placement.Consolidation; c != nil {
		t.Fatalf("off by default, got %+v", c)
	}
}

func testdataDir(t *testing.T) string {
	dir, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestRetriesDefault: a group on another provider than local retries
// idempotent requests that failed after they were sent unless it says
// otherwise; a local group retries failed connections only; a value
// outside the two is an error at its position.
func TestRetriesDefault(t *testing.T) {
	for _, tc := range []struct {
		name, old, new, want string
	}{
		{"remote, left out", "", "", RetriesIdempotent},
		{"remote, written", "    provider: rack\n", "    provider: rack\n    retries: connect\n", RetriesConnect},
		{"local", "    provider: rack\n    placement: {strategy: pack, labels: {zone: b}}\n", "", RetriesConnect},
		{"local, written", "    provider: rack\n    placement: {strategy: pack, labels: {zone: b}}\n", "    retries: idempotent\n", RetriesIdempotent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := providersDoc
			if tc.old != "" {
				doc = strings.Replace(doc, tc.old, tc.new, 1)
			}
			cfg, err := Parse("testdata/shoal.yaml", []byte(doc))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := cfg.Groups[0].Retries; got != tc.want {
				t.Errorf("retries = %q, want %q", got, tc.want)
			}
		})
	}
	err := parseEdited(t, providersDoc, "    provider: rack\n", "    provider: rack\n    retries: always\n")
	if want := `groups[0].retries: must be one of connect, idempotent`; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q, want it to say %q", err, want)
	}
}
