package store

import (
	"context"
	"database/sql"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/decision"
)

func TestDecisions(t *testing.T) {
	s, path := openTest(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

	want := decision.Record{Group: "web", Time: t0.Add(500 * time.Millisecond), Rule: "hot",
		Sources: []string{"hot", "target"}, Values: map[string]float64{"cpu.avg": 81.5, "ready": 2},
		Current: 2, Recommendation: 3, Request: &decision.Request{Kind: "up", Source: decision.SourcePrefix + "hot"}, Outcome: decision.Accepted, Code: "job",
		Reason: "cpu.avg above 75 for 1m", JobID: "7"}
	d := want
	if err := s.InsertDecision(ctx, &d); err != nil {
		t.Fatal(err)
	}
	if d.ID == 0 {
		t.Fatal("InsertDecision did not set the id")
	}
	for i := 1; i <= 4; i++ {
		other := decision.Record{Group: "web", Time: t0.Add(time.Duration(i) * time.Minute), Rule: "cold", Outcome: decision.Nothing, Code: "cooldown"}
		if i == 3 {
			other.Outcome = decision.Accepted
		}
		if err := s.InsertDecision(ctx, &other); err != nil {
			t.Fatal(err)
		}
		api := decision.Record{Group: "api", Time: t0.Add(time.Duration(i) * time.Minute), Rule: "target", Outcome: decision.Nothing}
		if err := s.InsertDecision(ctx, &api); err != nil {
			t.Fatal(err)
		}
	}

	all, err := s.Decisions(ctx, DecisionQuery{Group: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 5 {
		t.Fatalf("got %d decisions of web, want 5", len(all))
	}
	want.ID = d.ID
	if !reflect.DeepEqual(all[0], want) {
		t.Errorf("decision round trip:\n got %+v\nwant %+v", all[0], want)
	}
	for i := 1; i < len(all); i++ {
		if all[i].ID <= all[i-1].ID {
			t.Errorf("decisions not oldest first: %d after %d", all[i].ID, all[i-1].ID)
		}
	}

	since, err := s.Decisions(ctx, DecisionQuery{Group: "web", Since: t0.Add(2 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if len(since) != 3 || !since[0].Time.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("since 10:02: %d decisions starting %v, want 3 from 10:02", len(since), since)
	}

	newest, err := s.Decisions(ctx, DecisionQuery{Group: "web", Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(newest) != 2 || newest[1].ID != all[4].ID || newest[0].ID != all[3].ID {
		t.Errorf("limit 2 = %+v, want the newest two, oldest first", newest)
	}
	follow, err := s.Decisions(ctx, DecisionQuery{Group: "web", AfterID: all[1].ID, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(follow) != 2 || follow[0].ID != all[2].ID || follow[1].ID != all[3].ID {
		t.Errorf("after %d limit 2 = %+v, want the next two", all[1].ID, follow)
	}
	every, err := s.Decisions(ctx, DecisionQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(every) != 9 {
		t.Errorf("all groups: %d decisions, want 9", len(every))
	}

	last, err := s.LastDecisionTimes(ctx, "web", decision.Accepted)
	if err != nil {
		t.Fatal(err)
	}
	wantLast := map[string]time.Time{"hot": want.Time, "cold": t0.Add(3 * time.Minute)}
	if len(last) != 2 || !last["hot"].Equal(wantLast["hot"]) || !last["cold"].Equal(wantLast["cold"]) {
		t.Errorf("LastDecisionTimes = %v, want %v", last, wantLast)
	}

	// Decisions survive a reopen.
	s.Close()
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	again, err := s2.Decisions(ctx, DecisionQuery{Group: "web"})
	if err != nil || len(again) != 5 {
		t.Errorf("after reopen: %d decisions, %v", len(again), err)
	}
}

func TestDecisionsPrunePerGroup(t *testing.T) {
	s, _ := openTest(t)
	s.maxDecisions = 3
	ctx := context.Background()
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	quiet := decision.Record{Group: "quiet", Time: at, Rule: "r", Outcome: decision.Nothing}
	if err := s.InsertDecision(ctx, &quiet); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for i := range 10 {
		d := decision.Record{Group: "busy", Time: at.Add(time.Duration(i) * time.Second), Rule: "r", Outcome: decision.Nothing}
		if err := s.InsertDecision(ctx, &d); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, d.ID)
	}
	busy, err := s.Decisions(ctx, DecisionQuery{Group: "busy"})
	if err != nil {
		t.Fatal(err)
	}
	if len(busy) != 3 || busy[0].ID != ids[7] {
		t.Errorf("busy keeps %d decisions from id %v, want the newest 3 (from %d)", len(busy), busy, ids[7])
	}
	// A busy group does not push out another group's history.
	q, err := s.Decisions(ctx, DecisionQuery{Group: "quiet"})
	if err != nil || len(q) != 1 {
		t.Errorf("quiet group kept %d decisions, want 1 (%v)", len(q), err)
	}
}

// TestDecisionsUngrouped: a group's query with Ungrouped adds the events of
// no group (an HAProxy restart) and no other group's, in id order, and
// follows them by id.
func TestDecisionsUngrouped(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	var ids []int64
	for i, g := range []string{"web", "", "api", "web"} {
		d := decision.Record{Group: g, Time: at.Add(time.Duration(i) * time.Second), Rule: "r", Outcome: decision.Event}
		if err := s.InsertDecision(ctx, &d); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, d.ID)
	}
	for _, tc := range []struct {
		q    DecisionQuery
		want []int64
	}{
		{DecisionQuery{Group: "web"}, []int64{ids[0], ids[3]}},
		{DecisionQuery{Group: "web", Ungrouped: true}, []int64{ids[0], ids[1], ids[3]}},
		{DecisionQuery{Group: "web", Ungrouped: true, AfterID: ids[0]}, []int64{ids[1], ids[3]}},
	} {
		recs, err := s.Decisions(ctx, tc.q)
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, r := range recs {
			got = append(got, r.ID)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%+v: ids %v, want %v", tc.q, got, tc.want)
		}
	}
}

// TestMigrateFromVersion1 opens a database written before decisions existed.
func TestMigrateFromVersion1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range migrations[0] {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`INSERT INTO group_state (name, desired) VALUES ('web', 3)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`PRAGMA user_version = 1`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g, ok, err := s.GroupState(context.Background(), "web")
	if err != nil || !ok || g.Desired != 3 {
		t.Errorf("group state after migration = %+v, %v, %v", g, ok, err)
	}
	d := decision.Record{Group: "web", Time: time.Now(), Rule: "r", Outcome: decision.Nothing}
	if err := s.InsertDecision(context.Background(), &d); err != nil {
		t.Errorf("insert after migration: %v", err)
	}
}
