package store

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/job"
)

// TestReadsDatabaseOfOldShapes opens testdata/before-i23-shapes.db, written
// by the store before decisions and jobs had one shape each (store.Decision,
// store.Job): the schema did not change, and every row reads back as the
// record it was.
func TestReadsDatabaseOfOldShapes(t *testing.T) {
	s := openCopy(t, "before-i23-shapes.db")
	ctx := context.Background()
	at := time.Date(2026, 11, 23, 9, 0, 0, 500_000_000, time.UTC)

	ds, err := s.Decisions(ctx, DecisionQuery{Group: "web"})
	if err != nil {
		t.Fatal(err)
	}
	wantDs := []decision.Record{
		{ID: 1, Group: "web", Time: at, Rule: "hot", Sources: []string{"hot", "target"}, Values: map[string]float64{"web.cpu": 91.5},
			Current: 2, Recommendation: 3, Request: &decision.Request{Kind: job.Up, Source: decision.SourcePrefix + "hot"},
			Outcome: decision.Accepted, Code: "scale", Reason: "hot", JobID: "1"},
		{ID: 2, Group: "web", Time: at.Add(time.Second), Rule: "target", Current: 3, Recommendation: 3,
			Outcome: decision.Nothing, Code: "tolerance", Reason: "band"},
		{ID: 3, Group: "web", Time: at.Add(2 * time.Second), Rule: "deploy", Sources: []string{"cli"}, Current: 3, Recommendation: 3,
			Request: &decision.Request{Kind: job.Deploy, Source: decision.SourcePrefix + "deploy"},
			Outcome: decision.Deploy, Code: "done", Reason: "deploy of version abc (job 2) done", JobID: "2"},
	}
	if !reflect.DeepEqual(ds, wantDs) {
		t.Errorf("decisions of the old database:\n got %+v\nwant %+v", ds, wantDs)
	}

	js, err := s.Jobs(ctx, "web", 0)
	if err != nil {
		t.Fatal(err)
	}
	started, finished := at.Add(time.Second), at.Add(5*time.Second)
	wantJs := []job.Job{
		{ID: "3", Group: "web", Source: "cli", Kind: job.Plan, Plan: "large", From: 3, Target: 3, State: job.Ignored, Reason: "cooldown",
			CreatedAt: at, FinishedAt: &at},
		{ID: "2", Group: "web", Source: "cli", Kind: job.Deploy, From: 3, Target: 3, State: job.Running, Version: "abc",
			CreatedAt: at, StartedAt: &at},
		{ID: "1", Group: "web", Source: "policy:hot", Kind: job.Up, From: 2, Target: 3, State: job.Done,
			CreatedAt: at, StartedAt: &started, FinishedAt: &finished},
	}
	if len(js) != len(wantJs) {
		t.Fatalf("jobs of the old database: %+v, want %+v", js, wantJs)
	}
	for i := range js {
		if !jobsEqual(js[i], wantJs[i]) || js[i].Version != wantJs[i].Version {
			t.Errorf("job %d of the old database:\n got %+v\nwant %+v", i, js[i], wantJs[i])
		}
	}
	failed, err := s.FailUnfinishedJobs(ctx, "restarted", at.Add(time.Hour))
	if err != nil || len(failed) != 1 || failed[0].ID != "2" || failed[0].State != job.Failed {
		t.Errorf("FailUnfinishedJobs on the old database = %+v, %v; want job 2 failed", failed, err)
	}
}
