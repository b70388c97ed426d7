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

	// Out of rotation: a server added at weight off passes its gate (UP at
	// weight 0); a switch on one line swaps which server is in rotation,
	// and a reload keeps it.
	b2 := startBackend(t, "b2")
	if err := m.AddServer(ctx, Server{Backend: "web", Name: "b2", Addr: loopback(b2.port), Health: cfg.Groups[0].Health, Weight: WeightOff}, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "b2 UP at weight 0", func() (bool, string) {
		st, err := statsByName(t, m, "web")
		if err != nil {
			return false, err.Error()
		}
		return st["b2"].Status.IsUp() && st["b2"].Weight == 0, fmt.Sprint(st["b2"].Status, st["b2"].Weight)
	})
	if err := m.SetWeights(ctx, "web", []ServerWeight{{"b2", 100}, {"b1", WeightOff}}); err != nil {
		t.Fatal(err)
	}
	st, err := statsByName(t, m, "web")
	if err != nil {
		t.Fatal(err)
	}
	if st["b1"].Weight != 0 || !st["b1"].Status.IsUp() || st["b2"].Weight != 100 {
		t.Fatalf("after the switch: b1 %s weight %d, b2 weight %d", st["b1"].Status, st["b1"].Weight, st["b2"].Weight)
	}
	if err := m.SetWeights(ctx, "web", []ServerWeight{{"b2", 100}, {"nope", 1}}); err == nil {
		t.Error("SetWeights with an unregistered server: no error")
	}
	if ok, err := m.Reload(ctx, cfg); err != nil || !ok {
		t.Fatalf("Reload = %v, %v", ok, err)
	}
	waitFor(t, 10*time.Second, "the switch kept by a reload", func() (bool, string) {
		st, err := statsByName(t, m, "web")
		if err != nil {
			return false, err.Error()
		}
		return st["b1"].Weight == 0 && st["b1"].Status.IsUp() && st["b2"].Weight == 100, fmt.Sprint(st["b1"], st["b2"])
	})
}
