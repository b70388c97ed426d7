package e2e

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/loadgen"
)

// TestSSHWarmPoolRunning: a group on 2 namespace hosts (capacity 2 each)
// whose app takes 3 s to start (a sleep before the demo-backend). Under
// load, a scale-out without a pool waits for the start and the health
// gate; with warm_pool {size: 2, state: running} (added by a reload) it
// takes an instance the pool started and health-checked out of rotation,
// in service at once, and the pool refills in the background within the
// hosts' capacity (2 instances + 2 pool = 4 slots). shoal killed -9
// adopts the pool's processes by their marker at its restart (same
// processes, none started twice, none left over). No request fails, the
// CPU saturated from the kill on.
func TestSSHWarmPoolRunning(t *testing.T) {
	parallel(t)
	const startup = 3 * time.Second
	lab := newLab(t, 2)
	var hosts []sshHost
	for _, h := range lab.Hosts {
		hosts = append(hosts, sshHost{h: h, extra: "capacity: {instances: 2}"})
	}
	g := sshGroup("web", "rack", 1, 3, "")
	g.Command = fmt.Sprintf(`["sh", "-c", "sleep %d && exec \"$0\" \"$@\"", %q, "--listen", "{{.Host}}:{{.Port}}", "--name", "{{.Name}}"]`,
		int(startup/time.Second), filepath.Join(binDir, "demo-backend"))
	// No host dies here: a restart under busy loops took a host for down
	// with the suite's 2 s handshake bound, and its pool server was started
	// anew instead of adopted.
	prov := sshTimeouts + calmSSH(sshProviders(lab, t.TempDir(), map[string][]sshHost{"rack": hosts}))
	e := newEnv(t, prov, g)
	e.start()
	e.waitInService("web", 1)

	timedScale := func(n int) time.Duration {
		t.Helper()
		begin := time.Now()
		scaleSync(t, e, "--size", strconv.Itoa(n))
		return time.Since(begin)
	}
	alone(t) // the two scale-outs are measured
	// Longer than sshLoad's: the load runs through the kill and restart.
	// (Started before the turn came, it ran unpaced through the wait in
	// line, beside the shared tests.)
	stop, err := loadgen.Start(context.Background(), loadgen.Options{URL: "http://" + e.listen + "/", Concurrency: loadConcurrency, Timeout: 10 * time.Second, Duration: 4 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop() })
	cold := timedScale(2)
	e.checkInSync("web")
	scaleSync(t, e, "--size", "1")

	g.Extra = "    provider: rack\n    warm_pool: {size: 2, state: running}\n"
	e.writeConfig(prov, g)
	e.reload()
	pool := e.waitWarm(2, 60*time.Second)
	warm := timedScale(2)
	e.checkInSync("web")
	t.Logf("time to in service: %s without a pool (app start %s + health gate), %s from the running pool", cold.Round(time.Millisecond), startup, warm.Round(time.Millisecond))
	if warm >= startup || warm > cold/2 {
		t.Errorf("from the running pool in %s, want less than the app's start (%s) and at most half the cold scale-out (%s)", warm, startup, cold)
	}
	taken := 0
	for _, in := range e.webStatus().Instances {
		if slices.Contains(slices.Collect(maps.Values(pool)), in.Name) {
			t.Errorf("instance %s is named as a pool member", in.Name)
		}
	}
	// The instance taken runs the pool member's process: its marker.
	byMarker := map[string]bool{}
	for _, h := range lab.Hosts {
		for _, name := range e.hostInstances(h) {
			byMarker[name] = true
		}
	}
	for _, name := range pool {
		if byMarker[name] {
			taken++
		}
	}
	if taken != 2 {
		t.Errorf("%d of the pool's processes %v run, want both (one serving, one waiting): %v", taken, pool, byMarker)
	}

	// From here the CPU is saturated too.
	stopHogs := cpuHogs(t, runtime.NumCPU()+1, 3*time.Minute)
	defer stopHogs()
	// Refilled within capacity: 2 instances and 2 waiting fill the 4 slots.
	refilled := e.waitWarm(2, 60*time.Second)
	running := func() map[int]string {
		all := map[int]string{}
		for _, h := range lab.Hosts {
			maps.Copy(all, e.hostInstances(h))
		}
		return all
	}
	before := running()
	if len(before) != 4 {
		t.Fatalf("processes on the hosts %v, want 4 (2 instances, 2 in the pool)", before)
	}
	e.kill9()
	e.start()
	e.waitInService("web", 2)
	after := e.waitWarm(2, 60*time.Second)
	if fmt.Sprint(slices.Sorted(maps.Values(after))) != fmt.Sprint(slices.Sorted(maps.Values(refilled))) {
		t.Errorf("pool after the restart %v, want the killed run's %v adopted", after, refilled)
	}
	e.eventually("the same processes, none started twice or left over", 10*time.Second, func() error {
		if now := running(); !maps.Equal(now, before) {
			return fmt.Errorf("processes %v, before the kill %v", now, before)
		}
		return nil
	})
	e.checkInSync("web")
	res := stop()
	t.Logf("%d requests, %d failed %v", res.Requests, res.Failures, res.FailureSamples)
	if res.Requests < 100 || res.Failures != 0 {
		t.Errorf("%d requests, %d failed: want 0 failed", res.Requests, res.Failures)
	}
}
