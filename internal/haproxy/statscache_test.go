package haproxy

import (
	"context"
	"testing"
)

// TestServerStatsOneAnswer: one answer of every backend serves each
// backend's servers and its own line (what `shoal status` reads for 50
// groups) until it is StatsMaxAge old or a change is made.
func TestServerStatsOneAnswer(t *testing.T) {
	fetches := 0
	fetch := func(context.Context) ([]ServerStat, error) {
		fetches++
		return []ServerStat{
			{Backend: "web", Type: TypeBackend, Queue: 3},
			{Backend: "web", Name: "web-1", Type: TypeServer},
			{Backend: "web", Name: "web-2", Type: TypeServer},
			{Backend: "api", Type: TypeBackend},
			{Backend: "api", Name: "api-1", Type: TypeServer},
		}, nil
	}
	var c serverStats
	ctx := context.Background()
	web, err := c.backend(ctx, "web", fetch)
	if err != nil || len(web) != 2 || web[0].Name != "web-1" {
		t.Fatalf("web's servers = %+v, %v", web, err)
	}
	b, ok, err := c.backendLine(ctx, "web", fetch)
	if err != nil || !ok || b.Queue != 3 {
		t.Fatalf("web's own line = %+v, %v, %v", b, ok, err)
	}
	if api, _ := c.backend(ctx, "api", fetch); len(api) != 1 {
		t.Fatalf("api's servers = %+v", api)
	}
	if _, ok, _ := c.backendLine(ctx, "gone", fetch); ok {
		t.Fatal("a backend HAProxy does not have has a line")
	}
	if fetches != 1 {
		t.Fatalf("%d show stats for four reads within %v, want 1", fetches, StatsMaxAge)
	}
	c.forget()
	if _, err := c.backend(ctx, "web", fetch); err != nil || fetches != 2 {
		t.Fatalf("after a change: %d show stats (%v), want a new one", fetches, err)
	}
}
