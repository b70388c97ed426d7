package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/shoal-lb/shoal/internal/compat/sacloud/autoscalerpb"
)

// These run the real shoal binary on a sacloud provider against
// iaas-api-go's fake of the Sakura Cloud API (fake_mode), which keeps its
// state in a JSON file (fake_store_path) so that a restarted shoal sees
// the same servers; stand-ins serve for the fake's servers on 127.0.0.1.

// fakeServer is a server as the fake's store file holds it.
type fakeServer struct {
	ID, Name string
	Tags     []string
	CPU      int
}

// fakeItem is a resource as the fake's store file holds it.
type fakeItem struct {
	ResourceType, ID, Name string
	Tags                   []string
	CPU                    int
}

// fakeItems reads the fake's store file (written whole on every change: a
// read that races a write is retried).
func fakeItems(t *testing.T, store string) []fakeItem {
	t.Helper()
	var last error
	for range 50 {
		b, err := os.ReadFile(store)
		var items []fakeItem
		if err == nil {
			if err = json.Unmarshal(b, &items); err == nil {
				return items
			}
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("read the fake's store %s: %v", store, last)
	return nil
}

// fakeServers reads the servers and disks in the fake's store file.
func fakeServers(t *testing.T, store string) (servers []fakeServer, disks []string) {
	t.Helper()
	for _, it := range fakeItems(t, store) {
		switch it.ResourceType {
		case "Server":
			servers = append(servers, fakeServer{ID: it.ID, Name: it.Name, Tags: it.Tags, CPU: it.CPU})
		case "Disk":
			if strings.HasPrefix(it.Name, "hscale-group-") {
				disks = append(disks, it.Name)
			}
		}
	}
	return servers, disks
}

// fakeNotes reads the names of the startup script notes in the fake's
// store file that carry an owner marker (shoal-o=...).
func fakeNotes(t *testing.T, store string) []string {
	t.Helper()
	var notes []string
	for _, it := range fakeItems(t, store) {
		if it.ResourceType == "Note" && slices.ContainsFunc(it.Tags, func(tag string) bool { return strings.HasPrefix(tag, "shoal-o=") }) {
			notes = append(notes, it.Name)
		}
	}
	return notes
}

func sacloudEnv(t *testing.T) (*shoalEnv, string) {
	return sacloudEnvTop(t, "")
}

// sacloudEnvTop is sacloudEnv with more top-level config (compat, say).
func sacloudEnvTop(t *testing.T, top string) (*shoalEnv, string) {
	providers, store := sacloudProvider(t)
	// The group's largest plan runs bigger servers.
	providers += "    server_plans: {largest: {core: 2, memory: 4}}\n"
	e := newEnv(t, top+providers, groupSpec{Name: "hscale-group", Min: 2, Max: 5,
		Plans: "[{name: smallest, size: 2}, {name: medium, size: 3}, {name: largest, size: 5}]",
		Extra: "    provider: sakura\n", Cloud: true})
	return e, store
}

// sacloudProvider is the providers section of a sacloud provider named
// sakura on the fake, and the fake's store file. Its server names are the
// instances' (a group named hscale-group is what ours reads). More keys of
// the provider's entry may follow it, indented 4 spaces.
func sacloudProvider(t *testing.T) (providers, store string) {
	dir, err := os.MkdirTemp("", "sacloud-e2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	store = filepath.Join(dir, "fake-store.json")
	providers = fmt.Sprintf(`providers:
  - name: sakura
    type: sacloud
    port: 80
    interval: 500ms
    zone: tk1b
    shutdown_force: false
    fake_mode: true
    fake_store_path: %s
    emulator: {stand_in: [%q, "--listen", "127.0.0.1:{{.Port}}", "--name", "{{.Name}}"]}
    template:
      plan: {core: 1, memory: 1}
      network_interfaces: [{upstream: shared}]
      disks: [{os_type: almalinux, plan: ssd, connection: virtio, size: 20}]
      edit_parameter:
        disable_pw_auth: true
        startup_scripts: ["echo 'server name: {{ .Name }}' > /usr/share/nginx/html/index.html"]
`, store, filepath.Join(binDir, "demo-backend"))
	return providers, store
}

// ours are the servers carrying e's owner marker, by name.
func ours(t *testing.T, e *shoalEnv, store string) map[string]fakeServer {
	servers, _ := fakeServers(t, store)
	out := map[string]fakeServer{}
	for _, s := range servers {
		if !strings.HasPrefix(s.Name, "hscale-group-") {
			continue
		}
		if _, dup := out[s.Name]; dup {
			t.Errorf("two servers named %s in the fake: %+v", s.Name, servers)
		}
		out[s.Name] = s
	}
	return out
}

// sacloudMatches fails unless the fake's servers are exactly the group's
// instances: no duplicate (ours fails the test on one), no orphan.
func sacloudMatches(t *testing.T, e *shoalEnv, store string) error {
	servers := ours(t, e, store)
	var names []string
	for _, in := range e.status().Groups[0].Instances {
		names = append(names, in.Name)
		if _, ok := servers[in.Name]; !ok {
			return fmt.Errorf("instance %s has no server", in.Name)
		}
	}
	if len(servers) != len(names) {
		return fmt.Errorf("%d servers for instances %v: %+v", len(servers), names, servers)
	}
	return nil
}

func inService(e *shoalEnv, n int) func() error {
	return func() error {
		g := e.status().Groups[0]
		if g.InService != n || len(g.Instances) != n {
			return fmt.Errorf("%d in service of %d instances, want %d", g.InService, len(g.Instances), n)
		}
		return nil
	}
}

// TestSacloudFakeScaleKillRestart: 2 servers, a scale-out to 5 during
// which shoal is killed (-9), a restart that finishes it with no duplicate
// server and no orphan (the fake's listing proves it), and a stop that
// deletes every server with its disk.
func TestSacloudFakeScaleKillRestart(t *testing.T) {
	parallel(t) // mostly waits on polls, boots and timeouts: see the package doc
	e, store := sacloudEnv(t)
	e.start()
	e.eventually("2 servers in service", 60*time.Second, inService(e, 2))
	servers := ours(t, e, store)
	if len(servers) != 2 {
		t.Fatalf("the fake has %d of our servers, want 2: %+v", len(servers), servers)
	}
	for _, in := range e.status().Groups[0].Instances {
		if !strings.HasPrefix(in.Addr, "127.0.0.1:") {
			t.Fatalf("instance %s at %s: traffic must go to its stand-in, never to the fake's address", in.Name, in.Addr)
		}
		s, ok := servers[in.Name]
		if !ok || !slices.ContainsFunc(s.Tags, func(tag string) bool { return strings.HasPrefix(tag, "shoal-o=") }) {
			t.Errorf("instance %s: server %+v, want one of its name with the owner marker", in.Name, s)
		}
	}

	if out, stderr, code := e.cli("scale", "hscale-group", "--plan", "largest"); code != 0 {
		t.Fatalf("scale: %d %s%s", code, out, stderr)
	}
	// Killed mid-create, while a startup script note exists (a create
	// holds one for a fraction of a second): shoal is frozen (SIGSTOP) as
	// soon as the fake shows one, and killed if the frozen fake still does.
	g := e.status().Groups[0]
	var notesAtKill []string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no startup script note seen in the fake during the scale-out to kill shoal at (servers: %d)", len(ours(t, e, store)))
		}
		if len(fakeNotes(t, store)) == 0 {
			continue
		}
		if err := e.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		if notesAtKill = fakeNotes(t, store); len(notesAtKill) > 0 {
			break
		}
		if err := e.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	before := len(ours(t, e, store))
	e.kill9()
	if before < 3 {
		t.Fatalf("killed with %d servers, want a third one being created", before)
	}
	t.Logf("killed with %d servers and startup script notes %v in the fake, %d instances in service of desired %d", before, notesAtKill, g.InService, g.Desired)
	e.start()
	e.eventually("5 servers in service after the restart", 90*time.Second, inService(e, 5))
	e.eventually("the fake's servers are the instances, no more", 30*time.Second, func() error { return sacloudMatches(t, e, store) })
	// Startup script notes live while their server is created: none is
	// left, by the creates nor by the kill (those at the kill swept at the
	// restart).
	if notes := fakeNotes(t, store); len(notes) > 0 {
		t.Errorf("startup script notes left in the fake after the restart converged: %v (at the kill: %v)", notes, notesAtKill)
	}

	// The group's plan picks the server size: the first two were created
	// at smallest (the template's 1 core), the rest at largest
	// (server_plans: 2 cores).
	for name, s := range ours(t, e, store) {
		want := 2
		if name == "hscale-group-001" || name == "hscale-group-002" {
			want = 1
		}
		if s.CPU != want {
			t.Errorf("server %s has %d cores, want %d", name, s.CPU, want)
		}
	}

	e.stop()
	all, disks := fakeServers(t, store)
	var left []string
	for _, s := range all {
		if strings.HasPrefix(s.Name, "hscale-group-") {
			left = append(left, s.Name)
		}
	}
	if len(left) > 0 || len(disks) > 0 {
		t.Errorf("after stop the fake still has servers %v and disks %v", left, disks)
	}
}

// TestSacloudDropInDrivesFakeServers: the seed's stack unchanged on top of
// shoal's sacloud provider. `autoscaler inputs direct up` (its gRPC Up, as
// the seed's cron script sends it) creates a server in the fake and puts its
// instance behind HAProxy; `down` deletes it again.
func TestSacloudDropInDrivesFakeServers(t *testing.T) {
	parallel(t) // mostly waits on polls, boots and timeouts: see the package doc
	e, store := sacloudEnvTop(t, compatTop)
	e.start()
	e.eventually("2 servers in service", 60*time.Second, inService(e, 2))
	c := dialCompat(t, e)

	resp := call(t, c.Up, &pb.ScalingRequest{Source: "cron", ResourceName: "hscale-group", Sync: true})
	wantStatus(t, resp, pb.ScalingJobStatus_JOB_DONE, "")
	e.eventually("3 servers in service", 60*time.Second, inService(e, 3))
	servers := ours(t, e, store)
	if len(servers) != 3 {
		t.Fatalf("the fake has %d of our servers after up, want 3: %+v", len(servers), servers)
	}
	for _, in := range e.status().Groups[0].Instances {
		if _, ok := servers[in.Name]; !ok {
			t.Errorf("instance %s has no server in the fake", in.Name)
		}
	}
	e.checkInSync("hscale-group")

	resp = call(t, c.Down, &pb.ScalingRequest{Source: "cron", ResourceName: "hscale-group", Sync: true})
	wantStatus(t, resp, pb.ScalingJobStatus_JOB_DONE, "")
	e.eventually("2 servers in service, the third deleted", 60*time.Second, func() error {
		if err := inService(e, 2)(); err != nil {
			return err
		}
		if n := len(ours(t, e, store)); n != 2 {
			return fmt.Errorf("%d servers in the fake", n)
		}
		return nil
	})
	e.checkInSync("hscale-group")
}
