package group

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/store"
)

// The reconciler's unit tests: Run, gate, serve and retire on a fake
// clock, provider, HAProxy and store. Each test is named after the
// transitions of lifecycle's diagram it takes an instance through. The
// e2e tests prove the same with real processes and HAProxy.

// reconciler is a group running on fakes.
type reconciler struct {
	t    *testing.T
	g    *Group
	clk  *fakeClock
	prov *fakeProvider
	lb   *fakeBalancer
	st   *fakeStore
	ev   *events
}

func reconcilerConfig() config.Group {
	return config.Group{Name: "web", MinSize: 0, MaxSize: 5,
		DrainTimeout: 30 * time.Second, ReplaceAfter: 10 * time.Second,
		Health:   config.Health{Interval: time.Second, Timeout: time.Second, Rise: 2, Fall: 3, Grace: 10 * time.Second},
		Template: config.Template{StopTimeout: 5 * time.Second}}
}

// newReconciler runs a group of desired instances on fakes; setup, if not
// nil, prepares them (or restores instances) before Run starts.
func newReconciler(t *testing.T, desired int, setup func(*reconciler)) *reconciler {
	t.Helper()
	return newReconcilerOf(t, reconcilerConfig(), desired, setup)
}

// newReconcilerOf is newReconciler with the group's config cfg.
func newReconcilerOf(t *testing.T, cfg config.Group, desired int, setup func(*reconciler)) *reconciler {
	t.Helper()
	clk := newFakeClock()
	ev := &events{}
	r := &reconciler{t: t, clk: clk, ev: ev,
		prov: &fakeProvider{clk: clk, ev: ev, insts: map[string]*fakeInstance{}},
		lb:   &fakeBalancer{ev: ev, servers: map[string]haproxy.ServerStat{}, drains: map[string]time.Duration{}},
		st: &fakeStore{state: map[string]store.GroupState{"web": {Name: "web", Desired: desired}},
			insts: map[string]store.Instance{}},
	}
	g, err := open(context.Background(), cfg, Providers{config.ProviderLocal: r.prov}, r.lb, r.st, slog.New(slog.NewTextHandler(io.Discard, nil)), clk)
	if err != nil {
		t.Fatal(err)
	}
	r.g = g
	if setup != nil {
		setup(r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		r.lb.drain()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Run did not return within 5 s of its context's end")
		}
	})
	return r
}

func (r *reconciler) state(name string) (State, bool) {
	r.g.mu.Lock()
	defer r.g.mu.Unlock()
	in, ok := r.g.insts[name]
	if !ok {
		return "", false
	}
	return in.state, true
}

func (r *reconciler) awaitState(name string, want State) {
	r.t.Helper()
	waitFor(r.t, name+" "+string(want), func() bool {
		s, ok := r.state(name)
		return ok && s == want
	})
}

// watchGone returns a wait for the instance now named name to be forgotten;
// call it before what ends the instance: a replacement may take the name.
func (r *reconciler) watchGone(name string) (await func()) {
	r.t.Helper()
	r.g.mu.Lock()
	in := r.g.insts[name]
	r.g.mu.Unlock()
	if in == nil {
		r.t.Fatalf("no instance %s", name)
	}
	return func() {
		r.t.Helper()
		waitFor(r.t, name+" forgotten", func() bool {
			r.g.mu.Lock()
			defer r.g.mu.Unlock()
			return r.g.insts[name] != in
		})
	}
}

// awaitStarts waits for the n-th start and returns when each happened.
func (r *reconciler) awaitStarts(n int) []time.Time {
	r.t.Helper()
	waitFor(r.t, "start number "+strconv.Itoa(n), func() bool { return len(r.prov.startTimes()) >= n })
	return r.prov.startTimes()
}

// awaitFailure waits for the n-th failure and returns it.
func (r *reconciler) awaitFailure(n int) Failure {
	r.t.Helper()
	var f Failure
	waitFor(r.t, "failure number "+strconv.Itoa(n), func() bool {
		r.g.mu.Lock()
		defer r.g.mu.Unlock()
		if len(r.g.failures) < n {
			return false
		}
		f = r.g.failures[n-1]
		return true
	})
	return f
}

// awaitGate waits until the instances named are behind their health gates,
// which they all entered now.
func (r *reconciler) awaitGate(names ...string) {
	r.t.Helper()
	for _, name := range names {
		r.awaitState(name, Starting)
	}
	r.clk.awaitWaiters(r.t, r.clk.Now().Add(healthPoll), len(names), strings.Join(names, ", ")+" polling their health")
}

// bringUp passes the health checks of the instances named, which entered
// their gates now, and waits until they are in service.
func (r *reconciler) bringUp(names ...string) {
	r.t.Helper()
	r.awaitGate(names...)
	for _, name := range names {
		r.lb.set(name, "UP", "L7OK")
	}
	r.clk.Advance(healthPoll)
	for _, name := range names {
		r.awaitState(name, InService)
	}
	r.clk.awaitWaiters(r.t, r.clk.Now().Add(healthWatch), len(names), strings.Join(names, ", ")+" watching their health")
}

// poll moves the clock by d, past a health poll, and waits until that poll
// has read HAProxy's stats: what the test sets next is the next poll's news.
//
// On a loaded machine a poller can still hold its last tick when the clock
// moves (the next is then dropped, as time.Ticker drops it), or find the
// answer another poller cached at the time just reached: after a second
// without a poll, the clock moves on by one tick of the slower poll.
func (r *reconciler) poll(d time.Duration) {
	r.t.Helper()
	n := r.lb.pollCount()
	r.clk.Advance(d)
	again := time.Now().Add(time.Second)
	waitFor(r.t, "a health poll", func() bool {
		if r.lb.pollCount() > n {
			return true
		}
		if time.Now().After(again) {
			r.clk.Advance(min(d, healthWatch))
			again = time.Now().Add(time.Second)
		}
		return false
	})
}

// wantEvents checks the calls about the instance named name, in order. A
// replacement that took the name after it was forgotten starts afresh.
func wantEvents(t *testing.T, ev *events, name string, want ...string) {
	t.Helper()
	got := ev.of(name)
	if len(got) > len(want) && got[len(want)] == "start" {
		got = got[:len(want)]
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: calls %q, want %q", name, got, want)
	}
}

func TestReconcilerStartingToInService(t *testing.T) {
	r := newReconciler(t, 2, nil)
	t0 := r.clk.Now()
	r.awaitStarts(2)
	r.awaitGate("web-001", "web-002")
	if rec, ok := r.st.record("web-001"); !ok || rec.State != string(Starting) || rec.Addr != "127.0.0.1:20001" {
		t.Fatalf("web-001 recorded as %+v, %v; want starting on port 20001", rec, ok)
	}

	// HAProxy has it DOWN until its checks pass: it stays starting.
	r.poll(healthPoll)
	if s, _ := r.state("web-001"); s != Starting {
		t.Fatalf("web-001 is %s while HAProxy has it DOWN", s)
	}
	r.lb.set("web-001", "UP", "L7OK")
	r.poll(healthPoll)
	r.awaitState("web-001", InService)
	if s, _ := r.state("web-002"); s != Starting {
		t.Fatalf("web-002 is %s although its checks never passed", s)
	}
	wantEvents(t, r.ev, "web-001", "start", "add", "ready")
	r.g.mu.Lock()
	since := r.g.insts["web-001"].servingSince
	r.g.mu.Unlock()
	if want := t0.Add(2 * healthPoll); !since.Equal(want) {
		t.Fatalf("web-001 in service since %v, want the poll that saw it UP, %v", since, want)
	}
	// The record follows the state: written after it changed.
	waitFor(t, "web-001 recorded in service", func() bool {
		rec, _ := r.st.record("web-001")
		return rec.State == string(InService)
	})
}

func TestReconcilerStartingToFailedNotUpWithinGrace(t *testing.T) {
	r := newReconciler(t, 1, nil)
	t0 := r.clk.Now()
	r.awaitGate("web-001")
	gone := r.watchGone("web-001")
	r.lb.set("web-001", "DOWN", "L4CON")
	r.poll(healthPoll)
	grace := reconcilerConfig().Health.Grace
	r.clk.awaitWaiters(t, t0.Add(grace), 1, "the grace timer")
	r.poll(grace - healthPoll)

	f := r.awaitFailure(1)
	if !f.At.Equal(t0.Add(grace)) || f.Reason != "health check did not pass within 10s (last check: L4CON)" || !f.crash {
		t.Fatalf("failure %+v; want at %v, grace's reason with the last check, counted as a crash", f, t0.Add(grace))
	}
	gone()
	wantEvents(t, r.ev, "web-001", "start", "add", "remove", "stop")
	if _, ok := r.st.record("web-001"); ok {
		t.Fatal("web-001 still recorded after it failed")
	}
	// It never served: its replacement backs off.
	r.clk.awaitAfterFunc(t, f.At.Add(time.Second), "the back-off")
	r.clk.Advance(time.Second)
	if starts := r.awaitStarts(2); !starts[1].Equal(f.At.Add(time.Second)) {
		t.Fatalf("replacement started at %v, want 1 s after the failure", starts[1])
	}
}

func TestReconcilerStartingToFailedStartFailed(t *testing.T) {
	r := newReconciler(t, 1, func(r *reconciler) { r.prov.fail = errors.New("pre_start hook: exit status 3") })
	f := r.awaitFailure(1)
	if f.Reason != "start failed: pre_start hook: exit status 3" {
		t.Fatalf("failure reason %q", f.Reason)
	}
	waitFor(t, "web-001 forgotten", func() bool { _, ok := r.state("web-001"); return !ok })
	// Nothing started: nothing to add, remove or stop.
	wantEvents(t, r.ev, "web-001", "start")
	r.clk.awaitAfterFunc(t, f.At.Add(time.Second), "the back-off")
}

func TestReconcilerStartingToFailedExited(t *testing.T) {
	r := newReconciler(t, 1, nil)
	r.awaitGate("web-001")
	gone := r.watchGone("web-001")
	r.prov.instance("web-001").exit("exit status 2")
	f := r.awaitFailure(1)
	if f.Reason != "exited before passing its health check: exit status 2" {
		t.Fatalf("failure reason %q", f.Reason)
	}
	gone()
	// Stopped anyway: what it forked dies with it.
	wantEvents(t, r.ev, "web-001", "start", "add", "remove", "stop")
}

// TestReconcilerStartingToFailedDeployCheckFailing: an instance of the
// version a deploy rolls out that answers its check with errors fall times
// in a row fails then, not after grace: that version is broken.
func TestReconcilerStartingToFailedDeployCheckFailing(t *testing.T) {
	r := newReconciler(t, 1, func(r *reconciler) {
		r.g.mu.Lock()
		r.g.dep.begin("v2", config.Template{StopTimeout: 5 * time.Second})
		r.g.mu.Unlock()
	})
	t0 := r.clk.Now()
	r.awaitGate("web-001")
	gone := r.watchGone("web-001")
	r.lb.setStat(haproxy.ServerStat{Name: "web-001", Status: "DOWN", CheckStatus: "L7STS", CheckCode: 500})
	failed := func() bool {
		r.g.mu.Lock()
		defer r.g.mu.Unlock()
		return len(r.g.failures) > 0
	}
	// The streak is measured from the first poll that saw an error: fall −
	// 1 checks of interval + timeout, plus a stats refresh and a poll.
	h := reconcilerConfig().Health
	streak := time.Duration(h.Fall-1)*(h.Interval+h.Timeout) + statsMaxAge + healthPoll
	for !failed() && r.clk.Now().Before(t0.Add(h.Grace)) {
		n := r.lb.pollCount()
		r.clk.Advance(healthPoll)
		waitFor(t, "a health poll or the failure", func() bool { return r.lb.pollCount() > n || failed() })
	}
	f := r.awaitFailure(1)
	if f.Reason != "failed health check 3 times: HTTP 500" || f.version != "v2" {
		t.Fatalf("failure %+v; want version v2's check failing with HTTP 500", f)
	}
	// The poll that observes or decides may read the clock one advance
	// late: each can add a poll; and on a loaded machine the deploy's own
	// reads of the stats let the loop above advance while the poll that
	// decides waits for a core: two more.
	if d, want := f.At.Sub(t0), healthPoll+streak; d < want || d > want+4*healthPoll {
		t.Fatalf("failed %v after the start, want %v (the streak from the first poll), up to four polls later; grace is %v", d, want, h.Grace)
	}
	gone()
	wantEvents(t, r.ev, "web-001", "start", "add", "remove", "stop")
}

// TestReconcilerInServiceToFailedExited: an instance that exits is
// replaced; at once if it had served steadily (an accident), after the
// back-off if not (the start of a crash loop).
func TestReconcilerInServiceToFailedExited(t *testing.T) {
	for _, tc := range []struct {
		name    string
		served  time.Duration
		backoff time.Duration
	}{
		{"served steadily: replaced at once", stableService, 0},
		{"served less than 30s: backs off", stableService - healthWatch, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReconciler(t, 1, nil)
			r.bringUp("web-001")
			r.poll(tc.served)
			gone := r.watchGone("web-001")
			r.prov.instance("web-001").exit("signal: killed")

			f := r.awaitFailure(1)
			if f.Reason != "exited: signal: killed" || f.crash != (tc.backoff > 0) {
				t.Fatalf("failure %+v; want the exit, counted as a crash: %v", f, tc.backoff > 0)
			}
			gone()
			wantEvents(t, r.ev, "web-001", "start", "add", "ready", "remove", "stop")
			if tc.backoff > 0 {
				r.clk.awaitAfterFunc(t, f.At.Add(tc.backoff), "the back-off")
				r.clk.Advance(tc.backoff)
			}
			if starts := r.awaitStarts(2); !starts[1].Equal(f.At.Add(tc.backoff)) {
				t.Fatalf("replacement started %v after the failure, want %v", starts[1].Sub(f.At), tc.backoff)
			}
		})
	}
}

// TestReconcilerFailedBacksOff: instances that fail before serving
// steadily are a crash loop; each replacement waits 1 s, doubling to 60 s.
func TestReconcilerFailedBacksOff(t *testing.T) {
	r := newReconciler(t, 1, func(r *reconciler) {
		r.prov.onStart = func(in *fakeInstance) { in.exit("exit status 1") }
	})
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60}
	for i, secs := range want {
		backoff := secs * time.Second
		f := r.awaitFailure(i + 1)
		r.clk.awaitAfterFunc(t, f.At.Add(backoff), "back-off number "+strconv.Itoa(i+1))
		r.g.mu.Lock()
		next := r.g.nextLaunch
		r.g.mu.Unlock()
		if got := next.Sub(f.At); got != backoff {
			t.Fatalf("after failure %d the next start waits %v, want %v", i+1, got, backoff)
		}
		r.clk.Advance(backoff)
		if starts := r.awaitStarts(i + 2); !starts[i+1].Equal(f.At.Add(backoff)) {
			t.Fatalf("start %d at +%v after failure %d, want +%v", i+2, starts[i+1].Sub(f.At), i+1, backoff)
		}
	}
}

// TestReconcilerInServiceToDrainingToStopping: scale-in runs pre_stop,
// drains for drain_timeout, then removes the server and stops the process.
func TestReconcilerInServiceToDrainingToStopping(t *testing.T) {
	r := newReconciler(t, 2, func(r *reconciler) { r.lb.drained = make(chan struct{}) })
	r.awaitStarts(2)
	r.bringUp("web-001", "web-002")
	gone := r.watchGone("web-002")
	if err := r.g.SetDesired(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	// The newest goes; it stays draining until HAProxy's drain ends.
	r.awaitState("web-002", Draining)
	waitFor(t, "web-002 drained", func() bool { _, ok := r.lb.drainTimeout("web-002"); return ok })
	if d, _ := r.lb.drainTimeout("web-002"); d != 30*time.Second {
		t.Fatalf("drained for %v, want drain_timeout 30s", d)
	}
	if s, _ := r.state("web-002"); s != Draining {
		t.Fatalf("web-002 is %s while its drain runs", s)
	}
	wantEvents(t, r.ev, "web-002", "start", "add", "ready", "pre_stop", "drain")
	r.lb.drain()
	gone()
	wantEvents(t, r.ev, "web-002", "start", "add", "ready", "pre_stop", "drain", "remove", "stop")
	if _, ok := r.st.record("web-002"); ok {
		t.Fatal("web-002 still recorded after it stopped")
	}
	if s, _ := r.state("web-001"); s != InService {
		t.Fatalf("web-001 is %s, want it left in service", s)
	}
	r.g.mu.Lock()
	failures := len(r.g.failures)
	r.g.mu.Unlock()
	if failures != 0 {
		t.Fatalf("%d failures after a scale-in", failures)
	}
}

// newOutage runs web-001 and web-002 in service on a fakeCloud whose API
// refuses deletions (setup, if not nil, prepares the rest).
func newOutage(t *testing.T, setup func(*reconciler)) (*reconciler, *fakeCloud) {
	t.Helper()
	var cloud *fakeCloud
	r := newReconciler(t, 2, func(r *reconciler) {
		cloud = &fakeCloud{fakeProvider: r.prov}
		cloud.setDown(errors.New("stop: exit status 75: 503 Service Unavailable"))
		r.g.provs[config.ProviderLocal] = cloud
		if setup != nil {
			setup(r)
		}
	})
	r.awaitStarts(2)
	r.bringUp("web-001", "web-002")
	return r, cloud
}

// TestReconcilerDrainingCloudRefusesDelete: a cloud's instance leaves
// HAProxy only once its cloud accepted the deletion. While the API refuses,
// it goes back into service with the reason, drained and asked again after
// a back-off; past delete_timeout the job fails with the API's answer, and
// the retirement goes on until the API is back.
func TestReconcilerDrainingCloudRefusesDelete(t *testing.T) {
	r, cloud := newOutage(t, nil)
	if got := r.g.DeleteTimeout(); got != 5*time.Second {
		t.Fatalf("DeleteTimeout %v, want the provider's 5s", got)
	}
	m := r.g.Mark()
	if err := r.g.SetDesired(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	waiting := func() string {
		for _, in := range r.g.Status(context.Background()).Instances {
			if in.Name == "web-002" {
				return in.Waiting
			}
		}
		return ""
	}
	waitFor(t, "web-002 back in service, waiting", func() bool { return waiting() != "" })
	if w := waiting(); w != "waiting for the cloud API: stop: exit status 75: 503 Service Unavailable" {
		t.Fatalf("web-002 waiting: %q", w)
	}
	if s, _ := r.state("web-002"); s != InService {
		t.Fatalf("web-002 is %s while its cloud refuses to delete it, want in-service", s)
	}
	wantEvents(t, r.ev, "web-002", "start", "add", "ready", "pre_stop", "drain", "delete refused", "undrain")

	// The job fails at delete_timeout with the API's answer; the instance
	// still serves.
	refused := r.clk.Now()
	errc := make(chan error, 1)
	go func() { _, err := r.g.WaitConverged(context.Background(), m); errc <- err }()
	var err error
	r.stepUntil("the job failing", func() bool {
		select {
		case err = <-errc:
			return true
		default:
			return false
		}
	})
	if !errors.Is(err, ErrNotConverged) || !strings.Contains(err.Error(), "web-002: not deleted within delete_timeout 5s: waiting for the cloud API: stop: exit status 75") {
		t.Fatalf("job's wait = %v; want it failed with the cloud's answer", err)
	}
	if f := r.awaitFailure(1); f.At.Sub(refused) < 5*time.Second || f.crash {
		t.Fatalf("job failed %v after the first refusal, want delete_timeout 5s; crash-loop counted %v", f.At.Sub(refused), f.crash)
	}
	// Status says what is true: the job failed, not the instance, which
	// serves and waits for its cloud with the API's last answer.
	st := r.g.Status(context.Background())
	if len(st.LastFailures) != 0 {
		t.Errorf("status lists recent failures %+v while web-002 still serves", st.LastFailures)
	}
	if w := waiting(); w != "waiting for the cloud API: stop: exit status 75: 503 Service Unavailable" {
		t.Errorf("web-002 waiting after delete_timeout: %q", w)
	}
	for _, e := range r.ev.of("web-002") {
		if e == "remove" || e == "stop" {
			t.Fatalf("web-002 %s while its cloud refused to delete it: %q", e, r.ev.of("web-002"))
		}
	}

	// A later job held up by it says why when it times out.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := r.g.WaitConverged(ctx, r.g.Mark()); err == nil || !strings.Contains(err.Error(), "(web-002: waiting for the cloud API: stop: exit status 75") {
		t.Fatalf("a later job's wait = %v; want it to name web-002 and the cloud's answer", err)
	}

	// The API is back: deleted, then out of HAProxy, then its Stop waits.
	gone := r.watchGone("web-002")
	cloud.setDown(nil)
	r.stepUntil("web-002 gone", func() bool {
		r.g.mu.Lock()
		defer r.g.mu.Unlock()
		return r.g.insts["web-002"] == nil
	})
	gone()
	got := r.ev.of("web-002")
	if n := len(got); n < 3 || !slices.Equal(got[n-3:], []string{"delete", "remove", "stop"}) {
		t.Fatalf("web-002: calls %q, want it to end with delete, remove, stop", got)
	}
	if s, _ := r.state("web-001"); s != InService {
		t.Fatalf("web-001 is %s, want it left in service", s)
	}
}

// TestReconcilerOutageStaysInRotation: while the cloud's API does not
// answer at all, a retiring instance it refused to delete stays in
// rotation: no retry drains it again (nor asks the API to delete it)
// until the API answers; then one drain, the deletion, and it goes.
func TestReconcilerOutageStaysInRotation(t *testing.T) {
	r, cloud := newOutage(t, nil)
	cloud.setUnreachable(errors.New("list servers: exit status 75: 503 Service Unavailable"))
	if err := r.g.SetDesired(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	count := func(what string) int {
		n := 0
		for _, e := range r.ev.of("web-002") {
			if e == what {
				n++
			}
		}
		return n
	}
	waitFor(t, "web-002's deletion refused", func() bool { return count("delete refused") == 1 })
	for range 60 { // 30 s: retries at 1, 3, 7, 15 and 31 s would each drain it
		r.clk.Advance(500 * time.Millisecond)
		time.Sleep(time.Millisecond)
	}
	if d, rf := count("drain"), count("delete refused"); d != 1 || rf != 1 {
		t.Fatalf("web-002: %d drains, %d refused deletes during the outage; want 1 and 1: %q", d, rf, r.ev.of("web-002"))
	}
	if s, _ := r.state("web-002"); s != InService {
		t.Fatalf("web-002 is %s during the outage, want in-service", s)
	}
	for _, in := range r.g.Status(context.Background()).Instances {
		if in.Name == "web-002" && in.Waiting != "waiting for the cloud API: list servers: exit status 75: 503 Service Unavailable" {
			t.Errorf("web-002 waiting %q, want the API's last answer", in.Waiting)
		}
	}

	cloud.setUnreachable(nil)
	cloud.setDown(nil)
	r.stepUntil("web-002 gone", func() bool {
		r.g.mu.Lock()
		defer r.g.mu.Unlock()
		return r.g.insts["web-002"] == nil
	})
	got := r.ev.of("web-002")
	if n := len(got); n < 4 || !slices.Equal(got[n-4:], []string{"drain", "delete", "remove", "stop"}) || count("drain") != 2 {
		t.Fatalf("web-002: calls %q, want one more drain once the API answers, then delete, remove, stop", got)
	}
}

// TestReconcilerScaleUpKeepsWaitingInstance: a group scaled back up while
// a retiring instance waits for its cloud's API takes that instance back
// (it still serves) instead of launching a new server and paying for
// both; once the API is back, nothing is deleted. A scale-up during a
// retry's drain takes it back too, ending the drain at once.
func TestReconcilerScaleUpKeepsWaitingInstance(t *testing.T) {
	r, cloud := newOutage(t, nil)
	if err := r.g.SetDesired(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "web-002 waiting for the cloud API", func() bool {
		r.g.mu.Lock()
		defer r.g.mu.Unlock()
		in := r.g.insts["web-002"]
		return in != nil && in.wait.keep != nil
	})

	m := r.g.Mark()
	if err := r.g.SetDesired(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := r.g.WaitConverged(ctx, m); err != nil {
		t.Fatalf("scale-up's job: %v", err)
	}
	// Its retry timers fire and the API comes back: it stays.
	cloud.setDown(nil)
	for range 80 {
		r.clk.Advance(500 * time.Millisecond)
		time.Sleep(time.Millisecond)
	}
	if n := len(r.prov.startTimes()); n != 2 {
		t.Fatalf("%d instances started, want the 2 of the start: the waiting one kept", n)
	}
	got := r.ev.of("web-002")
	if n := len(got); n == 0 || got[n-1] != "undrain" || slices.Contains(got, "delete") || slices.Contains(got, "remove") || slices.Contains(got, "stop") {
		t.Fatalf("web-002: calls %q, want it back in rotation (undrain last), never deleted", got)
	}
	st := r.g.Status(context.Background())
	if st.InService != 2 || len(st.LastFailures) != 0 {
		t.Fatalf("status: %d in service, failures %+v; want 2 and none", st.InService, st.LastFailures)
	}
	for _, in := range st.Instances {
		if in.State != InService || in.Waiting != "" {
			t.Errorf("%s: %s, waiting %q; want in service, not waiting", in.Name, in.State, in.Waiting)
		}
	}

}

// TestReconcilerScaleUpEndsRetryDrain: a scale-up while a waiting
// instance's retry drains it (sessions left) takes it back at once: the
// drain ends, it goes back into rotation, and nothing new is launched.
func TestReconcilerScaleUpEndsRetryDrain(t *testing.T) {
	r, _ := newOutage(t, func(r *reconciler) {
		// The first drain ends at once; the retry's holds.
		r.lb.drained, r.lb.freeDrains = make(chan struct{}), 1
	})
	if err := r.g.SetDesired(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	drains := func() int {
		n := 0
		for _, e := range r.ev.of("web-002") {
			if e == "drain" {
				n++
			}
		}
		return n
	}
	r.stepUntil("web-002 in a retry's drain", func() bool { return drains() == 2 })
	if s, _ := r.state("web-002"); s != Draining {
		t.Fatalf("web-002 is %s in its retry's drain", s)
	}
	if err := r.g.SetDesired(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	r.awaitState("web-002", InService)
	waitFor(t, "web-002 undrained", func() bool { ev := r.ev.of("web-002"); return ev[len(ev)-1] == "undrain" })
	if n := len(r.prov.startTimes()); n != 2 {
		t.Fatalf("%d instances started, want 2: web-002 taken back mid-drain", n)
	}
	if got := r.ev.of("web-002"); slices.Contains(got, "delete") || strings.Count(strings.Join(got, ","), "delete refused") != 1 {
		t.Fatalf("web-002: calls %q, want one refused delete and no other", got)
	}
}

// TestReconcilerScaleUpAwaitsDeleteCall: a scale-up while a waiting
// instance's Delete call is out awaits the cloud's answer rather than
// launch: refused again, the instance is taken back; accepted, it goes
// and a new one is launched.
func TestReconcilerScaleUpAwaitsDeleteCall(t *testing.T) {
	for _, refused := range []bool{true, false} {
		t.Run(fmt.Sprintf("refused=%v", refused), func(t *testing.T) {
			r, cloud := newOutage(t, nil)
			if err := r.g.SetDesired(context.Background(), 1); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "web-002 waiting for the cloud API", func() bool {
				r.g.mu.Lock()
				defer r.g.mu.Unlock()
				in := r.g.insts["web-002"]
				return in != nil && in.wait.keep != nil
			})
			hold := make(chan struct{})
			cloud.setHold(hold)
			r.stepUntil("web-002's retry's Delete call out", func() bool { return slices.Contains(r.ev.of("web-002"), "delete held") })
			m := r.g.Mark()
			if err := r.g.SetDesired(context.Background(), 2); err != nil {
				t.Fatal(err)
			}
			for range 10 { // reconciler passes while the call is out
				r.clk.Advance(500 * time.Millisecond)
				time.Sleep(time.Millisecond)
			}
			if n := len(r.prov.startTimes()); n != 2 {
				t.Fatalf("%d instances started while web-002's Delete call was out, want 2", n)
			}
			if !refused {
				cloud.setDown(nil)
			}
			cloud.setHold(nil)
			close(hold)
			if refused {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if _, err := r.g.WaitConverged(ctx, m); err != nil {
					t.Fatalf("scale-up's job: %v", err)
				}
				if n := len(r.prov.startTimes()); n != 2 {
					t.Fatalf("%d instances started, want 2: web-002 taken back", n)
				}
				return
			}
			r.awaitStarts(3)
			// Deleted, then out of HAProxy; its index goes to the new one.
			waitFor(t, "web-002 deleted and started anew", func() bool {
				ev := strings.Join(r.ev.of("web-002"), ",")
				return strings.Contains(ev, ",delete held,delete,remove,stop,start")
			})
		})
	}
}

// stepUntil advances the clock half a second at a time until cond holds.
func (r *reconciler) stepUntil(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out: %s", what)
		}
		r.clk.Advance(500 * time.Millisecond)
		time.Sleep(time.Millisecond)
	}
}

// TestReconcilerStartingToDraining: an instance retired before it entered
// service has nothing to hand over: no pre_stop.
func TestReconcilerStartingToDraining(t *testing.T) {
	r := newReconciler(t, 1, nil)
	r.awaitGate("web-001")
	gone := r.watchGone("web-001")
	if err := r.g.SetDesired(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	gone()
	wantEvents(t, r.ev, "web-001", "start", "add", "drain", "remove", "stop")
}

// TestReconcilerDrainingResumed: an instance adopted while draining gets
// what is left of drain_timeout.
func TestReconcilerDrainingResumed(t *testing.T) {
	r := newReconciler(t, 0, func(r *reconciler) {
		since := r.clk.Now().Add(-12 * time.Second)
		r.g.Restore(context.Background(), []store.Instance{{Record: provider.Record{Group: "web", Name: "web-001", Index: 1,
			ID: "1001", Addr: "127.0.0.1:20001", Host: "127.0.0.1"}, State: string(Draining), StateSince: since}})
	})
	waitFor(t, "web-001 forgotten", func() bool { _, ok := r.state("web-001"); return !ok })
	if d, _ := r.lb.drainTimeout("web-001"); d != 18*time.Second {
		t.Fatalf("resumed drain for %v, want what was left of 30s after 12s: 18s", d)
	}
	// Restore marks it draining in HAProxy (timeout 0), the drain resumes.
	wantEvents(t, r.ev, "web-001", "add", "drain", "drain", "remove", "stop")
}

func TestReconcilerInServiceToUnhealthyToInService(t *testing.T) {
	r := newReconciler(t, 1, nil)
	r.bringUp("web-001")
	r.lb.set("web-001", "DOWN", "L7STS")
	r.poll(healthWatch)
	r.awaitState("web-001", Unhealthy)
	r.lb.set("web-001", "UP", "L7OK")
	r.poll(healthWatch)
	r.awaitState("web-001", InService)
	// Down for less than replace_after in all: nothing replaced.
	r.lb.set("web-001", "DOWN", "L7STS")
	r.poll(healthWatch)
	r.awaitState("web-001", Unhealthy)
	r.poll(reconcilerConfig().ReplaceAfter - healthWatch)
	r.lb.set("web-001", "UP", "L7OK")
	r.poll(healthWatch)
	r.awaitState("web-001", InService)
	r.g.mu.Lock()
	failures := len(r.g.failures)
	r.g.mu.Unlock()
	if failures != 0 || len(r.prov.startTimes()) != 1 {
		t.Fatalf("%d failures, %d starts; want an instance that came back left alone", failures, len(r.prov.startTimes()))
	}
}

// TestReconcilerUnhealthyToFailedHung: the requests a hung instance holds
// are ended as soon as HAProxy has it DOWN; DOWN for replace_after, it is
// stopped, then removed (its streams end with it), and replaced.
func TestReconcilerUnhealthyToFailedHung(t *testing.T) {
	r := newReconciler(t, 1, nil)
	r.bringUp("web-001")
	r.poll(stableService)
	gone := r.watchGone("web-001")
	r.lb.setStat(haproxy.ServerStat{Name: "web-001", Status: "DOWN", CheckStatus: "L7TOUT", Sessions: 3, ServerAborts: 2})
	r.poll(healthWatch)
	r.awaitState("web-001", Unhealthy)
	// Status shows HAProxy's count of the responses it cut short.
	if in := r.g.Status(context.Background()).Instances[0]; in.ServerAborts != 2 {
		t.Fatalf("status shows %+v, want 2 server aborts", in)
	}
	waitFor(t, "web-001's requests ended", func() bool { return slices.Contains(r.ev.of("web-001"), "shutdown_sessions") })
	down := r.clk.Now()
	r.poll(reconcilerConfig().ReplaceAfter)

	f := r.awaitFailure(1)
	if want := "health check failing for 10s (replace_after 10s, last check: L7TOUT); replaced"; f.Reason != want || !f.At.Equal(down.Add(10*time.Second)) {
		t.Fatalf("failure %+v; want %q at %v", f, want, down.Add(10*time.Second))
	}
	gone()
	wantEvents(t, r.ev, "web-001", "start", "add", "ready", "shutdown_sessions", "stop", "remove")
	// It had served steadily: replaced at once.
	if starts := r.awaitStarts(2); !starts[1].Equal(f.At) {
		t.Fatalf("replacement started %v after the failure, want at once", starts[1].Sub(f.At))
	}
	if f.Instance != "web-001" {
		t.Fatalf("failure names %q, want web-001", f.Instance)
	}
}

// TestReconcilerStartDelayMeasured: the time from an instance's launch to
// in service is recorded, and the group's start delay is the median of
// those recorded, as `shoal policy simulate` takes it.
func TestReconcilerStartDelayMeasured(t *testing.T) {
	r := newReconciler(t, 1, nil)
	r.awaitGate("web-001")
	r.poll(healthPoll)
	r.poll(healthPoll)
	r.lb.set("web-001", "UP", "L7OK")
	r.poll(healthPoll)
	r.awaitState("web-001", InService)
	waitFor(t, "a start delay recorded", func() bool {
		r.st.mu.Lock()
		defer r.st.mu.Unlock()
		return len(r.st.startDelays) == 1
	})
	if got := r.st.startDelays[0]; got != 3*healthPoll {
		t.Fatalf("start delay %v, want the 3 polls to in service, %v", got, 3*healthPoll)
	}
	r.st.mu.Lock()
	r.st.startDelays = append(r.st.startDelays, 210*time.Second, 4*time.Second, 5*time.Second)
	r.st.mu.Unlock()
	sd, err := r.g.MeasuredStartDelay(context.Background())
	if err != nil || sd == nil || sd.Median != 4500*time.Millisecond || sd.Samples != 4 {
		t.Fatalf("MeasuredStartDelay = %+v, %v; want the median of 600ms, 4s, 5s, 3m30s: 4.5s of 4", sd, err)
	}
	if st := r.g.Status(context.Background()); st.StartDelay == nil || *st.StartDelay != *sd {
		t.Fatalf("status start delay %+v, want %+v", st.StartDelay, sd)
	}
}

// TestReconcilerFencedActsOnNothing: once the store's Guard refuses (an
// HA node deposed without noticing), a retiring cloud instance is drained
// but not deleted, left in HAProxy and its job fails "not the leader"; an
// instance that exits is not stopped nor replaced, however long the
// reconciler runs.
func TestReconcilerFencedActsOnNothing(t *testing.T) {
	r, cloud := newOutage(t, nil)
	cloud.setDown(nil)
	r.st.mu.Lock()
	r.st.guard = store.ErrFenced
	r.st.mu.Unlock()
	m := r.g.Mark()
	if err := r.g.SetDesired(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := r.g.WaitConverged(context.Background(), m); errc <- err }()
	var err error
	r.stepUntil("the job failing", func() bool {
		select {
		case err = <-errc:
			return true
		default:
			return false
		}
	})
	if !errors.Is(err, ErrNotConverged) || !strings.Contains(err.Error(), "web-002: deletion of web-002 not done: not the leader") {
		t.Fatalf("job's wait = %v; want it failed: not the leader", err)
	}
	wantEvents(t, r.ev, "web-002", "start", "add", "ready", "pre_stop", "drain")

	r.prov.instance("web-001").exit("killed")
	r.awaitFailure(2)
	for range 20 { // 10 s: past any back-off and several resyncs
		r.clk.Advance(500 * time.Millisecond)
		time.Sleep(time.Millisecond)
	}
	wantEvents(t, r.ev, "web-001", "start", "add", "ready")
	if n := len(r.prov.startTimes()); n != 2 {
		t.Fatalf("%d starts, want no replacement by a node that does not lead", n)
	}
}

// TestReconcilerNoFenceDoesNotLatch: a node without a fence for a moment
// (a step-down under way, which may fail and give it back) starts nothing
// meanwhile, and launches again once the Guard passes.
func TestReconcilerNoFenceDoesNotLatch(t *testing.T) {
	r := newReconciler(t, 1, func(r *reconciler) { r.st.guard = store.ErrNoFence })
	if f := r.awaitFailure(1); !strings.Contains(f.Reason, "start of web-001 not done: not the leader") {
		t.Fatalf("failure %q, want the start refused", f.Reason)
	}
	if n := len(r.prov.startTimes()); n != 0 {
		t.Fatalf("%d starts without a fence", n)
	}
	r.st.mu.Lock()
	r.st.guard = nil
	r.st.mu.Unlock()
	r.stepUntil("a start once the fence is back", func() bool { return len(r.prov.startTimes()) == 1 })
}
