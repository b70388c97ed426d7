package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// sacloudDoc is the seed's server group (000_b29bda03d2490fd8) as a
// provider entry; tests replace its markers to break one thing at a time.
const sacloudDoc = `listen: 127.0.0.1:8080
providers:
  - name: sakura
    type: sacloud
    port: 80
    zone: tk1b
    shutdown_force: false
    server_plans:
      largest: {core: 2, memory: 4}
    template:
      tags: [web]
      description: "hscale-group"
      interface_driver: "virtio"
      plan: {core: 1, memory: 1, dedicated_cpu: false}
      network_interfaces:
        - upstream: "shared"
      disks:
        - os_type: "almalinux"
          plan: "ssd"
          connection: "virtio"
          size: 20
      edit_parameter:
        disabled: false
        disable_pw_auth: true
        change_partition_uuid: true
        ssh_keys: ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 me"]
        startup_scripts:
          - |
            echo "server name: {{ .Name }}" > /usr/share/nginx/html/index.html
groups:
  - name: hscale-group
    min_size: 2
    max_size: 5
    provider: sakura
    plans: [{name: smallest, size: 2}, {name: medium, size: 3}, {name: largest, size: 5}]
`

func TestParseSacloudProvider(t *testing.T) {
	cfg, err := Parse("testdata/shoal.yaml", []byte(sacloudDoc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	i := slices.IndexFunc(cfg.Providers, func(p Provider) bool { return p.Name == "sakura" })
	if i < 0 {
		t.Fatalf("no provider sakura in %+v", cfg.Providers)
	}
	p := cfg.Providers[i]
	if p.Type != ProviderSacloud || p.Sacloud == nil || p.SSH != nil {
		t.Fatalf("provider = %+v, want a sacloud one", p)
	}
	s := p.Sacloud
	tmpl := s.Template
	if s.Zone != "tk1b" || s.ShutdownForce || s.FakeMode || tmpl.Description != "hscale-group" || tmpl.InterfaceDriver != "virtio" {
		t.Errorf("provider = %+v", s)
	}
	if tmpl.Plan != (SacloudPlan{Core: 1, Memory: 1}) || s.PlanFor("largest") != (SacloudPlan{Core: 2, Memory: 4}) || s.PlanFor("medium") != tmpl.Plan || s.PlanFor("") != tmpl.Plan {
		t.Errorf("plans: template %+v, server_plans %+v", tmpl.Plan, s.ServerPlans)
	}
	if len(tmpl.NetworkInterfaces) != 1 || !tmpl.NetworkInterfaces[0].Shared || len(tmpl.Disks) != 1 || tmpl.Disks[0] != (SacloudDisk{OSType: "almalinux", Plan: "ssd", Connection: "virtio", Size: 20}) {
		t.Errorf("template = %+v", tmpl)
	}
	e := tmpl.EditParameter
	scripts, err := e.Scripts(SacloudScriptData{Name: "hscale-group-003", Group: "hscale-group", Index: 3, Zone: "tk1b"})
	if err != nil || len(scripts) != 1 || !strings.Contains(scripts[0], `echo "server name: hscale-group-003"`) {
		t.Errorf("startup script = %q, %v; want {{ .Name }} as the server's name", scripts, err)
	}
	if !e.DisablePasswordAuth || !e.ChangePartitionUUID || e.EnableDHCP || len(e.SSHKeys) != 1 {
		t.Errorf("edit_parameter = %+v", e)
	}
}

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
		{"bad startup script", `{{ .Name }}`, `{{ .Hostname }}`, "testdata/shoal.yaml:28:13: providers[0].template.edit_parameter.startup_scripts[0]: template fails on a sample server (fields: .Name .Group .Index .Zone): template: startup_script:1:22: executing \"startup_script\" at <.Hostname>: can't evaluate field Hostname in type config.SacloudScriptData"},
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

// seedServerGroup is the ServerGroup of the seed (000_b29bda03d2490fd8,
// sacloud/autoscaler's config) as its author wrote it, comments and the
// redacted key included: zone, shutdown_force and template move into a
// provider entry unchanged.
const seedServerGroup = `        zone: "tk1b"

        shutdown_force: false

        template:
          # tags: [ "tag1", "tag2" ]
          description: "hscale-group"
          interface_driver: "virtio"
          plan:
            core: 1
            memory: 1
            dedicated_cpu: false

          network_interfaces:
            - upstream: "shared" # 共有セグメント
              expose:
                ports: [80] #エンハンスドLBで使われるport番号
                server_group_name: "gr1" #エンハンスドLBで使われるグループ名


          disks:
            - os_type: "almalinux"
              plan: "ssd"
              connection: "virtio"
              size: 20

          edit_parameter:
            disabled: false
            password: ""
            disable_pw_auth: true
            enable_dhcp: false
            change_partition_uuid: true
            ssh_keys:
              - "ssh-ed25519  **********"

            startup_scripts:
              - |
                #!/bin/bash
                sudo yum install -y nginx
                sudo systemctl enable nginx
                echo "server name: {{ .Name }}" >  /usr/share/nginx/html/index.html
                echo "OK" > /usr/share/nginx/html/live
`

// SeedProvider is seedServerGroup as a provider entry named sakura, with
// extra (indented keys of the entry) before it.
func seedProvider(extra string) string {
	return "listen: 127.0.0.1:8080\nproviders:\n      - name: sakura\n        type: sacloud\n        port: 80\n" + extra + seedServerGroup + `groups:
  - {name: hscale-group, provider: sakura, min_size: 2, max_size: 5,
     plans: [{name: smallest, size: 2}, {name: medium, size: 3}, {name: largest, size: 5}]}
`
}

// TestSacloudSeedTemplatePastedUnchanged: the seed's server group template
// validates as pasted, password and expose included (README: "move into the
// provider entry unchanged").
func TestSacloudSeedTemplatePastedUnchanged(t *testing.T) {
	cfg, err := Parse("testdata/shoal.yaml", []byte(seedProvider("")))
	if err != nil {
		t.Fatalf("the seed's template pasted unchanged: %v", err)
	}
	s := cfg.Providers[slices.IndexFunc(cfg.Providers, func(p Provider) bool { return p.Name == "sakura" })].Sacloud
	e := s.Template.EditParameter
	if s.Zone != "tk1b" || e == nil || e.Password != "" || !e.DisablePasswordAuth || len(e.StartupScripts) != 1 {
		t.Errorf("driver = %+v, edit = %+v", s, e)
	}
	if nic := s.Template.NetworkInterfaces[0]; !nic.Shared || nic.Expose == nil || !slices.Equal(nic.Expose.Ports, []int{80}) || nic.Expose.ServerGroupName != "gr1" {
		t.Errorf("nic = %+v", nic)
	}
}

// TestSacloudPasswordSources: the edit's password comes from the config
// (as the autoscaler writes it) or a file, and no message shows it.
func TestSacloudPasswordSources(t *testing.T) {
	const pw = "pw-do-not-print-1"
	inline := strings.Replace(seedProvider(""), `password: ""`, `password: "`+pw+`"`, 1)
	cfg, err := Parse("testdata/shoal.yaml", []byte(inline))
	if err != nil {
		t.Fatalf("inline password: %v", err)
	}
	if got := cfg.Providers[0].Sacloud.Template.EditParameter.Password; got != pw {
		t.Errorf("inline password = %q, want the config's", got)
	}
	file := filepath.Join(t.TempDir(), "pw")
	os.WriteFile(file, []byte(pw+"\n"), 0o600)
	fromFile := strings.Replace(seedProvider(""), `password: ""`, `password_file: `+file, 1)
	if cfg, err = Parse("testdata/shoal.yaml", []byte(fromFile)); err != nil {
		t.Fatalf("password_file: %v", err)
	}
	if got := cfg.Providers[0].Sacloud.Template.EditParameter.Password; got != pw {
		t.Errorf("password_file's password = %q, want the file's", got)
	}
	// A config that fails elsewhere never shows the password.
	bad := strings.Replace(inline, `zone: "tk1b"`, `zone: "tk1c"`, 1)
	_, err = Parse("testdata/shoal.yaml", []byte(bad))
	if err == nil || strings.Contains(err.Error(), pw) || !strings.Contains(err.Error(), "testdata/shoal.yaml:6:15: providers[0].zone: must be a Sakura Cloud zone") {
		t.Errorf("Parse error = %v; want the zone's, without the password", err)
	}
}
