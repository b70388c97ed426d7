package group

import (
	"bytes"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/decision"
)

// recorded lists the events r's group wrote to its event log, as
// "type subject", in order.
func recorded(r *reconciler) []string {
	r.st.mu.Lock()
	defer r.st.mu.Unlock()
	var out []string
	for _, d := range r.st.decisions {
		if d.Outcome == decision.Event {
			out = append(out, d.Rule+"."+string(d.Code)+" "+d.Sources[0])
		}
	}
	return out
}

// TestEventsRecorded: an instance that dies in service is recorded
// unhealthy and terminated, its replacement launched and replacing it.
func TestEventsRecorded(t *testing.T) {
	r := newReconciler(t, 1, nil)
	r.bringUp("web-001")
	r.poll(stableService)
	gone := r.watchGone("web-001")
	r.prov.instance("web-001").exit("signal: killed")
	r.awaitFailure(1)
	gone()
	r.awaitStarts(2)
	// The replacement takes the free name: web-001's if it was forgotten
	// by then (it need not be: a replacement does not wait for it).
	replacement := r.prov.startNames()[1]
	want := []string{"instance.launched web-001", "instance.unhealthy web-001", "instance.terminated web-001",
		"instance.launched " + replacement, "instance.replaced web-001"}
	var got []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if got = recorded(r); len(got) >= len(want) {
			break
		}
	}
	sorted, wantSorted := slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))
	if !slices.Equal(sorted, wantSorted) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("events %q; want %q (the last three in any order)", got, want)
	}
	if i, j := slices.Index(got[1:], "instance.launched "+replacement), slices.Index(got, "instance.replaced web-001"); i+1 > j {
		t.Errorf("events %q: the replacement recorded before its launch", got)
	}
}

// TestEventsLaunchFailed: an instance that fails to start is recorded as
// a failed launch, and replaces nothing.
func TestEventsLaunchFailed(t *testing.T) {
	r := newReconciler(t, 1, func(r *reconciler) { r.prov.fail = errors.New("pre_start hook: exit status 3") })
	r.awaitFailure(1)
	waitFor(t, "the event", func() bool { return slices.Contains(recorded(r), "instance.launch_failed web-001") })
	if got := recorded(r); len(got) != 1 {
		t.Errorf("events %q; want the failed launch only", got)
	}
	r.st.mu.Lock()
	defer r.st.mu.Unlock()
	for _, d := range r.st.decisions {
		if d.Outcome == decision.Event && d.Reason != "web-001 failed to launch: start failed: pre_start hook: exit status 3" {
			t.Errorf("reason %q", d.Reason)
		}
	}
}

// lockedBuffer is a log's output that tests read while the group writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// TestEventsCrashLoopReportedOncePerBackoff: a group of 5 whose template
// cannot start launches its 5 at once, and their failures are one event
// and one warning; then one instance at a time probes, once a back-off,
// each probe's failure reported with the count left unreported before it;
// once a probe goes into service the rest launch.
func TestEventsCrashLoopReportedOncePerBackoff(t *testing.T) {
	var logs lockedBuffer
	r := newReconciler(t, 5, func(r *reconciler) {
		r.g.log = slog.New(slog.NewTextHandler(&logs, nil)).With("group", "web")
		r.prov.onStart = func(in *fakeInstance) { in.exit("exit status 1") }
	})
	launchFailed := func() []string {
		r.st.mu.Lock()
		defer r.st.mu.Unlock()
		var out []string
		for _, d := range r.st.decisions {
			if d.Outcome == decision.Event && d.Rule+"."+string(d.Code) == "instance.launch_failed" {
				out = append(out, d.Reason)
			}
		}
		return out
	}
	empty := func() bool {
		r.g.mu.Lock()
		defer r.g.mu.Unlock()
		return len(r.g.insts) == 0
	}
	f := r.awaitFailure(5)
	waitFor(t, "the 5 forgotten", empty)
	if n := len(r.prov.startTimes()); n != 5 {
		t.Fatalf("%d starts, want the 5 of the first pass", n)
	}
	if got := launchFailed(); len(got) != 1 {
		t.Fatalf("failed launches recorded %q; want one for the pass of 5", got)
	}
	if n := logs.count(`msg="instance failed"`); n != 1 {
		t.Fatalf("%d warnings of a failed instance, want 1:\n%s", n, logs.b.String())
	}

	// Five crashes: the next launch waits 16 s, and is one probe.
	r.clk.awaitAfterFunc(t, f.At.Add(16*time.Second), "the back-off")
	r.clk.Advance(16 * time.Second)
	f = r.awaitFailure(6)
	waitFor(t, "the probe forgotten", empty)
	if n := len(r.prov.startTimes()); n != 6 {
		t.Fatalf("%d starts after the back-off, want one probe (6)", n)
	}
	got := launchFailed()
	if len(got) != 2 || !strings.Contains(got[1], "(and 4 more instances since 2026-01-01T00:00:00Z, not reported one by one") {
		t.Fatalf("failed launches recorded %q; want the probe's, counting the 4 left unreported", got)
	}
	if n := logs.count(`msg="instance failed"`); n != 2 {
		t.Fatalf("%d warnings of a failed instance, want 2", n)
	}

	// The template starts again: the next probe goes into service, then
	// the other 4 launch.
	r.prov.mu.Lock()
	r.prov.onStart = nil
	r.prov.mu.Unlock()
	r.clk.awaitAfterFunc(t, f.At.Add(32*time.Second), "the back-off")
	r.clk.Advance(32 * time.Second)
	r.awaitStarts(7)
	if n := len(r.prov.startTimes()); n != 7 {
		t.Fatalf("%d starts, want one probe (7) before it is in service", n)
	}
	r.bringUp("web-001")
	r.awaitStarts(11)
	r.awaitGate("web-002", "web-003", "web-004", "web-005")
	if n := len(r.prov.startTimes()); n != 11 {
		t.Fatalf("%d starts, want 11", n)
	}
}
