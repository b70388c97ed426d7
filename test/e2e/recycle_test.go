package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/group"
)

// TestLifetimeRecycle: a group of 4 with max_lifetime 1m and max_unavailable
// 1 replaces every instance once its lifetime (less its jitter) ends, one at
// a time, launch before terminate, under keep-alive load with the CPU
// saturated: no request fails and never fewer than 3 serve.
func TestLifetimeRecycle(t *testing.T) {
	parallel(t) // alone from just before the first recycle: it saturates the CPU
	g := groupSpec{Name: "web", Min: 4, Max: 4,
		Extra: "    max_lifetime: 1m\n    disruption: {max_unavailable: 1}\n"}
	e := newEnv(t, "", g)
	began := time.Now()
	e.start()
	e.waitInService("web", 4)
	// Names are reused (a replacement takes the lowest free index): the
	// first instances are told by their processes.
	var first []int
	for _, in := range groupOf(t, e.status(), "web").Instances {
		first = append(first, in.PID)
	}
	// The first instance is due 54-60 s after it started (max_lifetime less
	// up to 10 % jitter): until just before, the test only waits.
	time.Sleep(time.Until(began.Add(46 * time.Second)))
	stop := load(t, e)
	alone(t)
	stopHogs := cpuHogs(t, 2, 4*time.Minute)
	defer stopHogs()
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
