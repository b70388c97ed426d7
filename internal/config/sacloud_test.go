package config

import (
	_ "embed"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sacloudDoc is the seed's server group (000_b29bda03d2490fd8) as a
// provider entry; tests replace its markers to break one thing at a time.
//
//go:embed testdata/providers-sacloud.yaml
var sacloudDoc string

func TestParseSacloudErrors(t *testing.T) {
	dir := t.TempDir()
	leaky := filepath.Join(dir, "leaky.json")
	os.WriteFile(leaky, []byte(`{"AccessToken": "tok-do-not-print"}`), 0o600)
	tests := []struct {
		name     string
		old, new string
		want     string
	}{
		{"bad zone", "zone: tk1b", "zone: tokyo", "testdata/shoal.yaml:6:11: providers[0].zone: must be a Sakura Cloud zone (one of tk1a, tk1b, is1a, is1b, is1c, tk1v), got \"tokyo\""},
		{"zone the cloud lacks", "zone: tk1b", "zone: tk1c", "testdata/shoal.yaml:6:11: providers[0].zone: must be a Sakura Cloud zone (one of tk1a, tk1b, is1a, is1b, is1c, tk1v), got \"tk1c\""},
		{"no zone", "    zone: tk1b\n", "", "testdata/shoal.yaml:3:5: providers[0].zone: required"},
		{"unknown os_type", `os_type: "almalinux"`, `os_type: "windows"`, "testdata/shoal.yaml:18:20: providers[0].template.disks[0].os_type: unknown os_type \"windows\"; known: almalinux, almalinux10, almalinux9, almalinux8, rockylinux, rockylinux10, rockylinux9, rockylinux8, miracle, miraclelinux, miracle9, miraclelinux9, miracle8, miraclelinux8, ubuntu, ubuntu2404, ubuntu2204, debian, debian12, debian11, kusanagi"},
		{"os_type and archive", `os_type: "almalinux"`, `os_type: "almalinux"
          source_archive: {id: "113"}`, "testdata/shoal.yaml:19:27: providers[0].template.disks[0].source_archive: only one of os_type and source_archive can be given"},
		{"selector without criteria", `os_type: "almalinux"`, `source_archive: {}`, "testdata/shoal.yaml:18:27: providers[0].template.disks[0].source_archive: must select by id, names or tags"},
		{"bad disk plan", `plan: "ssd"`, `plan: "nvme"`, "testdata/shoal.yaml:19:17: providers[0].template.disks[0].plan: must be ssd or hdd, got \"nvme\""},
		{"shared with addresses", `- upstream: "shared"`, `- upstream: "shared"
          assign_cidr_block: 192.168.0.0/24`, "testdata/shoal.yaml:17:30: providers[0].template.network_interfaces[0].assign_cidr_block: the shared segment assigns addresses itself: leave assign_cidr_block out, or use a switch"},
		{"bad upstream", `- upstream: "shared"`, `- upstream: "internet"`, "testdata/shoal.yaml:16:21: providers[0].template.network_interfaces[0].upstream: must be \"shared\" or a selector of a switch ({id: ...} or {names: [...]}), got \"internet\""},
		{"route outside the block", `- upstream: "shared"`, `- upstream: {names: [backend]}
          assign_cidr_block: 192.168.0.0/24
          default_route: 10.0.0.1`, "testdata/shoal.yaml:18:26: providers[0].template.network_interfaces[0].default_route: must be in 192.168.0.0/24, got \"10.0.0.1\""},
		{"bad startup script", `{{ .Name }}`, `{{ .Hostname }}`, "testdata/shoal.yaml:28:13: providers[0].template.edit_parameter.startup_scripts[0]: template fails on a sample server (fields: .Name .Group .Index .Zone): template: startup_script:1:22: executing \"startup_script\" at <.Hostname>: can't evaluate field Hostname in type sacloud.ScriptData"},
		{"marker tag", "tags: [web]", "tags: [shoal-owner=x]", "testdata/shoal.yaml:11:14: providers[0].template.tags[0]: tags starting with shoal- are shoal's markers, got \"shoal-owner=x\""},
		{"unknown server plan", "largest: {core: 2", "huge: {core: 2", "testdata/shoal.yaml:9:7: providers[0].server_plans.huge: no group on provider sakura has a plan \"huge\"; plans: largest, medium, smallest"},
		{"no core", "plan: {core: 1, memory: 1,", "plan: {memory: 1,", "testdata/shoal.yaml:14:13: providers[0].template.plan.core: required"},
		{"expose on another port", `- upstream: "shared"`, `- upstream: "shared"
          expose: {ports: [8080], server_group_name: gr1}`, "testdata/shoal.yaml:17:27: providers[0].template.network_interfaces[0].expose.ports: every server serves on the provider's port 80, which the list lacks (HAProxy connects there); got [8080]"},
		{"expose of an ELB's VIP", `- upstream: "shared"`, `- upstream: "shared"
          expose: {ports: [80], vip: 192.0.2.1}`, "testdata/shoal.yaml:17:33: providers[0].template.network_interfaces[0].expose.vip: unknown field; allowed: ports, server_group_name"},
		{"password twice", "disable_pw_auth: true", "disable_pw_auth: true\n        password: \"pw-do-not-print\"\n        password_env: HOME", "testdata/shoal.yaml:26:23: providers[0].template.edit_parameter.password_env: conflicts with providers[0].template.edit_parameter.password; set only one"},
		{"password not a string", "disable_pw_auth: true", "disable_pw_auth: true\n        password: [pw-do-not-print]", "testdata/shoal.yaml:25:19: providers[0].template.edit_parameter.password: must be a string (quote it), got !!seq"},
		{"password with disabled edit", "disabled: false", "disabled: true\n        password: \"pw-do-not-print\"", "testdata/shoal.yaml:23:9: providers[0].template.edit_parameter: disabled: true but password, ssh_keys or startup_scripts are given"},
		{"credentials without secret", "    shutdown_force: false\n", "    shutdown_force: false\n    credentials_file: " + leaky + "\n", "testdata/shoal.yaml:8:23: providers[0].credentials_file: credentials file " + leaky + " lacks AccessToken or AccessTokenSecret"},
		{"store without fake", "    shutdown_force: false\n", "    shutdown_force: false\n    fake_store_path: store.json\n", "testdata/shoal.yaml:8:22: providers[0].fake_store_path: is the fake API's store: set fake_mode: true, or leave it out"},
		{"fake without stand-ins", "    shutdown_force: false\n", "    shutdown_force: false\n    fake_mode: true\n", "testdata/shoal.yaml:8:16: providers[0].fake_mode: the fake API's servers cannot serve: give emulator.stand_in, a local process to stand in for each"},
		{"stand-ins without fake", "    shutdown_force: false\n", "    shutdown_force: false\n    emulator: {stand_in: [app]}\n", "testdata/shoal.yaml:8:15: providers[0].emulator: stands in for the fake API's servers: set fake_mode: true, or leave emulator out to use real servers"},
		{"fake and real", "groups:\n", "  - {name: fake, type: sacloud, port: 80, zone: is1a, fake_mode: true, emulator: {stand_in: [app]}, template: {plan: {core: 1, memory: 1}}}\ngroups:\n", "testdata/shoal.yaml:30:55: providers[1].fake_mode: the fake sacloud API replaces the real one for the whole process, and provider sakura uses the real one: use one or the other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := parseEdited(t, sacloudDoc, tt.old, tt.new)
			if strings.Contains(err.Error(), "tok-do-not-print") || strings.Contains(err.Error(), "pw-do-not-print") {
				t.Errorf("error shows the credentials: %s", err)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("Parse error:\n got: %s\nwant: %s", got, tt.want)
			}
		})
	}
}
