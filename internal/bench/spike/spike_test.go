package spike

import (
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/bench"
	"github.com/shoal-lb/shoal/internal/sim"
)

// TestSetupsOnARamp runs the benchmark's policy through the simulator's
// setups on a ramp past the hosts' capacity and back: the hosts fill
// first and are all the hosts-only group gets, the cloud's instances cost,
// and all-cloud pays for the quiet hours the hosts carry in the mix.
func TestSetupsOnARamp(t *testing.T) {
	env := &bench.Env{Work: t.TempDir()}
	model := sim.Model{Capacity: 100, BaseP99: 15 * time.Millisecond, ServiceCV: 0.3}
	pol := policy{target: 50, maxSize: 16, cost: 0.1}
	l, err := pol.load(env, 1)
	if err != nil {
		t.Fatal(err)
	}
	var rates []float64
	for range 60 {
		rates = append(rates, 40) // one instance's worth
	}
	for i := range 60 {
		rates = append(rates, 40+float64(i)*10) // to 630 req/s: 13 at the target
	}
	for range 60 {
		rates = append(rates, 40)
	}
	start := time.Date(1998, 6, 30, 8, 0, 0, 0, time.UTC)
	delays := map[string]time.Duration{hostsName: 4200 * time.Millisecond, cloudName: 210 * time.Second}
	run := func(s setup) outcome {
		t.Helper()
		o, err := simulate(l, s, model, 100*time.Millisecond, start, rates, time.Minute, pol.cost, delays, 0)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	hostsOnly := run(setup{Name: "hosts only", Hosts: 4})
	mixed := run(setup{Name: "hosts + cloud", Hosts: 4, Cloud: 210 * time.Second})
	allCloud := run(setup{Name: "all-cloud", Cloud: 210 * time.Second})

	if hostsOnly.MaxSize != 4 || hostsOnly.Seconds[cloudName] != 0 || hostsOnly.Cost != 0 {
		t.Errorf("hosts only: largest %d, cloud %.0f s, cost %.2f; want 4, 0, 0", hostsOnly.MaxSize, hostsOnly.Seconds[cloudName], hostsOnly.Cost)
	}
	if mixed.MaxSize <= 4 || mixed.Seconds[cloudName] == 0 {
		t.Errorf("hosts + cloud: largest %d, cloud %.0f s: the ramp must spill into the cloud", mixed.MaxSize, mixed.Seconds[cloudName])
	}
	if allCloud.Seconds[hostsName] != 0 {
		t.Errorf("all-cloud ran %.0f s on the hosts", allCloud.Seconds[hostsName])
	}
	if !(mixed.Cost < allCloud.Cost) || mixed.Cost != mixed.Seconds[cloudName]/3600*pol.cost {
		t.Errorf("cost: hosts + cloud %.3f, all-cloud %.3f; want less, at %.2f per cloud hour", mixed.Cost, allCloud.Cost, pol.cost)
	}
	if !(mixed.Violation < hostsOnly.Violation) {
		t.Errorf("violation seconds: hosts + cloud %.0f, hosts only %.0f; the cloud must take what the hosts cannot", mixed.Violation, hostsOnly.Violation)
	}
}

// TestScaledDelays: a delay divided by K, in whole seconds, at least one.
func TestScaledDelays(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		k    float64
		want time.Duration
	}{{210 * time.Second, 30, 7 * time.Second}, {20 * time.Second, 30, time.Second}, {2 * time.Minute, 30, 4 * time.Second}, {30 * time.Second, 1, 30 * time.Second}} {
		if got := scaledBoot(c.d, c.k); got != c.want {
			t.Errorf("scaledBoot(%s, %g) = %s, want %s", c.d, c.k, got, c.want)
		}
	}
}

// TestInstanceSeconds: samples per provider integrate over the window,
// each holding until the next.
func TestInstanceSeconds(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := sampler{samples: []sample{
		{t0, map[string]int{hostsName: 1}},
		{t0.Add(2 * time.Second), map[string]int{hostsName: 4, cloudName: 2}},
		{t0.Add(5 * time.Second), map[string]int{hostsName: 4}},
		{t0.Add(9 * time.Second), map[string]int{hostsName: 1}},
	}}
	got, most := s.instanceSeconds(t0.Add(time.Second), t0.Add(8*time.Second))
	// hosts: 1×1 + 4×3 + 4×3 = 25; cloud: 2×3 = 6.
	if got[hostsName] != 25 || got[cloudName] != 6 || most != 6 {
		t.Errorf("got %v, largest %d; want local 25, cloud 6, largest 6", got, most)
	}
}
