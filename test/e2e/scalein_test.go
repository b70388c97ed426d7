package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/haproxy"
)

// instanceNames lists the group's instances, sorted.
func instanceNames(e *shoalEnv) []string {
	var names []string
	for _, in := range e.status().Groups[0].Instances {
		names = append(names, in.Name)
	}
	slices.Sort(names)
	return names
}

// scaleInEvent returns the scale_in event of the group's newest job.
func scaleInEvent(t *testing.T, e *shoalEnv) api.Event {
	t.Helper()
	list, err := e.client().Jobs(context.Background(), "web", 1)
	if err != nil {
		t.Fatal(err)
	}
	out, stderr, code := e.cli("events", "web", "-o", "json")
	if code != 0 {
		t.Fatalf("shoal events exited %d: %s", code, stderr)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev api.Event
		if err := json.Unmarshal([]byte(line), &ev); err == nil && ev.Outcome == decision.ScaleIn && ev.JobID == list[0].ID {
			return ev
		}
	}
	t.Fatalf("no scale_in event for job %s in shoal events:\n%s", list[0].ID, out)
	return api.Event{}
}

// TestScaleInRetiresNewest (issue 22 item 7): scale-in retires the instance
// that started last, not the highest index. web-001, killed and replaced
// (its index reused), is the newest; the event log says it went and why.
func TestScaleInRetiresNewest(t *testing.T) {
	parallel(t) // waits for scale jobs, no load
	g := web
	g.Min, g.Max, g.Plans = 1, 3, ""
	e := newEnv(t, "", g)
	e.start()
	e.waitInService("web", 1)
	scaleSync(t, e, "--size", "3")

	first := e.status().Groups[0].Instances[0]
	if first.Name != "web-001" {
		t.Fatalf("first instance %s, want web-001", first.Name)
	}
	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.eventually("web-001 is replaced", 30*time.Second, func() error {
		s := e.status().Groups[0]
		for _, in := range s.Instances {
			if in.Name == "web-001" && in.PID != first.PID && s.InService == 3 {
				return nil
			}
		}
		return fmt.Errorf("%d in service: %+v", s.InService, s.Instances)
	})

	scaleSync(t, e, "--size", "2")
	if got := instanceNames(e); fmt.Sprint(got) != "[web-002 web-003]" {
		t.Fatalf("after scale-in: %v; want web-001 (the newest, a replacement) retired", got)
	}
	ev := scaleInEvent(t, e)
	if ev.Code != "newest" || !strings.Contains(ev.Reason, "web-001: scale_in newest: in service, started last") {
		t.Fatalf("scale_in event %+v; want code newest and web-001 named with why", ev)
	}
	out, _, _ := e.cli("events", "web")
	t.Logf("shoal events web:\n%s", out)
	e.checkInSync("web")
}

// TestScaleInLeastBusy: with scale_in least_busy, the instance with the
// fewest sessions in HAProxy goes, neither the newest nor the oldest.
func TestScaleInLeastBusy(t *testing.T) {
	parallel(t) // waits out windows on the clock: see the package doc
	g := slowGroup(t, groupSpec{Name: "web", Min: 1, Max: 3, Extra: "    scale_in: least_busy\n"})
	e := newEnv(t, "", g)
	e.start()
	e.waitInService("web", 1)
	scaleSync(t, e, "--size", "3")

	// web-001 (the oldest) and web-003 (the newest) hold requests; web-002
	// answers at once.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for range 6 {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+e.listen+"/sleep?ms=60000&on=web-001,web-003", nil)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	hc := haproxy.Client{Socket: filepath.Join(e.stateDir(), "haproxy", "admin.sock")}
	// The held requests end with the test: a client that goes away does not
	// end its request in HAProxy, and shoal's stop would wait for them
	// (HAProxy's hard-stop-after, 30 s).
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, s := range []string{"web-001", "web-003"} {
			if _, err := hc.Exec(ctx, "shutdown sessions server web/"+s); err != nil {
				t.Logf("shutdown sessions server web/%s: %v", s, err)
			}
		}
	})
	e.eventually("web-001 and web-003 hold requests, web-002 none", 10*time.Second, func() error {
		stats, err := hc.Stats(ctx, "web")
		if err != nil {
			return err
		}
		n := map[string]int{}
		for _, st := range stats {
			n[st.Name] = st.Sessions
		}
		if n["web-001"] < 1 || n["web-003"] < 1 || n["web-002"] != 0 {
			return fmt.Errorf("sessions %v", n)
		}
		return nil
	})
	scaleSync(t, e, "--size", "2")
	if got := instanceNames(e); fmt.Sprint(got) != "[web-001 web-003]" {
		t.Fatalf("after scale-in: %v; want web-002, the idle one, retired", got)
	}
	ev := scaleInEvent(t, e)
	if ev.Code != "least_busy" || !strings.Contains(ev.Reason, "web-002: scale_in least_busy: in service, 0 sessions (web-") {
		t.Fatalf("scale_in event %+v; want code least_busy naming web-002 and the others' sessions", ev)
	}
	e.checkInSync("web")
}
