package group

import (
	"errors"
	"slices"
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
	// The replacement takes the free name.
	want := []string{"instance.launched web-001", "instance.unhealthy web-001", "instance.terminated web-001",
		"instance.launched web-001", "instance.replaced web-001"}
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
	if i, j := slices.Index(got[1:], "instance.launched web-001"), slices.Index(got, "instance.replaced web-001"); i+1 > j {
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
