package jobrun

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/instance"
	"github.com/shoal-lb/shoal/internal/store"
)

func newGroup(t *testing.T, cfg config.Group) *group.Group {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "shoal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	// Resolving targets needs no provider or balancer.
	g, err := group.New(context.Background(), cfg, nil, nil, st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// fixed is a set of groups no reload changes: jobs' view of core's registry.
type fixed []*group.Group

func (f fixed) Group(name string) (*group.Group, bool) {
	i := slices.IndexFunc(f, func(g *group.Group) bool { return g.Name() == name })
	if i < 0 {
		return nil, false
	}
	return f[i], true
}

func (f fixed) Names() []string {
	var names []string
	for _, g := range f {
		names = append(names, g.Name())
	}
	slices.Sort(names)
	return names
}

var ladder = config.Group{Name: "web", MinSize: 2, MaxSize: 6,
	Plans: []config.Plan{{Name: "smallest", Size: 2}, {Name: "medium", Size: 3}, {Name: "largest", Size: 5}}}

func TestResolve(t *testing.T) {
	g := newGroup(t, ladder)
	flat := newGroup(t, config.Group{Name: "flat", MinSize: 1, MaxSize: 3})
	for _, tc := range []struct {
		name   string
		g      *group.Group
		req    Request
		from   int
		target int
		reason string
		input  error
	}{
		{"up the ladder", g, Request{Kind: Up}, 2, 3, "", nil},
		{"up from between plans", g, Request{Kind: Up}, 4, 5, "", nil},
		{"up at the top", g, Request{Kind: Up}, 5, 0, "already at the largest plan (largest: 5)", nil},
		{"down the ladder", g, Request{Kind: Down}, 5, 3, "", nil},
		{"down from above the top plan", g, Request{Kind: Down}, 6, 5, "", nil},
		{"down at the bottom", g, Request{Kind: Down}, 2, 0, "already at the smallest plan (smallest: 2)", nil},
		{"up to a plan", g, Request{Kind: Up, Plan: "largest"}, 2, 5, "", nil},
		{"up to the current plan", g, Request{Kind: Up, Plan: "medium"}, 3, 3, "", nil},
		{"up to a smaller plan", g, Request{Kind: Up, Plan: "smallest"}, 3, 0, "an up request never scales down", nil},
		{"down to a larger plan", g, Request{Kind: Down, Plan: "largest"}, 3, 0, "a down request never scales up", nil},
		{"jump to a plan", g, Request{Kind: Plan, Plan: "smallest"}, 5, 2, "", nil},
		{"unknown plan", g, Request{Kind: Plan, Plan: "huge"}, 2, 0, "", ErrUnknownPlan},
		{"size", g, Request{Kind: Size, Size: 6}, 2, 6, "", nil},
		{"size out of range", g, Request{Kind: Size, Size: 7}, 2, 0, "", ErrInvalid},
		{"keep", g, Request{Kind: Keep}, 3, 3, "", nil},
		{"up without plans", flat, Request{Kind: Up}, 1, 2, "", nil},
		{"up at max without plans", flat, Request{Kind: Up}, 3, 0, "already at max_size 3", nil},
		{"down at min without plans", flat, Request{Kind: Down}, 1, 0, "already at min_size 1", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target, reason, inErr := resolve(tc.g, tc.req, tc.from)
			if tc.input != nil {
				if inErr == nil || !errors.Is(inErr, tc.input) {
					t.Fatalf("input error %v, want %v", inErr, tc.input)
				}
				return
			}
			if inErr != nil {
				t.Fatalf("unexpected input error %v", inErr)
			}
			if target != tc.target || !strings.Contains(reason, tc.reason) || (tc.reason == "" && reason != "") {
				t.Fatalf("resolve = %d %q, want %d %q", target, reason, tc.target, tc.reason)
			}
		})
	}
}

func TestUnknownPlanListsValidNames(t *testing.T) {
	_, _, inErr := resolve(newGroup(t, ladder), Request{Kind: Plan, Plan: "huge"}, 2)
	if inErr == nil || strings.Join(inErr.Valid, ",") != "smallest,medium,largest" || !strings.Contains(inErr.Msg, "smallest, medium, largest") {
		t.Fatalf("error %+v, want the plans listed in ladder order", inErr)
	}
}

func TestCooldownReason(t *testing.T) {
	cfg := ladder
	cfg.Cooldown = config.Cooldown{Up: time.Minute, Down: time.Hour}
	g := newGroup(t, cfg)
	now := time.Now()
	if err := g.StartCooldowns(context.Background(), now); err != nil {
		t.Fatal(err)
	}
	if r := cooldownReason(g, 2, 3, now.Add(30*time.Second)); !strings.Contains(r, "scale-up cooldown runs until") || !strings.Contains(r, "30s left") {
		t.Fatalf("up during cooldown: %q", r)
	}
	if r := cooldownReason(g, 2, 3, now.Add(2*time.Minute)); r != "" {
		t.Fatalf("up after its cooldown: %q, want none", r)
	}
	if r := cooldownReason(g, 3, 2, now.Add(2*time.Minute)); !strings.Contains(r, "scale-down cooldown") {
		t.Fatalf("down during its longer cooldown: %q", r)
	}
	if r := cooldownReason(g, 3, 3, now); r != "" {
		t.Fatalf("no size change is never held back: %q", r)
	}
}

func TestSubmitRejectsBadSource(t *testing.T) {
	g := newGroup(t, ladder)
	st, err := store.Open(filepath.Join(t.TempDir(), "shoal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := NewManager(context.Background(), fixed{g}, st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, src := range []string{strings.Repeat("x", 129), "cron\nINJECTED"} {
		_, err := m.Submit(context.Background(), Request{Group: "web", Kind: Up, Source: src})
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("source %q: %v, want ErrInvalid", src, err)
		}
	}
	if list, _ := m.List(context.Background(), "", 10); len(list) != 0 {
		t.Fatalf("rejected requests recorded jobs: %+v", list)
	}
}

// TestFailedJobStartsItsCooldown: a scale-up that fails (here it times out,
// as when new instances never pass their check) must start the scale-up
// cooldown, or each further alert would raise the group by another step.
func TestFailedJobStartsItsCooldown(t *testing.T) {
	cfg := ladder
	cfg.Cooldown = config.Cooldown{Up: time.Hour, Down: time.Hour}
	g := newGroup(t, cfg) // no reconciler runs: the job cannot converge
	st, err := store.Open(filepath.Join(t.TempDir(), "shoal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := NewManager(context.Background(), fixed{g}, st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.timeout = func(*group.Group) time.Duration { return 100 * time.Millisecond }

	ctx := context.Background()
	j, err := m.Submit(ctx, Request{Group: "web", Kind: Up})
	if err != nil || j.State != Accepted {
		t.Fatalf("first up = %+v, %v; want accepted", j, err)
	}
	j, err = m.Wait(ctx, j.ID)
	if err != nil || j.State != Failed {
		t.Fatalf("first up ended %+v, %v; want failed", j, err)
	}
	if g.Desired() != j.Target || !strings.Contains(j.Reason, "desired size stays 3") {
		t.Fatalf("desired size %d after job %+v; want the job's target, said in the reason", g.Desired(), j)
	}
	up, down := g.Cooldowns()
	if time.Until(up) < 59*time.Minute || !down.IsZero() {
		t.Fatalf("cooldowns after a failed up: up %v, down %v; want only the up cooldown", up, down)
	}
	j, err = m.Submit(ctx, Request{Group: "web", Kind: Up})
	if err != nil || j.State != Ignored || !strings.Contains(j.Reason, "scale-up cooldown") || j.From != 3 || g.Desired() != 3 {
		t.Fatalf("second up = %+v, %v (desired %d); want ignored for the scale-up cooldown, size staying 3", j, err, g.Desired())
	}
}

// TestJobFailedByRestartStartsItsCooldown: a scale-down running when shoal
// died is failed by the next start, which also starts the scale-down cooldown.
func TestJobFailedByRestartStartsItsCooldown(t *testing.T) {
	cfg := ladder
	cfg.Cooldown = config.Cooldown{Up: time.Hour, Down: time.Hour}
	g := newGroup(t, cfg)
	st, err := store.Open(filepath.Join(t.TempDir(), "shoal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	j := Job{Group: "web", Source: "test", Kind: Down, From: 3, Target: 2, State: Running, CreatedAt: time.Now()}
	if err := st.InsertJob(ctx, &j); err != nil {
		t.Fatal(err)
	}
	m, err := NewManager(ctx, fixed{g}, st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if got, _ := m.Get(ctx, j.ID); got.State != Failed {
		t.Fatalf("job after restart: %+v, want failed", got)
	}
	up, down := g.Cooldowns()
	if !up.IsZero() || time.Until(down) < 59*time.Minute {
		t.Fatalf("cooldowns after a down failed by a restart: up %v, down %v; want only the down cooldown", up, down)
	}
}

// TestSubmitOverBudget: a scale-out that would take the instances run in
// the last hour past max_hourly_instances is ignored with the count.
func TestSubmitOverBudget(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "shoal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	// Two instances that ran earlier in the hour.
	for _, name := range []string{"web-001", "web-002"} {
		if err := st.PutInstance(ctx, store.Instance{Record: instance.Record{Group: "web", Name: name, StartedAt: time.Now().Add(-10 * time.Minute)}, State: "in-service"}); err != nil {
			t.Fatal(err)
		}
		if err := st.DeleteInstance(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	cfg := ladder
	cfg.MaxHourlyInstances = 3
	g, err := group.New(ctx, cfg, nil, nil, st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewManager(ctx, fixed{g}, st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	j, err := m.Submit(ctx, Request{Group: "web", Kind: Size, Size: 4})
	if err != nil {
		t.Fatal(err)
	}
	want := "max_hourly_instances 3: 2 instances ran in the last hour (0 running, 2 ended since); 2 more would make 4"
	if j.State != Ignored || j.Reason != want {
		t.Fatalf("job %+v, want ignored: %s", j, want)
	}
}
