package etcdstore

import (
	"slices"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/instance"
	"github.com/shoal-lb/shoal/internal/job"
	"github.com/shoal-lb/shoal/internal/store"
	"github.com/shoal-lb/shoal/internal/testetcd"
)

// An HA pair keeps an instance's operator marks (and an outlier's ejection) and a day-two job's
// instances and note in etcd as SQLite does: the new leader finds them.
func TestMarksAndJobInstances(t *testing.T) {
	etcd := testetcd.Start(t)
	n, fence := leader(t, etcd.Endpoint)
	s := New(n.Client(), n.Prefix())
	s.SetFence(fence)
	ctx := t.Context()
	in := store.Instance{Record: instance.Record{Group: "web", Name: "web-001", Index: 1}, State: "drained", Marks: []string{"ejected-at=1796000000000", "ejected-until=1796000015000", "no-replace", "protected"}}
	if err := s.PutInstance(ctx, in); err != nil {
		t.Fatal(err)
	}
	j := job.Job{Group: "web", Kind: job.Drain, Source: "test", State: job.Accepted, CreatedAt: time.Now(), Instances: []string{"web-001"}, Note: "no replacement"}
	if err := s.InsertJob(ctx, &j); err != nil {
		t.Fatal(err)
	}
	// What the other node reads: a store of its own on the same prefix.
	other := New(n.Client(), n.Prefix())
	ins, err := other.Instances(ctx)
	if err != nil || len(ins) != 1 || ins[0].State != "drained" || !slices.Equal(ins[0].Marks, in.Marks) {
		t.Fatalf("Instances = %+v, %v; want web-001 drained with marks %v", ins, err, in.Marks)
	}
	got, err := other.Job(ctx, j.ID)
	if err != nil || !slices.Equal(got.Instances, j.Instances) || got.Note != j.Note || got.Kind != job.Drain {
		t.Fatalf("Job = %+v, %v; want instances %v and note %q", got, err, j.Instances, j.Note)
	}
}
