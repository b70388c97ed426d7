package ec2

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/testbin"
	"github.com/shoal-lb/shoal/internal/testmoto"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/provider/cloud"
)

// The generic cloud provider over this driver and moto. Moto's instances
// cannot serve (their addresses are invented), so the provider runs in
// emulator mode: each instance gets a local demo-backend stand-in on
// 127.0.0.1, which is all that is ever sent traffic.

// The tests, one after the other, share one moto (testmoto.Shared).
func TestMain(m *testing.M) { testbin.Main(m, testmoto.CloseShared) }

// running is a cloud.Provider whose Run loop runs until stop, which
// returns once Run has.
type running struct {
	*cloud.Provider
	stop func()
}

func runProvider(t *testing.T, d cloud.Driver, owner, stateDir string) *running {
	t.Helper()
	cfg := config.CloudProvider{
		Port: 8080, Interval: 500 * time.Millisecond, BootTimeout: 30 * time.Second,
		CreateTimeout: 30 * time.Second, DeleteTimeout: 30 * time.Second,
		Emulator: &config.Emulator{StandIn: []string{testbin.DemoBackend(t), "--listen", "127.0.0.1:{{.Port}}", "--name", "stand-in-{{.Name}}"}},
	}
	p, err := cloud.New("aws", d, cfg, cloud.Options{Owner: owner, Driver: Type, StateDir: stateDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // after Run ends: the stand-ins the test left running
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := cloud.StopStandIns(ctx, stateDir, "aws"); err != nil {
			t.Errorf("stop the stand-ins left running: %v", err)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { p.Run(ctx) })
	r := &running{Provider: p, stop: func() { cancel(); wg.Wait() }}
	t.Cleanup(r.stop)
	return r
}

// listed returns the owner's instances in moto by ID, as the driver lists
// them.
func listed(t *testing.T, d *Driver, owner string) map[string]cloud.Server {
	t.Helper()
	list, err := d.List(t.Context(), owner)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	out := map[string]cloud.Server{}
	for _, s := range list {
		out[s.ID] = s
	}
	return out
}

func spec(name string, index int) provider.Spec {
	tmpl, _ := config.NewTemplate([]string{"unused-by-cloud-servers"}, nil)
	return provider.Spec{Group: "web", Name: name, Index: index, Template: tmpl}
}

// TestProviderMoto: the generic provider scales out on EC2 (moto) through
// this driver, serves from stand-ins, and after a restart adopts what it
// recorded, sweeps a stray it never recorded, and scales in by
// terminating.
func TestProviderMoto(t *testing.T) {
	e := newMotoEnv(t)
	t.Cleanup(func() { e.calls.report(t) })
	d := e.driver(t, Config{LaunchTemplate: &LaunchTemplate{Name: e.lt, Version: "$Default"}, Address: AddressPrivate})
	const owner = "owner-provider"
	stateDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	first := runProvider(t, d, owner, stateDir)
	const n = 10
	ins := make([]provider.Instance, n)
	errs := make([]error, n)
	describesBefore := e.calls.count("DescribeInstances")
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { ins[i], errs[i] = first.Start(ctx, spec(fmt.Sprintf("web-%03d", i+1), i+1)) })
	}
	wg.Wait()
	took := time.Since(start)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Start %d: %v", i+1, err)
		}
	}
	calls := first.Calls()
	describes := e.calls.count("DescribeInstances") - describesBefore
	t.Logf("%d instances in service (moto + stand-ins) in %v: %d RunInstances, %d listings (%d DescribeInstances pages)", n, took.Round(time.Millisecond), calls.Create, calls.List, describes)
	if calls.Create != n || e.calls.count("RunInstances") < n {
		t.Errorf("%d creates for %d instances", calls.Create, n)
	}
	// Listings are per interval, shared by every booting instance: never
	// one per instance per poll.
	if limit := int64(took/(500*time.Millisecond)) + 3; calls.List > limit {
		t.Errorf("%d listings in %v for %d instances, want at most %d (one per interval)", calls.List, took, n, limit)
	}

	servers := listed(t, d, owner)
	recs := make([]provider.Record, n)
	for i, in := range ins {
		rec := in.Record()
		recs[i] = rec
		s, ok := servers[rec.ID]
		if !ok || s.Phase != cloud.Running || s.Tags[cloud.TagInstance] != rec.Name || s.Tags[cloud.TagGroup] != "web" {
			t.Fatalf("record %+v: moto has %+v", rec, s)
		}
		if !strings.HasPrefix(rec.Addr, "127.0.0.1:") || strings.HasPrefix(rec.Addr, s.IP+":") {
			t.Errorf("record addr %s, want its stand-in's on 127.0.0.1, never moto's %s", rec.Addr, s.IP)
		}
		if got := testbin.Get(t, rec.Addr); got != "stand-in-"+rec.Name {
			t.Errorf("GET %s answered as %q", rec.Addr, got)
		}
	}

	// A stray: an instance of this owner that no record names, as a shoal
	// killed between RunInstances and recording it leaves behind.
	stray, err := d.Create(ctx, request(owner, "web-009"))
	if err != nil {
		t.Fatal(err)
	}

	// Restart: the first shoal dies (its stand-ins, like EC2's instances,
	// live on); the second adopts the records and sweeps the rest.
	first.stop()
	second := runProvider(t, d, owner, stateDir)
	adopted := make([]provider.Instance, n)
	for i, rec := range recs {
		if adopted[i], err = second.Adopt(ctx, rec, config.Template{}); err != nil {
			t.Fatalf("Adopt %s: %v", rec.Name, err)
		}
	}
	swept, err := second.StopStrays(ctx, recs)
	if err != nil {
		t.Fatalf("StopStrays: %v", err)
	}
	if len(swept) != 1 || swept[0].ID != stray.ID {
		t.Errorf("swept %+v, want only the stray %s", swept, stray.ID)
	}
	servers = listed(t, d, owner)
	if s := servers[stray.ID]; s.Phase != cloud.Gone {
		t.Errorf("stray after the sweep: %+v, want terminated", s)
	}
	for _, rec := range recs {
		if s := servers[rec.ID]; s.Phase != cloud.Running {
			t.Errorf("adopted %s after the sweep: %+v, want running", rec.Name, s)
		}
	}

	// Scale in: Stop terminates the instance and its stand-in.
	for _, in := range adopted {
		if err := in.Stop(ctx); err != nil {
			t.Fatalf("Stop %s: %v", in.Record().Name, err)
		}
	}
	for id, s := range listed(t, d, owner) {
		if s.Phase != cloud.Gone {
			t.Errorf("after scale-in %s is %s, want terminated", id, s.State)
		}
	}
	for _, in := range adopted {
		select {
		case <-in.Done():
		case <-time.After(10 * time.Second):
			t.Errorf("%s not done after Stop", in.Record().Name)
		}
	}
}

// TestRegionEC2DoesNotServe: a region EC2 does not have (valid in form)
// fails the instance's start at once with the region named, instead of an
// outage ("HTTP status 500 (temporary)") retried until create_timeout; a
// listing's error names it too.
func TestRegionEC2DoesNotServe(t *testing.T) {
	e := newMotoEnv(t)
	d := e.driver(t, Config{Region: "ap-northeast-9", AMI: e.ami, InstanceType: "t3.micro", Address: AddressPrivate})
	const owner = "owner-bad-region"
	p := runProvider(t, d, owner, t.TempDir())
	start := time.Now()
	_, err := p.Start(t.Context(), spec("web-001", 1))
	took := time.Since(start)
	t.Logf("Start after %v: %v", took.Round(time.Millisecond), err)
	if err == nil || !strings.Contains(err.Error(), "region ap-northeast-9") || strings.Contains(err.Error(), "temporary") {
		t.Errorf("Start = %v; want a permanent error naming region ap-northeast-9", err)
	}
	if took > 10*time.Second {
		t.Errorf("Start took %v: retried what no retry changes (create_timeout 30s)", took)
	}
	if _, err := d.List(t.Context(), owner); err == nil || !strings.Contains(err.Error(), "region ap-northeast-9") {
		t.Errorf("List = %v; want an error naming region ap-northeast-9", err)
	}
	// The same moto in a region it has: the check passes once, and is
	// not asked again. (The bad region's provider stops first: its listing
	// asks again, until the region passes, on the same moto.)
	p.stop()
	ok := e.driver(t, Config{LaunchTemplate: &LaunchTemplate{Name: e.lt, Version: "$Default"}, Address: AddressPrivate})
	before := e.calls.count("DescribeRegions")
	for i := range 2 {
		s, err := ok.Create(t.Context(), request(owner, fmt.Sprintf("web-%03d", i+2)))
		if err != nil {
			t.Fatalf("Create in %s: %v", region, err)
		}
		t.Cleanup(func() { ok.Delete(context.Background(), s.ID) })
	}
	if n := e.calls.count("DescribeRegions") - before; n != 1 {
		t.Errorf("DescribeRegions called %d times for 2 creates, want once", n)
	}
}

// TestWarmPoolMoto: a warm pool that waits stopped on EC2 (moto): its
// instances are launched, then stopped (StopInstances), tagged as the
// pool's; a Start takes one (StartInstances, no RunInstances) and serves
// from its stand-in; the pool refills; a shoal killed then adopts the
// pool's instances; emptying the pool terminates them.
func TestWarmPoolMoto(t *testing.T) {
	e := newMotoEnv(t)
	t.Cleanup(func() { e.calls.report(t) })
	d := e.driver(t, Config{LaunchTemplate: &LaunchTemplate{Name: e.lt, Version: "$Default"}, Address: AddressPrivate})
	const owner = "owner-pool"
	stateDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tmpl := spec("web-001", 1).Template
	wp := &config.WarmPool{Size: 2, State: config.WarmStopped}

	warm := func(p *running) map[string]bool {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
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
	first := runProvider(t, d, owner, stateDir)
	first.SetWarmPool("web", wp, tmpl)
	pool := warm(first)
	for id := range pool {
		s := listed(t, d, owner)[id]
		if s.Phase != cloud.Stopped || s.Tags[cloud.TagPool] != "web" || s.Tags[cloud.TagTemplate] != tmpl.Hash("web") {
			t.Errorf("pool instance %s: %+v, want stopped, tagged as web's pool", id, s)
		}
	}
	runs := e.calls.count("RunInstances")
	in, err := first.Start(ctx, spec("web-001", 1))
	if err != nil {
		t.Fatal(err)
	}
	rec := in.Record()
	if !pool[rec.ID] || e.calls.count("StartInstances") != 1 {
		t.Errorf("Start made %s with %d StartInstances, want one of the pool's %v started", rec.ID, e.calls.count("StartInstances"), pool)
	}
	if got := testbin.Get(t, rec.Addr); got != "stand-in-web-001" {
		t.Errorf("GET %s answered as %q", rec.Addr, got)
	}
	if s := listed(t, d, owner)[rec.ID]; s.Phase != cloud.Running {
		t.Errorf("taken instance %+v, want running", s)
	}
	refilled := warm(first)
	if n := e.calls.count("RunInstances") - runs; n != 1 {
		t.Errorf("%d RunInstances since the take, want 1 (the refill)", n)
	}

	first.stop() // killed: the next run adopts the pool's instances
	second := runProvider(t, d, owner, stateDir)
	if _, err := second.Adopt(ctx, rec, tmpl); err != nil {
		t.Fatal(err)
	}
	second.SetWarmPool("web", wp, tmpl) // as a group's Restore: after its adoptions
	if swept, err := second.StopStrays(ctx, []provider.Record{rec}); err != nil || len(swept) != 0 {
		t.Fatalf("StopStrays swept %+v (%v), want nothing: the pool's are the pool's", swept, err)
	}
	if adopted := warm(second); fmt.Sprint(adopted) != fmt.Sprint(refilled) {
		t.Errorf("pool after the restart %v, want the adopted %v", adopted, refilled)
	}
	if err := second.EmptyWarmPool(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	for id := range refilled {
		if s := listed(t, d, owner)[id]; s.Phase != cloud.Gone {
			t.Errorf("pool instance %s after emptying the pool: %+v, want terminated", id, s)
		}
	}
}
