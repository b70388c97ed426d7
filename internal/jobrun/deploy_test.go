package jobrun

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/event"
	"github.com/shoal-lb/shoal/internal/store"
)

// TestSubmitDeployInputErrors: a deploy naming an unknown group or a
// variable the template does not declare is refused with the valid names,
// and records no job; a scale request is never a deploy.
func TestSubmitDeployInputErrors(t *testing.T) {
	cfg := ladder
	cfg.Template = config.Template{Command: []string{"app", "{{.Vars.tag}}"}, Vars: map[string]string{"tag": "v1", "mode": "a"}}
	cfg.Deploy = config.DefaultDeploy
	g := newGroup(t, cfg)
	st, err := store.Open(filepath.Join(t.TempDir(), "shoal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := NewManager(context.Background(), fixed{g}, st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()

	var in *InputError
	_, err = m.SubmitDeploy(ctx, DeployRequest{Group: "web", Set: map[string]string{"colour": "blue"}})
	if !errors.As(err, &in) || !errors.Is(err, ErrUnknownVar) || strings.Join(in.Valid, ",") != "mode,tag" || !strings.Contains(in.Msg, `unknown template variable "colour"`) {
		t.Fatalf("unknown variable: %v (%+v)", err, in)
	}
	if _, err := m.SubmitDeploy(ctx, DeployRequest{Group: "nope"}); !errors.Is(err, ErrUnknownGroup) {
		t.Fatalf("unknown group: %v", err)
	}
	if _, err := m.SubmitDeploy(ctx, DeployRequest{Group: "web", Set: map[string]string{"tag": "a\x00b"}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("NUL in a value: %v", err)
	}
	if _, err := m.Submit(ctx, Request{Group: "web", Kind: Deploy}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Submit of kind deploy: %v", err)
	}
	if list, _ := m.List(ctx, "", 10); len(list) != 0 {
		t.Fatalf("refused requests recorded jobs: %+v", list)
	}
	if m.Running("web") != "" {
		t.Fatalf("a job runs: %s", m.Running("web"))
	}
}

// TestIgnoredDeployIsAnEvent: a deploy refused because another job runs is
// recorded in the group's event log with its reason, so `shoal events`, the
// dashboard and the notifications (deploy.ignored) tell it.
func TestIgnoredDeployIsAnEvent(t *testing.T) {
	cfg := ladder
	cfg.Template = config.Template{Command: []string{"app"}}
	cfg.Deploy = config.DefaultDeploy
	g := newGroup(t, cfg)
	st, err := store.Open(filepath.Join(t.TempDir(), "shoal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := NewManager(context.Background(), fixed{g}, st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	m.mu.Lock()
	m.running["web"] = "41" // a scale job, as far as the deploy can tell
	m.mu.Unlock()
	j, err := m.SubmitDeploy(ctx, DeployRequest{Group: "web", Source: "cli"})
	if err != nil || j.State != Ignored {
		t.Fatalf("deploy while job 41 runs: %+v, %v; want ignored", j, err)
	}
	recs, err := st.Decisions(ctx, store.DecisionQuery{Group: "web"})
	if err != nil {
		t.Fatal(err)
	}
	var got []event.Event
	for _, r := range recs {
		if ev, ok := event.FromDecision(r); ok {
			got = append(got, ev)
		}
	}
	if len(got) != 1 || got[0].Type != event.DeployIgnored || got[0].JobID != j.ID ||
		!strings.Contains(got[0].Message, "another job (41) is running for group web") {
		t.Fatalf("events %+v, want one deploy.ignored of job %s with its reason", got, j.ID)
	}
}
