package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/loadgen"
)

// policyLoadRate is the open-loop load that drives the policy out: 100
// requests/s is 50 per ready instance at 2 (target 15: 7 instances, capped
// at the max, 5) and still 20 at 5, while the trickle alone (under 20/s)
// asks for 2, the min, with a margin: 3 would take 30/s.
const policyLoadRate = 100

// policyAutoscale tracks requests per instance, every evaluation period
// allowed to double the group or to shed 3 (5 → 2 at once), with a short
// stabilization so that scale-in follows the end of the load within
// seconds.
const policyAutoscale = `    autoscale:
      target: {metric: requests_per_second_per_instance, value: 15, period: 1s, scale_in_stabilization: 3s, max_step: {up: "100%", down: 3}}
`

// TestCloudPolicyScalesOutAndIn: on each cloud provider (the exec
// provider's script cloud, EC2 on moto, Sakura Cloud on iaas-api-go's
// fake) a group of min 2, max 5 whose target-tracking policy reads real
// HTTP load through HAProxy scales itself 2 → 5 under load and back to 2
// once it stops, each decision an event of the target with a done job of
// source policy:target; the cloud's listing then holds exactly the group's
// instances (no duplicate, no orphan), and a client sending requests all
// along, scale-in included, sees none fail (drain works on clouds).
func TestCloudPolicyScalesOutAndIn(t *testing.T) {
	t.Parallel() // the subtests take the machine (see parallel)
	for _, tc := range []struct {
		name, group, provider string
		// cloud starts the cloud: the providers section, and a check that
		// its listing is exactly the group's instances.
		cloud func(t *testing.T) (providers string, matches func(*shoalEnv) error)
	}{
		{"exec", "web", "cli", func(t *testing.T) (string, func(*shoalEnv) error) {
			c := newExecCloud(t)
			return c.provider(), func(e *shoalEnv) error { return c.matches(e, "web") }
		}},
		{"ec2-moto", "web", "aws", func(t *testing.T) (string, func(*shoalEnv) error) {
			c := newMotoCloud(t)
			return c.provider(), c.matches
		}},
		{"sacloud-fake", "hscale-group", "sakura", func(t *testing.T) (string, func(*shoalEnv) error) {
			providers, store := sacloudProvider(t)
			return providers, func(e *shoalEnv) error { return sacloudMatches(t, e, store) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Each has its own cloud, shoal, HAProxy and ports; the policy
			// reads a request rate, which a busy machine does not change.
			parallel(t)
			begin := time.Now()
			providers, matches := tc.cloud(t)
			e := newEnv(t, "metrics: {warmup: 1s}\n"+providers, groupSpec{Name: tc.group, Min: 2, Max: 5, Drain: "3s",
				Extra: "    provider: " + tc.provider + "\n" + policyAutoscale, Cloud: true})
			e.start()
			e.eventually("2 instances in service", 60*time.Second, inService(e, 2))
			e.eventually("the cloud's listing is the group's 2 instances", 15*time.Second, func() error { return matches(e) })
			for _, in := range e.status().Groups[0].Instances {
				if !strings.HasPrefix(in.Addr, "127.") {
					t.Fatalf("instance %s at %s: traffic must stay on loopback", in.Name, in.Addr)
				}
			}
			tr := startTrickle(t, e)
			started := time.Now()
			t.Logf("2 in service after %s", started.Sub(begin).Round(time.Millisecond))

			stopLoad := openLoad(t, e, policyLoadRate, 40*time.Second)
			e.eventually("the policy scales out to 5, all in service", 40*time.Second, inService(e, 5))
			out := time.Now()
			e.eventually("the cloud's listing is the group's 5 instances", 15*time.Second, func() error { return matches(e) })
			e.checkInSync(tc.group)
			res := stopLoad()
			stopped := time.Now()
			if res.Errors != 0 || res.Completed == 0 {
				t.Fatalf("%d of %d loaded requests failed during the scale-out: %v", res.Errors, res.Sent, res.FailureSamples)
			}

			e.eventually("the policy scales back in to 2", 30*time.Second, inService(e, 2))
			in := time.Now()
			e.eventually("the cloud's listing is the group's 2 instances", 15*time.Second, func() error { return matches(e) })
			e.checkInSync(tc.group)
			tr.end()
			if n := tr.failed.Load(); n != 0 || tr.ok.Load() == 0 {
				t.Fatalf("%d of %d requests failed across scale-out and scale-in: %v", n, n+tr.ok.Load(), tr.samples)
			}

			checkPolicyDecisions(t, e, tc.group)
			t.Logf("2 → 5 in %s under %d req/s (%d sent, p99 %s); 5 → 2 in %s after the load stopped; trickle %d requests, none failed",
				out.Sub(started).Round(time.Millisecond), policyLoadRate, res.Sent, res.P99,
				in.Sub(stopped).Round(time.Millisecond), tr.ok.Load())
		})
	}
}

// openLoad sends rate requests/s through shoal's listener, open loop, for
// at most d; stop ends it early and returns what it measured.
func openLoad(t *testing.T, e *shoalEnv, rate float64, d time.Duration) (stop func() loadgen.OpenResult) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan loadgen.OpenResult, 1)
	go func() {
		res, err := loadgen.RunOpen(ctx, loadgen.OpenOptions{
			URL: "http://" + e.listen + "/", Timeout: 10 * time.Second,
			Schedule: []loadgen.Segment{{Rate: rate, Duration: d}},
		})
		if err != nil {
			t.Errorf("open-loop load: %v", err)
		}
		done <- res
	}()
	stop = sync.OnceValue(func() loadgen.OpenResult {
		cancel()
		return <-done
	})
	t.Cleanup(func() { stop() })
	return stop
}

// checkPolicyDecisions asserts that `shoal events` shows the target
// scaling group out to 5 and then in to 2, each accepted with a job of the
// policy that is done.
func checkPolicyDecisions(t *testing.T, e *shoalEnv, group string) {
	t.Helper()
	out, stderr, code := e.cli("events", group, "-o", "json", "--since", "5m")
	if code != 0 {
		t.Fatalf("shoal events exited %d: %s", code, stderr)
	}
	var sizes []int
	for line := range strings.Lines(out) {
		var ev api.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("events line %q: %v", line, err)
		}
		if ev.Outcome != "accepted" {
			continue
		}
		if ev.Rule != "target" || ev.Request == nil || ev.Request.Source != "policy:target" || ev.JobID == "" {
			t.Fatalf("an accepted decision not the target's: %+v", ev)
		}
		j, err := e.client().Job(context.Background(), ev.JobID, 0)
		if err != nil {
			t.Fatal(err)
		}
		if j.Source != "policy:target" || j.State != "done" {
			t.Fatalf("job %s of event %d: source %q state %s, want policy:target done", j.ID, ev.ID, j.Source, j.State)
		}
		sizes = append(sizes, ev.Request.Size)
	}
	// Out to 5 and back in to 2, each in one step or more: how many
	// depends on how the stabilization window sees the load's end.
	top := slices.Index(sizes, 5)
	if top < 0 || sizes[len(sizes)-1] != 2 || !slices.IsSorted(sizes[:top+1]) || !slices.IsSortedFunc(sizes[top:], func(a, b int) int { return b - a }) {
		table, _, _ := e.cli("events", group, "--since", "5m")
		t.Fatalf("the target's accepted decisions asked for sizes %v, want up to 5, then down to 2:\n%s", sizes, table)
	}
	t.Logf("shoal events: the target asked for sizes %v", sizes)
}
