package core

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/provider/local"
	sshprov "github.com/shoal-lb/shoal/internal/provider/ssh"
	"github.com/shoal-lb/shoal/internal/store"
)

// hostsCore is a core over two ssh providers that share a host name (not
// connected: cordons need no connection) and a real SQLite store.
func hostsCore(t *testing.T, st *store.Store) *core {
	t.Helper()
	dir := t.TempDir()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := gossh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	key, known := filepath.Join(dir, "id"), filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(key, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(known, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	entry := func(addrs ...string) *sshprov.Config {
		c := &sshprov.Config{HostDownAfter: 5 * time.Second, ConnectTimeout: time.Second, RemoteDir: dir}
		for _, a := range addrs {
			c.Hosts = append(c.Hosts, sshprov.Host{Address: a, User: "shoal", KeyFile: key, KnownHosts: known})
		}
		return c
	}
	cfg := &config.Config{StateDir: dir, Providers: []config.Provider{
		{Name: "rack", Type: sshprov.Type, Spec: entry("10.0.0.1", "10.0.0.2")},
		{Name: "spare", Type: sshprov.Type, Spec: entry("10.0.0.1")},
	}}
	log := slog.New(slog.DiscardHandler)
	provs, err := newProviders(cfg, local.New(dir, nil), log)
	if err != nil {
		t.Fatal(err)
	}
	if err := provs.cordons.load(t.Context(), st); err != nil {
		t.Fatal(err)
	}
	return &core{log: log, st: st, provs: provs, cfg: cfg}
}

// TestCordonHosts: host names resolve within their provider, cordons reach
// the providers' hosts and the store (a new core over it finds them), each
// change is one event, and a drain without instance replacement only
// cordons.
func TestCordonHosts(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "shoal.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := hostsCore(t, st)
	ctx := t.Context()

	_, err = c.CordonHost(ctx, api.HostRequest{Host: "10.0.0.1"}, true)
	if !errors.Is(err, api.ErrAmbiguousHost) || !strings.Contains(err.Error(), "providers rack, spare each have one") {
		t.Errorf("ambiguous: %v", err)
	}
	_, err = c.CordonHost(ctx, api.HostRequest{Host: "10.0.0.9"}, true)
	if !errors.Is(err, api.ErrUnknownHost) || !strings.Contains(err.Error(), "the hosts are rack/10.0.0.1, rack/10.0.0.2, spare/10.0.0.1") {
		t.Errorf("unknown: %v", err)
	}
	_, err = c.CordonHost(ctx, api.HostRequest{Host: "10.0.0.2", Provider: "spare"}, true)
	if !errors.Is(err, api.ErrUnknownHost) || !strings.Contains(err.Error(), "provider spare has no such host") {
		t.Errorf("wrong provider: %v", err)
	}

	resp, err := c.CordonHost(ctx, api.HostRequest{Host: "10.0.0.1", Provider: "rack"}, true)
	if err != nil || !resp.Changed || !resp.Host.Cordoned {
		t.Fatalf("cordon rack/10.0.0.1: %+v %v", resp, err)
	}
	if resp, err := c.CordonHost(ctx, api.HostRequest{Host: "10.0.0.1", Provider: "rack"}, true); err != nil || resp.Changed {
		t.Errorf("second cordon: %+v %v", resp, err)
	}
	cordoned := func(c *core) map[string]bool {
		out := map[string]bool{}
		for _, h := range c.provs.Hosts() {
			out[h.Provider+"/"+h.Name] = h.Cordoned
		}
		return out
	}
	if got := cordoned(c); !got["rack/10.0.0.1"] || got["spare/10.0.0.1"] || got["rack/10.0.0.2"] {
		t.Errorf("hosts' cordons %v, want rack/10.0.0.1 only", got)
	}

	// A drain without instance replacement cordons, and says it moved nothing.
	_, err = c.DrainHost(ctx, api.HostRequest{Host: "10.0.0.2"})
	if !errors.Is(err, api.ErrNoReplace) || !strings.Contains(err.Error(), "host 10.0.0.2 is cordoned") {
		t.Errorf("drain: %v", err)
	}

	// A new core over the same store (a restart) finds both.
	if got := cordoned(hostsCore(t, st)); !got["rack/10.0.0.1"] || !got["rack/10.0.0.2"] || got["spare/10.0.0.1"] {
		t.Errorf("after a restart: %v", got)
	}
	if resp, err := c.CordonHost(ctx, api.HostRequest{Host: "10.0.0.2"}, false); err != nil || !resp.Changed || resp.Host.Cordoned {
		t.Errorf("uncordon: %+v %v", resp, err)
	}

	evs, err := st.Decisions(ctx, store.DecisionQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		if e.Outcome == decision.Event && e.Rule == "host" {
			got = append(got, string(e.Code)+" "+e.Sources[0])
		}
	}
	want := []string{"cordoned 10.0.0.1", "cordoned 10.0.0.2", "uncordoned 10.0.0.2"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("host events %v, want %v", got, want)
	}
}

// noReplace fails every replacement: a drain with instances would leave them.
type noReplace struct{}

func (noReplace) Replace(context.Context, string, string) error { return errors.New("no room") }

// TestDrainEmptyHost: with a replacer, a drain of a host with no instances
// cordons it, ends done at once, and is recorded.
func TestDrainEmptyHost(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "shoal.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := hostsCore(t, st)
	c.replacer, c.groups, c.srvCtx = noReplace{}, newRegistry(nil), t.Context()
	resp, err := c.DrainHost(t.Context(), api.HostRequest{Host: "10.0.0.2"})
	if err != nil || resp.Drain == nil || !resp.Host.Cordoned {
		t.Fatalf("drain: %+v %v", resp, err)
	}
	c.drains.wg.Wait()
	ds := c.HostDrains()
	if len(ds) != 1 || ds[0].State != "done" || len(ds[0].Instances) != 0 || ds[0].Progress != "" {
		t.Errorf("drains %+v", ds)
	}
	evs, err := st.Decisions(t.Context(), store.DecisionQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	drained := 0
	for _, e := range evs {
		if e.Rule == "host" && e.Code == "drained" && e.Reason == "host 10.0.0.2 drained: 0 instance(s) moved" {
			drained++
		}
	}
	if drained != 1 {
		t.Errorf("%d host.drained events, want 1: %+v", drained, evs)
	}
}

// TestResumeDrains: a drain recorded as running is resumed at start (here
// on an empty host: it ends done, its record cleared); one of a host no
// provider has any more ends there, reported, its record cleared too; a
// drain's end clears the record, so the next start resumes nothing.
func TestResumeDrains(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "shoal.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := t.Context()
	for _, h := range []store.CordonedHost{
		{Provider: "rack", Host: "10.0.0.2", Since: time.Now(), Draining: true},
		{Provider: "rack", Host: "10.9.9.9", Since: time.Now(), Draining: true},
		{Provider: "rack", Host: "10.0.0.1", Since: time.Now()},
	} {
		if _, err := st.CordonHost(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	c := hostsCore(t, st)
	c.replacer, c.groups, c.srvCtx = noReplace{}, newRegistry(nil), ctx
	c.resumeDrains(ctx)
	c.drains.wg.Wait()
	ds := c.HostDrains()
	if len(ds) != 1 || ds[0].Host != "10.0.0.2" || ds[0].State != "done" {
		t.Fatalf("drains after the start: %+v; want 10.0.0.2's, resumed and done", ds)
	}
	hs, err := st.CordonedHosts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if h.Draining {
			t.Errorf("%s still recorded draining", h.Host)
		}
	}
	if len(hs) != 3 {
		t.Errorf("cordons %+v: want all 3 kept", hs)
	}
	evs, err := st.Decisions(ctx, store.DecisionQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var failed []string
	for _, e := range evs {
		if e.Rule == "host" && e.Code == "drain_failed" {
			failed = append(failed, e.Reason)
		}
	}
	if len(failed) != 1 || !strings.Contains(failed[0], "host 10.9.9.9 drain could not resume") || !strings.Contains(failed[0], "unknown host") {
		t.Errorf("host.drain_failed events %q; want one for 10.9.9.9, unknown", failed)
	}
	// A second start finds nothing to resume.
	c2 := hostsCore(t, st)
	c2.replacer, c2.groups, c2.srvCtx = noReplace{}, newRegistry(nil), ctx
	c2.resumeDrains(ctx)
	c2.drains.wg.Wait()
	if ds := c2.HostDrains(); len(ds) != 0 {
		t.Errorf("a second start resumed %+v", ds)
	}
}
