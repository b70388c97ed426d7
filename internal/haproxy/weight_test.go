package haproxy

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"
)

// TestSetWeight: a weight set over the Runtime API shows in HAProxy's
// stats, refuses what HAProxy would, and survives a reload, which re-adds
// every server from the registry (a canary's weights must not fall back to
// the default with a config change).
func TestSetWeight(t *testing.T) {
	t.Parallel()
	requireHAProxy(t)
	ctx := context.Background()
	stateDir := t.TempDir()
	cleanupHAProxy(t, stateDir)
	cfg := testConfig(stateDir, "127.0.0.1:"+strconv.Itoa(freePort(t)))
	m := newTestManager(t, cfg)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	b := startBackend(t, "b1")
	if err := m.AddServer(ctx, Server{Backend: "web", Name: "b1", Addr: loopback(b.port), Health: cfg.Groups[0].Health}, true); err != nil {
		t.Fatal(err)
	}
	weight := func() int {
		st, err := statsByName(t, m, "web")
		if err != nil {
			t.Fatal(err)
		}
		return st["b1"].Weight
	}
	if w := weight(); w != 100 {
		t.Fatalf("a new server's weight is %d, want 100", w)
	}
	if err := m.SetWeight(ctx, "web", "b1", 40); err != nil {
		t.Fatal(err)
	}
	if w := weight(); w != 40 {
		t.Fatalf("weight after SetWeight(40): %d", w)
	}
	for _, c := range []struct {
		name string
		w    int
	}{{"b1", 0}, {"b1", 257}, {"nope", 10}, {"b 1", 10}} {
		if err := m.SetWeight(ctx, "web", c.name, c.w); err == nil {
			t.Errorf("SetWeight(%q, %d): no error", c.name, c.w)
		}
	}
	reloaded := *cfg
	reloaded.HAProxy.Defaults = []string{"option http-keep-alive"}
	if ok, err := m.Reload(ctx, &reloaded); err != nil || !ok {
		t.Fatalf("Reload = %v, %v", ok, err)
	}
	waitFor(t, 10*time.Second, "b1 back after the reload with its weight", func() (bool, string) {
		st, err := statsByName(t, m, "web")
		if err != nil {
			return false, err.Error()
		}
		return st["b1"].Weight == 40, fmt.Sprint(st["b1"].Weight)
	})
}
