package policy

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/testbin"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/jobrun"
	"github.com/shoal-lb/shoal/internal/store"
)

// submitter records requests and accepts them, or ignores them with reason.
type submitter struct {
	mu     sync.Mutex
	reqs   []jobrun.Request
	ignore string
}

func (s *submitter) Submit(_ context.Context, req jobrun.Request) (jobrun.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, req)
	j := jobrun.Job{ID: strconv.Itoa(len(s.reqs)), Group: req.Group, Kind: req.Kind, Source: req.Source, State: jobrun.Accepted}
	if s.ignore != "" {
		j.State, j.Reason = jobrun.Ignored, s.ignore
	}
	return j, nil
}

func (s *submitter) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

// clock is a settable fake clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRunner runs the live loop against a real store: the rule fires once,
// its cooldown is recorded once, and survives a restart of the runner.
func TestRunner(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "shoal.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	g := parseGroup(t, 1, 10, "", `      interval: 100ms
      rules:
        - {name: hot, metric: cpu.avg, above: 75, for: 10s, action: up, cooldown: 300s}
`)
	h := history{}.fill("cpu.avg", -600, 1200, constant(90)).fill("size", -600, 1200, constant(4)).fill("ready", -600, 1200, constant(4))
	sub := &submitter{}
	clk := &clock{t: secs(0)}
	logs := &testbin.Buffer{}
	newRunner := func() *Runner {
		return &Runner{Group: g, Metrics: h, Jobs: sub, State: func() State { return State{Desired: 4} },
			Store: st, Log: slog.New(slog.NewTextHandler(logs, nil)), Now: clk.now}
	}
	decisions := func() []decision.Record {
		ds, err := st.Decisions(context.Background(), store.DecisionQuery{Group: "web"})
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	run := func(r *Runner) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}

	stop := run(newRunner())
	waitFor(t, "the job and the cooldown decision", func() bool { return len(decisions()) >= 2 })
	clk.set(secs(5))
	time.Sleep(200 * time.Millisecond) // several more evaluations, all held back alike
	stop()

	ds := decisions()
	if len(ds) != 2 {
		t.Fatalf("got %d decisions, want 2 (the job, then one held-back record): %+v", len(ds), ds)
	}
	if d := ds[0]; d.Outcome != decision.Accepted || d.JobID != "1" || d.Rule != "hot" || d.Request == nil || d.Request.Kind != jobrun.Up || d.Values["cpu.avg"] != 90 {
		t.Errorf("first decision = %+v", d)
	}
	if d := ds[1]; d.Outcome != decision.Nothing || d.Code != CodeRuleCooldown {
		t.Errorf("second decision = %+v", d)
	}
	if n := sub.count(); n != 1 {
		t.Errorf("submitted %d jobs, want 1", n)
	}
	if !strings.Contains(logs.String(), `msg="autoscale decision" group=web rule=hot outcome=accepted`) {
		t.Errorf("no info line for the decision in:\n%s", logs.String())
	}

	// A restart keeps the rule's cooldown: nothing new until it is over.
	clk.set(secs(100))
	stop = run(newRunner())
	time.Sleep(200 * time.Millisecond)
	if n := sub.count(); n != 1 {
		t.Errorf("after restart: submitted %d jobs, want still 1", n)
	}
	clk.set(secs(301))
	waitFor(t, "the second job", func() bool { return sub.count() >= 2 })
	stop()
	var accepted []string
	for _, d := range decisions() {
		if d.Outcome == decision.Accepted {
			accepted = append(accepted, d.JobID)
		}
	}
	if strings.Join(accepted, ",") != "1,2" {
		t.Errorf("accepted jobs %v, want 1,2", accepted)
	}

	// A job the manager ignores is recorded with its reason, and the same
	// request is not repeated at every tick.
	sub.mu.Lock()
	sub.ignore = "another job (9) is running for group web"
	sub.mu.Unlock()
	clk.set(secs(700))
	stop = run(newRunner())
	waitFor(t, "the refusal to be noted", func() bool {
		ds := decisions()
		return ds[len(ds)-1].Code == CodeRefused
	})
	time.Sleep(200 * time.Millisecond)
	if n := sub.count(); n != 3 {
		t.Errorf("submitted %d jobs, want 3: a refused request waits before it is repeated", n)
	}
	clk.set(secs(711))
	waitFor(t, "the retry", func() bool { return sub.count() == 4 })
	stop()
	ds = decisions()
	var ignored []decision.Record
	for _, d := range ds {
		if d.Outcome == decision.Ignored {
			ignored = append(ignored, d)
		}
	}
	if len(ignored) == 0 || !strings.Contains(ignored[0].Reason, "job ignored: another job (9) is running") || ignored[0].JobID != "3" {
		t.Errorf("ignored decisions = %+v", ignored)
	}
}

// TestReplaySeed004 replays the seed 004 policy (examples/seed-004.yaml) on
// a synthetic day: a load peak, then a quiet stretch.
func TestReplaySeed004(t *testing.T) {
	cfg, err := config.Load(filepath.Join("..", "..", "examples", "seed-004.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.Groups[0]
	// CPU 90 % for ten minutes from 12:00, then 10 % for an hour; the group
	// stays at 3 (nothing is done in a replay).
	h := history{}.fill("cpu.avg", -600, 0, constant(50)).fill("cpu.avg", 1, 600, constant(90)).
		fill("cpu.avg", 601, 4200, constant(10)).fill("size", -600, 4200, constant(3)).fill("ready", -600, 4200, constant(3))
	ds, err := Replay(context.Background(), g, h, secs(0), secs(4200))
	if err != nil {
		t.Fatal(err)
	}

	var got []string
	for _, d := range ds {
		got = append(got, fmt.Sprintf("%s %s %s %s", d.Time.Sub(t0), d.Rule, d.Outcome, d.Code))
	}
	want := []string{
		// Evaluated once a minute, as CloudWatch does: the average of
		// [0:00, 1:00] is 89 (one sample of 50, sixty of 90).
		"1m0s cdp-out request scale",
		"2m0s cdp-out nothing cooldown", // the group's 300 s
		"6m0s cdp-out request scale",
		"7m0s cdp-out nothing cooldown",
		// The 25-minute average falls below 35 % once less than 7.8
		// minutes of the 90 % peak are in it (every sample below 35, as
		// `for: 25m` wanted, only at 35m).
		"28m0s cdp-down request scale",
		"29m0s cdp-down nothing rule_cooldown",
		"53m0s cdp-down request scale", // its 1500 s cooldown is over
		"54m0s cdp-down nothing rule_cooldown",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("replayed decisions:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, d := range ds {
		if d.Request != nil && d.Request.Source != "policy:"+d.Rule {
			t.Errorf("request source %q for rule %s", d.Request.Source, d.Rule)
		}
	}
}

// TestRunnerMatchesReplay drives the live loop and Replay over the same
// history: the decisions must be the same, the live ones with jobs accepted
// where the replayed ones would have requested them.
func TestRunnerMatchesReplay(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "shoal.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	g := parseGroup(t, 1, 10, "", `      rules:
        - {name: out, metric: cpu.avg, above: 75, for: 1m, action: {add: 1}, cooldown: 300s}
        - {name: in, metric: cpu.avg, below: 35, for: 10m, action: {remove: 1}, cooldown: 600s}
      target: {metric: cpu.avg, value: 60, scale_in_stabilization: 120s}
`)
	h := history{}.fill("cpu.avg", -600, 3000, func(i int) float64 {
		switch {
		case i < 600:
			return 50 + float64(i%5)
		case i < 1200:
			return 90
		}
		return 10 + float64(i%3)
	}).fill("size", -600, 3000, constant(3)).fill("ready", -600, 3000, constant(3))
	// The group's cooldowns start when a job is accepted (as if it finished
	// at once), as Replay assumes.
	g.Cooldown = config.Cooldown{Up: 60 * time.Second, Down: 120 * time.Second}
	var cooldowns State
	sub := &submitter{}
	r := &Runner{Group: g, Metrics: h, Jobs: sub, State: func() State {
		s := cooldowns
		s.Desired = 3
		return s
	}, Store: st, Log: slog.New(slog.NewTextHandler(&testbin.Buffer{}, nil))}
	ctx := context.Background()
	l, err := r.start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= 3000; i++ {
		n := sub.count()
		l.step(ctx, secs(i))
		if sub.count() > n {
			cooldowns.UpCooldownUntil, cooldowns.DownCooldownUntil = secs(i).Add(g.Cooldown.Up), secs(i).Add(g.Cooldown.Down)
		}
	}
	live, err := st.Decisions(ctx, store.DecisionQuery{Group: "web"})
	if err != nil {
		t.Fatal(err)
	}
	replayed, err := Replay(ctx, g, h, secs(0), secs(3000))
	if err != nil {
		t.Fatal(err)
	}

	line := func(at time.Time, rule string, outcome decision.Outcome, code decision.Code, rec int) string {
		if outcome == decision.Accepted {
			outcome = decision.Requested
		}
		return fmt.Sprintf("%s %s %s %s %d", at.Sub(t0), rule, outcome, code, rec)
	}
	var a, b []string
	for _, d := range live {
		a = append(a, line(d.Time, d.Rule, d.Outcome, d.Code, d.Recommendation))
	}
	for _, d := range replayed {
		b = append(b, line(d.Time, d.Rule, d.Outcome, d.Code, d.Recommendation))
	}
	if strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Errorf("live decisions:\n%s\nreplayed:\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
	if len(a) < 4 {
		t.Errorf("only %d decisions; the history should make both rules and the target act:\n%s", len(a), strings.Join(a, "\n"))
	}
}
