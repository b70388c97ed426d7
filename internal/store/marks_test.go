package store

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/instance"
	"github.com/shoal-lb/shoal/internal/job"
)

// An instance's operator marks (and an outlier's ejection) and a job's instances and note survive the
// round trip, so day-two state outlives a restart of shoal.
func TestMarksAndJobInstances(t *testing.T) {
	s, path := openTest(t)
	ctx := context.Background()
	in := Instance{Record: instance.Record{Name: "web-001", Group: "web", Index: 1, Addr: "127.0.0.1:9000"},
		State: "standby", Marks: []string{"decrement", "ejected-at=1796000000000", "ejected-at=1796000005000", "ejected-until=1796000015000", "protected"}}
	if err := s.PutInstance(ctx, in); err != nil {
		t.Fatal(err)
	}
	j := job.Job{Group: "web", Kind: job.Replace, Source: "test", State: job.Accepted, CreatedAt: time.Now(),
		Instances: []string{"web-001", "web-002"}, Note: "launch before terminate"}
	if err := s.InsertJob(ctx, &j); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !slices.Equal(got[0].Marks, in.Marks) || got[0].State != "standby" {
		t.Fatalf("instances after reopening = %+v, want marks %v", got, in.Marks)
	}
	in.Marks = nil
	if err := s.PutInstance(ctx, in); err != nil {
		t.Fatal(err)
	}
	if got, _ = s.Instances(ctx); len(got[0].Marks) != 0 {
		t.Fatalf("marks after clearing = %v, want none", got[0].Marks)
	}
	gj, err := s.Job(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gj.Instances, j.Instances) || gj.Note != j.Note {
		t.Fatalf("job = %+v, want instances %v and note %q", gj, j.Instances, j.Note)
	}
}
