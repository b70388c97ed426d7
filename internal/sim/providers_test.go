package sim

import (
	"testing"
	"time"
)

// TestProvidersFillInOrder: a step from 2 to 6 instances over hosts of
// capacity 4 (5 s to start) and a cloud (210 s): the 2 more on the hosts
// are ready long before the 2 in the cloud; the step down empties the
// cloud first, so its instance-seconds stop while the hosts' go on.
func TestProvidersFillInOrder(t *testing.T) {
	g := group(t, 2, 6, "{up: 0s, down: 0s}", `      target: {metric: requests_per_second_per_instance, value: 100}
`)
	rates := []float64{150, 550, 550, 550, 550, 550, 150, 150, 150, 150, 150, 150, 150, 150}
	res, err := Simulate(Run{Group: g, Model: Model{Capacity: 200, BaseP99: 10 * time.Millisecond, ServiceCV: 1}, SLO: 200 * time.Millisecond,
		Providers: []Provider{{Name: "rack", Capacity: 4, StartDelay: 5 * time.Second}, {Name: "cloud", StartDelay: 210 * time.Second}},
		Interval:  time.Second, Start: t0, Initial: 2, Rates: rates})
	if err != nil {
		t.Fatal(err)
	}
	if res.MaxSize != 6 {
		t.Fatalf("max size %d, want 6", res.MaxSize)
	}
	at := func(metric string, d time.Duration) float64 {
		p := res.History.Points(metric, t0.Add(d), t0.Add(d))
		if len(p) != 1 {
			t.Fatalf("%s at %s: %v", metric, d, p)
		}
		return p[0].V
	}
	// The scale-out to 4 (max_step) is asked for at 08:01:00, on to 6 at
	// 08:01:16: the look-ahead then is the cloud's.
	if got := at("ready", time.Minute+10*time.Second); got != 4 {
		t.Errorf("ready at 08:01:10 = %v, want 4: the hosts' two started in 5 s", got)
	}
	if got := at("ready", 4*time.Minute); got != 4 {
		t.Errorf("ready at 08:04:00 = %v, want 4: the cloud's take 210 s", got)
	}
	if got := at("ready", 5*time.Minute); got != 6 {
		t.Errorf("ready at 08:05:00 = %v, want 6", got)
	}
	rack, cloud := res.ProviderSeconds["rack"], res.ProviderSeconds["cloud"]
	if cloud == 0 || rack <= cloud {
		t.Errorf("instance-seconds rack %v, cloud %v: want both, the rack's more", rack, cloud)
	}
	// After the step down, only the rack runs: its seconds grow, not the cloud's.
	if got := at("size", 13*time.Minute); got > 4 {
		t.Errorf("size at 08:13 = %v, want the cloud emptied (at most 4)", got)
	}
	if want := 14 * time.Minute.Seconds() * 2; rack < want {
		t.Errorf("rack instance-seconds %v, want at least %v (2 all along)", rack, want)
	}
}
