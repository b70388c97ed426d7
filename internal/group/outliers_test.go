package group

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/event"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/store"
)

// outlierTestGroup is web with two instances in service behind a fake
// HAProxy, judging 3 consecutive 5xx, on a fake clock; judgeOutliers is
// called by hand.
func outlierTestGroup(t *testing.T) (*Group, *fakeBalancer, *fakeClock, *store.Store) {
	t.Helper()
	g, st := newTestGroup(t)
	clk := newFakeClock()
	g.clk = clk
	c := g.conf()
	c.Outliers = &config.Outliers{Consecutive5xx: 3, MaxEjected: 50, EjectFor: 10 * time.Second}
	g.live.Store(&c)
	lb := &fakeBalancer{ev: &events{}, servers: map[string]haproxy.ServerStat{}, drains: map[string]time.Duration{}}
	g.lb = lb
	for i, n := range []string{"web-001", "web-002"} {
		g.insts[n] = &instance{name: n, index: i + 1, state: InService, retire: make(chan struct{})}
		lb.setStat(haproxy.ServerStat{Name: n, Status: "UP"})
	}
	return g, lb, clk, st
}

// answered makes HAProxy's counters of name say it answered req requests,
// errs of them 5xx, in all.
func answered(lb *fakeBalancer, name string, req, errs int64) {
	st := haproxy.ServerStat{Name: name, Status: "UP", Requests: req}
	st.Responses[5] = errs
	lb.setStat(st)
}

func outlierEvents(t *testing.T, st *store.Store) []string {
	t.Helper()
	ds, err := st.Decisions(context.Background(), store.DecisionQuery{Group: "web"})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range ds {
		out = append(out, d.Rule+"."+string(d.Code)+" "+strings.Join(d.Sources, ","))
	}
	slices.Sort(out)
	return out
}

// TestEjectAndReturn: an outlier is drained in HAProxy, marked in status,
// recorded, and undrained after eject_for.
func TestEjectAndReturn(t *testing.T) {
	g, lb, clk, st := outlierTestGroup(t)
	ctx := context.Background()
	g.judgeOutliers(ctx)
	answered(lb, "web-001", 3, 3)
	clk.Advance(time.Second)
	g.judgeOutliers(ctx)
	if got := lb.ev.of("web-001"); !slices.Equal(got, []string{"drain"}) {
		t.Fatalf("HAProxy calls for web-001: %v, want a drain", got)
	}
	s := g.Status(ctx)
	if s.Instances[0].EjectedUntil == nil || !s.Instances[0].EjectedUntil.Equal(clk.Now().Add(10*time.Second)) || s.Instances[1].EjectedUntil != nil {
		t.Fatalf("status: %+v", s.Instances)
	}
	if s.Instances[0].State != InService {
		t.Fatalf("an ejected instance is %s, want in-service (it keeps its place)", s.Instances[0].State)
	}
	clk.Advance(10 * time.Second)
	g.judgeOutliers(ctx)
	if got := lb.ev.of("web-001"); !slices.Equal(got, []string{"drain", "undrain"}) {
		t.Fatalf("HAProxy calls for web-001: %v, want drain, undrain", got)
	}
	if g.Status(ctx).Instances[0].EjectedUntil != nil {
		t.Fatal("still marked ejected")
	}
	if got := outlierEvents(t, st); !slices.Equal(got, []string{"instance.ejected web-001", "instance.returned web-001"}) {
		t.Fatalf("events: %v", got)
	}
}

// TestOperatorDrainWinsOverEjection: an instance an operator drains while
// it is ejected is not put back in rotation by the ejector.
func TestOperatorDrainWinsOverEjection(t *testing.T) {
	g, lb, clk, _ := outlierTestGroup(t)
	ctx := context.Background()
	g.judgeOutliers(ctx)
	answered(lb, "web-001", 3, 3)
	clk.Advance(time.Second)
	g.judgeOutliers(ctx)
	g.mu.Lock()
	in := g.insts["web-001"]
	if in.ejected.IsZero() {
		g.mu.Unlock()
		t.Fatal("web-001 not ejected")
	}
	g.holdLocked(in, Drained, marks{noReplace: true}) // shoal instances drain web-001 --no-replace
	g.mu.Unlock()
	for range 3 {
		clk.Advance(10 * time.Second)
		g.judgeOutliers(ctx)
	}
	if got := lb.ev.of("web-001"); slices.Contains(got, "undrain") {
		t.Fatalf("the ejector undrained an operator's drain: %v", got)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if in.state != Drained || !in.ejected.IsZero() {
		t.Fatalf("web-001 %s, ejected until %v", in.state, in.ejected)
	}
}

// TestOutliersReloadedAway: a reload that takes outliers out puts back
// what was ejected, and the poll ends.
func TestOutliersReloadedAway(t *testing.T) {
	g, lb, clk, st := outlierTestGroup(t)
	ctx := context.Background()
	g.judgeOutliers(ctx)
	answered(lb, "web-002", 3, 3)
	clk.Advance(time.Second)
	g.judgeOutliers(ctx)
	c := g.conf()
	c.Outliers = nil
	g.live.Store(&c)
	if g.judgeOutliers(ctx) {
		t.Fatal("the poll goes on without outliers")
	}
	if got := lb.ev.of("web-002"); !slices.Equal(got, []string{"drain", "undrain"}) {
		t.Fatalf("HAProxy calls for web-002: %v, want drain, undrain", got)
	}
	// Its record forgets the ejection too: a restart must not take it out.
	recs, err := st.Instances(ctx)
	if err != nil || len(recs) == 0 {
		t.Fatalf("records: %v, %v", recs, err)
	}
	for _, r := range recs {
		if u, at := ejectionOf(r.Marks); !u.IsZero() || at != nil {
			t.Errorf("%s's record keeps its ejection: %q", r.Name, r.Marks)
		}
	}
}

// TestEjectedThenUnhealthyIsReturned: an ejected instance that HAProxy's
// checks had DOWN meanwhile is still put back in rotation: left drained,
// it would never serve again once its checks pass.
func TestEjectedThenUnhealthyIsReturned(t *testing.T) {
	g, lb, clk, _ := outlierTestGroup(t)
	ctx := context.Background()
	g.judgeOutliers(ctx)
	answered(lb, "web-001", 3, 3)
	clk.Advance(time.Second)
	g.judgeOutliers(ctx)
	g.mu.Lock()
	g.insts["web-001"].state = Unhealthy
	g.mu.Unlock()
	clk.Advance(10 * time.Second)
	g.judgeOutliers(ctx)
	if got := lb.ev.of("web-001"); !slices.Equal(got, []string{"drain", "undrain"}) {
		t.Fatalf("HAProxy calls for web-001: %v, want drain, undrain", got)
	}
}

// An ejection's marks read back as written, beside an operator's marks,
// and a word that is not one of them is skipped.
func TestEjectionMarks(t *testing.T) {
	until := time.UnixMilli(1_796_000_000_123)
	at := []time.Time{time.UnixMilli(1_795_999_990_000), time.UnixMilli(1_795_999_999_000)}
	words := append(ejectionWords(until, at), markProtected, "ejected-at=x")
	u, got := ejectionOf(words)
	if !u.Equal(until) || len(got) != 2 || !got[0].Equal(at[0]) || !got[1].Equal(at[1]) {
		t.Fatalf("ejectionOf(%q) = %v, %v", words, u, got)
	}
	if !marksOf(words).protected {
		t.Fatal("the operator's mark is lost beside the ejection's")
	}
	if w := ejectionWords(time.Time{}, nil); len(w) != 0 {
		t.Fatalf("no ejection: %q", w)
	}
}

// TestEjectionInTheRecord: an ejection and its count are in the instance's
// record; a new detector seeded from the records (a restart of shoal)
// keeps the instance out until the recorded end and counts the next
// ejection as the second, doubled.
func TestEjectionInTheRecord(t *testing.T) {
	g, lb, clk, st := outlierTestGroup(t)
	ctx := context.Background()
	g.judgeOutliers(ctx)
	answered(lb, "web-001", 3, 3)
	clk.Advance(time.Second)
	g.judgeOutliers(ctx)
	recs, err := st.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var rec store.Instance
	for _, r := range recs {
		if r.Name == "web-001" {
			rec = r
		}
	}
	until, at := ejectionOf(rec.Marks)
	if !until.Equal(clk.Now().Add(10*time.Second).Truncate(time.Millisecond)) || len(at) != 1 {
		t.Fatalf("record of web-001: marks %q", rec.Marks)
	}

	// Restarted: the instance as Restore makes it from its record, and a
	// detector that starts afresh.
	g.mu.Lock()
	g.insts["web-001"].ejected, g.insts["web-001"].ejections = until, at
	g.mu.Unlock()
	g.ej.det = nil
	answered(lb, "web-001", 0, 0) // a new HAProxy's counters
	clk.Advance(5 * time.Second)
	g.judgeOutliers(ctx)
	if got := lb.ev.of("web-001"); slices.Contains(got, "undrain") {
		t.Fatalf("returned before the recorded end: %v", got)
	}
	clk.Advance(5 * time.Second)
	g.judgeOutliers(ctx)
	if got := lb.ev.of("web-001"); !slices.Equal(got, []string{"drain", "undrain"}) {
		t.Fatalf("HAProxy calls for web-001: %v, want drain, undrain", got)
	}
	recs, _ = st.Instances(ctx)
	for _, r := range recs {
		if u, at := ejectionOf(r.Marks); r.Name == "web-001" && (!u.IsZero() || len(at) != 1) {
			t.Fatalf("record after the return: marks %q, want the count kept and no end", r.Marks)
		}
	}
	answered(lb, "web-001", 3, 3)
	clk.Advance(time.Second)
	g.judgeOutliers(ctx)
	s := g.Status(ctx)
	if s.Instances[0].EjectedUntil == nil || !s.Instances[0].EjectedUntil.Equal(clk.Now().Add(20*time.Second)) {
		t.Fatalf("second ejection: %+v, want 20 s (doubled)", s.Instances[0])
	}
}

// TestEjectionNotified: an ejection and a return are notifications for a
// target that wants them, with the numbers in their message.
func TestEjectionNotified(t *testing.T) {
	g, lb, clk, st := outlierTestGroup(t)
	st.SetRouter(func(ev event.Event) []string { return []string{"hook"} })
	ctx := context.Background()
	g.judgeOutliers(ctx)
	answered(lb, "web-001", 3, 3)
	clk.Advance(time.Second)
	g.judgeOutliers(ctx)
	clk.Advance(10 * time.Second)
	g.judgeOutliers(ctx)
	ns, err := st.DueNotifications(ctx, "hook", time.Now().Add(time.Hour), 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range ns {
		got = append(got, string(n.Event.Type)+" "+n.Event.Subject)
		if n.Event.Type == event.InstanceEjected && !strings.Contains(n.Event.Message, "3 consecutive 5xx") {
			t.Errorf("ejection message %q lacks its numbers", n.Event.Message)
		}
	}
	if !slices.Equal(got, []string{"instance.ejected web-001", "instance.returned web-001"}) {
		t.Fatalf("notifications: %v", got)
	}
}

// TestRestoreEjected: an instance adopted with an ejection still ahead is
// drained in HAProxy at once; one whose ejection is over is not (the
// ejector's first poll records its return), and with outliers taken out of
// the config its ejection is dropped from the record (nothing would ever
// return it).
func TestRestoreEjected(t *testing.T) {
	rec := func(name string, idx int, marks []string) store.Instance {
		return store.Instance{Record: provider.Record{Group: "web", Name: name, Index: idx, ID: fmt.Sprint(1000 + idx),
			Addr: fmt.Sprintf("127.0.0.1:%d", 20000+idx), Host: "127.0.0.1"}, State: string(InService), Marks: marks}
	}
	for _, outliers := range []bool{true, false} {
		r := newReconciler(t, 2, func(r *reconciler) {
			if outliers {
				c := r.g.conf()
				c.Outliers = &config.Outliers{Consecutive5xx: 3, MaxEjected: 50, EjectFor: 10 * time.Second}
				r.g.live.Store(&c)
			}
			now := r.clk.Now()
			ahead := ejectionWords(now.Add(5*time.Second), []time.Time{now.Add(-5 * time.Second)})
			over := ejectionWords(now.Add(-time.Second), []time.Time{now.Add(-11 * time.Second)})
			r.g.Restore(context.Background(), []store.Instance{rec("web-001", 1, ahead), rec("web-002", 2, over)})
		})
		one, two := r.ev.of("web-001"), r.ev.of("web-002")
		if outliers && (!slices.Equal(one, []string{"add", "drain"}) || !slices.Equal(two, []string{"add"})) {
			t.Errorf("outliers on: HAProxy calls %q and %q; want web-001 drained, web-002 only added", one, two)
		}
		if !outliers {
			if !slices.Equal(one, []string{"add"}) {
				t.Errorf("outliers off: HAProxy calls for web-001 %q, want only add", one)
			}
			r.st.mu.Lock()
			marks := r.st.insts["web-001"].Marks
			r.st.mu.Unlock()
			if u, at := ejectionOf(marks); !u.IsZero() || at != nil {
				t.Errorf("outliers off: web-001's record keeps its ejection: %q", marks)
			}
		}
	}
}
