package policy

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/shoal-lb/shoal/internal/jobrun"
	"github.com/shoal-lb/shoal/internal/store"
)

// TestRunnerAsleep: while a group that scales to zero sleeps its policy does
// nothing: not move it into its bounds (core raises the policy's min_size to
// 1: only idle_after scales to 0), nor act on what the history holds. Once
// the group is awake the same history makes the rule scale it out.
func TestRunnerAsleep(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "shoal.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	g := parseGroup(t, 0, 5, "    scale_to_zero: {}\n", "      rules: [{name: hot, metric: cpu.avg, above: 75, for: 10s, action: up}]\n")
	g = g.PolicyGroup() // as core's runPolicy passes it
	h := history{}.fill("cpu.avg", -600, 600, constant(90)).fill("size", -600, 600, constant(1)).fill("ready", -600, 600, constant(1))
	desired := 0
	sub := &submitter{}
	r := &Runner{Group: g, Metrics: h, Jobs: sub, State: func() State { return State{Desired: desired} },
		Store: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	l, err := r.start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	l.step(context.Background(), secs(0))
	recorded, err := st.Decisions(context.Background(), store.DecisionQuery{Group: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if sub.count() != 0 || len(recorded) != 0 {
		t.Fatalf("asleep: submitted %d jobs, recorded %+v; want nothing", sub.count(), recorded)
	}

	desired = 1
	l.step(context.Background(), secs(1))
	if sub.count() != 1 || sub.reqs[0].Kind != "up" {
		t.Fatalf("awake: submitted %+v, want the rule's up", sub.reqs)
	}

	// A policy test replays the same: nothing while the recorded size is 0,
	// the rule's up once it is 1.
	rh := history{}.fill("cpu.avg", -600, 600, constant(90)).fill("ready", 0, 600, constant(1)).
		fill("size", -600, -1, constant(0)).fill("size", 0, 600, constant(1))
	ds, err := Replay(context.Background(), g, rh, secs(-300), secs(60))
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if len(ds) == 0 || ds[0].Time.Before(secs(0)) || ds[0].Request == nil || ds[0].Request.Kind != jobrun.Up {
		t.Fatalf("replay: first decision %+v, want the rule's up at 0 s or later", ds)
	}
}
