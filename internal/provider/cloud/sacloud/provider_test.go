package sacloud

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/testbin"

	"github.com/sacloud/iaas-api-go"
	"github.com/sacloud/iaas-api-go/fake"
	"github.com/sacloud/iaas-api-go/types"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/provider/cloud"
)

func TestMain(m *testing.M) { testbin.Main(m) }

// newProvider runs the generic cloud provider over a sacloud driver on the
// fake API, with stand-ins: the fake's servers cannot serve.
func newProvider(t *testing.T, owner, stateDir string) (*cloud.Provider, *Driver) {
	t.Helper()
	bin := testbin.DemoBackend(t)
	d := newDriver(t, load(t, seedProvider))
	cfg := config.CloudProvider{Port: 80, Interval: 200 * time.Millisecond, BootTimeout: 20 * time.Second,
		CreateTimeout: 20 * time.Second, DeleteTimeout: 10 * time.Second,
		Emulator: &config.Emulator{StandIn: []string{bin, "--listen", "127.0.0.1:{{.Port}}", "--name", "stand-in-{{.Name}}"}}}
	opts := cloud.Options{Owner: owner, Driver: Type, StateDir: stateDir}
	if os.Getenv("POOLDEBUG") != "" {
		opts.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	p, err := cloud.New("sakura", d, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopStandIns(t, stateDir) }) // after Run ends
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { p.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return p, d
}

// stopStandIns ends the servers' stand-ins that the test left running (a
// server the test never deleted, or one a failure left).
func stopStandIns(t *testing.T, stateDir string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cloud.StopStandIns(ctx, stateDir, "sakura"); err != nil {
		t.Errorf("stop the stand-ins left running: %v", err)
	}
}

func spec(name string, index int) provider.Spec {
	tmpl, _ := config.NewTemplate([]string{"unused-by-cloud-servers"}, nil)
	return provider.Spec{Group: "web", Name: name, Index: index, Template: tmpl}
}

// TestThroughCloudProvider drives the driver as shoal does: the generic
// provider starts servers in the fake, waits for them to run, puts their
// stand-ins in service, stops one, and a restarted provider adopts the
// recorded ones and sweeps the one it has no record of.
func TestThroughCloudProvider(t *testing.T) {
	owner := ownerID(t)
	stateDir, err := os.MkdirTemp("", "sacloud-state")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(stateDir) })
	p, d := newProvider(t, owner, stateDir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// A boot that takes a while, as a real one does (minutes there): the
	// fake powers on in four ticks.
	defer func(d time.Duration) { fake.PowerOnDuration = d }(fake.PowerOnDuration)
	fake.PowerOnDuration = 100 * time.Millisecond

	const n = 10
	ins := make([]provider.Instance, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range ins {
		wg.Go(func() { ins[i], errs[i] = p.Start(ctx, spec(fmt.Sprintf("web-%03d", i+1), i+1)) })
	}
	wg.Wait()
	inService := time.Since(start)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("start %d: %v", i+1, err)
		}
	}
	calls := p.Calls()
	t.Logf("%d servers of the fake API in service (stand-ins answering) in %s with %+v API calls", n, inService.Round(time.Millisecond), calls)
	if calls.Create != n {
		t.Errorf("creates = %d, want %d", calls.Create, n)
	}
	// Each listing is one API call (TestListIsOneCall); how many the
	// provider makes while servers boot is its own affair (its starts wake
	// it): a loose bound, far below polling each server.
	if calls.List > 2*n {
		t.Errorf("%d listings for %d servers", calls.List, n)
	}
	for _, in := range ins {
		rec := in.Record()
		if !strings.HasPrefix(rec.Addr, "127.0.0.1:") {
			t.Fatalf("instance %s at %s, want its stand-in on 127.0.0.1 (never the fake's address)", rec.Name, rec.Addr)
		}
		if got := testbin.Get(t, rec.Addr); got != "stand-in-"+rec.Name {
			t.Errorf("GET %s answered as %q", rec.Addr, got)
		}
		srv, err := d.servers.Read(ctx, "tk1b", types.StringID(rec.ID))
		if err != nil || srv.Name != rec.Name || !srv.InstanceStatus.IsUp() {
			t.Errorf("instance %s: server %+v, %v; want it up under the same name", rec.Name, srv, err)
		}
	}

	victim := ins[1]
	if err := victim.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := d.servers.Read(ctx, "tk1b", types.StringID(victim.Record().ID)); !iaas.IsNotFoundError(err) {
		t.Errorf("server of a stopped instance: %v, want 404", err)
	}

	// A restarted shoal with records of all but the last instance.
	var recs []provider.Record
	for _, in := range ins[:n-1] {
		if in != victim {
			recs = append(recs, in.Record())
		}
	}
	second, _ := newProvider(t, owner, stateDir)
	var adopted []provider.Instance
	// Their stand-ins are processes: stopped with their servers even when
	// the test fails.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, in := range adopted {
			if err := in.Stop(ctx); err != nil {
				t.Errorf("cleanup: stop %s: %v", in.Record().Name, err)
			}
		}
	})
	for _, rec := range recs {
		in, err := second.Adopt(ctx, rec, config.Template{})
		if err != nil {
			t.Errorf("Adopt %s: %v", rec.Name, err)
			continue
		}
		adopted = append(adopted, in)
	}
	if _, err := second.Adopt(ctx, victim.Record(), config.Template{}); err == nil {
		t.Errorf("Adopt of the stopped instance succeeded")
	}
	swept, err := second.StopStrays(ctx, recs)
	if err != nil {
		t.Fatalf("StopStrays: %v", err)
	}
	last := ins[n-1].Record()
	if len(swept) != 1 || swept[0].ID != last.ID {
		t.Errorf("swept %+v, want the unrecorded %s (%s)", swept, last.Name, last.ID)
	}
	// The listing by tag proves it: no duplicate, no orphan.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		servers, err := d.List(ctx, owner)
		if err != nil {
			t.Fatal(err)
		}
		if len(servers) == len(recs) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d servers listed, want the %d recorded: %+v", len(servers), len(recs), servers)
		}
	}
}

// TestWarmPoolFake: a warm pool that waits shut down on Sakura Cloud (the
// fake API): its servers are created, booted, shut down and listed
// stopped, tagged as the pool's; a Start takes one (booted again, no
// create) and serves from its stand-in; the pool refills; emptying it
// deletes its servers.
func TestWarmPoolFake(t *testing.T) {
	owner := ownerID(t)
	stateDir, err := os.MkdirTemp("", "sacloud-state")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(stateDir) })
	defer func(d time.Duration) { fake.PowerOnDuration = d }(fake.PowerOnDuration)
	fake.PowerOnDuration = 100 * time.Millisecond
	p, d := newProvider(t, owner, stateDir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tmpl := spec("web-001", 1).Template
	p.SetWarmPool("web", &config.WarmPool{Size: 2, State: config.WarmStopped}, tmpl)

	warm := func() map[string]bool {
		t.Helper()
		for deadline := time.Now().Add(40 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			ids := map[string]bool{}
			for _, s := range p.WarmPool("web") {
				if s.State == "warm" {
					ids[s.ID] = true
				}
			}
			if len(ids) == 2 && len(p.WarmPool("web")) == 2 {
				return ids
			}
		}
		t.Fatalf("warm pool %+v, want 2 warm", p.WarmPool("web"))
		return nil
	}
	listed := func() map[string]cloud.Server {
		t.Helper()
		list, err := d.List(ctx, owner)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]cloud.Server{}
		for _, s := range list {
			out[s.ID] = s
		}
		return out
	}
	pool := warm()
	for id := range pool {
		if s := listed()[id]; s.Phase != cloud.Stopped || s.State != "down" || s.Tags[cloud.TagPool] != "web" {
			t.Errorf("pool server %s: %+v, want down, tagged as web's pool", id, s)
		}
	}
	creates := p.Calls().Create
	in, err := p.Start(ctx, spec("web-001", 1))
	if err != nil {
		t.Fatal(err)
	}
	rec := in.Record()
	// The one create since is the pool's refill.
	if !pool[rec.ID] || p.Calls().Create > creates+1 {
		t.Errorf("Start made %s (%d creates), want one of the pool's %v booted", rec.ID, p.Calls().Create-creates, pool)
	}
	if s := listed()[rec.ID]; s.Phase != cloud.Running {
		t.Errorf("taken server %+v, want up", s)
	}
	if got := testbin.Get(t, rec.Addr); got != "stand-in-web-001" {
		t.Errorf("GET %s answered as %q", rec.Addr, got)
	}
	refilled := warm()
	if err := p.EmptyWarmPool(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	for id := range refilled {
		if s, ok := listed()[id]; ok {
			t.Errorf("pool server %s after emptying the pool: %+v", id, s)
		}
	}
}
