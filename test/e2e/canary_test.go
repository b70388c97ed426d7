package e2e

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/jobrun"
)

// canaryGroup is web at size instances of the demo backend whose share of
// 500s (fail) and added delay per request (delay) are template variables,
// deployed by canary with these steps and analysis (YAML flow). Step
// lengths are short here so that a test lasts seconds; the analysis is
// the one a user writes.
func canaryGroup(size int, steps, analysis string) groupSpec {
	return groupSpec{
		Name: "web", Min: size, Max: size + 2,
		Command: fmt.Sprintf(`[%q, "--listen", "127.0.0.1:{{.Port}}", "--name", "{{.Name}}", "--fail-share", "{{.Vars.fail}}", "--delay", "{{.Vars.delay}}"]`,
			filepath.Join(binDir, "demo-backend")),
		Env: `{RELEASE: "{{.Vars.release}}"}`,
		Extra: "      vars: {fail: \"0\", delay: \"0s\", release: \"1\"}\n" +
			"    deploy: {strategy: canary, max_surge: 1, canary: {steps: " + steps + ", analysis: " + analysis + "}}\n",
	}
}

// serverPoll is one read of the backend's servers: weight and requests.
type serverPoll struct {
	at      time.Time
	weight  map[string]int
	reqs    map[string]int64
	errs    map[string]int64
	serving map[string]bool
}

// pollServers reads HAProxy's stats of web every 100 ms until stopped.
func pollServers(t *testing.T, e *shoalEnv) (stop func() []serverPoll) {
	c := haproxy.Client{Socket: filepath.Join(e.stateDir(), "haproxy", "admin.sock")}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	var (
		mu    sync.Mutex
		polls []serverPoll
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
			stats, err := c.Stats(rctx, "web")
			rcancel()
			if err == nil {
				p := serverPoll{at: time.Now(), weight: map[string]int{}, reqs: map[string]int64{}, errs: map[string]int64{}, serving: map[string]bool{}}
				for _, s := range stats {
					if s.Type != haproxy.TypeServer {
						continue
					}
					p.weight[s.Name], p.reqs[s.Name], p.errs[s.Name] = s.Weight, s.Requests, s.Responses[5]
					p.serving[s.Name] = s.Status.IsUp() && !strings.Contains(string(s.Status), "DRAIN") && !s.Status.InMaint()
				}
				mu.Lock()
				polls = append(polls, p)
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	stop = func() []serverPoll {
		once.Do(func() { cancel(); <-done })
		mu.Lock()
		defer mu.Unlock()
		return polls
	}
	t.Cleanup(func() { stop() })
	return stop
}

// weightShare is the canary's share of the requests that p's weights
// promise (servers in rotation only).
func weightShare(p serverPoll, canary func(string) bool) float64 {
	var c, all int
	for n, w := range p.weight {
		if !p.serving[n] {
			continue
		}
		all += w
		if canary(n) {
			c += w
		}
	}
	if all == 0 {
		return 0
	}
	return 100 * float64(c) / float64(all)
}

// TestCanaryPromotedThroughSteps deploys a good version by canary, 5 % →
// 25 % → 100 %, under keep-alive load: no request fails, and the share of
// requests the canary got while each step's weights held, measured from
// HAProxy's own counters, is within 2 points of the step's weight. Then the
// stable instances are replaced and the new version serves.
func TestCanaryPromotedThroughSteps(t *testing.T) {
	parallel(t)
	e := newEnv(t, "", canaryGroup(3, "[{weight: 5%, for: 8s}, {weight: 25%, for: 8s}, {weight: 100%, for: 3s}]",
		"{max_error_rate: {above: 1%, vs_stable: 2x}, max_p99: {vs_stable: 3x}, min_requests: 100, interval: 1s}"))
	e.start()
	e.waitInService("web", 3)
	before := groupOf(t, e.status(), "web")
	stable := map[string]bool{}
	for _, in := range before.Instances {
		stable[in.Name] = true
	}
	isCanary := func(name string) bool { return !stable[name] }

	alone(t)
	stopLoad := load(t, e)
	polls := pollServers(t, e)
	time.Sleep(500 * time.Millisecond)
	out, stderr, code := e.cli("deploy", "web", "--set", "release=2", "--sync")
	t.Logf("shoal deploy:\n%s%s", out, stderr)
	if code != 0 {
		t.Fatalf("canary deploy exited %d", code)
	}
	time.Sleep(500 * time.Millisecond)
	res := stopLoad()
	ps := polls()
	t.Logf("%d requests, %d failures, spread %v", res.Requests, res.Failures, res.ByInstance)
	if res.Failures != 0 {
		t.Fatalf("%d of %d requests failed during the canary: %v", res.Failures, res.Requests, res.FailureSamples)
	}

	// Between two polls with the same weights, the requests each server
	// got are the share those weights gave.
	type tally struct{ can, all int64 }
	by := map[float64]*tally{}
	for i := 1; i < len(ps); i++ {
		a, b := ps[i-1], ps[i]
		wa, wb := weightShare(a, isCanary), weightShare(b, isCanary)
		if !sameWeights(a, b) {
			continue
		}
		step := -1.0
		for _, w := range []float64{5, 25, 100} {
			if math.Abs(wa-w) <= 1.5 && math.Abs(wb-w) <= 1.5 {
				step = w
			}
		}
		if step < 0 {
			continue
		}
		tl := by[step]
		if tl == nil {
			tl = &tally{}
			by[step] = tl
		}
		for n, r := range b.reqs {
			d := r - a.reqs[n]
			if d < 0 {
				continue
			}
			tl.all += d
			if isCanary(n) {
				tl.can += d
			}
		}
	}
	for _, w := range []float64{5, 25, 100} {
		tl := by[w]
		if tl == nil || tl.all < 500 {
			t.Fatalf("step %g%%: too few requests measured (%+v)", w, tl)
		}
		got := 100 * float64(tl.can) / float64(tl.all)
		t.Logf("step %g%%: canary got %d of %d requests: %.2f%%", w, tl.can, tl.all, got)
		if math.Abs(got-w) > 2 {
			t.Errorf("step %g%%: the canary got %.2f%% of the requests, want within 2 points", w, got)
		}
	}

	after := groupOf(t, e.status(), "web")
	if after.Version == before.Version || versions(after)[after.Version] != 3 || after.Deploying != "" {
		t.Fatalf("after the canary: version %q (was %q), instances %v", after.Version, before.Version, versions(after))
	}
	evs := e.events(api.EventsQuery{Group: "web"})
	var steps, promoted int
	for _, ev := range evs {
		switch {
		case eventOf("canary.step", "")(ev):
			steps++
		case eventOf("canary.promoted", "")(ev):
			promoted++
			if !strings.Contains(ev.Reason, "every step passed (3)") || !strings.Contains(ev.Reason, "canary ") {
				t.Errorf("promotion event: %q", ev.Reason)
			}
		}
	}
	if steps != 3 || promoted != 1 {
		t.Fatalf("%d canary.step and %d canary.promoted events, want 3 and 1", steps, promoted)
	}
	e.checkInSync("web")
}

func sameWeights(a, b serverPoll) bool {
	if len(a.weight) != len(b.weight) {
		return false
	}
	for n, w := range a.weight {
		if b.weight[n] != w || a.serving[n] != b.serving[n] {
			return false
		}
	}
	return true
}

// TestCanaryRolledBackOnErrors deploys a version that answers 3 % of real
// requests with 500 while its health check passes: the analysis rolls it
// back within one interval after the canary answered min_requests, the
// stable instances' weights are back, the canary instance is gone, and the
// only failed requests are the canary's 500s.
func TestCanaryRolledBackOnErrors(t *testing.T) {
	parallel(t)
	const interval, minRequests = 2 * time.Second, 300
	e := newEnv(t, "", canaryGroup(3, "[{weight: 25%, for: 60s}, {weight: 100%}]",
		fmt.Sprintf("{max_error_rate: {above: 1%%, vs_stable: 2x}, min_requests: %d, interval: %s}", minRequests, interval)))
	e.start()
	e.waitInService("web", 3)
	before := groupOf(t, e.status(), "web")
	stable := map[string]bool{}
	for _, in := range before.Instances {
		stable[in.Name] = true
	}

	alone(t)
	stopLoad := load(t, e)
	polls := pollServers(t, e)
	time.Sleep(500 * time.Millisecond)
	out, stderr, code := e.cli("deploy", "web", "--set", "fail=0.03", "--sync")
	t.Logf("shoal deploy:\n%s%s", out, stderr)
	if code != 1 || !strings.Contains(out, "rolled back: analysis: error rate") {
		t.Fatalf("deploy of a version answering 3%% 500s exited %d, want 1 and a rollback on its error rate", code)
	}
	time.Sleep(500 * time.Millisecond)
	res := stopLoad()
	ps := polls()
	t.Logf("%d requests, %d failures %v, spread %v", res.Requests, res.Failures, res.FailureKinds, res.ByInstance)

	// When the canary had answered min_requests, and its last 5xx count.
	var reached time.Time
	var canary500 int64
	for _, p := range ps {
		for n, r := range p.reqs {
			if stable[n] {
				continue
			}
			if r >= minRequests && reached.IsZero() {
				reached = p.at
			}
			canary500 = max(canary500, p.errs[n])
		}
	}
	ev := e.waitEvent("canary rolled back", 5*time.Second, 0, eventOf("canary.rolled_back", ""))
	t.Logf("rolled back at %s, %s after min_requests: %s", ev.Time.Format(time.RFC3339Nano), ev.Time.Sub(reached), ev.Reason)
	if reached.IsZero() {
		t.Fatal("the canary never reached min_requests in HAProxy's counters")
	}
	// One interval, one poll of the deploy and one of this test's.
	if late := ev.Time.Sub(reached); late > interval+500*time.Millisecond {
		t.Errorf("rolled back %s after min_requests, want within one interval (%s)", late, interval)
	}
	if !strings.Contains(ev.Reason, "beyond max_error_rate (above 1% and 2x the stable version's)") {
		t.Errorf("rollback event lacks the figures: %q", ev.Reason)
	}
	// The only failures are the canary's 500s.
	for kind, n := range res.FailureKinds {
		if kind != "HTTP 500" {
			t.Errorf("%d requests failed as %s", n, kind)
		}
	}
	if got := res.FailureKinds["HTTP 500"]; got == 0 || got > canary500 {
		t.Errorf("clients saw %d 500s, the canary answered %d", got, canary500)
	}
	last := ps[len(ps)-1]
	for n := range last.weight {
		if !stable[n] {
			t.Errorf("canary server %s still in HAProxy after the rollback", n)
		} else if last.weight[n] != 100 || last.errs[n] != 0 {
			t.Errorf("stable server %s: weight %d, %d 5xx", n, last.weight[n], last.errs[n])
		}
	}
	after := groupOf(t, e.status(), "web")
	if after.Version != before.Version || versions(after)[before.Version] != 3 || len(after.Instances) != 3 {
		t.Fatalf("after the rollback: version %q, instances %v", after.Version, versions(after))
	}
	list, err := e.client().Jobs(context.Background(), "web", 1)
	if err != nil {
		t.Fatal(err)
	}
	if j := list[0]; j.Kind != jobrun.Deploy || j.State != jobrun.Failed || !strings.Contains(j.Reason, "error rate") {
		t.Fatalf("job %+v: want a failed deploy with the analysis' reason", j)
	}
	e.checkInSync("web")
}
