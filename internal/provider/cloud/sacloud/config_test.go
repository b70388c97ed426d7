package sacloud

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/shoal-lb/shoal/internal/config"
)

// sacloudDoc is the seed's server group (000_b29bda03d2490fd8) as a
// provider entry; tests replace its markers to break one thing at a time.
var sacloudDoc = readDoc("../../../config/testdata/providers-sacloud.yaml")

func TestParseSacloudProvider(t *testing.T) {
	cfg, err := config.Parse("testdata/shoal.yaml", []byte(sacloudDoc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	i := slices.IndexFunc(cfg.Providers, func(p config.Provider) bool { return p.Name == "sakura" })
	if i < 0 {
		t.Fatalf("no provider sakura in %+v", cfg.Providers)
	}
	p := cfg.Providers[i]
	if p.Type != Type || Of(p) == nil {
		t.Fatalf("provider = %+v, want a sacloud one", p)
	}
	s := Of(p)
	tmpl := s.Template
	if s.Zone != "tk1b" || s.ShutdownForce || s.FakeMode || tmpl.Description != "hscale-group" || tmpl.InterfaceDriver != "virtio" {
		t.Errorf("provider = %+v", s)
	}
	if tmpl.Plan != (Plan{Core: 1, Memory: 1}) || s.PlanFor("largest") != (Plan{Core: 2, Memory: 4}) || s.PlanFor("medium") != tmpl.Plan || s.PlanFor("") != tmpl.Plan {
		t.Errorf("plans: template %+v, server_plans %+v", tmpl.Plan, s.ServerPlans)
	}
	if len(tmpl.NetworkInterfaces) != 1 || !tmpl.NetworkInterfaces[0].Shared || len(tmpl.Disks) != 1 || tmpl.Disks[0] != (Disk{OSType: "almalinux", Plan: "ssd", Connection: "virtio", Size: 20}) {
		t.Errorf("template = %+v", tmpl)
	}
	e := tmpl.EditParameter
	scripts, err := e.Scripts(ScriptData{Name: "hscale-group-003", Group: "hscale-group", Index: 3, Zone: "tk1b"})
	if err != nil || len(scripts) != 1 || !strings.Contains(scripts[0], `echo "server name: hscale-group-003"`) {
		t.Errorf("startup script = %q, %v; want {{ .Name }} as the server's name", scripts, err)
	}
	if !e.DisablePasswordAuth || !e.ChangePartitionUUID || e.EnableDHCP || len(e.SSHKeys) != 1 {
		t.Errorf("edit_parameter = %+v", e)
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

// seedEntry is seedServerGroup as a provider entry named sakura, with
// extra (indented keys of the entry) before it.
func seedEntry(extra string) string {
	return "listen: 127.0.0.1:8080\nproviders:\n      - name: sakura\n        type: sacloud\n        port: 80\n" + extra + seedServerGroup + `groups:
  - {name: hscale-group, provider: sakura, min_size: 2, max_size: 5,
     plans: [{name: smallest, size: 2}, {name: medium, size: 3}, {name: largest, size: 5}]}
`
}

// TestSacloudSeedTemplatePastedUnchanged: the seed's server group template
// validates as pasted, password and expose included (README: "move into the
// provider entry unchanged").
func TestSacloudSeedTemplatePastedUnchanged(t *testing.T) {
	cfg, err := config.Parse("testdata/shoal.yaml", []byte(seedEntry("")))
	if err != nil {
		t.Fatalf("the seed's template pasted unchanged: %v", err)
	}
	s := Of(cfg.Providers[slices.IndexFunc(cfg.Providers, func(p config.Provider) bool { return p.Name == "sakura" })])
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
	inline := strings.Replace(seedEntry(""), `password: ""`, `password: "`+pw+`"`, 1)
	cfg, err := config.Parse("testdata/shoal.yaml", []byte(inline))
	if err != nil {
		t.Fatalf("inline password: %v", err)
	}
	if got := Of(cfg.Providers[0]).Template.EditParameter.Password; got != pw {
		t.Errorf("inline password = %q, want the config's", got)
	}
	file := filepath.Join(t.TempDir(), "pw")
	os.WriteFile(file, []byte(pw+"\n"), 0o600)
	fromFile := strings.Replace(seedEntry(""), `password: ""`, `password_file: `+file, 1)
	if cfg, err = config.Parse("testdata/shoal.yaml", []byte(fromFile)); err != nil {
		t.Fatalf("password_file: %v", err)
	}
	if got := Of(cfg.Providers[0]).Template.EditParameter.Password; got != pw {
		t.Errorf("password_file's password = %q, want the file's", got)
	}
	// A config that fails elsewhere never shows the password.
	bad := strings.Replace(inline, `zone: "tk1b"`, `zone: "tk1c"`, 1)
	_, err = config.Parse("testdata/shoal.yaml", []byte(bad))
	if err == nil || strings.Contains(err.Error(), pw) || !strings.Contains(err.Error(), "testdata/shoal.yaml:6:15: providers[0].zone: must be a Sakura Cloud zone") {
		t.Errorf("Parse error = %v; want the zone's, without the password", err)
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

// TestParseAPIRootURL: api_root_url, and its refusals at FILE:LINE:COL.
func TestParseAPIRootURL(t *testing.T) {
	cfg, err := config.Parse("testdata/shoal.yaml", []byte(strings.Replace(sacloudDoc, "    zone: tk1b\n", "    zone: tk1b\n    api_root_url: http://127.0.0.1:9000/cloud/zone/\n", 1)))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	i := slices.IndexFunc(cfg.Providers, func(p config.Provider) bool { return p.Name == "sakura" })
	if got := Of(cfg.Providers[i]).APIRootURL; got != "http://127.0.0.1:9000/cloud/zone" {
		t.Errorf("api_root_url = %q, want it without the trailing slash", got)
	}
	for _, c := range []struct{ add, want string }{
		{"    api_root_url: ftp://proxy/cloud\n", `testdata/shoal.yaml:7:19: providers[0].api_root_url: must be an http:// or https:// URL without credentials or query, such as https://secure.sakura.ad.jp/cloud/zone, got "ftp://proxy/cloud"`},
		{"    api_root_url: https://user:pw@proxy/cloud\n", `testdata/shoal.yaml:7:19: providers[0].api_root_url: must not hold credentials (user:password@); the API keys come from credentials_file or the environment`},
		{"    fake_mode: true\n    emulator: {stand_in: [app]}\n    api_root_url: http://127.0.0.1:9000/cloud/zone\n", `testdata/shoal.yaml:9:19: providers[0].api_root_url: the fake API (fake_mode) runs in shoal's process and has no URL: use one or the other`},
	} {
		_, err := config.Parse("testdata/shoal.yaml", []byte(strings.Replace(sacloudDoc, "    zone: tk1b\n", "    zone: tk1b\n"+c.add, 1)))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "pw@") {
			t.Errorf("%q:\n got: %v\nwant: %s", c.add, err, c.want)
		}
	}
}
