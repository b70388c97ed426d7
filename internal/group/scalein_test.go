package group

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/provider"
)

// scaleInGroup is a group of web-001..web-003 in service where web-001 is
// the newest: it replaced a failed instance, reusing the lowest free index.
// web-002 is the oldest.
func scaleInGroup(t *testing.T, policy string, lb Balancer) *Group {
	t.Helper()
	g, _ := newTestGroup(t)
	c := g.conf()
	c.ScaleIn = policy
	g.live.Store(&c)
	g.lb = lb
	t0 := time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC)
	for _, x := range []struct {
		name  string
		index int
		ago   time.Duration
	}{{"web-001", 1, 0}, {"web-002", 2, 2 * time.Hour}, {"web-003", 3, time.Hour}} {
		g.insts[x.name] = &instance{name: x.name, index: x.index, state: InService, retire: make(chan struct{}),
			rec: provider.Record{StartedAt: t0.Add(-x.ago)}}
	}
	return g
}

func order(active []*instance, policy string, sessions map[string]int) string {
	var names []string
	for _, p := range scaleInOrder(active, policy, sessions) {
		names = append(names, p.in.name)
	}
	return strings.Join(names, " ")
}

// TestScaleInOrder (issue 22 item 7): scale-in picks by start time, not by
// index, which is reused; instances that serve nobody always go first.
func TestScaleInOrder(t *testing.T) {
	g := scaleInGroup(t, config.ScaleInNewest, nil)
	active := g.activeLocked()
	busy := map[string]int{"web-001": 5, "web-002": 1, "web-003": 1}
	for _, tc := range []struct {
		policy string
		want   string
	}{
		{config.ScaleInNewest, "web-001 web-003 web-002"},
		{config.ScaleInOldest, "web-002 web-003 web-001"},
		// web-002 and web-003 tie at 1 session: the newer, web-003, goes.
		{config.ScaleInLeastBusy, "web-003 web-002 web-001"},
	} {
		if got := order(active, tc.policy, busy); got != tc.want {
			t.Errorf("scale_in %s: order %s, want %s", tc.policy, got, tc.want)
		}
	}

	// A starting and an unhealthy instance go first, whatever the policy.
	starting := &instance{name: "web-004", index: 4, state: Starting, since: time.Now(), retire: make(chan struct{})}
	down := &instance{name: "web-005", index: 5, state: Unhealthy, retire: make(chan struct{}),
		rec: provider.Record{StartedAt: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}}
	active = append(active, down, starting)
	for _, policy := range config.ScaleInPolicies {
		if got := order(active, policy, busy); !strings.HasPrefix(got, "web-004 web-005 ") {
			t.Errorf("scale_in %s: order %s, want the starting web-004, then the unhealthy web-005, first", policy, got)
		}
	}
}

// TestScaleInRetirementsSayWhy: SetDesired retires at once and the job's
// retirements name the instance and why.
func TestScaleInRetirementsSayWhy(t *testing.T) {
	for _, tc := range []struct {
		policy string
		lb     Balancer
		want   string
		why    string
	}{
		{config.ScaleInNewest, nil, "web-001", "scale_in newest: in service, started last (2026-11-25T06:00:00Z)"},
		{config.ScaleInOldest, nil, "web-002", "scale_in oldest: in service, started first (2026-11-25T04:00:00Z)"},
		{config.ScaleInLeastBusy, statsOnly{stats: []haproxy.ServerStat{{Name: "web-001", Sessions: 3}, {Name: "web-002", Sessions: 0}, {Name: "web-003", Sessions: 7}}},
			"web-002", "scale_in least_busy: in service, 0 sessions (web-001 has 3, web-003 has 7), started 2026-11-25T04:00:00Z"},
		{config.ScaleInLeastBusy, statsDown{}, "web-001",
			"scale_in newest: in service, started last (2026-11-25T06:00:00Z) (least_busy had no session counts from HAProxy)"},
	} {
		g := scaleInGroup(t, tc.policy, tc.lb)
		m := g.Mark()
		if err := g.SetDesired(context.Background(), 2); err != nil {
			t.Fatal(err)
		}
		r := g.Retirements(m)
		if len(r) != 1 || r[0].Instance != tc.want || r[0].Reason != tc.why {
			t.Errorf("scale_in %s: retirements %+v, want %s: %s", tc.policy, r, tc.want, tc.why)
			continue
		}
		select {
		case <-g.insts[tc.want].retire:
		default:
			t.Errorf("scale_in %s: %s was not asked to retire", tc.policy, tc.want)
		}
		if other := g.Retirements(Mark{job: m.job + 1}); len(other) != 0 {
			t.Errorf("another job's retirements: %+v", other)
		}
	}
}

// statsDown is a Balancer whose HAProxy cannot be reached.
type statsDown struct{ statsOnly }

func (statsDown) Stats(context.Context, string) ([]haproxy.ServerStat, error) {
	return nil, errors.New("haproxy is not running")
}

// TestScaleInReportsEveryRetirement: a large scale-in names every instance
// it retires, and a later job sees only its own.
func TestScaleInReportsEveryRetirement(t *testing.T) {
	g, _ := newTestGroup(t)
	c := g.conf()
	c.MaxSize, c.ScaleIn = 30, config.ScaleInNewest
	g.live.Store(&c)
	for i := range 30 {
		name := fmt.Sprintf("web-%03d", i+1)
		g.insts[name] = &instance{name: name, index: i + 1, state: InService, retire: make(chan struct{})}
	}
	m := g.Mark()
	if err := g.SetDesired(context.Background(), 5); err != nil {
		t.Fatal(err)
	}
	if r := g.Retirements(m); len(r) != 25 || r[0].Instance != "web-030" || r[24].Instance != "web-006" {
		t.Fatalf("%d retirements (first %+v); want 25, web-030 to web-006", len(r), r[:min(len(r), 1)])
	}
	for name, in := range g.insts {
		if in.retiring {
			delete(g.insts, name) // gone, as their lifecycles would make them
		}
	}
	m2 := g.Mark()
	if err := g.SetDesired(context.Background(), 4); err != nil {
		t.Fatal(err)
	}
	if r := g.Retirements(m2); len(r) != 1 || r[0].Instance != "web-005" {
		t.Fatalf("second job's retirements %+v; want web-005 alone", r)
	}
	if r := g.Retirements(m); len(r) != 0 {
		t.Fatalf("the first job's retirements are still kept: %d", len(r))
	}
}
