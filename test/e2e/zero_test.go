package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
)

// zeroGroup is a group that sleeps at 0 instances and has a CPU target
// policy: the combination that, before scale_to_zero, never came back from
// 0. Its checks are quick so a cold start takes about a second; the scale-up
// cooldown is long to show that a wake does not wait for it.
func zeroGroup(idleAfter string) groupSpec {
	return groupSpec{
		Name: "web", Min: 0, Max: 3, CooldownUp: "300s", CooldownDn: "1s",
		Health: "{path: /healthz, interval: 200ms, rise: 1, fall: 2, timeout: 1s, grace: 3s}",
		Extra: fmt.Sprintf("    scale_to_zero: {idle_after: %s, max_queue: 500}\n", idleAfter) +
			"    autoscale:\n      target: {metric: cpu.avg, value: 50}\n",
	}
}

// burst sends n concurrent GETs, each on its own connection, and returns
// how many were not answered 200 and a sample of what they got instead.
func burst(t *testing.T, e *shoalEnv, n int) (failed int, why []string) {
	t.Helper()
	client := &http.Client{Timeout: 40 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, MaxConnsPerHost: 0}}
	defer client.CloseIdleConnections()
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Get("http://" + e.listen + "/")
			msg := ""
			if err != nil {
				msg = err.Error()
			} else {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					msg = resp.Status
				}
			}
			if msg != "" {
				mu.Lock()
				failed++
				if len(why) < 5 {
					why = append(why, msg)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return failed, why
}

// waitAsleep waits until web has no instance in shoal and in HAProxy.
func (e *shoalEnv) waitAsleep(timeout time.Duration) {
	e.t.Helper()
	e.eventually("web is asleep (desired 0, no instance)", timeout, func() error {
		s, err := e.client().Group(context.Background(), "web")
		if err != nil {
			return err
		}
		if s.Desired != 0 || len(s.Instances) != 0 {
			return fmt.Errorf("desired %d, %d instances", s.Desired, len(s.Instances))
		}
		return nil
	})
	if got := e.haproxyServers("web"); len(got) != 0 {
		e.t.Fatalf("HAProxy still has servers for a sleeping group: %v", got)
	}
}

// TestScaleFromZero: a group with min_size 0 and a CPU policy starts asleep;
// a burst of 200 concurrent GETs while it sleeps is held by HAProxy, wakes
// it through a job, and every request gets 200. With no more requests it
// goes back to 0 after idle_after, and a second burst wakes it again (the
// scale-up cooldown the first wake started does not hold the wake back).
// Both decisions are events.
func TestScaleFromZero(t *testing.T) {
	parallel(t)
	e := newEnv(t, "", zeroGroup("4s"))
	e.start()

	// Asleep from the start, and it stays so with no traffic: the policy
	// does not start an instance for want of a metric.
	e.waitAsleep(5 * time.Second)
	time.Sleep(3 * time.Second)
	e.waitAsleep(time.Second)

	start := time.Now()
	failed, why := burst(t, e, 200)
	took := time.Since(start)
	if failed > 0 {
		t.Fatalf("%d of 200 requests sent while asleep failed (e.g. %v), want 0", failed, why)
	}
	t.Logf("200 requests sent while asleep: all 200 OK within %v", took.Round(time.Millisecond))
	if took > 30*time.Second {
		t.Fatalf("the burst took %v: the wake should take seconds", took)
	}
	wake := e.waitEvent("a wake decision", 5*time.Second, 0, accepted("wake", "wake"))
	if wake.Current != 0 || wake.Recommendation != 1 || !strings.Contains(wake.Reason, "requests arrived while asleep") {
		t.Fatalf("wake event = %+v", wake)
	}
	s, err := e.client().Group(context.Background(), "web")
	if err != nil {
		t.Fatal(err)
	}
	if s.Desired != 1 {
		t.Fatalf("desired %d after the wake, want 1 (the policy has no reason to go further)", s.Desired)
	}

	// idle_after 4s without a request: back to 0, through a job.
	e.waitAsleep(30 * time.Second)
	sleep := e.waitEvent("an idle decision", 5*time.Second, wake.ID, accepted("idle_after", "size"))
	if sleep.Current != 1 || sleep.Recommendation != 0 {
		t.Fatalf("idle event = %+v", sleep)
	}
	out, stderr, code := e.cli("events", "web", "--since", "5m")
	if code != 0 || !strings.Contains(out, "wake") || !strings.Contains(out, "idle_after") {
		t.Fatalf("shoal events (exit %d) shows no wake or idle_after decision:\n%s%s", code, out, stderr)
	}

	// Asleep again, inside the 300 s scale-up cooldown of the first wake.
	if failed, why := burst(t, e, 20); failed > 0 {
		t.Fatalf("%d of 20 requests after the group went back to sleep failed (e.g. %v)", failed, why)
	}
	e.waitEvent("a second wake", 5*time.Second, sleep.ID, accepted("wake", "wake"))
	e.checkInSync("web")
}

// TestScaleFromZeroNoSpuriousWake: a group woken and put back to sleep
// between two metrics samples (3 s apart here) stays asleep: the requests it
// served before the sleep are no reason to wake it (they once were, and the
// next sample woke it again).
func TestScaleFromZeroNoSpuriousWake(t *testing.T) {
	parallel(t) // waits out windows on the clock: see the package doc
	e := newEnv(t, "metrics: {interval: 3s}\n", zeroGroup("60s"))
	e.start()
	e.waitAsleep(5 * time.Second)
	c := e.client()
	for i := range 3 {
		if failed, why := burst(t, e, 2); failed > 0 {
			t.Fatalf("round %d: %d of 2 requests failed (e.g. %v)", i, failed, why)
		}
		// At once, as soon as the wake's job lets it.
		size := 0
		e.eventually("the scale to 0 is accepted", 20*time.Second, func() error {
			j, err := c.Scale(context.Background(), "web", api.ScaleRequest{Size: &size, Source: "test"})
			if err != nil {
				return err
			}
			if j.State == "ignored" {
				return fmt.Errorf("ignored: %s", j.Reason)
			}
			return nil
		})
		e.waitAsleep(10 * time.Second)
		// Two more samples (the one after the sleep once woke it again),
		// and a second for what they decide.
		asleep, err := c.Metrics(context.Background(), "web", time.Minute, "")
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		e.eventually("two more metrics samples", 10*time.Second, func() error {
			doc, err := c.Metrics(context.Background(), "web", time.Minute, "")
			if err != nil {
				return err
			}
			if doc.Time.After(asleep.Time) {
				seen, asleep = seen+1, doc
			}
			if seen < 2 {
				return fmt.Errorf("%d samples since asleep", seen)
			}
			return nil
		})
		time.Sleep(time.Second)
		e.waitAsleep(time.Second)
	}
	for _, ev := range e.events(api.EventsQuery{Group: "web"}) {
		if ev.Rule == "wake" && strings.Contains(ev.Reason, "(0 held") {
			t.Errorf("a wake for no held request: %+v", ev)
		}
	}
}

// TestScaleFromZeroKill9: requests that arrive while the group sleeps and
// shoal is dead (kill -9) are held by HAProxy; the restarted shoal adopts
// HAProxy, sees them and wakes the group, and none is lost.
func TestScaleFromZeroKill9(t *testing.T) {
	parallel(t)
	e := newEnv(t, "", zeroGroup("60s"))
	e.start()
	e.waitAsleep(5 * time.Second)
	e.kill9()

	type result struct {
		failed int
		why    []string
	}
	done := make(chan result, 1)
	go func() {
		f, w := burst(t, e, 50)
		done <- result{f, w}
	}()
	// The requests wait in HAProxy while no shoal runs.
	time.Sleep(2 * time.Second)
	select {
	case r := <-done:
		t.Fatalf("the burst ended while shoal was dead (%d failed: %v): nothing can have woken the group", r.failed, r.why)
	default:
	}
	e.start()
	select {
	case r := <-done:
		if r.failed > 0 {
			t.Fatalf("%d of 50 requests held across the kill -9 failed (e.g. %v), want 0", r.failed, r.why)
		}
	case <-time.After(45 * time.Second):
		t.Fatal("the held requests were not answered within 45 s of the restart")
	}
	evs := e.events(api.EventsQuery{Group: "web"})
	found := false
	for _, ev := range evs {
		found = found || accepted("wake", "wake")(ev)
	}
	if !found {
		t.Fatalf("no accepted wake decision after the restart: %+v", evs)
	}
	e.checkInSync("web")
}

// TestScaleFromZeroValidate: the review's reproduction, min_size 0 with a
// CPU policy and nothing that can wake the group, which `validate` passed
// and which then slept for good, is refused with its position and the fix.
func TestScaleFromZeroValidate(t *testing.T) {
	parallel(t) // runs validate, no load
	g := zeroGroup("60s")
	g.Extra = "    autoscale:\n      target: {metric: cpu.avg, value: 50}\n"
	e := newEnv(t, "", g)
	_, stderr, code := e.cli("validate")
	want := e.cfgPath + ":8:15: groups[0].min_size: 0 with an autoscale policy needs scale_to_zero"
	if code != 2 || !strings.Contains(stderr, want) {
		t.Fatalf("shoal validate exited %d, want 2 with %q:\n%s", code, want, stderr)
	}
	// With scale_to_zero the same group is valid, haproxy -c included.
	e.writeConfig("", zeroGroup("60s"))
	if out, stderr, code := e.cli("validate"); code != 0 || !strings.Contains(out, "haproxy -c passed") {
		t.Fatalf("shoal validate exited %d: %s%s", code, out, stderr)
	}
}

// TestScaleToZeroMaxQueueCountsHeldOnly: max_queue bounds the requests
// HAProxy holds, not those still being answered by a draining instance. With
// max_queue 3, three long requests on the instance a hand scale to 0 drains,
// and no request held, a new GET is held and answered once the group wakes
// (it got 503 at once: the limit counted every backend connection).
func TestScaleToZeroMaxQueueCountsHeldOnly(t *testing.T) {
	parallel(t)
	e := newEnv(t, "", groupSpec{
		Name: "web", Min: 0, Max: 2, Drain: "10s",
		Health: "{path: /healthz, interval: 200ms, rise: 1, fall: 2, timeout: 1s, grace: 3s}",
		Extra:  "    scale_to_zero: {idle_after: 5m, max_queue: 3}\n",
	})
	e.start()
	e.waitAsleep(5 * time.Second)
	if failed, why := burst(t, e, 1); failed > 0 {
		t.Fatalf("the request that wakes the group failed: %v", why)
	}
	e.waitInService("web", 1)

	client := &http.Client{Timeout: 40 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	long := make(chan error, 3)
	for i := 0; i < 3; i++ {
		go func() {
			resp, err := client.Get("http://" + e.listen + "/work?ms=0&wait=5000")
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("status %s", resp.Status)
				}
			}
			long <- err
		}()
	}
	e.eventually("the instance holds the 3 long requests", 5*time.Second, func() error {
		s, err := e.client().Group(context.Background(), "web")
		if err != nil {
			return err
		}
		if len(s.Instances) != 1 || s.Instances[0].Sessions != 3 {
			return fmt.Errorf("instances %+v", s.Instances)
		}
		return nil
	})
	if out, stderr, code := e.cli("scale", "web", "--size", "0"); code != 0 {
		t.Fatalf("shoal scale web --size 0 exited %d:\n%s%s", code, out, stderr)
	}
	e.eventually("the instance drains", 5*time.Second, func() error {
		s, err := e.client().Group(context.Background(), "web")
		if err != nil {
			return err
		}
		if s.Desired != 0 || len(s.Instances) != 1 {
			return fmt.Errorf("desired %d, instances %+v", s.Desired, s.Instances)
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond) // the drain is set in HAProxy

	start := time.Now()
	resp, err := client.Get("http://" + e.listen + "/")
	if err != nil {
		t.Fatalf("GET while the last instance drains: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET while the last instance drains 3 requests (none held, max_queue 3): %s after %v, want it held and answered 200",
			resp.Status, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("GET held while the last instance drained: 200 after %v", time.Since(start).Round(time.Millisecond))
	for i := 0; i < 3; i++ {
		if err := <-long; err != nil {
			t.Errorf("a long request on the draining instance: %v", err)
		}
	}
}

// slowZeroGroup is a group that sleeps at 0 and whose instance takes start
// to listen (a cloud server's boot, shortened), so that requests stay held
// for that long after the wake.
func slowZeroGroup(start time.Duration, maxQueue int) groupSpec {
	slow := fmt.Sprintf(`["/bin/sh", "-c", "sleep %g; exec %s --listen 127.0.0.1:{{.Port}} --name {{.Name}}"]`,
		start.Seconds(), filepath.Join(binDir, "demo-backend"))
	return groupSpec{
		Name: "web", Min: 0, Max: 1, Command: slow,
		Health: "{path: /healthz, interval: 200ms, rise: 1, fall: 2, timeout: 1s, grace: 15s}",
		Extra:  fmt.Sprintf("    scale_to_zero: {idle_after: 5m, max_queue: %d}\n", maxQueue),
	}
}

// heldResult is what one GET sent while the group slept got.
type heldResult struct {
	status int
	err    error
	took   time.Duration
}

// fireHeld sends n concurrent GETs, each on its own connection, and
// delivers each result as it comes.
func fireHeld(e *shoalEnv, n int) <-chan heldResult {
	out := make(chan heldResult, n)
	client := &http.Client{Timeout: 45 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	start := time.Now()
	for range n {
		go func() {
			resp, err := client.Get("http://" + e.listen + "/")
			r := heldResult{err: err}
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				r.status = resp.StatusCode
			}
			r.took = time.Since(start)
			out <- r
		}()
	}
	return out
}

// TestScaleFromZeroReloadWhileHeld: issue 37's reproduction. Requests held
// for a sleeping group whose instance takes 4 s to start are answered 200
// once it is in service, although `shoal reload` (an unrelated group added)
// replaced HAProxy's worker while they waited: once, twice, and before the
// sample that wakes the group (metrics every 3 s), and once with every core
// busy (there the instance takes 12 s: in a saturated CI run the reload
// took until after a 4 s instance was in service). They got 503 after
// 30.7 s, or lost their connection after 31.5 s: the old worker that held
// them never got the instance (checks do not run there, and the Runtime
// API cannot enable a server in it).
func TestScaleFromZeroReloadWhileHeld(t *testing.T) {
	t.Parallel() // the subtests take the machine (see parallel)
	for _, tc := range []struct {
		name    string
		top     string
		reloads []time.Duration // after the requests
		busy    bool            // with the CPU saturated
	}{
		{"once", "", []time.Duration{time.Second}, false},
		{"twice", "", []time.Duration{time.Second, 2 * time.Second}, false},
		{"before wake", "metrics: {interval: 3s}\n", []time.Duration{300 * time.Millisecond}, false},
		{"busy", "", []time.Duration{time.Second}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Own shoal and HAProxy; the waits are the instance's start.
			if tc.busy {
				exclusiveBusy(t)
				cpuHogs(t, runtime.NumCPU()+1, 2*time.Minute)
			} else {
				parallel(t)
			}
			startIn := 4 * time.Second
			if tc.busy {
				startIn = 12 * time.Second
			}
			web := slowZeroGroup(startIn, 50)
			e := newEnv(t, tc.top, web)
			e.start()
			e.waitAsleep(5 * time.Second)

			results := fireHeld(e, 3)
			start := time.Now()
			for i, at := range tc.reloads {
				time.Sleep(time.Until(start.Add(at)))
				others := make([]groupSpec, 0, i+1)
				for j := range i + 1 {
					others = append(others, groupSpec{Name: fmt.Sprintf("other%d", j), Min: 0, Max: 1, Extra: fmt.Sprintf("    hosts: [other%d.test]\n", j)})
				}
				e.writeConfig(tc.top, append([]groupSpec{web}, others...)...)
				e.reload()
				select {
				case r := <-results:
					t.Fatalf("a held request ended before the instance could start: %d %v after %v", r.status, r.err, r.took)
				default:
				}
			}
			for range 3 {
				r := <-results
				if r.err != nil || r.status != http.StatusOK {
					t.Fatalf("a request held across %d reload(s): status %d, %v after %v; want 200", len(tc.reloads), r.status, r.err, r.took.Round(time.Millisecond))
				}
				t.Logf("held across %d reload(s): 200 after %v", len(tc.reloads), r.took.Round(time.Millisecond))
				if r.took > startIn+16*time.Second {
					t.Fatalf("answered after %v: the instance was in service within seconds", r.took)
				}
			}
			e.checkInSync("web")
		})
	}
}

// TestScaleToZeroMaxQueueWithRateLimit: max_queue bounds the held requests
// when the frontend has a rate limit too. The limit's track-sc0 took sticky
// counter 0 first, the hold's own track-sc0 was ignored and its count read
// the limit's table (no conn_cur: always 0), so all 10 of 10 concurrent GETs
// were held with max_queue 5. Now 5 get 503 at once and 5 are held and
// answered 200.
func TestScaleToZeroMaxQueueWithRateLimit(t *testing.T) {
	parallel(t) // own shoal and HAProxy; waits for the instance's start
	e := newEnv(t, "", slowZeroGroup(3*time.Second, 5))
	e.useFrontends(fmt.Sprintf("frontends:\n  - name: edge\n    bind: [%s]\n    rate_limit: {requests: 1000, per: 1m}\n    routes: [{group: web}]\n", e.listen))
	e.start()
	e.waitAsleep(5 * time.Second)

	results := fireHeld(e, 10)
	var refused, served []time.Duration
	for range 10 {
		r := <-results
		switch {
		case r.err == nil && r.status == http.StatusServiceUnavailable:
			refused = append(refused, r.took)
		case r.err == nil && r.status == http.StatusOK:
			served = append(served, r.took)
		default:
			t.Fatalf("a request got %d %v after %v; want 503 at once or 200", r.status, r.err, r.took)
		}
	}
	t.Logf("refused %v, served %v", refused, served)
	if len(refused) != 5 || len(served) != 5 {
		t.Fatalf("%d refused and %d served of 10 with max_queue 5, want 5 and 5", len(refused), len(served))
	}
	for _, d := range refused {
		if d > 2*time.Second {
			t.Fatalf("a request beyond max_queue got 503 after %v, want it at once", d)
		}
	}
	for _, d := range served {
		if d < 2*time.Second {
			t.Fatalf("a held request was answered after %v, before the instance could listen", d)
		}
	}
}
