package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
)

// outlierGroup is web at 3 instances whose outliers judge the failure rate
// over 5 s; 34 % of 3 lets one instance out at once.
func outlierGroup(command string) groupSpec {
	return groupSpec{Name: "web", Min: 3, Max: 3, Command: command, Extra: `    outliers:
      consecutive_5xx: 0
      failure_rate: {above: 0.2, over: 5s, min_requests: 20}
      max_ejected: 34%
      eject_for: 3s
`}
}

const (
	outlierOver = 5 * time.Second
	// outlierPoll is the ejector's poll (group.outlierPoll), and what one
	// read of the events through the API may add.
	outlierPoll = time.Second
	eventRead   = 200 * time.Millisecond
)

// pacedLoad sends GET url from workers clients, each one request at a
// time every 5 ms, until stopped (at most 2 minutes), counting the answers
// by status.
type pacedLoad struct {
	stop func()
	done chan struct{}
	mu   sync.Mutex
	by   map[int]int
}

func startPacedLoad(t *testing.T, url string, workers int) *pacedLoad {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	l := &pacedLoad{stop: cancel, done: make(chan struct{}), by: map[int]int{}}
	client := &http.Client{Timeout: 5 * time.Second}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { l.run(ctx, client, url) })
	}
	go func() {
		wg.Wait()
		close(l.done)
	}()
	t.Cleanup(l.end)
	return l
}

func (l *pacedLoad) run(ctx context.Context, client *http.Client, url string) {
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		code := -1
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			code = resp.StatusCode
		} else if ctx.Err() != nil {
			return // stopped mid-request: not an answer
		}
		l.mu.Lock()
		l.by[code]++
		l.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (l *pacedLoad) end() { l.stop(); <-l.done }

// setFailing makes an instance answer share of its requests 500 (the demo
// backend's POST /fail), straight to its address.
func setFailing(t *testing.T, addr string, share float64) {
	t.Helper()
	resp, err := http.Post(fmt.Sprintf("http://%s/fail?share=%g", addr, share), "", nil)
	if err != nil {
		t.Fatalf("POST /fail to %s: %v", addr, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /fail to %s: %s", addr, resp.Status)
	}
}

func eventOf(typ, subject string) func(api.Event) bool {
	rule, code, _ := strings.Cut(typ, ".")
	return func(ev api.Event) bool {
		return ev.Outcome == "event" && ev.Rule == rule && string(ev.Code) == code && (subject == "" || len(ev.Sources) > 0 && ev.Sources[0] == subject)
	}
}

// TestOutlierEjection: one of three instances starts answering half its
// requests 500. It is ejected within over and one poll (HAProxy has it in
// DRAIN, status marks it, it gets no new request), returned after eject_for,
// ejected again for twice as long, and at its third ejection within 10
// minutes replaced. The other instances are never touched.
func TestOutlierEjection(t *testing.T) {
	parallel(t)
	e := newEnv(t, "", outlierGroup(""))
	e.start()
	e.waitInService("web", 3)
	load := startPacedLoad(t, "http://"+e.listen+"/", 1)
	in, ok := e.instance("web-001")
	if !ok {
		t.Fatal("no web-001")
	}
	time.Sleep(time.Second) // some healthy history first
	after := e.events(api.EventsQuery{Group: "web", Limit: 1})
	var since int64
	if len(after) > 0 {
		since = after[0].ID
	}

	setFailing(t, in.Addr, 0.5)
	failing := time.Now()
	ev := e.waitEvent("web-001 ejected", outlierOver+outlierPoll+eventRead, since, eventOf("instance.ejected", "web-001"))
	took := time.Since(failing)
	t.Logf("ejected %s after failing began: %s", took.Round(time.Millisecond), ev.Reason)
	if !strings.Contains(ev.Reason, "web-001 ejected for 3s (ejection 1 within 10m0s)") || !strings.Contains(ev.Reason, "answers 5xx over 5s") {
		t.Fatalf("ejection event: %q", ev.Reason)
	}
	if st := e.serverStatus("web-001"); st != "DRAIN" {
		t.Fatalf("HAProxy has web-001 %s, want DRAIN", st)
	}
	in, _ = e.instance("web-001")
	if in.EjectedUntil == nil || in.State != "in-service" {
		t.Fatalf("status of web-001: state %s, ejected_until %v", in.State, in.EjectedUntil)
	}
	out, _, _ := e.cli("status")
	if !strings.Contains(out, "in-service,ejected") {
		t.Fatalf("shoal status does not mark web-001 ejected:\n%s", out)
	}
	// Out of rotation: its request count stands still while the others'
	// grow.
	before := e.serverStat("web", "web-001").Requests
	time.Sleep(time.Second)
	if got := e.serverStat("web", "web-001").Requests; got != before {
		t.Fatalf("web-001 got %d requests while ejected", got-before)
	}

	ev = e.waitEvent("web-001 returned", 3*time.Second+outlierPoll+eventRead+time.Second, ev.ID, eventOf("instance.returned", "web-001"))
	t.Logf("returned: %s", ev.Reason)
	if st := e.serverStatus("web-001"); st != "UP" {
		t.Fatalf("HAProxy has web-001 %s after its return, want UP", st)
	}
	// Still failing: ejected again, for twice as long.
	ev = e.waitEvent("web-001 ejected again", outlierOver+outlierPoll+eventRead, ev.ID, eventOf("instance.ejected", "web-001"))
	if !strings.Contains(ev.Reason, "web-001 ejected for 6s (ejection 2 within 10m0s)") {
		t.Fatalf("second ejection: %q", ev.Reason)
	}
	ev = e.waitEvent("web-001 returned again", 6*time.Second+outlierPoll+eventRead+time.Second, ev.ID, eventOf("instance.returned", "web-001"))
	// The third time within 10 minutes it is replaced.
	ev = e.waitEvent("web-001 replaced", outlierOver+outlierPoll+eventRead, ev.ID, eventOf("instance.replaced", "web-001"))
	if !strings.Contains(ev.Reason, "web-001 replaced: an outlier 3 times within 10m0s") {
		t.Fatalf("replacement: %q", ev.Reason)
	}
	e.eventually("the outlier gone and 3 in service", 45*time.Second, func() error {
		s, err := e.client().Group(context.Background(), "web")
		if err != nil {
			return err
		}
		for _, i := range s.Instances {
			if i.Addr == in.Addr {
				return fmt.Errorf("the outlier (%s) is %s", i.Addr, i.State)
			}
		}
		if s.InService != 3 || len(s.Instances) != 3 {
			return fmt.Errorf("%d instances, %d in service", len(s.Instances), s.InService)
		}
		return nil
	})
	for _, ev := range e.events(api.EventsQuery{Group: "web", After: since}) {
		if (eventOf("instance.ejected", "")(ev) || eventOf("group.failing", "")(ev)) && (len(ev.Sources) == 0 || ev.Sources[0] != "web-001") {
			t.Errorf("unexpected event: %s.%s %v: %s", ev.Rule, ev.Code, ev.Sources, ev.Reason)
		}
	}
	load.end()
	load.mu.Lock()
	t.Logf("answers by status: %v", load.by)
	if load.by[-1] > 0 {
		t.Errorf("%d requests got no answer", load.by[-1])
	}
	load.mu.Unlock()
	e.checkInSync("web")
}

// TestOutlierGroupFailing: every instance answers half its requests 500.
// That is the group failing, not an outlier: max_ejected holds (one of
// three out at any time, in shoal's status and in HAProxy), and an event
// says the group as a whole is failing.
func TestOutlierGroupFailing(t *testing.T) {
	parallel(t)
	cmd := fmt.Sprintf(`[%q, "--listen", "127.0.0.1:{{.Port}}", "--name", "{{.Name}}", "--fail-share", "0.5"]`, binDir+"/demo-backend")
	e := newEnv(t, "", outlierGroup(cmd))
	e.start()
	e.waitInService("web", 3)
	startPacedLoad(t, "http://"+e.listen+"/", 1)
	ev := e.waitEvent("the group failing", outlierOver+outlierPoll+eventRead+5*time.Second, 0, eventOf("group.failing", ""))
	t.Logf("%s", ev.Reason)
	if !strings.Contains(ev.Reason, "the group as a whole is failing, not an outlier") || !strings.Contains(ev.Reason, "max_ejected 34% lets 1 out at once") {
		t.Fatalf("group failing event: %q", ev.Reason)
	}
	// For 10 s (ejections come and go, 3 s each): never more than one out.
	seenOut := 0
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		s, err := e.client().Group(context.Background(), "web")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, i := range s.Instances {
			if i.EjectedUntil != nil {
				n++
			}
		}
		// One show stat for all three: read one by one (2 in DRAIN once),
		// an ejection's end and the next's start could fall between reads.
		drains := 0
		for _, st := range e.serverStatuses() {
			if st == "DRAIN" {
				drains++
			}
		}
		if n > 1 || drains > 1 {
			t.Fatalf("%d ejected in status, %d in DRAIN in HAProxy: max_ejected 34%% of 3 is 1", n, drains)
		}
		seenOut = max(seenOut, n)
	}
	if seenOut != 1 {
		t.Fatalf("no instance was ever ejected (max_ejected lets one out)")
	}
	evs := e.events(api.EventsQuery{Group: "web"})
	failingEvents := 0
	for _, ev := range evs {
		if eventOf("group.failing", "")(ev) {
			failingEvents++
		}
	}
	t.Logf("%d group.failing events", failingEvents)
}

// TestOutlierLatency: one of three instances starts answering 500 ms late
// (its checks still fast). From the sampled access log its p99 is above
// p99_above and 3x the others': it is ejected within over and one poll,
// with the numbers in the event, and returned after eject_for.
func TestOutlierLatency(t *testing.T) {
	parallel(t)
	g := groupSpec{Name: "web", Min: 3, Max: 3, Extra: `    outliers:
      consecutive_5xx: 0
      latency: {p99_above: 200ms, over: 6s, vs_group: 3x}
      max_ejected: 34%
      eject_for: 3s
`}
	e := newEnv(t, "access_log: {sample: 1}\n", g)
	e.start()
	e.waitInService("web", 3)
	startPacedLoad(t, "http://"+e.listen+"/", 4)
	in, ok := e.instance("web-002")
	if !ok {
		t.Fatal("no web-002")
	}
	time.Sleep(time.Second)
	var since int64
	if evs := e.events(api.EventsQuery{Group: "web", Limit: 1}); len(evs) > 0 {
		since = evs[0].ID
	}
	resp, err := http.Post("http://"+in.Addr+"/slow?ms=500", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	slow := time.Now()
	ev := e.waitEvent("web-002 ejected", 6*time.Second+outlierPoll+eventRead, since, eventOf("instance.ejected", "web-002"))
	t.Logf("ejected %s after it turned slow: %s", time.Since(slow).Round(time.Millisecond), ev.Reason)
	if !strings.Contains(ev.Reason, "p99 5") || !strings.Contains(ev.Reason, "above 200ms") || !strings.Contains(ev.Reason, "the rest of the group's median p99") {
		t.Fatalf("ejection event: %q", ev.Reason)
	}
	if st := e.serverStatus("web-002"); st != "DRAIN" {
		t.Fatalf("HAProxy has web-002 %s, want DRAIN", st)
	}
	resp, err = http.Post("http://"+in.Addr+"/slow?ms=0", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	e.waitEvent("web-002 returned", 3*time.Second+outlierPoll+eventRead+time.Second, ev.ID, eventOf("instance.returned", "web-002"))
	if st := e.serverStatus("web-002"); st != "UP" {
		t.Fatalf("HAProxy has web-002 %s after its return, want UP", st)
	}
}

// TestOutlierEjectionSurvivesRestart: an instance answering half its
// requests 500 is ejected for 15 s; shoal is killed (kill -9) at once and
// started again. The instance stays out of rotation (HAProxy keeps it in
// DRAIN, status shows the same end) until its ejection ends, not sooner;
// then, still failing, its second ejection doubles to 30 s and counts as
// the second within 10 minutes, and the third replaces it: the count and
// the doubling are in the store, not only in the running core.
func TestOutlierEjectionSurvivesRestart(t *testing.T) {
	parallel(t)
	const ejectFor = 15 * time.Second
	e := newEnv(t, "", groupSpec{Name: "web", Min: 3, Max: 3, Extra: `    outliers:
      consecutive_5xx: 0
      failure_rate: {above: 0.2, over: 5s, min_requests: 20}
      max_ejected: 34%
      eject_for: 15s
`})
	e.start()
	e.waitInService("web", 3)
	load := startPacedLoad(t, "http://"+e.listen+"/", 1)
	in, ok := e.instance("web-001")
	if !ok {
		t.Fatal("no web-001")
	}
	time.Sleep(time.Second)
	var since int64
	if evs := e.events(api.EventsQuery{Group: "web", Limit: 1}); len(evs) > 0 {
		since = evs[0].ID
	}
	setFailing(t, in.Addr, 0.5)
	ev := e.waitEvent("web-001 ejected", outlierOver+outlierPoll+eventRead+time.Second, since, eventOf("instance.ejected", "web-001"))
	if !strings.Contains(ev.Reason, "web-001 ejected for 15s (ejection 1 within 10m0s)") {
		t.Fatalf("ejection event: %q", ev.Reason)
	}
	in, _ = e.instance("web-001")
	if in.EjectedUntil == nil {
		t.Fatal("status does not show web-001 ejected")
	}
	until := *in.EjectedUntil

	e.kill9()
	e.start()
	restarted := time.Now()
	t.Logf("restarted %s before the ejection's end", until.Sub(restarted).Round(time.Millisecond))
	if !restarted.Before(until.Add(-2 * time.Second)) {
		t.Fatalf("the restart took until %s past the ejection's end at %s: too slow to tell", restarted.Format(time.StampMilli), until.Format(time.StampMilli))
	}
	in, _ = e.instance("web-001")
	// The record keeps milliseconds.
	if in.EjectedUntil == nil || !in.EjectedUntil.Equal(until.Truncate(time.Millisecond)) || in.State != "in-service" {
		t.Fatalf("after the restart web-001 is %s, ejected until %v; want in-service, ejected until %s", in.State, in.EjectedUntil, until)
	}
	// Out of rotation until its end: HAProxy has it in DRAIN and its count
	// of requests stands still, polled until 1 s before the end.
	before := e.serverStat("web", "web-001").Requests
	for time.Until(until) > time.Second {
		if st := e.serverStatus("web-001"); st != "DRAIN" {
			t.Fatalf("HAProxy has web-001 %s %s before its ejection ends, want DRAIN", st, time.Until(until).Round(time.Millisecond))
		}
		time.Sleep(300 * time.Millisecond)
	}
	if got := e.serverStat("web", "web-001").Requests; got != before {
		t.Fatalf("web-001 got %d requests while ejected across the restart", got-before)
	}
	ev = e.waitEvent("web-001 returned", time.Until(until)+outlierPoll+eventRead+time.Second, ev.ID, eventOf("instance.returned", "web-001"))
	if ev.Time.Before(until) {
		t.Fatalf("web-001 returned at %s, before its ejection's end %s", ev.Time.Format(time.StampMilli), until.Format(time.StampMilli))
	}
	// Still failing: the second ejection doubles and is counted as such.
	ev = e.waitEvent("web-001 ejected again", outlierOver+outlierPoll+eventRead+time.Second, ev.ID, eventOf("instance.ejected", "web-001"))
	if !strings.Contains(ev.Reason, "web-001 ejected for 30s (ejection 2 within 10m0s)") {
		t.Fatalf("second ejection after the restart: %q", ev.Reason)
	}
	ev = e.waitEvent("web-001 returned again", 2*ejectFor+outlierPoll+eventRead+time.Second, ev.ID, eventOf("instance.returned", "web-001"))
	ev = e.waitEvent("web-001 replaced", outlierOver+outlierPoll+eventRead+time.Second, ev.ID, eventOf("instance.replaced", "web-001"))
	if !strings.Contains(ev.Reason, "web-001 replaced: an outlier 3 times within 10m0s") {
		t.Fatalf("replacement: %q", ev.Reason)
	}
	e.eventually("the outlier gone and 3 in service", 45*time.Second, func() error {
		s, err := e.client().Group(context.Background(), "web")
		if err != nil {
			return err
		}
		for _, i := range s.Instances {
			if i.Addr == in.Addr {
				return fmt.Errorf("the outlier (%s) is %s", i.Addr, i.State)
			}
		}
		if s.InService != 3 || len(s.Instances) != 3 {
			return fmt.Errorf("%d instances, %d in service", len(s.Instances), s.InService)
		}
		return nil
	})
	load.end()
	load.mu.Lock()
	t.Logf("answers by status: %v", load.by)
	if load.by[-1] > 0 {
		t.Errorf("%d requests got no answer", load.by[-1])
	}
	load.mu.Unlock()
	e.checkInSync("web")
}
