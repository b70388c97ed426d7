package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
)

// seedServerGroup is the seed's ServerGroup (000_b29bda03d2490fd8,
// sacloud/autoscaler's config) from zone to the end of its template, as its
// author wrote it, comments, the empty password, the ELB's expose and the
// redacted key included, indented as keys of a provider entry.
const seedServerGroup = `    zone: "tk1b"

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
            echo -e "keepalive_requests 10;\ngzip_proxied any;\ngzip on;\ngzip_http_version 1.0;\ngzip_comp_level 9;\ngzip_types text/html;" > /etc/nginx/conf.d/gzip.conf
            curl https://ja.wikipedia.org/wiki/%E4%B8%96%E7%95%8C%E9%81%BA%E7%94%A3 > /usr/share/nginx/html/sekai.html
            sudo systemctl start nginx
            echo "server name: {{ .Name }}" >  /usr/share/nginx/html/index.html
            echo "OK" > /usr/share/nginx/html/live
            firewall-cmd --permanent --add-service http
            firewall-cmd --reload
`

// seedEnv is shoal with the seed's server group pasted into a sacloud
// provider on the fake (edit changes the pasted text), and the fake's store.
func seedEnv(t *testing.T, edit func(string) string) (*shoalEnv, string) {
	store := filepath.Join(t.TempDir(), "fake-store.json")
	providers := fmt.Sprintf(`providers:
  - name: sakura
    type: sacloud
    port: 80
    interval: 500ms
    fake_mode: true
    fake_store_path: %s
    emulator: {stand_in: [%q, "--listen", "127.0.0.1:{{.Port}}", "--name", "{{.Name}}"]}
`, store, filepath.Join(binDir, "demo-backend")) + edit(seedServerGroup)
	e := newEnv(t, providers, groupSpec{Name: "hscale-group", Min: 2, Max: 5,
		Plans: "[{name: smallest, size: 2}, {name: medium, size: 3}, {name: largest, size: 5}]",
		Extra: "    provider: sakura\n", Cloud: true})
	return e, store
}

// TestSacloudSeedTemplateServes: the seed's server group pasted unchanged
// validates and serves on the fake; status shows each instance's server ID
// (text, JSON, the API), and a scale-in's event names the server deleted
// and the shutdown asked (shutdown_force: false → graceful).
func TestSacloudSeedTemplateServes(t *testing.T) {
	parallel(t) // mostly waits on polls and boots
	e, store := seedEnv(t, func(s string) string { return s })
	if out, stderr, code := e.cli("validate"); code != 0 {
		t.Fatalf("shoal validate of the seed's template: exit %d\n%s%s", code, out, stderr)
	}
	e.start()
	e.eventually("2 servers in service", 60*time.Second, inService(e, 2))

	servers := ours(t, e, store)
	ids := map[string]string{}
	for _, in := range e.status().Groups[0].Instances {
		s, ok := servers[in.Name]
		if !ok || in.CloudID != s.ID {
			t.Errorf("instance %s: cloud_id %q in `shoal status -o json`, want its server's ID in the fake (%+v)", in.Name, in.CloudID, s)
		}
		ids[in.Name] = s.ID
	}
	st, err := e.client().Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range st.Groups[0].Instances {
		if in.CloudID == "" || in.CloudID != ids[in.Name] {
			t.Errorf("/v1/status: instance %s cloud_id %q, want %q", in.Name, in.CloudID, ids[in.Name])
		}
	}
	out, _, code := e.cli("status")
	if code != 0 || !strings.Contains(out, "CLOUD-ID") {
		t.Fatalf("shoal status: exit %d, no CLOUD-ID column:\n%s", code, out)
	}
	for name, id := range ids {
		if !strings.Contains(out, name+"  "+id) && !containsRow(out, name, id) {
			t.Errorf("shoal status shows no row with %s and its server %s:\n%s", name, id, out)
		}
	}

	if out, stderr, code := e.cli("scale", "hscale-group", "--plan", "medium"); code != 0 {
		t.Fatalf("scale: %d %s%s", code, out, stderr)
	}
	e.eventually("3 servers in service", 60*time.Second, inService(e, 3))
	third := ours(t, e, store)["hscale-group-003"].ID
	if out, stderr, code := e.cli("scale", "hscale-group", "--plan", "smallest"); code != 0 {
		t.Fatalf("scale in: %d %s%s", code, out, stderr)
	}
	e.eventually("back to 2 servers", 60*time.Second, func() error {
		if err := inService(e, 2)(); err != nil {
			return err
		}
		if n := len(ours(t, e, store)); n != 2 {
			return fmt.Errorf("%d servers in the fake", n)
		}
		return nil
	})
	var terminated []string
	e.eventually("the scale-in's termination event", 30*time.Second, func() error {
		terminated = nil
		for _, ev := range e.events(api.EventsQuery{Group: "hscale-group"}) {
			if strings.Contains(ev.Reason, " terminated") {
				terminated = append(terminated, ev.Reason)
			}
		}
		if len(terminated) == 0 {
			return fmt.Errorf("no termination event yet")
		}
		return nil
	})
	want := fmt.Sprintf("terminated: server %s deleted (shutdown: graceful)", third)
	if len(terminated) != 1 || !strings.Contains(terminated[0], want) {
		t.Errorf("termination events %q, want one saying %q", terminated, want)
	}
	events, _, _ := e.cli("events", "hscale-group")
	if !strings.Contains(events, "(shutdown: graceful)") {
		t.Errorf("shoal events does not say which shutdown was asked:\n%s", events)
	}
}

// TestSacloudForcedShutdownSaysSo: with shutdown_force: true a scale-in's
// event says the shutdown was forced (the graceful one is in
// TestSacloudSeedTemplateServes).
func TestSacloudForcedShutdownSaysSo(t *testing.T) {
	parallel(t)
	e, store := seedEnv(t, func(s string) string {
		return strings.Replace(s, "shutdown_force: false", "shutdown_force: true", 1)
	})
	e.start()
	e.eventually("2 servers in service", 60*time.Second, inService(e, 2))
	if out, stderr, code := e.cli("scale", "hscale-group", "--plan", "medium"); code != 0 {
		t.Fatalf("scale: %d %s%s", code, out, stderr)
	}
	e.eventually("3 servers in service", 60*time.Second, inService(e, 3))
	third := ours(t, e, store)["hscale-group-003"].ID
	if out, stderr, code := e.cli("scale", "hscale-group", "--plan", "smallest"); code != 0 {
		t.Fatalf("scale in: %d %s%s", code, out, stderr)
	}
	want := fmt.Sprintf("hscale-group-003 terminated: server %s deleted (shutdown: forced)", third)
	e.eventually("the forced shutdown's event", 60*time.Second, func() error {
		var got []string
		for _, ev := range e.events(api.EventsQuery{Group: "hscale-group"}) {
			if strings.Contains(ev.Reason, " terminated") {
				got = append(got, ev.Reason)
			}
			if ev.Reason == want {
				return nil
			}
		}
		return fmt.Errorf("termination events %q, want %q", got, want)
	})
}

// containsRow reports whether a line of out holds name and then id as
// columns.
func containsRow(out, name, id string) bool {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == name && f[1] == id {
			return true
		}
	}
	return false
}

// TestSacloudPlanNotSoldFailsClearly: a plan Sakura does not sell (core 3,
// memory 7) fails each start before any server exists, with the field and
// the reason in the group's status, and the group backs off between starts.
func TestSacloudPlanNotSoldFailsClearly(t *testing.T) {
	parallel(t)
	e, store := seedEnv(t, func(s string) string {
		return strings.Replace(s, "        core: 1\n        memory: 1\n", "        core: 3\n        memory: 7\n", 1)
	})
	e.start()
	const want = "sacloud: template.plan: zone tk1b sells no standard plan of 3 cores and 7 GB memory"
	var failures []string
	e.eventually("the plan's failure in status", 30*time.Second, func() error {
		failures = nil
		for _, f := range e.status().Groups[0].LastFailures {
			failures = append(failures, f.Reason)
		}
		for _, r := range failures {
			if strings.Contains(r, want) {
				return nil
			}
		}
		return fmt.Errorf("recent failures %q", failures)
	})
	time.Sleep(8 * time.Second)
	if s := ours(t, e, store); len(s) != 0 {
		t.Errorf("servers created for a plan not sold: %+v", s)
	}
	n := 0
	for _, ev := range e.events(api.EventsQuery{Group: "hscale-group"}) {
		if strings.Contains(ev.Reason, want) {
			n++
		}
	}
	// Two instances at once, then back-off doubling from 1 s: a few
	// starts in 8 s, not one per reconcile.
	if n == 0 || n > 12 {
		t.Errorf("%d failed starts with the plan's reason in about 8 s; want a few (backing off)", n)
	}
	t.Logf("%d failed starts in about 8 s; recent failures %q", n, failures)
}
