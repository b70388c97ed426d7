package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
)

// TestGroupAcrossProviders: one group over two namespace SSH hosts
// (capacity 2 each) and the exec provider's test cloud, its policy
// reading real load. A load step of keep-alive GETs scales it 2 → 6: 4 on
// the hosts, 2 in the cloud; its end brings it back to 2, the cloud's
// first; no request fails, and the cloud's listing holds exactly the
// group's cloud instances; a kill -9 of shoal at 6 and its restart adopt
// each instance on its provider. Then the cloud refuses to create (quota
// exceeded): under the same load step the group scales on the hosts up to
// their capacity, the cloud is skipped for a back-off that grows at its
// next refusal, said in the events and in shoal status, no server leaks,
// and nothing fails. Last, the cloud serving again, the load step with the
// CPU saturated.
func TestGroupAcrossProviders(t *testing.T) {
	parallel(t) // mostly waits on polls and the policy's evaluations
	lab := newLab(t, 2)
	c := newExecCloud(t)
	var hosts []sshHost
	for _, h := range lab.Hosts {
		hosts = append(hosts, sshHost{h: h, extra: "capacity: {instances: 2}"})
	}
	providers := sshProviders(lab, t.TempDir(), map[string][]sshHost{"rack": hosts}) +
		strings.TrimPrefix(c.provider(), "providers:\n")
	g := sshGroup("web", "rack", 2, 6, "    placement: {strategy: spread}\n"+policyAutoscale)
	g.Extra = strings.Replace(g.Extra, "    provider: rack\n", "    providers: [{name: rack}, {name: cli, cost_per_hour: 0.05}]\n", 1)
	g.Drain = "3s"
	e := newEnv(t, sshTimeouts+"metrics: {warmup: 1s}\n"+providers, g)
	if out, stderr, code := e.cli("validate"); code != 0 {
		t.Fatalf("shoal validate refuses the group across providers (exit %d):\n%s%s", code, out, stderr)
	}
	e.start()
	e.eventually("2 instances in service", 60*time.Second, inService(e, 2))
	if got := byProvider(e); got["rack"] != 2 || got["cli"] != 0 {
		t.Fatalf("at 2: %v, want both on the hosts", got)
	}
	tr := startTrickle(t, e)

	// The load step: 2 → 4 on the hosts, → 6 with the cloud's 2; its end
	// back to 2, the cloud's first. Then again with the CPU saturated
	// while the load runs (it runs alone then; the scale-in that follows
	// the load's end shares the machine again).
	step := func(label string, saturated bool) {
		t.Helper()
		stopHogs := func() {}
		if saturated {
			busy(t)
			stopHogs = cpuHogs(t, runtime.NumCPU()+1, 2*time.Minute)
		}
		begin := time.Now()
		stop := sshLoad(t, e)
		e.eventually(label+": the policy scales out to 6, all in service", 60*time.Second, inService(e, 6))
		t.Logf("%s: 2 → 6 in %s", label, time.Since(begin).Round(time.Millisecond))
		if got := byProvider(e); got["rack"] != 4 || got["cli"] != 2 {
			t.Fatalf("%s: at 6: %v, want 4 on the hosts and 2 in the cloud", label, got)
		}
		for h, n := range e.perHost("web") {
			if !strings.HasPrefix(h, "127.0.1") && n != 2 {
				t.Errorf("%s: host %s has %d instances, want its capacity, 2: %v", label, h, n, e.perHost("web"))
			}
		}
		e.eventually(label+": the cloud's servers are the group's 2 cloud instances", 15*time.Second, func() error { return cloudMatches(e, c) })
		e.checkInSync("web")
		st := groupOf(t, e.status(), "web")
		if len(st.Providers) != 2 || st.Providers[0].Instances != 4 || st.Providers[1].Instances != 2 || st.Providers[1].CostPerHour != 0.05 {
			t.Errorf("%s: status providers %+v", label, st.Providers)
		}
		out, _, _ := e.cli("status")
		if !strings.Contains(out, "PROVIDER") || !strings.Contains(out, "cost today") {
			t.Errorf("%s: shoal status shows no providers or cost:\n%s", label, out)
		}
		res := stop()
		stopHogs()
		if saturated {
			shareAgain(t)
		}
		e.eventually(label+": the cloud's instances go first", 40*time.Second, func() error {
			got := byProvider(e)
			if got["cli"] != 0 {
				return fmt.Errorf("%v", got)
			}
			if got["rack"] < 2 {
				t.Fatalf("%s: the hosts' instances went before the cloud's: %v", label, got)
			}
			return nil
		})
		e.eventually(label+": the policy scales back in to 2", 40*time.Second, inService(e, 2))
		e.eventually(label+": no server left in the cloud", 15*time.Second, func() error { return cloudMatches(e, c) })
		e.checkInSync("web")
		if res.Failures != 0 || res.Requests == 0 {
			t.Fatalf("%s: %d of %d keep-alive GETs failed during the step: %v", label, res.Failures, res.Requests, res.FailureSamples)
		}
		t.Logf("%s: %d keep-alive GETs, none failed", label, res.Requests)
	}
	step("idle machine", false)

	// A kill -9 of shoal at 6: the restart adopts each instance on the
	// provider it runs on, none is taken for a stray.
	tr.end()
	if n := tr.failed.Load(); n != 0 || tr.ok.Load() == 0 {
		t.Fatalf("%d of %d trickled GETs failed: %v", n, n+tr.ok.Load(), tr.samples)
	}
	stop := sshLoad(t, e)
	e.eventually("6 again", 60*time.Second, inService(e, 6))
	before := map[string]string{}
	for _, in := range groupOf(t, e.status(), "web").Instances {
		before[in.Name] = in.Provider
	}
	// Killed under the load: once it stops, the policy may start a
	// scale-in, and an instance it stopped is rightly not adopted.
	e.kill9()
	e.start()
	if n := strings.Count(e.log.String(), "instance adopted"); n != 6 {
		t.Fatalf("%d instances adopted after the kill -9, want the 6 of before %v", n, before)
	}
	if res := stop(); res.Failures != 0 {
		t.Fatalf("%d of %d keep-alive GETs failed across the kill -9: %v", res.Failures, res.Requests, res.FailureSamples)
	}
	for _, in := range groupOf(t, e.status(), "web").Instances {
		if p, ok := before[in.Name]; !ok || p != in.Provider {
			t.Errorf("after the restart %s is on %q, before on %q", in.Name, in.Provider, p)
		}
	}
	if n := strings.Count(e.log.String(), "stray instance stopped"); n != 0 {
		t.Errorf("%d strays stopped after the restart: an instance taken for another provider's", n)
	}
	e.eventually("the policy scales back in to 2 after the restart", 40*time.Second, inService(e, 2))
	e.eventually("no server left in the cloud", 15*time.Second, func() error { return cloudMatches(e, c) })
	tr = startTrickle(t, e)

	// The cloud refuses: the hosts take what they can, the cloud is
	// skipped, nothing leaks.
	if err := os.WriteFile(filepath.Join(c.dir, "fail-start"), []byte("fail"), 0o644); err != nil {
		t.Fatal(err)
	}
	stop = sshLoad(t, e)
	e.eventually("the hosts fill up to their capacity, 4", 60*time.Second, inService(e, 4))
	e.eventually("the refusal in the events", 30*time.Second, func() error { return skipEvent(e, "skipped for 30s after a failed start (1 in a row)") })
	// After the first back-off the cloud is asked again, refuses again,
	// and is skipped for longer; the hosts keep their 4 serving.
	e.eventually("the second refusal in the events", 50*time.Second, func() error { return skipEvent(e, "skipped for 1m0s after a failed start (2 in a row)") })
	if err := inService(e, 4)(); err != nil {
		t.Fatalf("while the cloud refuses: %v", err)
	}
	if got := byProvider(e); got["rack"] != 4 || got["cli"] != 0 {
		t.Fatalf("while the cloud refuses: %v, want 4 on the hosts", got)
	}
	if left := c.servers(); len(left) != 0 {
		t.Fatalf("servers in the cloud that refused: %v", left)
	}
	st := groupOf(t, e.status(), "web")
	if st.Providers[1].SkippedUntil.IsZero() || !strings.Contains(st.Providers[1].SkipReason, "quota exceeded") {
		t.Errorf("status of the refusing cloud: %+v", st.Providers[1])
	}
	e.checkInSync("web")
	res := stop()
	e.eventually("back to 2 on the hosts", 40*time.Second, inService(e, 2))
	tr.end()
	if res.Failures != 0 || res.Requests == 0 {
		t.Fatalf("%d of %d keep-alive GETs failed while the cloud refused: %v", res.Failures, res.Requests, res.FailureSamples)
	}
	if n := tr.failed.Load(); n != 0 || tr.ok.Load() == 0 {
		t.Fatalf("%d of %d trickled GETs failed: %v", n, n+tr.ok.Load(), tr.samples)
	}

	// The cloud takes creates again once its skip has run out; the load
	// step again, with the CPU saturated, last: it runs alone, and only its
	// scale-in shares the machine again (a step in the middle left the rest
	// of the test to run after every other test's step alone).
	if err := os.Remove(filepath.Join(c.dir, "fail-start")); err != nil {
		t.Fatal(err)
	}
	e.eventually("the cloud no longer skipped", 2*time.Minute, func() error {
		if until := groupOf(t, e.status(), "web").Providers[1].SkippedUntil; time.Now().Before(until) {
			return fmt.Errorf("skipped until %v", until)
		}
		return nil
	})
	tr = startTrickle(t, e)
	step("CPU saturated", true)
	tr.end()
	if n := tr.failed.Load(); n != 0 || tr.ok.Load() == 0 {
		t.Fatalf("%d of %d trickled GETs failed: %v", n, n+tr.ok.Load(), tr.samples)
	}
	if calls := c.calls(); calls["start"] < 6 {
		t.Errorf("cloud calls %v: want the 4 creates of the steps and at least 2 refused", calls)
	}
	e.stop()
	if left := c.servers(); len(left) != 0 {
		t.Fatalf("servers left in the cloud after shoal stopped: %v", left)
	}
}

// byProvider counts the group web's instances by provider.
func byProvider(e *shoalEnv) map[string]int {
	out := map[string]int{}
	for _, in := range groupOf(e.t, e.status(), "web").Instances {
		out[in.Provider]++
	}
	return out
}

// cloudMatches fails unless the cloud's servers are exactly the group's
// instances on it, each at its address.
func cloudMatches(e *shoalEnv, c *execCloud) error {
	want := map[string]string{}
	for _, in := range groupOf(e.t, e.status(), "web").Instances {
		if in.Provider == "cli" {
			want[in.Name] = in.Addr
		}
	}
	got := map[string]string{}
	for _, s := range c.servers() {
		got[s.Tags["shoal-instance"]] = net.JoinHostPort(s.Address, fmt.Sprint(c.port))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("cloud servers %v, the group's cloud instances %v", got, want)
	}
	return nil
}

// skipEvent finds the event of the cloud skipped after its refusal, with
// what (its back-off and count).
func skipEvent(e *shoalEnv, what string) error {
	out, stderr, code := e.cli("events", "web", "-o", "json", "--since", "5m")
	if code != 0 {
		return fmt.Errorf("shoal events exited %d: %s", code, stderr)
	}
	for line := range strings.Lines(out) {
		var ev api.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			return fmt.Errorf("events line %q: %v", line, err)
		}
		if ev.Rule == "provider" && ev.Code == "skipped" && strings.Contains(ev.Reason, "provider cli "+what) && strings.Contains(ev.Reason, "quota exceeded") {
			return nil
		}
	}
	return fmt.Errorf("no provider.skipped event of cli %s in:\n%s", what, out)
}
