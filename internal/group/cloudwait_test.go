package group

import (
	"context"
	"testing"
	"time"
)

// TestCloudWait: a refusal makes the instance wait (status is told once
// per reason); while a retry's Delete call is out it cannot be taken back;
// taken back, its retirement's context ends and nothing is left waiting.
func TestCloudWait(t *testing.T) {
	var w cloudWait
	if w.waiting() || w.callOut() {
		t.Fatal("a new wait is waiting")
	}
	w.call() // the first Delete call: not waiting yet
	if w.waiting() || w.callOut() {
		t.Fatal("a first Delete call counts as a wait")
	}
	kctx, keep := context.WithCancel(context.Background())
	defer keep()
	if !w.set("waiting for the cloud API: 503", keep) || !w.waiting() || w.callOut() {
		t.Fatalf("after a refusal: waiting %v, callOut %v", w.waiting(), w.callOut())
	}
	if w.set("waiting for the cloud API: 503", keep) {
		t.Fatal("the same reason again reported a change")
	}
	w.call()
	if !w.callOut() || !w.waiting() {
		t.Fatalf("retry's call out: callOut %v, waiting %v", w.callOut(), w.waiting())
	}
	if !w.set("waiting for the cloud API: timeout", keep) || w.callOut() {
		t.Fatal("refused again: not waiting for a take-back")
	}
	w.takeBack()
	if kctx.Err() == nil || w.waiting() || w.keep != nil {
		t.Fatalf("after take-back: context %v, waiting %v", kctx.Err(), w.waiting())
	}
	if !w.set("x", nil) || !w.set("", nil) || w.waiting() {
		t.Fatal("set back to no reason: still waiting, or unreported")
	}
}

// TestDeleteRetry: retries wait 1 s doubling to 30 s; the wait that would
// pass delete_timeout is cut short there, the job fails then, once, and
// the retries go on at full waits.
func TestDeleteRetry(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const timeout = 40 * time.Second
	r := newDeleteRetry(t0)
	now := t0
	type step struct {
		wait   time.Duration
		report bool
	}
	var got []step
	for range 9 {
		d, report := r.next(now, timeout)
		got = append(got, step{d, report})
		now = now.Add(d)
		r.waited(d)
	}
	want := []step{
		{1 * time.Second, false}, {2 * time.Second, false}, {4 * time.Second, false}, {8 * time.Second, false},
		{16 * time.Second, false}, // 31 s
		{9 * time.Second, false},  // cut at delete_timeout (40 s)
		{30 * time.Second, true},  // reported, then a full wait
		{30 * time.Second, false}, {30 * time.Second, false},
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("retry %d: wait %s report %v, want %s %v (all: %v)", i+1, got[i].wait, got[i].report, want[i].wait, want[i].report, got)
		}
	}

	// Reached already at the first wait (a Delete that hung past
	// delete_timeout): reported at once.
	r = newDeleteRetry(t0)
	if d, report := r.next(t0.Add(timeout+time.Second), timeout); !report || d != time.Second {
		t.Fatalf("past delete_timeout: wait %s report %v, want 1s and a report", d, report)
	}
	if _, report := r.next(t0.Add(2*timeout), timeout); report {
		t.Fatal("reported twice")
	}
}
