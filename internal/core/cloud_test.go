package core

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider/cloud"
	cloudexec "github.com/shoal-lb/shoal/internal/provider/cloud/exec"
	"github.com/shoal-lb/shoal/internal/provider/local"
)

// TestCloudProviderRegistry: an exec entry of the config becomes a cloud
// provider of the registry, whose poller lists the cloud from start, and
// whose API calls are exposed by kind.
func TestCloudProviderRegistry(t *testing.T) {
	dir := t.TempDir()
	// A CLI whose cloud is empty; it logs each call.
	script := filepath.Join(dir, "cloud.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"$1\" >>"+filepath.Join(dir, "calls")+"\necho '[]'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{
		StateDir: t.TempDir(),
		Providers: []config.Provider{{Name: "cli", Type: cloudexec.Type,
			Cloud: &config.CloudProvider{Port: 8080, Interval: 100 * time.Millisecond},
			Spec:  &cloudexec.Config{Start: []string{script, "start"}, Stop: []string{script, "stop", "{{.ID}}"}, List: []string{script, "list", "{{.Owner}}"}},
		}},
	}
	log := slog.New(slog.DiscardHandler)
	provs, err := newProviders(cfg, local.New(cfg.StateDir, log), log)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := provs.Get("cli")
	if _, isCloud := p.(*cloud.Provider); !ok || !isCloud {
		t.Fatalf("provider cli = %T, want a cloud provider", p)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(cloudCalls{provs})
	provs.start()
	t.Cleanup(provs.stop)

	deadline := time.Now().Add(10 * time.Second)
	for {
		got := map[string]float64{}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["provider"] == "cli" {
					got[labels["call"]] = m.GetCounter().GetValue()
				}
			}
		}
		if len(got) != 3 || got["create"] != 0 || got["delete"] != 0 {
			t.Fatalf("shoal_cloud_api_calls_total = %v", got)
		}
		if got["list"] >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the poller listed %v times in 10s at a 100ms interval", got["list"])
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "calls"))
	if len(b) == 0 || string(b[:5]) != "list\n" {
		t.Errorf("the CLI ran %q, want list calls", b)
	}
}
