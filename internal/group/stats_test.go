package group

import (
	"context"
	"errors"
	"testing"

	"github.com/shoal-lb/shoal/internal/haproxy"
)

// TestStatsCache: one answer of HAProxy serves every read within maxAge,
// an error too; a read maxAge later fetches anew.
func TestStatsCache(t *testing.T) {
	clk := newFakeClock()
	fetches := 0
	answer := []haproxy.ServerStat{{Name: "web-001", Status: "UP"}, {Name: "web-002", Status: "DOWN"}}
	var fail error
	c := newStatsCache(func(context.Context) ([]haproxy.ServerStat, error) {
		fetches++
		return answer, fail
	}, clk, statsMaxAge)
	ctx := context.Background()

	if st, ok := c.server(ctx, "web-002"); !ok || st.Status != "DOWN" || fetches != 1 {
		t.Fatalf("first read: %+v %v after %d fetches, want web-002 DOWN after 1", st, ok, fetches)
	}
	if st, ok := c.server(ctx, "web-001"); !ok || st.Status != "UP" || fetches != 1 {
		t.Fatalf("read within maxAge: %+v %v after %d fetches, want web-001 UP from the same answer", st, ok, fetches)
	}
	if _, ok := c.server(ctx, "web-003"); ok {
		t.Fatal("a server HAProxy does not have was found")
	}

	clk.Advance(statsMaxAge - 1)
	answer = []haproxy.ServerStat{{Name: "web-001", Status: "DOWN"}}
	if st, _ := c.server(ctx, "web-001"); st.Status != "UP" || fetches != 1 {
		t.Fatalf("read just before maxAge: %s after %d fetches, want the cached UP", st.Status, fetches)
	}
	clk.Advance(1)
	if st, _ := c.server(ctx, "web-001"); st.Status != "DOWN" || fetches != 2 {
		t.Fatalf("read at maxAge: %s after %d fetches, want a new answer, DOWN", st.Status, fetches)
	}

	// HAProxy restarting: no news for anyone, and asked once per maxAge.
	clk.Advance(statsMaxAge)
	fail = errors.New("connection refused")
	for range 3 {
		if _, ok := c.server(ctx, "web-001"); ok {
			t.Fatal("a server was found in a failed answer")
		}
	}
	if fetches != 3 {
		t.Fatalf("%d fetches, want 3: a failed answer is cached too", fetches)
	}
}
