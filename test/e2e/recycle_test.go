package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/group"
)

// TestLifetimeRecycle: a group of 4 given max_lifetime 1m and
// max_unavailable 1 (by a reload, once its instances are older than that)
// replaces every instance, one at a time, launch before terminate, under
// keep-alive load with the CPU saturated: no request fails and never fewer
// than 3 serve.
func TestLifetimeRecycle(t *testing.T) {
	parallel(t) // alone for the recycle: it saturates the CPU
	// Checks every 300 ms and a 1 s drain: each replacement's gate and
	// drain take seconds, not the defaults' tens.
	g := groupSpec{Name: "web", Min: 4, Max: 4, Drain: "1s", Health: "{path: /healthz, interval: 300ms, rise: 2, fall: 2, timeout: 1s}"}
	e := newEnv(t, "", g)
	e.start()
	e.waitInService("web", 4)
	began := time.Now()
	// Names are reused (a replacement takes the lowest free index): the
	// first instances are told by their processes.
	var first []int
	for _, in := range groupOf(t, e.status(), "web").Instances {
		first = append(first, in.PID)
	}
	// The instances grow older than the lifetime the reload gives them
	// while the test only waits, beside the others; the recycle itself,
	// every instance due at once, runs alone with the CPU saturated.
	time.Sleep(time.Until(began.Add(61 * time.Second)))
	busy(t)
	stopHogs := cpuHogs(t, 2, 4*time.Minute)
	defer stopHogs()
	stop := load(t, e)
	time.Sleep(time.Second)
	g.Extra = "    max_lifetime: 1m\n    disruption: {max_unavailable: 1}\n"
	e.writeConfig("", g)
	if out, stderr, code := e.cli("reload"); code != 0 {
		t.Fatalf("shoal reload exited %d:\n%s%s", code, out, stderr)
	}
	minServing := 4
	e.eventually("every first instance recycled", 3*time.Minute, func() error {
		g := groupOf(t, e.status(), "web")
		serving := 0
		var left []string
		for _, in := range g.Instances {
			if in.State == group.InService {
				serving++
			}
			if slices.Contains(first, in.PID) {
				left = append(left, in.Name)
			}
		}
		minServing = min(minServing, serving)
		if len(left) > 0 || serving != 4 {
			return fmt.Errorf("%d in service; first ones left: %v", serving, left)
		}
		return nil
	})
	res := stop()
	stopHogs()
	t.Logf("%d requests, %d failed; at least %d in service throughout", res.Requests, res.Failures, minServing)
	if res.Failures != 0 {
		t.Fatalf("%d of %d requests failed during the recycle: %v", res.Failures, res.Requests, res.FailureSamples)
	}
	if minServing < 3 {
		t.Errorf("%d in service at one point, want at least 3 (max_unavailable 1)", minServing)
	}
	started := 0
	for _, ev := range e.events(api.EventsQuery{Group: "web", Limit: 500}) {
		if ev.Rule == "recycle" && ev.Code == "started" {
			started++
		}
	}
	if started < 4 {
		t.Errorf("%d recycle.started events, want at least 4", started)
	}
	e.checkInSync("web")
}
