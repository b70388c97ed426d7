package sacloud

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sacloud/iaas-api-go"
	"github.com/sacloud/iaas-api-go/fake"
	"github.com/sacloud/iaas-api-go/search"
	"github.com/sacloud/iaas-api-go/types"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider/cloud"
)

// This package's own tests cannot import provider/all (which imports
// it): they register the sacloud entry type themselves.
func init() { config.RegisterProvider(ProviderType) }

// These tests run the driver against iaas-api-go's own in-process fake of
// the Sakura Cloud API (FakeMode), not a real account: the fake creates,
// boots, lists by tag, shuts down and deletes, and answers 404 after. It
// assigns no reachable address, and nothing here sends traffic to one.

// seedProvider is the seed's server group (000_b29bda03d2490fd8) as a
// shoal provider entry.
const seedProvider = `
  - name: sakura
    type: sacloud
    port: 80
    zone: tk1b
    shutdown_force: false
    fake_mode: true
    emulator: {stand_in: [app, "--port={{.Port}}"]}
    server_plans:
      medium: {core: 2, memory: 4}
    template:
      tags: [web]
      description: "hscale-group"
      interface_driver: "virtio"
      plan:
        core: 1
        memory: 1
        dedicated_cpu: false
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
        enable_dhcp: false
        change_partition_uuid: true
        ssh_keys:
          - "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ8o test"
        startup_scripts:
          - |
            #!/bin/bash
            echo "server name: {{ .Name }}" > /usr/share/nginx/html/index.html
`

// load parses a shoal config holding provider and returns its sacloud
// entry, as shoal would build the driver from it.
func load(t *testing.T, provider string) Config {
	t.Helper()
	y := "listen: 127.0.0.1:8080\nproviders:" + provider + `
groups:
  - name: web
    min_size: 0
    max_size: 5
    provider: sakura
    plans: [{name: smallest, size: 2}, {name: medium, size: 3}, {name: largest, size: 5}]
`
	// A short directory: the config checks its state_dir's socket paths.
	dir, err := os.MkdirTemp("", "sacloud")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg, err := config.Parse(filepath.Join(dir, "shoal.yaml"), []byte(y))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	i := slices.IndexFunc(cfg.Providers, func(p config.Provider) bool { return p.Name == "sakura" })
	if i < 0 || Of(cfg.Providers[i]) == nil {
		t.Fatalf("no sacloud provider in %+v", cfg.Providers)
	}
	return *Of(cfg.Providers[i])
}

func newDriver(t *testing.T, cfg Config) *Driver {
	t.Helper()
	d, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return d.(*Driver)
}

// ownerID is an owner ID of shoal's form (ssh.OwnerID: shoal- and 16 hex
// digits), one per test.
func ownerID(t *testing.T) string {
	sum := sha256.Sum256([]byte(t.Name()))
	return "shoal-" + hex.EncodeToString(sum[:8])
}

func request(owner, group string, index int, plan string) cloud.CreateRequest {
	name := fmt.Sprintf("%s-%03d", group, index)
	return cloud.CreateRequest{Name: name, Group: group, Index: index, Plan: plan, Tags: map[string]string{
		cloud.TagOwner: owner, cloud.TagGroup: group, cloud.TagInstance: name,
	}}
}

// waitPhase lists owner's servers until id is in phase, and returns how
// long that took.
func waitPhase(t *testing.T, d *Driver, owner, id string, phase cloud.Phase) (cloud.Server, time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		servers, err := d.List(context.Background(), owner)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		for _, s := range servers {
			if s.ID == id && s.Phase == phase {
				return s, time.Since(start)
			}
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("server %s not %s after 10s: %+v", id, phase, servers)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestCreateBootsAndListFindsOnlyOurs(t *testing.T) {
	d := newDriver(t, load(t, seedProvider))
	ctx := context.Background()
	owner := ownerID(t)

	start := time.Now()
	got, err := d.Create(ctx, request(owner, "web", 1, ""))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	createTook := time.Since(start)
	if got.ID == "" || got.Name != "web-001" || got.Phase != cloud.Pending {
		t.Fatalf("Create returned %+v, want an ID, name web-001, pending", got)
	}
	running, bootTook := waitPhase(t, d, owner, got.ID, cloud.Running)
	t.Logf("fake API latency: Create %v (server, disk copy, boot request), pending to running %v", createTook, bootTook)
	// Another owner's server in the same zone, with the same group name.
	other, err := d.Create(ctx, request("shoal-0000000000000000", "web", 1, ""))
	if err != nil {
		t.Fatalf("Create (other owner): %v", err)
	}
	t.Cleanup(func() { d.Delete(ctx, other.ID) })

	if running.State != "up" {
		t.Errorf("running server's state = %q, want up", running.State)
	}
	want := map[string]string{cloud.TagOwner: owner, cloud.TagGroup: "web", cloud.TagInstance: "web-001", "web": ""}
	for k, v := range want {
		if running.Tags[k] != v {
			t.Errorf("tag %s = %q, want %q (tags %v)", k, running.Tags[k], v, running.Tags)
		}
	}

	servers, err := d.List(ctx, owner)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(servers) != 1 || servers[0].ID != got.ID {
		t.Fatalf("List(%s) = %+v, want exactly server %s", owner, servers, got.ID)
	}
	theirs, err := d.List(ctx, "shoal-0000000000000000")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(theirs) != 1 || theirs[0].ID != other.ID {
		t.Fatalf("List(other owner) = %+v, want exactly server %s", theirs, other.ID)
	}

	// The server is the template's: plan, one disk from the almalinux
	// archive named after it, a NIC on the shared segment.
	srv, err := d.servers.Read(ctx, "tk1b", types.StringID(got.ID))
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if srv.CPU != 1 || srv.MemoryMB != 1024 || srv.Description != "hscale-group" || srv.InterfaceDriver != types.InterfaceDrivers.VirtIO {
		t.Errorf("server = %d cores, %d MB, %q, %s; want the template's 1 core, 1024 MB, hscale-group, virtio", srv.CPU, srv.MemoryMB, srv.Description, srv.InterfaceDriver)
	}
	if len(srv.Interfaces) != 1 || srv.Interfaces[0].SwitchScope != types.Scopes.Shared {
		t.Errorf("interfaces = %+v, want one on the shared segment", srv.Interfaces)
	}
	disks, err := d.disks.Find(ctx, "tk1b", &iaas.FindCondition{Filter: search.Filter{search.Key("Name"): search.PartialMatch("web-001-disk001")}})
	if err != nil {
		t.Fatalf("Find disks: %v", err)
	}
	var ours []*iaas.Disk
	for _, disk := range disks.Disks {
		if disk.ServerID == srv.ID {
			ours = append(ours, disk)
		}
	}
	if len(ours) != 1 || ours[0].SourceArchiveID != d.archiveIDs[0] || ours[0].SizeMB != 20*1024 || ours[0].Availability != types.Availabilities.Available {
		t.Fatalf("disks of the server = %+v, want one of 20 GB from the almalinux archive, available", ours)
	}
	// The startup script's note carried it to the disk and is gone.
	notes, err := d.notes.Find(ctx, &iaas.FindCondition{Filter: search.Filter{search.Key("Name"): search.PartialMatch("web-001-startup")}})
	if err != nil {
		t.Fatalf("Find notes: %v", err)
	}
	if len(notes.Notes) != 0 {
		t.Errorf("startup script notes left: %+v", notes.Notes)
	}
	if err := d.Delete(ctx, got.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
}

func TestDeleteShutsDownAndRemovesServerAndDisks(t *testing.T) {
	for _, force := range []bool{false, true} {
		t.Run(fmt.Sprintf("shutdown_force=%v", force), func(t *testing.T) {
			cfg := load(t, seedProvider)
			cfg.ShutdownForce = force
			d := newDriver(t, cfg)
			rec := &recordingServers{ServerAPI: d.servers}
			d.servers = rec
			ctx := context.Background()
			owner := ownerID(t)
			got, err := d.Create(ctx, request(owner, "web", 2, ""))
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			waitPhase(t, d, owner, got.ID, cloud.Running)
			srv, err := d.servers.Read(ctx, "tk1b", types.StringID(got.ID))
			if err != nil || len(srv.Disks) != 1 {
				t.Fatalf("Read: %v, disks %+v", err, srv.Disks)
			}
			disk := srv.Disks[0].ID

			start := time.Now()
			if err := d.Delete(ctx, got.ID); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			t.Logf("fake API latency: Delete (shutdown, wait down, delete with disks) %v", time.Since(start))
			// The fake powers off either way: the request tells the two
			// apart. iaas-api-go's power helper asks again when the server
			// is not down within its retry span (a loaded machine's fake
			// can take that long): every request carries the flag.
			if len(rec.shutdowns) == 0 || slices.ContainsFunc(rec.shutdowns, func(f bool) bool { return f != force }) {
				t.Errorf("shutdown requests (force flags) = %v, want one or more, each %v", rec.shutdowns, force)
			}
			if want := map[bool]string{false: "graceful", true: "forced"}[force]; d.ShutdownMode() != want {
				t.Errorf("ShutdownMode = %q, want %q", d.ShutdownMode(), want)
			}
			if _, err := d.servers.Read(ctx, "tk1b", types.StringID(got.ID)); !iaas.IsNotFoundError(err) {
				t.Errorf("server after Delete: err = %v, want 404", err)
			}
			if _, err := d.disks.Read(ctx, "tk1b", disk); !iaas.IsNotFoundError(err) {
				t.Errorf("disk after Delete: err = %v, want 404", err)
			}
			servers, err := d.List(ctx, owner)
			if err != nil || len(servers) != 0 {
				t.Errorf("List after Delete = %+v, %v; want none", servers, err)
			}
			if err := d.Delete(ctx, got.ID); err != nil {
				t.Errorf("Delete of a deleted server: %v, want nil", err)
			}
		})
	}
}

func TestPlanMapsToServerSize(t *testing.T) {
	d := newDriver(t, load(t, seedProvider))
	ctx := context.Background()
	owner := ownerID(t)
	for i, tc := range []struct {
		plan         string
		core, memory int
	}{
		{"medium", 2, 4},  // server_plans
		{"largest", 1, 1}, // not in server_plans: the template's
		{"", 1, 1},        // no plan: the template's
	} {
		got, err := d.Create(ctx, request(owner, "web", i+1, tc.plan))
		if err != nil {
			t.Fatalf("Create(plan %q): %v", tc.plan, err)
		}
		t.Cleanup(func() { d.Delete(ctx, got.ID) })
		srv, err := d.servers.Read(ctx, "tk1b", types.StringID(got.ID))
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		if srv.CPU != tc.core || srv.MemoryMB != tc.memory*1024 {
			t.Errorf("plan %q: server has %d cores, %d MB; want %d, %d GB", tc.plan, srv.CPU, srv.MemoryMB, tc.core, tc.memory)
		}
	}
}

func TestSwitchNICTakesAddressFromCIDRBlock(t *testing.T) {
	d := newDriver(t, load(t, seedProvider)) // switches the process to the fake
	ctx := context.Background()
	sw, err := iaas.NewSwitchOp(nil).Create(ctx, "tk1b", &iaas.SwitchCreateRequest{Name: "shoal-test-backend"})
	if err != nil {
		t.Fatalf("create switch: %v", err)
	}
	cfg := load(t, strings.Replace(seedProvider, `        - upstream: "shared"`, `        - upstream: {names: [shoal-test-backend]}
          assign_cidr_block: 192.168.10.0/24
          assign_netmask_len: 24
          default_route: 192.168.10.1`, 1))
	d = newDriver(t, cfg)
	owner := ownerID(t)
	got, err := d.Create(ctx, request(owner, "web", 3, ""))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { d.Delete(ctx, got.ID) })
	if got.IP != "192.168.10.3" {
		t.Errorf("Create: IP %q, want 192.168.10.3 (the block's address + index 3)", got.IP)
	}
	running, _ := waitPhase(t, d, owner, got.ID, cloud.Running)
	if running.IP != "192.168.10.3" {
		t.Errorf("List: IP %q, want 192.168.10.3", running.IP)
	}
	srv, err := d.servers.Read(ctx, "tk1b", types.StringID(got.ID))
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if len(srv.Interfaces) != 1 || srv.Interfaces[0].SwitchID != sw.ID {
		t.Errorf("interfaces = %+v, want one on switch %s", srv.Interfaces, sw.ID)
	}
}

func TestAssignedIP(t *testing.T) {
	for _, tc := range []struct {
		block string
		index int
		want  string
	}{
		{"192.168.0.0/24", 1, "192.168.0.1"},
		{"192.168.0.10/24", 2, "192.168.0.12"}, // from the block's address, as the autoscaler does
		{"10.0.0.0/30", 3, "10.0.0.3"},
		{"10.0.0.0/30", 4, ""}, // outside the block
		{"10.0.0.0/30", 0, ""},
	} {
		got, err := AssignedIP(tc.block, tc.index)
		if got != tc.want || (err != nil) != (tc.want == "") {
			t.Errorf("AssignedIP(%s, %d) = %q, %v; want %q", tc.block, tc.index, got, err, tc.want)
		}
	}
}

func TestFailedCreateLeavesNoServer(t *testing.T) {
	cfg := load(t, strings.Replace(seedProvider, `        - os_type: "almalinux"`, `        - source_archive: {id: "999999999999"}`, 1))
	d := newDriver(t, cfg)
	ctx := context.Background()
	owner := ownerID(t)
	_, err := d.Create(ctx, request(owner, "web", 1, ""))
	if err == nil {
		t.Fatal("Create with a source archive that does not exist succeeded")
	}
	if !strings.Contains(err.Error(), "create disk 1 of web-001") {
		t.Errorf("error %q does not say what failed", err)
	}
	servers, err := d.List(ctx, owner)
	if err != nil || len(servers) != 0 {
		t.Errorf("List after a failed Create = %+v, %v; want no server", servers, err)
	}
}

func TestAPIErrors(t *testing.T) {
	apiErr := func(code int, errCode, msg string) error {
		return iaas.NewAPIError("POST", nil, code, &iaas.APIErrorResponse{ErrorCode: errCode, ErrorMessage: msg})
	}
	for _, tc := range []struct {
		err       error
		retryable bool
		want      string
	}{
		{apiErr(429, "too_many_requests", "rate limited"), true, "429 rate limited"},
		{apiErr(503, "service_unavailable", "maintenance"), true, "503 maintenance"},
		{apiErr(409, "insufficient_resource", "no capacity left in the zone"), true, "409 no capacity"},
		{apiErr(400, "bad_request", "invalid plan"), false, "400 invalid plan (bad_request)"},
		{apiErr(401, "unauthorized", "bad key"), false, "401 bad key"},
		{&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, true, "API unreachable"},
		{context.DeadlineExceeded, false, "deadline"},
	} {
		err := apiError("create server web-001", tc.err)
		if errors.Is(err, cloud.ErrRetryable) != tc.retryable {
			t.Errorf("%v: retryable = %v, want %v", tc.err, !tc.retryable, tc.retryable)
		}
		if !strings.Contains(err.Error(), "sacloud: create server web-001") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %q: want what failed and %q", err, tc.want)
		}
	}
}

func TestCredentialsNeverInErrors(t *testing.T) {
	// A real-API driver cannot be built in this process once the fake is
	// on; credentials are read before that, so check them directly.
	t.Setenv(iaas.APIAccessTokenEnvKey, "")
	t.Setenv(iaas.APIAccessSecretEnvKey, "")
	_, _, err := credentials(Config{})
	if err == nil || !strings.Contains(err.Error(), "SAKURACLOUD_ACCESS_TOKEN") {
		t.Errorf("no keys: err = %v, want it to name the variables", err)
	}
	t.Setenv(iaas.APIAccessTokenEnvKey, "tok-secret-value")
	t.Setenv(iaas.APIAccessSecretEnvKey, "sec-secret-value")
	tok, sec, err := credentials(Config{})
	if err != nil || tok != "tok-secret-value" || sec != "sec-secret-value" {
		t.Errorf("from the environment: %q, %q, %v", tok, sec, err)
	}
	path := filepath.Join(t.TempDir(), "config.json")
	os.WriteFile(path, []byte(`{"AccessToken": "tok-in-file"}`), 0o600)
	if _, _, err := credentials(Config{CredentialsFile: path}); err == nil || strings.Contains(err.Error(), "tok-in-file") {
		t.Errorf("profile without a secret: err = %v, want an error without the token", err)
	}
	os.WriteFile(path, []byte(`{"AccessToken": "tok-in-file", "AccessTokenSecret": "sec-in-file"}`), 0o600)
	tok, sec, err = credentials(Config{CredentialsFile: path})
	if err != nil || tok != "tok-in-file" || sec != "sec-in-file" {
		t.Errorf("from the profile: %q, %q, %v", tok, sec, err)
	}
	// This process uses the fake: a real driver is refused, clearly.
	newDriver(t, load(t, seedProvider))
	if _, err := New(Config{Zone: "tk1b"}, slog.Default()); err == nil || !strings.Contains(err.Error(), "fake") {
		t.Errorf("real driver in a fake process: err = %v", err)
	}
}

// TestFakeStoreAcrossProcesses runs processes on one fake_store_path, as a
// shoal that is killed and restarted does: the second lists and deletes
// what the first created, and creates one more. The half-create and
// kill-mid-create processes first list the servers the earlier ones left
// (LISTED), each a process of its own that seeds the fake from the file.
func TestFakeStoreAcrossProcesses(t *testing.T) {
	store := filepath.Join(t.TempDir(), "fake-store.json")
	var listed string // the LISTED line of the last run, "-" if none
	run := func(step string) string {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFakeStoreChild$", "-test.v")
		cmd.Env = append(os.Environ(), "SHOAL_SACLOUD_STORE="+store, "SHOAL_SACLOUD_STEP="+step)
		out, err := cmd.CombinedOutput()
		// The child of a kill step kills itself with SIGKILL.
		var ee *exec.ExitError
		killed := errors.As(err, &ee) && ee.ProcessState.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
		if err != nil && !(strings.HasPrefix(step, "kill-") && killed) {
			t.Fatalf("%s: %v\n%s", step, err, out)
		}
		listed = "-"
		for _, line := range strings.Split(string(out), "\n") {
			if _, v, ok := strings.Cut(line, "LISTED "); ok {
				listed = strings.TrimSpace(v)
			}
			if _, v, ok := strings.Cut(line, "RESULT "); ok {
				return strings.TrimSpace(v)
			}
		}
		t.Fatalf("%s: no result in\n%s", step, out)
		return ""
	}
	start := time.Now()
	created := run("create")
	t.Logf("first process (fake store initialised, server created and running): %v", time.Since(start))
	if listed := run("list-delete"); listed != created {
		t.Fatalf("the second process listed %q, want the first one's server %q", listed, created)
	}
	// A process killed mid-Create (its disk still copying) leaves a
	// server the next one deletes at once, as on a real cloud, where the
	// copy finishes without the process that asked for it.
	half := run("half-create")
	if listed != "" {
		t.Fatalf("after deletion a third process lists %q, want none", listed)
	}
	if swept := run("sweep"); swept != half {
		t.Fatalf("the next process swept %q, want the half-created server %q", swept, half)
	}
	// A process killed mid-Create after its startup scripts' notes were
	// created (its disk still copying) leaves them, and a half-created
	// server: the next one's StopStrays deletes both (cloud.Sweeper).
	notes := run("kill-mid-create")
	if listed != "" {
		t.Fatalf("after the sweep a process lists %q, want none", listed)
	}
	if notes == "" {
		t.Fatal("the killed process made no startup script note")
	}
	want := notes + " | 1 server | no note left"
	if got := run("stop-strays"); got != want {
		t.Fatalf("the next process's StopStrays: %q, want %q", got, want)
	}
	// A store that does not parse is an error, not the SDK's panic.
	if err := os.WriteFile(store, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := run("bad-store"); !strings.Contains(got, "sacloud: fake API store "+store) {
		t.Fatalf("New on a broken store: %q, want an error naming it", got)
	}
}

// TestFakeStoreChild is TestFakeStoreAcrossProcesses's child process.
func TestFakeStoreChild(t *testing.T) {
	store, step := os.Getenv("SHOAL_SACLOUD_STORE"), os.Getenv("SHOAL_SACLOUD_STEP")
	if store == "" {
		t.Skip("run by TestFakeStoreAcrossProcesses")
	}
	cfg := load(t, strings.Replace(seedProvider, "fake_mode: true", "fake_mode: true\n    fake_store_path: "+store, 1))
	if step == "bad-store" {
		_, err := New(cfg, nil)
		fmt.Println("RESULT", err)
		return
	}
	if step == "half-create" || step == "kill-mid-create" {
		fake.DiskCopyDuration = time.Hour // the process "dies" mid-copy
	}
	d := newDriver(t, cfg)
	ctx := context.Background()
	if step == "half-create" || step == "kill-mid-create" {
		fmt.Println("LISTED", listOwner(t, d, "restarted"))
	}
	switch step {
	case "kill-mid-create":
		go func() { _, _ = d.Create(ctx, request("killed", "web", 4, "")) }()
		ids := ownerNotes(t, d, "killed", func(ids []string) bool { return len(ids) > 0 })
		fmt.Println("RESULT", strings.Join(ids, ","))
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // killed
	case "stop-strays":
		before := ownerNotes(t, d, "killed", nil)
		p, err := cloud.New("sakura", d, config.CloudProvider{}, cloud.Options{Owner: "killed", Driver: "sacloud", StateDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		stopped, err := p.StopStrays(sctx, nil)
		if err != nil {
			t.Fatalf("StopStrays: %v", err)
		}
		left := "no note left"
		if after := ownerNotes(t, d, "killed", nil); len(after) > 0 {
			left = "notes left: " + strings.Join(after, ",")
		}
		fmt.Printf("RESULT %s | %d server | %s\n", strings.Join(before, ","), len(stopped), left)
	case "half-create":
		srv, err := d.servers.Create(ctx, "tk1b", &iaas.ServerCreateRequest{
			CPU: 1, MemoryMB: 1024, Name: "web-003",
			ConnectedSwitches: []*iaas.ConnectedSwitch{{Scope: types.Scopes.Shared}},
			Tags:              serverTags(nil, request("restarted", "web", 3, "").Tags),
		})
		if err != nil {
			t.Fatalf("create server: %v", err)
		}
		// Killed between the fake's writes of the server and its NIC.
		fake.DataStore.Delete(fake.ResourceInterface, "tk1b", srv.Interfaces[0].ID)
		archives, err := d.resolveArchives(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.disks.Create(ctx, "tk1b", &iaas.DiskCreateRequest{
			DiskPlanID: types.DiskPlanIDMap["ssd"], SourceArchiveID: archives[0], ServerID: srv.ID, SizeMB: 20 * 1024, Name: "web-003-disk001",
		}, nil, types.ID(0)); err != nil {
			t.Fatalf("create disk: %v", err)
		}
		fmt.Println("RESULT", srv.ID)
	case "sweep":
		servers, err := d.List(ctx, "restarted")
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range servers {
			ids = append(ids, s.ID)
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := d.Delete(dctx, s.ID)
			cancel()
			if err != nil {
				t.Fatalf("delete the server left mid-create: %v", err)
			}
		}
		fmt.Println("RESULT", strings.Join(ids, ","))
	case "create":
		start := time.Now()
		s, err := d.Create(ctx, request("restarted", "web", 1, ""))
		if err != nil {
			t.Fatal(err)
		}
		_, boot := waitPhase(t, d, "restarted", s.ID, cloud.Running)
		fi, _ := os.Stat(store)
		t.Logf("fake API latency with a %d-byte store file: Create %v, pending to running %v", fi.Size(), time.Since(start)-boot, boot)
		fmt.Println("RESULT", s.ID)
	case "list-delete":
		servers, err := d.List(ctx, "restarted")
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range servers {
			ids = append(ids, s.ID)
			if s.Phase != cloud.Running {
				t.Errorf("server %s is %s after the restart, want running", s.ID, s.Phase)
			}
			if err := d.Delete(ctx, s.ID); err != nil {
				t.Fatal(err)
			}
		}
		// A server on the shared segment, in a store loaded from its
		// file.
		s, err := d.Create(ctx, request("restarted-too", "web", 2, ""))
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Delete(ctx, s.ID); err != nil {
			t.Fatal(err)
		}
		fmt.Println("RESULT", strings.Join(ids, ","))
	default:
		t.Fatalf("unknown step %q", step)
	}
}

// listOwner is the IDs of owner's servers, comma-separated.
func listOwner(t *testing.T, d *Driver, owner string) string {
	t.Helper()
	servers, err := d.List(context.Background(), owner)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range servers {
		ids = append(ids, s.ID)
	}
	return strings.Join(ids, ",")
}

// ownerNotes lists the IDs of the startup script notes with owner's
// marker, until done (nil: at once) holds of them, for up to 10 s.
func ownerNotes(t *testing.T, d *Driver, owner string, done func([]string) bool) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := d.notes.Find(context.Background(), &iaas.FindCondition{
			Filter: search.Filter{search.Key("Tags.Name"): search.TagsAndEqual(tagOwner + "=" + owner)},
		})
		if err != nil {
			t.Fatalf("find notes: %v", err)
		}
		var ids []string
		for _, n := range res.Notes {
			ids = append(ids, n.ID.String())
		}
		slices.Sort(ids)
		if done == nil || done(ids) {
			return ids
		}
		if time.Now().After(deadline) {
			t.Fatalf("owner %s's notes %v after 10 s", owner, ids)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSweepStraysKeepsNotesOfCreatesInFlight: SweepStrays deletes the
// owner's startup script notes that no create in flight uses, and leaves
// those of a create in flight and another owner's.
func TestSweepStraysKeepsNotesOfCreatesInFlight(t *testing.T) {
	d := newDriver(t, load(t, seedProvider))
	ctx := context.Background()
	owner := ownerID(t)
	edit := d.cfg.Template.EditParameter
	notes := func(owner string, index int) []types.ID {
		_, ids, err := d.editRequest(ctx, request(owner, "web", index, ""), edit, []string{""})
		if err != nil || len(ids) != 1 {
			t.Fatalf("startup script notes of web-%03d: %v, %v", index, ids, err)
		}
		return ids
	}
	d.setCreating("web-001", 1)
	inFlight := notes(owner, 1)
	stray := notes(owner, 2)
	other := notes("someone-else", 2)
	t.Cleanup(func() { _ = d.notes.Delete(ctx, other[0]) })

	swept, err := d.SweepStrays(ctx, owner)
	if want := []string{fmt.Sprintf("startup script note web-002-startup-1 (%s)", stray[0])}; err != nil || !slices.Equal(swept, want) {
		t.Fatalf("SweepStrays = %q, %v; want %q", swept, err, want)
	}
	if _, err := d.notes.Read(ctx, stray[0]); !iaas.IsNotFoundError(err) {
		t.Errorf("stray note after the sweep: %v, want 404", err)
	}
	for _, id := range []types.ID{inFlight[0], other[0]} {
		if _, err := d.notes.Read(ctx, id); err != nil {
			t.Errorf("note %s (in flight, or another owner's) after the sweep: %v", id, err)
		}
	}
	// The create ended without deleting its note (killed): swept next.
	d.setCreating("web-001", -1)
	if swept, err := d.SweepStrays(ctx, owner); err != nil || len(swept) != 1 || !strings.Contains(swept[0], "web-001-startup-1") {
		t.Fatalf("SweepStrays after the create ended = %q, %v; want web-001's note", swept, err)
	}
}

func TestMarkerTagsFitTheAPI(t *testing.T) {
	d := newDriver(t, load(t, seedProvider))
	ctx := context.Background()
	owner := ownerID(t)
	group := "a-group-named-at-length-32-chars" // the longest name the config takes
	got, err := d.Create(ctx, request(owner, group, 7, ""))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { d.Delete(ctx, got.ID) })
	srv, err := d.servers.Read(ctx, "tk1b", types.StringID(got.ID))
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	for _, tag := range srv.Tags {
		if len(tag) > maxTagLen {
			t.Errorf("tag %q is over the API's %d characters", tag, maxTagLen)
		}
	}
	if !slices.Contains(srv.Tags, "shoal-o="+owner) || srv.Name != group+"-007" {
		t.Errorf("server %q tags %v: want the owner marker and the instance's name", srv.Name, srv.Tags)
	}
	servers, err := d.List(ctx, owner)
	if err != nil || len(servers) != 1 {
		t.Fatalf("List = %+v, %v", servers, err)
	}
	want := map[string]string{cloud.TagOwner: owner, cloud.TagGroup: group, cloud.TagInstance: group + "-007"}
	for k, v := range want {
		if servers[0].Tags[k] != v {
			t.Errorf("listed tag %s = %q, want %q", k, servers[0].Tags[k], v)
		}
	}

	// An owner ID too long for a tag is refused before any call.
	long := strings.Repeat("x", 30)
	if _, err := d.Create(ctx, request(long, "web", 1, "")); err == nil || !strings.Contains(err.Error(), "over the API's limit of 32") {
		t.Errorf("Create with a 30-character owner: err = %v", err)
	}
	if servers, _ := d.List(ctx, long); len(servers) != 0 {
		t.Errorf("a refused Create left %+v", servers)
	}
}

// TestDeleteOfAServerLeftMidCreate deletes a server as a restarted shoal
// finds one whose Create never finished: created, its disk still being
// copied, never booted.
func TestDeleteOfAServerLeftMidCreate(t *testing.T) {
	d := newDriver(t, load(t, seedProvider))
	ctx := context.Background()
	owner := ownerID(t)
	srv, err := d.servers.Create(ctx, "tk1b", &iaas.ServerCreateRequest{
		CPU: 1, MemoryMB: 1024, Name: "web-001",
		ConnectedSwitches: []*iaas.ConnectedSwitch{{Scope: types.Scopes.Shared}},
		Tags:              serverTags(nil, request(owner, "web", 1, "").Tags),
	})
	if err != nil {
		t.Fatalf("create server: %v", err)
	}
	archives, err := d.resolveArchives(ctx)
	if err != nil {
		t.Fatal(err)
	}
	disk, err := d.disks.Create(ctx, "tk1b", &iaas.DiskCreateRequest{
		DiskPlanID: types.DiskPlanIDMap["ssd"], SourceArchiveID: archives[0], ServerID: srv.ID, SizeMB: 20 * 1024, Name: "web-001-disk001",
	}, nil, types.ID(0))
	if err != nil {
		t.Fatalf("create disk: %v", err)
	}
	servers, err := d.List(ctx, owner)
	if err != nil || len(servers) != 1 || servers[0].Phase != cloud.Pending {
		t.Fatalf("List = %+v, %v; want the server, pending", servers, err)
	}
	if err := d.Delete(ctx, servers[0].ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := d.servers.Read(ctx, "tk1b", srv.ID); !iaas.IsNotFoundError(err) {
		t.Errorf("server after Delete: %v, want 404", err)
	}
	if _, err := d.disks.Read(ctx, "tk1b", disk.ID); !iaas.IsNotFoundError(err) {
		t.Errorf("disk after Delete: %v, want 404", err)
	}
}

// TestDeleteIsDoneOnlyWhenTheServerIsGone: a 404 about one of a server's
// parts (here a NIC missing from the store) is not the server deleted.
func TestDeleteIsDoneOnlyWhenTheServerIsGone(t *testing.T) {
	d := newDriver(t, load(t, seedProvider))
	ctx := context.Background()
	srv, err := d.servers.Create(ctx, "tk1b", &iaas.ServerCreateRequest{
		CPU: 1, MemoryMB: 1024, Name: "web-001",
		ConnectedSwitches: []*iaas.ConnectedSwitch{{Scope: types.Scopes.Shared}},
		Tags:              serverTags(nil, request(ownerID(t), "web", 1, "").Tags),
	})
	if err != nil {
		t.Fatalf("create server: %v", err)
	}
	nic := srv.Interfaces[0].ID
	fake.DataStore.Delete(fake.ResourceInterface, "tk1b", nic)
	err = d.Delete(ctx, srv.ID.String())
	if err == nil || !strings.Contains(err.Error(), nic.String()) {
		t.Fatalf("Delete of a server whose NIC is missing: %v, want the NIC's 404", err)
	}
	if _, err := d.servers.Read(ctx, "tk1b", srv.ID); err != nil {
		t.Fatalf("the server is not there after the failed Delete: %v", err)
	}
	// Clean up what the test broke.
	srv.Interfaces = nil
	fake.DataStore.Put(fake.ResourceServer, "tk1b", srv.ID, srv)
	if err := d.Delete(ctx, srv.ID.String()); err != nil {
		t.Fatal(err)
	}
}

// countingServers counts the calls to the server API.
type countingServers struct {
	iaas.ServerAPI
	finds int
}

func (c *countingServers) Find(ctx context.Context, zone string, cond *iaas.FindCondition) (*iaas.ServerFindResult, error) {
	c.finds++
	return c.ServerAPI.Find(ctx, zone, cond)
}

// TestListIsOneCall: listing a group's servers is one API call, however
// many servers there are (up to a page of listPage).
func TestListIsOneCall(t *testing.T) {
	d := newDriver(t, load(t, seedProvider))
	ctx := context.Background()
	owner := ownerID(t)
	const n = 10
	for i := range n {
		s, err := d.Create(ctx, request(owner, "web", i+1, ""))
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		t.Cleanup(func() { d.Delete(ctx, s.ID) })
	}
	counting := &countingServers{ServerAPI: d.servers}
	d.servers = counting
	servers, err := d.List(ctx, owner)
	if err != nil || len(servers) != n {
		t.Fatalf("List = %d servers, %v; want %d", len(servers), err, n)
	}
	if counting.finds != 1 {
		t.Errorf("List made %d API calls for %d servers, want 1", counting.finds, n)
	}
}

// recordingServers records the force flag of each shutdown request, which
// the fake does not keep.
type recordingServers struct {
	iaas.ServerAPI
	mu        sync.Mutex
	shutdowns []bool
}

func (r *recordingServers) Shutdown(ctx context.Context, zone string, id types.ID, opt *iaas.ShutdownOption) error {
	r.mu.Lock()
	r.shutdowns = append(r.shutdowns, opt != nil && opt.Force)
	r.mu.Unlock()
	return r.ServerAPI.Shutdown(ctx, zone, id, opt)
}

// recordingDisks records the edit requests of the disks created.
type recordingDisks struct {
	iaas.DiskAPI
	mu    sync.Mutex
	edits []*iaas.DiskEditRequest
}

func (r *recordingDisks) CreateWithConfig(ctx context.Context, zone string, create *iaas.DiskCreateRequest, edit *iaas.DiskEditRequest, boot bool, distantFrom []types.ID, kms types.ID) (*iaas.Disk, error) {
	r.mu.Lock()
	r.edits = append(r.edits, edit)
	r.mu.Unlock()
	return r.DiskAPI.CreateWithConfig(ctx, zone, create, edit, boot, distantFrom, kms)
}

// TestPlanTheZoneDoesNotSell: a server size the zone's plan list lacks
// fails the create, naming the config's field and the sizes there are,
// and creates nothing; retrying cannot help, so it is not retryable.
func TestPlanTheZoneDoesNotSell(t *testing.T) {
	prov := strings.Replace(seedProvider, "        core: 1\n        memory: 1\n", "        core: 3\n        memory: 7\n", 1)
	prov = strings.Replace(prov, "medium: {core: 2, memory: 4}", "medium: {core: 2, memory: 5}", 1)
	d := newDriver(t, load(t, prov))
	ctx := context.Background()
	owner := ownerID(t)
	for _, tc := range []struct{ plan, want string }{
		{"", "sacloud: template.plan: zone tk1b sells no standard plan of 3 cores and 7 GB memory; plans of 3 cores there: none"},
		{"medium", "sacloud: server_plans.medium: zone tk1b sells no standard plan of 2 cores and 5 GB memory; plans of 2 cores there: 4 GB"},
	} {
		_, err := d.Create(ctx, request(owner, "web", 1, tc.plan))
		if err == nil || err.Error() != tc.want {
			t.Errorf("Create(plan %q) = %v\nwant: %s", tc.plan, err, tc.want)
		}
		if errors.Is(err, cloud.ErrRetryable) {
			t.Errorf("Create(plan %q): %v is retryable; no retry changes the plans sold", tc.plan, err)
		}
	}
	if got := listOwner(t, d, owner); got != "" {
		t.Errorf("servers after refused creates: %s, want none", got)
	}
}

// TestArchiveTheZoneLacks: an os_type with no public archive in the zone
// (the fake has none in is1c) fails the create before any server exists,
// naming the field, and is not retryable.
func TestArchiveTheZoneLacks(t *testing.T) {
	d := newDriver(t, load(t, strings.Replace(seedProvider, "zone: tk1b", "zone: is1c", 1)))
	ctx := context.Background()
	owner := ownerID(t)
	counting := &countingServers{ServerAPI: d.servers}
	d.servers = counting
	_, err := d.Create(ctx, request(owner, "web", 1, ""))
	want := "sacloud: template.disks[0].os_type: zone is1c has no public archive of os_type almalinux; choose another os_type or a source_archive"
	if err == nil || err.Error() != want {
		t.Fatalf("Create = %v\nwant: %s", err, want)
	}
	if errors.Is(err, cloud.ErrRetryable) {
		t.Errorf("%v is retryable", err)
	}
	servers, lerr := d.List(ctx, owner)
	if lerr != nil || len(servers) != 0 {
		t.Errorf("servers after the refused create: %+v, %v; want none", servers, lerr)
	}
}

// TestPasswordReachesTheDiskEdit: edit_parameter.password is the boot
// disk's edit's password.
func TestPasswordReachesTheDiskEdit(t *testing.T) {
	const pw = "pw-for-the-disk-edit"
	d := newDriver(t, load(t, strings.Replace(seedProvider, "disable_pw_auth: true", "disable_pw_auth: true\n        password: \""+pw+"\"", 1)))
	rec := &recordingDisks{DiskAPI: d.disks}
	d.disks = rec
	ctx := context.Background()
	s, err := d.Create(ctx, request(ownerID(t), "web", 1, ""))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { d.Delete(ctx, s.ID) })
	if len(rec.edits) != 1 || rec.edits[0].Password != pw {
		t.Errorf("disk edits = %+v, want one with the config's password", rec.edits)
	}
}

// TestDeleteRightAfterCreate: a server deleted as soon as its create
// returns (its boot accepted, not begun: it reads down) comes up while
// being deleted; Delete shuts it down and deletes it rather than fail with
// the API's 409.
func TestDeleteRightAfterCreate(t *testing.T) {
	d := newDriver(t, load(t, seedProvider))
	ctx := context.Background()
	owner := ownerID(t)
	for i := range 10 {
		s, err := d.Create(ctx, request(owner, "web", i+1, ""))
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		if err := d.Delete(ctx, s.ID); err != nil {
			t.Fatalf("Delete right after Create (%d): %v", i+1, err)
		}
	}
	if got := listOwner(t, d, owner); got != "" {
		t.Errorf("servers left: %s", got)
	}
}
