package outlier

import (
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

var t0 = time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)

// fleet is counters per instance, advanced by tick.
type fleet struct {
	req, errs map[string]int64
	names     []string
}

func newFleet(names ...string) *fleet {
	return &fleet{req: map[string]int64{}, errs: map[string]int64{}, names: names}
}

// add gives name n more answers, e of them 5xx.
func (f *fleet) add(name string, n, e int64) { f.req[name] += n; f.errs[name] += e }

func (f *fleet) samples() []Sample {
	var s []Sample
	for _, n := range f.names {
		s = append(s, Sample{Name: n, Requests: f.req[n], Errors: f.errs[n], Serving: true})
	}
	return s
}

func kinds(ds []Decision) string {
	var w []string
	for _, d := range ds {
		w = append(w, string(d.Kind)+":"+d.Instance)
	}
	return strings.Join(w, " ")
}

func TestConsecutive5xx(t *testing.T) {
	d := New(config.Outliers{Consecutive5xx: 5, MaxEjected: 50, EjectFor: 30 * time.Second})
	f := newFleet("a", "b")
	d.Step(t0, f.samples())
	// 4 errors in a row: not yet; one success ends the streak.
	f.add("a", 4, 4)
	f.add("b", 4, 0)
	if ds := d.Step(t0.Add(time.Second), f.samples()); len(ds) != 0 {
		t.Fatalf("4 in a row: %s", kinds(ds))
	}
	f.add("a", 3, 2) // one of these answered well
	if ds := d.Step(t0.Add(2*time.Second), f.samples()); len(ds) != 0 {
		t.Fatalf("streak broken: %s", kinds(ds))
	}
	f.add("a", 3, 3)
	f.add("a", 0, 0)
	if ds := d.Step(t0.Add(3*time.Second), f.samples()); len(ds) != 0 {
		t.Fatalf("3 in a row: %s", kinds(ds))
	}
	f.add("a", 2, 2)
	ds := d.Step(t0.Add(4*time.Second), f.samples())
	if kinds(ds) != "eject:a" || ds[0].For != 30*time.Second || !strings.Contains(ds[0].Reason, "5 consecutive 5xx answers (consecutive_5xx 5)") {
		t.Fatalf("5 in a row: %s %+v", kinds(ds), ds)
	}
	if got := d.Ejected(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("Ejected = %v", got)
	}
	// Back after eject_for, and not ejected again at once for what it did before.
	if ds := d.Step(t0.Add(33*time.Second), f.samples()); len(ds) != 0 {
		t.Fatalf("while ejected: %s", kinds(ds))
	}
	ds = d.Step(t0.Add(34*time.Second), f.samples())
	if kinds(ds) != "return:a" {
		t.Fatalf("after eject_for: %s", kinds(ds))
	}
	if ds := d.Step(t0.Add(35*time.Second), f.samples()); len(ds) != 0 {
		t.Fatalf("just back: %s", kinds(ds))
	}
}

func TestFailureRateMinRequests(t *testing.T) {
	d := New(config.Outliers{MaxEjected: 50, EjectFor: 10 * time.Second,
		FailureRate: &config.FailureRate{Above: 0.2, Over: 30 * time.Second, MinRequests: 50}})
	f := newFleet("a", "b")
	d.Step(t0, f.samples())
	// 40 answers, half 5xx: under min_requests.
	for i := 1; i <= 4; i++ {
		f.add("a", 10, 5)
		f.add("b", 10, 0)
		if ds := d.Step(t0.Add(time.Duration(i)*time.Second), f.samples()); len(ds) != 0 {
			t.Fatalf("%d requests: %s", 10*i, kinds(ds))
		}
	}
	f.add("a", 10, 5)
	f.add("b", 10, 0)
	ds := d.Step(t0.Add(5*time.Second), f.samples())
	if kinds(ds) != "eject:a" || !strings.Contains(ds[0].Reason, "25 of 50 answers 5xx over 30s (50.0%, above 20%)") {
		t.Fatalf("50 requests: %s %v", kinds(ds), ds)
	}

	// At the bound is not above it; answers older than over do not count.
	d = New(config.Outliers{MaxEjected: 50, EjectFor: 10 * time.Second,
		FailureRate: &config.FailureRate{Above: 0.2, Over: 30 * time.Second, MinRequests: 50}})
	f = newFleet("a", "b")
	d.Step(t0, f.samples())
	f.add("a", 100, 20)
	if ds := d.Step(t0.Add(time.Second), f.samples()); len(ds) != 0 {
		t.Fatalf("20%% exactly: %s", kinds(ds))
	}
	f.add("a", 100, 80) // 100 of 200 in the window
	if ds := d.Step(t0.Add(40*time.Second), f.samples()); kinds(ds) != "" {
		// the window holds the points at 1 s (dropped: older than 30 s) and 40 s only
		t.Fatalf("old answers counted: %s", kinds(ds))
	}
	f.add("a", 60, 30)
	if ds := d.Step(t0.Add(45*time.Second), f.samples()); kinds(ds) != "eject:a" {
		t.Fatalf("30 of 60 within 30 s: %s", kinds(ds))
	}
}

// latencyRun feeds n samples of took to name at at.
func latencyRun(d *Detector, name string, at time.Time, n int, took time.Duration) {
	for i := range n {
		d.Observe(name, at.Add(time.Duration(i)*time.Millisecond), took)
	}
}

func TestLatencyVsGroup(t *testing.T) {
	d := New(config.Outliers{MaxEjected: 40, EjectFor: 10 * time.Second,
		Latency: &config.LatencyOutlier{P99Above: 500 * time.Millisecond, Over: 30 * time.Second, VsGroup: 3}})
	f := newFleet("a", "b", "c")
	d.Step(t0, f.samples())
	// a is slow (2 s), b and c answer in 100 ms and 700 ms: a is above
	// p99_above and 3x the others' median (the upper of two: 700 ms) is
	// 2.1 s: not an outlier yet.
	latencyRun(d, "a", t0.Add(time.Second), 50, 2*time.Second)
	latencyRun(d, "b", t0.Add(time.Second), 50, 100*time.Millisecond)
	latencyRun(d, "c", t0.Add(time.Second), 50, 700*time.Millisecond)
	if ds := d.Step(t0.Add(2*time.Second), f.samples()); len(ds) != 0 {
		t.Fatalf("2 s vs 3 × 700 ms: %s", kinds(ds))
	}
	latencyRun(d, "a", t0.Add(3*time.Second), 50, 3*time.Second)
	ds := d.Step(t0.Add(4*time.Second), f.samples())
	if kinds(ds) != "eject:a" || !strings.Contains(ds[0].Reason, "p99 3s over 30s (100 sampled requests), above 500ms, 4.3x the rest of the group's median p99 700ms (vs_group 3x)") {
		t.Fatalf("3 s: %s %v", kinds(ds), ds)
	}
	// A slow group is not an outlier: c alone above p99_above but not 3x b.
	d = New(config.Outliers{MaxEjected: 40, EjectFor: 10 * time.Second,
		Latency: &config.LatencyOutlier{P99Above: 500 * time.Millisecond, Over: 30 * time.Second, VsGroup: 3}})
	d.Step(t0, f.samples())
	latencyRun(d, "a", t0.Add(time.Second), 50, time.Second)
	latencyRun(d, "b", t0.Add(time.Second), 50, time.Second)
	latencyRun(d, "c", t0.Add(time.Second), 50, 2*time.Second)
	if ds := d.Step(t0.Add(2*time.Second), f.samples()); len(ds) != 0 {
		t.Fatalf("slow group: %s", kinds(ds))
	}
	// Too few samples say nothing.
	latencyRun(d, "c", t0.Add(3*time.Second), 10, 60*time.Second)
	d2 := New(config.Outliers{MaxEjected: 40, EjectFor: 10 * time.Second,
		Latency: &config.LatencyOutlier{P99Above: 500 * time.Millisecond, Over: 30 * time.Second}})
	d2.Step(t0, f.samples())
	latencyRun(d2, "c", t0.Add(time.Second), minLatencySamples-1, 60*time.Second)
	if ds := d2.Step(t0.Add(2*time.Second), f.samples()); len(ds) != 0 {
		t.Fatalf("%d samples: %s", minLatencySamples-1, kinds(ds))
	}
}

func TestMaxEjectedCap(t *testing.T) {
	d := New(config.Outliers{Consecutive5xx: 3, MaxEjected: 40, EjectFor: 30 * time.Second})
	f := newFleet("a", "b", "c", "d", "e")
	d.Step(t0, f.samples())
	// Every instance fails: 40% of 5 is 2, the worst two go, and the
	// group is said to be failing as a whole, once.
	for _, n := range f.names {
		f.add(n, 5, 5)
	}
	ds := d.Step(t0.Add(time.Second), f.samples())
	if kinds(ds) != "group-failing: eject:a eject:b" {
		t.Fatalf("all failing: %s", kinds(ds))
	}
	if !strings.Contains(ds[0].Reason, "the group as a whole is failing, not an outlier: 5 of 5 instances in rotation are beyond the thresholds (a, b, c, d, e) and 0 already ejected; max_ejected 40% lets 2 out at once, so 3 stay in rotation") {
		t.Fatalf("reason: %s", ds[0].Reason)
	}
	for _, n := range f.names {
		f.add(n, 5, 5)
	}
	if ds := d.Step(t0.Add(2*time.Second), f.samples()); len(ds) != 0 {
		t.Fatalf("still failing, cap full: %s (said again, or over the cap)", kinds(ds))
	}
	if got := d.Ejected(); len(got) != 2 {
		t.Fatalf("Ejected = %v, want 2", got)
	}
	// Instances not serving (starting, held by an operator) are not counted:
	// of 2 serving, 40% is 0.
	d = New(config.Outliers{Consecutive5xx: 3, MaxEjected: 40, EjectFor: 30 * time.Second})
	s := []Sample{{Name: "a", Serving: true}, {Name: "b", Serving: true}, {Name: "c"}}
	d.Step(t0, s)
	s[0].Requests, s[0].Errors = 5, 5
	ds = d.Step(t0.Add(time.Second), s)
	if kinds(ds) != "group-failing:" || !strings.Contains(ds[0].Reason, "lets 0 out at once") {
		t.Fatalf("2 serving: %s %v", kinds(ds), ds)
	}
}

func TestDoublingAndReplace(t *testing.T) {
	d := New(config.Outliers{Consecutive5xx: 3, MaxEjected: 50, EjectFor: 30 * time.Second})
	f := newFleet("a", "b")
	now := t0
	d.Step(now, f.samples())
	fail := func() []Decision {
		now = now.Add(time.Second)
		f.add("a", 3, 3)
		return d.Step(now, f.samples())
	}
	ds := fail()
	if kinds(ds) != "eject:a" || ds[0].For != 30*time.Second {
		t.Fatalf("first: %s %v", kinds(ds), ds)
	}
	now = now.Add(30 * time.Second)
	if ds := d.Step(now, f.samples()); kinds(ds) != "return:a" {
		t.Fatalf("return: %s", kinds(ds))
	}
	ds = fail()
	if kinds(ds) != "eject:a" || ds[0].For != time.Minute || !strings.Contains(ds[0].Reason, "ejected for 1m0s (ejection 2 within 10m0s)") {
		t.Fatalf("second: %s %v", kinds(ds), ds)
	}
	now = now.Add(time.Minute)
	if ds := d.Step(now, f.samples()); kinds(ds) != "return:a" || !strings.Contains(ds[0].Reason, "its ejection of 1m0s is over") {
		t.Fatalf("return: %s %v", kinds(ds), ds)
	}
	// The third within 10 minutes replaces it.
	ds = fail()
	if kinds(ds) != "replace:a" || !strings.Contains(ds[0].Reason, "a replaced: an outlier 3 times within 10m0s (3 consecutive 5xx answers") {
		t.Fatalf("third: %s %v", kinds(ds), ds)
	}
	if len(d.Ejected()) != 0 {
		t.Fatalf("replaced yet ejected: %v", d.Ejected())
	}

	// Ejections older than 10 minutes do not count; the doubling stops at 5 min.
	if got := ejection(30*time.Second, 5); got != 5*time.Minute {
		t.Fatalf("5th ejection = %s, want 5m (8m capped)", got)
	}
	d = New(config.Outliers{Consecutive5xx: 3, MaxEjected: 50, EjectFor: 30 * time.Second})
	f = newFleet("a", "b")
	d.Step(now, f.samples())
	for i := range 4 {
		ds = fail()
		if kinds(ds) != "eject:a" {
			t.Fatalf("ejection %d, 11 min apart: %s", i, kinds(ds))
		}
		if ds[0].For != 30*time.Second {
			t.Fatalf("ejection %d lasted %s: the old ones were counted", i, ds[0].For)
		}
		now = now.Add(11 * time.Minute)
		if ds := d.Step(now, f.samples()); kinds(ds) != "return:a" {
			t.Fatalf("return %d: %s", i, kinds(ds))
		}
	}
}

// TestOperatorHold: an instance an operator takes out of rotation while
// ejected is theirs: no return, not counted.
func TestOperatorHold(t *testing.T) {
	d := New(config.Outliers{Consecutive5xx: 3, MaxEjected: 50, EjectFor: 30 * time.Second})
	s := []Sample{{Name: "a", Serving: true}, {Name: "b", Serving: true}}
	d.Step(t0, s)
	s[0].Requests, s[0].Errors = 3, 3
	if ds := d.Step(t0.Add(time.Second), s); kinds(ds) != "eject:a" {
		t.Fatalf("eject: %s", kinds(ds))
	}
	s[0].Serving = false // drained by an operator
	if ds := d.Step(t0.Add(time.Minute), s); len(ds) != 0 {
		t.Fatalf("held: %s", kinds(ds))
	}
	if len(d.Ejected()) != 0 {
		t.Fatalf("held yet ejected: %v", d.Ejected())
	}
	// Gone instances are forgotten; counters that went back start again.
	d.Step(t0.Add(61*time.Second), s[1:])
	if _, ok := d.insts["a"]; ok {
		t.Fatal("gone instance kept")
	}
	s[1].Requests, s[1].Errors = 100, 0
	d.Step(t0.Add(62*time.Second), s[1:])
	s[1].Requests, s[1].Errors = 3, 3 // reset by a re-add
	if ds := d.Step(t0.Add(63*time.Second), s[1:]); len(ds) != 0 {
		t.Fatalf("reset counters: %s", kinds(ds))
	}
}

// A new detector given an earlier one's History (as after a restart of
// shoal) keeps the instance out until the old end, then doubles its next
// ejection and replaces it at the third; ejections older than the replace
// window are dropped.
func TestHistoryRestore(t *testing.T) {
	cfg := config.Outliers{Consecutive5xx: 3, MaxEjected: 50, EjectFor: 10 * time.Second}
	d := New(cfg)
	f := newFleet("a", "b")
	d.Step(t0, f.samples())
	f.add("a", 3, 3)
	if ds := d.Step(t0.Add(time.Second), f.samples()); kinds(ds) != "eject:a" {
		t.Fatalf("first: %s", kinds(ds))
	}
	until, at := d.History("a")
	if !until.Equal(t0.Add(11*time.Second)) || len(at) != 1 || !at[0].Equal(t0.Add(time.Second)) {
		t.Fatalf("History = %v, %v", until, at)
	}
	if u, at := d.History("b"); !u.IsZero() || at != nil {
		t.Fatalf("History of b = %v, %v", u, at)
	}

	// A new detector (shoal restarted), with counters of a new HAProxy view.
	d = New(cfg)
	d.Restore(t0.Add(2*time.Second), "a", until, at)
	if got := d.Ejected(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("Ejected after Restore = %v", got)
	}
	if ds := d.Step(t0.Add(10*time.Second), f.samples()); len(ds) != 0 {
		t.Fatalf("before the old end: %s", kinds(ds))
	}
	if ds := d.Step(t0.Add(11*time.Second), f.samples()); kinds(ds) != "return:a" {
		t.Fatalf("at the old end: %s", kinds(ds))
	}
	f.add("a", 3, 3)
	ds := d.Step(t0.Add(12*time.Second), f.samples())
	if kinds(ds) != "eject:a" || ds[0].For != 20*time.Second || !strings.Contains(ds[0].Reason, "(ejection 2 within 10m0s)") {
		t.Fatalf("second after Restore: %s %+v", kinds(ds), ds)
	}
	d.Step(t0.Add(32*time.Second), f.samples()) // returns
	f.add("a", 3, 3)
	if ds := d.Step(t0.Add(33*time.Second), f.samples()); kinds(ds) != "replace:a" {
		t.Fatalf("third after Restore: %s", kinds(ds))
	}

	// Ejections past the window count no more; nothing left is no state.
	d = New(cfg)
	d.Restore(t0.Add(11*time.Minute), "a", time.Time{}, at)
	if u, got := d.History("a"); !u.IsZero() || got != nil {
		t.Fatalf("an old ejection restored: %v, %v", u, got)
	}
}
