package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider/local"
	sshprov "github.com/shoal-lb/shoal/internal/provider/ssh"
	"github.com/shoal-lb/shoal/internal/testhost"
)

// TestProvidersCheck: POST /v1/providers/check, through the core's
// registry of providers, against real sshd hosts: each host checked for the
// templates of the groups on its provider, a missing program and a host
// whose sshd is down reported per host, the whole answer not OK, and all
// within the bound even though one host does not answer.
func TestProvidersCheck(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lab, err := testhost.New(ctx, t.TempDir(), 2)
	if errors.Is(err, testhost.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lab.Close() })
	lab.Hosts[1].StopSSHD()

	tmpl := func(argv ...string) config.Template {
		tt, err := config.NewTemplate(argv, nil)
		if err != nil {
			t.Fatal(err)
		}
		tt.Dir = "/"
		return tt
	}
	rack := &sshprov.Config{HostDownAfter: 5 * time.Second, ConnectTimeout: time.Second, RemoteDir: t.TempDir()}
	for _, h := range lab.Hosts {
		rack.Hosts = append(rack.Hosts, sshprov.Host{Address: h.Addr, User: lab.User, KeyFile: lab.KeyFile, KnownHosts: lab.KnownHosts,
			Ports: sshprov.PortRange{Min: 20000, Max: 20099}})
	}
	cfg := &config.Config{
		StateDir:  t.TempDir(),
		Providers: []config.Provider{{Name: "rack", Type: sshprov.Type, Spec: rack}},
		Groups: []config.Group{
			{Name: "web", Provider: "rack", Template: tmpl("/bin/sh", "-c", "sleep 1")},
			{Name: "api", Provider: "rack", Template: tmpl("/opt/nowhere/api-server", "{{.Port}}")},
			// A local group's program is validate's business: not checked on the hosts.
			{Name: "local", Provider: config.ProviderLocal, Template: tmpl("/opt/nowhere/local-only")},
		},
	}
	log := slog.New(slog.DiscardHandler)
	provs, err := newProviders(cfg, local.New(cfg.StateDir, log), log)
	if err != nil {
		t.Fatal(err)
	}
	provs.start()
	t.Cleanup(provs.stop)
	c := &core{cfg: cfg, provs: provs}

	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: api.NewHandler(nil, nil, log, "", api.WithProviders(c))}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })

	began := time.Now()
	resp, err := api.NewClient(sock).PreflightProviders(ctx)
	took := time.Since(began)
	if err != nil {
		t.Fatal(err)
	}
	if took > api.PreflightTimeout {
		t.Errorf("check took %s, longer than its bound %s", took, api.PreflightTimeout)
	}
	if resp.OK || len(resp.Results) != 2 {
		t.Fatalf("check: %+v; want two hosts and not OK", resp)
	}
	byHost := map[string]int{}
	for i, r := range resp.Results {
		byHost[r.Host] = i
		if r.Provider != "rack" || r.OK {
			t.Errorf("result %+v; want rack's, with a problem", r)
		}
	}
	up := resp.Results[byHost[lab.Hosts[0].Addr]]
	if len(up.Problems) != 1 || !strings.Contains(up.Problems[0], "/opt/nowhere/api-server") || strings.Contains(strings.Join(up.Problems, " "), "local-only") {
		t.Errorf("reachable host: problems %q; want only api's missing program", up.Problems)
	}
	down := resp.Results[byHost[lab.Hosts[1].Addr]]
	if len(down.Problems) != 1 || !strings.Contains(down.Problems[0], "cannot connect") {
		t.Errorf("host without sshd: problems %q; want that it cannot be connected to", down.Problems)
	}

	// GET /v1/hosts: the connected host up, the other with its error.
	client := api.NewClient(sock)
	deadline := time.Now().Add(10 * time.Second)
	for {
		hs, err := client.Hosts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		states := map[string]string{}
		lastErr := map[string]string{}
		for _, h := range hs.Hosts {
			states[h.Name], lastErr[h.Name] = h.State, h.LastError
		}
		if len(hs.Hosts) == 2 && states[lab.Hosts[0].Addr] == "up" && states[lab.Hosts[1].Addr] != "up" && lastErr[lab.Hosts[1].Addr] != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hosts %+v; want %s up and %s not, with its error", hs.Hosts, lab.Hosts[0].Addr, lab.Hosts[1].Addr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestProvidersUpdate: a reload adds a new provider entry and applies a
// changed host's labels and capacity through the provider's Update; an
// unchanged entry is left alone. Nothing connects (start is not called).
func TestProvidersUpdate(t *testing.T) {
	dir, err := filepath.Abs("../config/testdata/ssh")
	if err != nil {
		t.Fatal(err)
	}
	host := func(addr, zone string, capacity int) sshprov.Host {
		return sshprov.Host{Address: addr, User: "deploy", KeyFile: dir + "/id_ed25519", KnownHosts: dir + "/known_hosts",
			Labels: map[string]string{"zone": zone}, Capacity: sshprov.Capacity{Instances: capacity}, Ports: sshprov.DefaultPorts}
	}
	entry := func(name string, hosts ...sshprov.Host) config.Provider {
		return config.Provider{Name: name, Type: sshprov.Type, Spec: &sshprov.Config{
			Hosts: hosts, HostDownAfter: 15 * time.Second, ConnectTimeout: 5 * time.Second, RemoteDir: ".shoal"}}
	}
	cfg := &config.Config{StateDir: t.TempDir(), Providers: []config.Provider{entry("rack", host("10.0.0.2", "a", 8))}}
	log := slog.New(slog.DiscardHandler)
	provs, err := newProviders(cfg, local.New(cfg.StateDir, log), log)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := provs.Get("rack2"); ok {
		t.Fatal("rack2 before the reload")
	}
	next := &config.Config{StateDir: cfg.StateDir, Providers: []config.Provider{
		entry("rack", host("10.0.0.2", "b", 4)),
		entry("rack2", host("[10.0.0.3]:2222", "c", 0)),
	}}
	if err := provs.update(next); err != nil {
		t.Fatal(err)
	}
	if _, ok := provs.Get("rack2"); !ok {
		t.Fatal("rack2 not added by the reload")
	}
	got := map[string]string{}
	for _, h := range provs.Hosts() {
		got[h.Provider+" "+h.Name] = fmt.Sprintf("%s %d", h.Labels["zone"], h.CapacityInstances)
	}
	if got["rack 10.0.0.2"] != "b 4" || got["rack2 10.0.0.3"] != "c 0" || len(got) != 2 {
		t.Fatalf("hosts after the reload: %v; want rack's host relabelled and rack2's added", got)
	}
	if names := provs.all(); len(names) != 3 || names[0].name != config.ProviderLocal || names[1].name != "rack" || names[2].name != "rack2" {
		t.Fatalf("providers %v; want local, then config order", names)
	}
}
