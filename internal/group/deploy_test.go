package group

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/store"
)

func olds(serving ...bool) []oldInstance {
	var out []oldInstance
	for i, s := range serving {
		out = append(out, oldInstance{Name: fmt.Sprintf("web-%03d", i+1), Serving: s})
	}
	return out
}

func TestPlanDeploy(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    deployView
		want deployStep
	}{
		{"start: surge one, retire nothing",
			deployView{Desired: 4, MaxSurge: 1, Old: olds(true, true, true, true)},
			deployStep{Surge: 1}},
		{"a new one is ready: retire one old, keep surging",
			deployView{Desired: 4, MaxSurge: 1, Old: olds(true, true, true, true), NewActive: 1, NewReady: 1},
			deployStep{Surge: 1, Retire: []string{"web-001"}}},
		{"a new one starting only: nothing to retire",
			deployView{Desired: 4, MaxSurge: 1, Old: olds(true, true, true), NewActive: 2, NewReady: 1},
			deployStep{Surge: 1}},
		{"last old retired: no surge left, no extra instance",
			deployView{Desired: 4, MaxSurge: 1, Old: olds(true), NewActive: 4, NewReady: 4},
			deployStep{Surge: 0, Retire: []string{"web-001"}}},
		{"surge two",
			deployView{Desired: 4, MaxSurge: 2, Old: olds(true, true, true, true)},
			deployStep{Surge: 2}},
		{"surge never exceeds the old ones left",
			deployView{Desired: 4, MaxSurge: 3, Old: olds(true), NewActive: 3, NewReady: 2},
			deployStep{Surge: 1}},
		{"max_unavailable: retire before anything new is ready",
			deployView{Desired: 4, MaxUnavailable: 1, Old: olds(true, true, true, true)},
			deployStep{Surge: 0, Retire: []string{"web-001"}}},
		{"max_unavailable reached: wait",
			deployView{Desired: 4, MaxUnavailable: 1, Old: olds(true, true, true), NewActive: 1},
			deployStep{Surge: 0}},
		{"old ones that serve nobody go at once",
			deployView{Desired: 3, MaxSurge: 1, Old: olds(false, true, true)},
			deployStep{Surge: 1, Retire: []string{"web-001"}}},
		{"done",
			deployView{Desired: 4, MaxSurge: 1, NewActive: 4, NewReady: 4},
			deployStep{Done: true}},
		{"not done while a new one is not ready",
			deployView{Desired: 4, MaxSurge: 1, NewActive: 4, NewReady: 3},
			deployStep{}},
		{"empty group",
			deployView{Desired: 0, MaxSurge: 1},
			deployStep{Done: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := planDeploy(tc.v)
			if got.Surge != tc.want.Surge || got.Done != tc.want.Done || !slices.Equal(got.Retire, tc.want.Retire) {
				t.Fatalf("planDeploy(%+v) = %+v, want %+v", tc.v, got, tc.want)
			}
		})
	}
}

// TestPlanDeploySimulated runs the planner against a model of the
// reconciler (it starts surge instances beyond desired; new ones become
// ready one step later; retired ones leave) and checks that serving
// instances never fall below desired − max_unavailable, that no more than
// desired + max_surge are active, and that the deploy ends with every
// instance new.
func TestPlanDeploySimulated(t *testing.T) {
	for _, c := range []struct{ desired, surge, unavail int }{{4, 1, 0}, {4, 2, 0}, {4, 0, 1}, {5, 2, 1}, {1, 1, 0}, {3, 3, 0}} {
		t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
			old := olds(slices.Repeat([]bool{true}, c.desired)...)
			starting, ready := 0, 0
			for step := 0; ; step++ {
				if step > 100 {
					t.Fatal("no progress after 100 steps")
				}
				v := deployView{Desired: c.desired, MaxSurge: c.surge, MaxUnavailable: c.unavail, Old: old, NewActive: starting + ready, NewReady: ready}
				s := planDeploy(v)
				if s.Done {
					if ready != c.desired || len(old) != 0 {
						t.Fatalf("done with %d ready and %d old", ready, len(old))
					}
					return
				}
				old = slices.DeleteFunc(old, func(o oldInstance) bool { return slices.Contains(s.Retire, o.Name) })
				if serving := len(old) + ready; serving < c.desired-c.unavail {
					t.Fatalf("step %d: %d serving, below %d", step, serving, c.desired-c.unavail)
				}
				// The started ones of the last step are ready now; the
				// reconciler starts what desired + surge asks for.
				ready += starting
				starting = max(0, c.desired+s.Surge-len(old)-ready)
				if active := len(old) + ready + starting; active > c.desired+c.surge {
					t.Fatalf("step %d: %d active, above %d", step, active, c.desired+c.surge)
				}
			}
		})
	}
}

func TestFailStreak(t *testing.T) {
	// Checks every 300ms taking up to 1s: the second of fall 2 ends at most
	// 1.3s after the first, and the stats are read every 200ms (250ms old).
	h := config.Health{Interval: 300 * time.Millisecond, Timeout: time.Second, Fall: 2}
	var f failStreak
	t0 := time.Now()
	bad := haproxy.ServerStat{CheckStatus: "L7STS", CheckCode: 500}
	if f.observe(haproxy.ServerStat{CheckStatus: "L4CON"}, h, t0) {
		t.Fatal("a refused connection counts as an answer")
	}
	// One bad answer stays in the stats until the next check ends: it
	// must not count twice.
	if f.observe(bad, h, t0) || f.observe(bad, h, t0.Add(1200*time.Millisecond)) {
		t.Fatal("failed before fall checks can have ended")
	}
	if f.observe(haproxy.ServerStat{CheckStatus: "L7OK"}, h, t0.Add(1300*time.Millisecond)) {
		t.Fatal("a passing check failed it")
	}
	if f.observe(bad, h, t0.Add(1400*time.Millisecond)) {
		t.Fatal("a passing check did not restart the streak")
	}
	if !f.observe(bad, h, t0.Add(3200*time.Millisecond)) { // 1.3 s + a poll + the answers' 250 ms of age after 1.4 s
		t.Fatal("fall failing answers in a row did not fail it")
	}
	one := config.Health{Interval: time.Second, Timeout: time.Second, Fall: 1}
	var g failStreak
	if g.observe(bad, one, t0); !g.observe(bad, one, t0.Add(450*time.Millisecond)) {
		t.Fatal("with fall 1, one bad answer did not fail it")
	}
	if got := checkReason(bad); got != "HTTP 500" {
		t.Fatalf("checkReason = %q, want HTTP 500", got)
	}
}

// TestServingTemplate: the variables of the last deploy survive a restart
// (they are stored with the group's state); a reload, or a restart with an
// edited config, changes what the next deploy rolls out (dropping variables
// the new template no longer declares) but never the serving template,
// which is stored; a successful deploy makes its template the serving one.
func TestServingTemplate(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "shoal.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	if err := st.PutGroupState(ctx, store.GroupState{Name: "web", Desired: 1, TemplateVars: `{"tag":"v2"}`}); err != nil {
		t.Fatal(err)
	}
	base := config.Template{Command: []string{"app", "{{.Vars.tag}}", "{{.Vars.mode}}"}, Vars: map[string]string{"tag": "v1", "mode": "a"}}
	cfg := config.Group{Name: "web", MinSize: 1, MaxSize: 3, Template: base, Deploy: config.DefaultDeploy}
	g, err := New(ctx, cfg, nil, statsOnly{}, st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	// No serving template was stored: the configured one, with the
	// deployed variables, serves.
	serving := g.Version()
	if g.Template().Vars["tag"] != "v2" || serving == base.Version("web") || g.Status(ctx).Configured != "" {
		t.Fatalf("restored template vars %v, version %s (base %s), configured %q", g.Template().Vars, serving, base.Version("web"), g.Status(ctx).Configured)
	}
	target, err := g.DeployTarget(map[string]string{"mode": "b"})
	if err != nil || target.Vars["tag"] != "v2" || target.Vars["mode"] != "b" {
		t.Fatalf("DeployTarget = %v, %v; want tag v2 kept and mode b", target.Vars, err)
	}
	var unknown *config.UnknownVarError
	if _, err := g.DeployTarget(map[string]string{"colour": "x"}); !errors.As(err, &unknown) {
		t.Fatalf("DeployTarget with an unknown variable: %v", err)
	}

	// A reload that still declares mode but no longer tag.
	reloaded := config.Template{Command: []string{"app2", "{{.Vars.mode}}"}, Vars: map[string]string{"mode": "a"}}
	cfg.Template = reloaded
	g.Update(ctx, cfg)
	if g.Version() != serving || g.Template().Command[0] != "app" || g.Status(ctx).Configured != reloaded.Version("web") {
		t.Fatalf("after a reload: serving %s %v, configured %q; want %s still serving and %s configured",
			g.Version(), g.Template().Command, g.Status(ctx).Configured, serving, reloaded.Version("web"))
	}
	if next, _ := g.DeployTarget(nil); next.Command[0] != "app2" || len(next.Overrides()) != 0 {
		t.Fatalf("the next deploy would roll out %v with overrides %v, want the reloaded template without tag", next.Command, next.Overrides())
	}

	// A restart with the reloaded config (or an edit before a restart)
	// finds the serving template in the store.
	g2, err := New(ctx, cfg, nil, statsOnly{}, st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if g2.Version() != serving || g2.Template().Command[0] != "app" || g2.Template().Vars["tag"] != "v2" {
		t.Fatalf("after a restart: serving %s %v %v, want %s", g2.Version(), g2.Template().Command, g2.Template().Vars, serving)
	}

	// A deploy that succeeds makes its template the serving one, stored.
	next, err := g2.DeployTarget(map[string]string{"mode": "c"})
	if err != nil {
		t.Fatal(err)
	}
	if err := g2.setServing(ctx, next, next.Version("web")); err != nil {
		t.Fatal(err)
	}
	g3, err := New(ctx, cfg, nil, statsOnly{}, st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if g3.Version() != next.Version("web") || g3.Status(ctx).Configured != "" {
		t.Fatalf("after a deploy and a restart: serving %s, configured %q; want %s on both", g3.Version(), g3.Status(ctx).Configured, next.Version("web"))
	}
}

// TestRemovedGroupForgetsServingTemplate: a group a reload removes keeps no
// serving template, so added back later it starts from its configured one
// rather than from what served before its removal.
func TestRemovedGroupForgetsServingTemplate(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "shoal.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	cfg := config.Group{Name: "web", MinSize: 0, MaxSize: 3, Template: config.Template{Command: []string{"app1"}}, Deploy: config.DefaultDeploy}
	g, err := New(ctx, cfg, nil, statsOnly{}, st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.RetireAll(ctx); err != nil {
		t.Fatal(err)
	}
	cfg.Template = config.Template{Command: []string{"app2"}}
	g2, err := New(ctx, cfg, nil, statsOnly{}, st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if g2.Template().Command[0] != "app2" {
		t.Fatalf("the group added back serves %v, want its configured template", g2.Template().Command)
	}
}
