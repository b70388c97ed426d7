package jobrun

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/store"
)

// TestWake: a wake moves a group at 0 to its wake size (the first plan with
// an instance) even in the scale-up cooldown, since requests wait for it;
// an up in the same cooldown is held back, and a group that is awake is not
// woken again.
func TestWake(t *testing.T) {
	cfg := config.Group{Name: "web", MinSize: 0, MaxSize: 6, Cooldown: config.Cooldown{Up: time.Hour, Down: time.Hour},
		Plans:       []config.Plan{{Name: "off", Size: 0}, {Name: "small", Size: 2}, {Name: "big", Size: 6}},
		ScaleToZero: &config.ScaleToZero{IdleAfter: time.Minute, MaxQueue: 10}}
	g := newGroup(t, cfg) // no reconciler: the accepted job does not converge
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
	if err := g.StartCooldowns(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}

	j, err := m.Submit(ctx, Request{Group: "web", Kind: Up})
	if err != nil || j.State != Ignored || !strings.Contains(j.Reason, "scale-up cooldown") {
		t.Fatalf("up in the cooldown = %+v, %v; want ignored for the cooldown", j, err)
	}
	j, err = m.Submit(ctx, Request{Group: "web", Kind: Wake, Source: "scale_to_zero:wake"})
	if err != nil || j.State != Accepted || j.From != 0 || j.Target != 2 {
		t.Fatalf("wake in the cooldown = %+v, %v; want accepted 0 → 2", j, err)
	}
	if _, err := m.Wait(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if g.Desired() != 2 {
		t.Fatalf("desired %d after the wake, want 2", g.Desired())
	}
	j, err = m.Submit(ctx, Request{Group: "web", Kind: Wake})
	if err != nil || j.State != Ignored || !strings.Contains(j.Reason, "the group is awake (size 2)") {
		t.Fatalf("wake of an awake group = %+v, %v; want ignored", j, err)
	}
}
