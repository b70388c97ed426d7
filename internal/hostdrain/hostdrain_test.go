package hostdrain

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeReplacer records the replacements asked for, failing the named ones.
type fakeReplacer struct {
	asked []string
	fail  map[string]error
}

func (f *fakeReplacer) Replace(_ context.Context, group, name string) error {
	f.asked = append(f.asked, group+"/"+name)
	return f.fail[name]
}

func TestDrain(t *testing.T) {
	r := &fakeReplacer{fail: map[string]error{"web-3": errors.New("the new instance failed its health gate")}}
	// api's budget is refused twice, then allowed; db's never.
	refusals := 2
	budget := func(group string) (bool, string) {
		switch group {
		case "api":
			if refusals > 0 {
				refusals--
				return false, "1 of max 1 unavailable"
			}
		case "db":
			return false, "outside window Mon-Fri 02:00-05:00 Asia/Tokyo"
		}
		return true, ""
	}
	var progress []string
	d := Drain{
		Host: "h1",
		Instances: []Instance{
			{"web", "web-1"}, {"api", "api-1"}, {"db", "db-1"}, {"web", "web-3"},
		},
		Replacer: r, Budget: budget, Poll: time.Millisecond, MaxWait: 50 * time.Millisecond,
		Progress: func(rep Report) { progress = append(progress, rep.Progress) },
	}
	rep := d.Run(t.Context())
	if want := []string{"web/web-1", "api/api-1", "web/web-3"}; !slices.Equal(r.asked, want) {
		t.Errorf("replaced %v, want %v (one at a time, db never)", r.asked, want)
	}
	if want := []Instance{{"web", "web-1"}, {"api", "api-1"}}; !slices.Equal(rep.Moved, want) {
		t.Errorf("moved %v, want %v", rep.Moved, want)
	}
	if len(rep.Left) != 2 ||
		rep.Left[0].Name != "db-1" || rep.Left[0].Reason != "waited 50ms for the disruption budget of group db: outside window Mon-Fri 02:00-05:00 Asia/Tokyo" ||
		rep.Left[1].Name != "web-3" || rep.Left[1].Reason != "replace failed: the new instance failed its health gate" {
		t.Errorf("left %+v", rep.Left)
	}
	if !slices.Contains(progress, "2/4: api-1 waits: 1 of max 1 unavailable") || progress[len(progress)-1] != "" {
		t.Errorf("progress %q", progress)
	}
}

func TestDrainInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancelCause(t.Context())
	r := &fakeReplacer{}
	d := Drain{
		Instances: []Instance{{"web", "web-1"}, {"web", "web-2"}, {"web", "web-3"}},
		Replacer:  r, Poll: time.Millisecond, MaxWait: time.Hour,
		Budget: func(string) (bool, string) {
			if len(r.asked) == 1 {
				cancel(errors.New("shoal is stopping"))
				return false, "1 of max 1 unavailable"
			}
			return true, ""
		},
	}
	rep := d.Run(ctx)
	if len(rep.Moved) != 1 || len(rep.Left) != 2 ||
		!strings.HasPrefix(rep.Left[0].Reason, "drain interrupted while waiting") ||
		rep.Left[1].Reason != "drain interrupted: shoal is stopping" {
		t.Errorf("report %+v", rep)
	}
}
