package etcdstore

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/ha/election"
	"github.com/shoal-lb/shoal/internal/instance"
	"github.com/shoal-lb/shoal/internal/job"
	"github.com/shoal-lb/shoal/internal/store"
	"github.com/shoal-lb/shoal/internal/testetcd"
)

// leader opens a node of a one-node pair and waits until it leads.
func leader(t *testing.T, endpoint string) (*election.Node, election.Fence) {
	t.Helper()
	cfg := config.HA{Node: "a", Cluster: "test", Priority: 100, Lease: 2 * time.Second,
		Etcd: config.HAEtcd{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second}}
	n, err := election.Open(t.Context(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; n.Close() })
	deadline := time.After(5 * time.Second)
	for !n.Role().Leader {
		select {
		case <-n.Roles():
		case <-deadline:
			t.Fatal("no leader within 5s")
		}
	}
	return n, n.Role().Fence
}

func TestStore(t *testing.T) {
	etcd := testetcd.Start(t)
	n, fence := leader(t, etcd.Endpoint)
	s := New(n.Client(), n.Prefix())
	ctx := t.Context()

	if err := s.PutGroupState(ctx, store.GroupState{Name: "web", Desired: 2}); !errors.Is(err, ErrFenced) {
		t.Fatalf("a write without a fence: %v, want ErrFenced", err)
	}
	s.SetFence(fence)

	cool := time.Now().Add(time.Minute).UTC().Round(0)
	if err := s.PutGroupState(ctx, store.GroupState{Name: "web", Desired: 3, UpCooldownUntil: cool}); err != nil {
		t.Fatal(err)
	}
	g, ok, err := s.GroupState(ctx, "web")
	if err != nil || !ok || g.Desired != 3 || !g.UpCooldownUntil.Equal(cool) {
		t.Fatalf("GroupState = %+v, %v, %v", g, ok, err)
	}
	if _, ok, err := s.GroupState(ctx, "none"); ok || err != nil {
		t.Errorf("a missing group: %v, %v", ok, err)
	}

	watch := s.WatchInstances(ctx)
	if set := <-watch; len(set) != 0 {
		t.Fatalf("first set = %+v", set)
	}
	for i, name := range []string{"web-2", "web-1", "api-1"} {
		grp := name[:3]
		in := store.Instance{Record: instance.Record{Group: grp, Name: name, Index: 2 - i, Addr: "127.0.0.1:900" + name[4:], Data: []byte(`{"pid":1}`)}, State: "in_service"}
		if err := s.PutInstance(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	ins, err := s.Instances(ctx)
	if err != nil || len(ins) != 3 || ins[0].Name != "api-1" || ins[1].Name != "web-1" || string(ins[2].Data) != `{"pid":1}` || ins[2].UpdatedAt.IsZero() {
		t.Fatalf("Instances = %+v, %v", ins, err)
	}
	began := time.Now()
	started := time.Now().Add(-time.Hour).UTC()
	if err := s.PutInstance(ctx, store.Instance{Record: instance.Record{Group: "api", Name: "api-1", StartedAt: started}, State: "in_service"}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteInstance(ctx, "api-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteInstance(ctx, "api-9"); err != nil {
		t.Errorf("deleting a missing instance: %v", err)
	}
	usage, err := s.Usage(ctx, "api", began.Add(-time.Second))
	if err != nil || len(usage) != 1 || usage[0].Name != "api-1" || !usage[0].Started.Equal(started) || usage[0].Ended.Before(began) {
		t.Errorf("Usage = %+v, %v", usage, err)
	}
	if usage, err := s.Usage(ctx, "api", time.Now().Add(time.Minute)); err != nil || len(usage) != 0 {
		t.Errorf("Usage after the end = %+v, %v", usage, err)
	}
	// A boot that failed before its instance was stored is billed too.
	if err := s.AddUsage(ctx, "api", store.Usage{Name: "api-7", Started: began.Add(-time.Minute), Ended: began}); err != nil {
		t.Fatal(err)
	}
	if usage, err := s.Usage(ctx, "api", began.Add(-time.Second)); err != nil || len(usage) != 2 || usage[0].Name != "api-7" {
		t.Errorf("Usage with a failed boot = %+v, %v", usage, err)
	}
	deadline := time.After(3 * time.Second)
	for set := range watch {
		if len(set) == 2 && set[0].Name == "web-1" {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("the watch never showed the deletion: %+v", set)
		default:
		}
	}

	// Jobs: ids count up, updates need the job, unfinished ones fail.
	j1 := job.Job{Group: "web", Kind: job.Size, From: 3, Target: 4, State: job.Running, CreatedAt: time.Now()}
	j2 := job.Job{Group: "api", Kind: job.Size, From: 1, Target: 2, State: job.Accepted, CreatedAt: time.Now()}
	for _, j := range []*job.Job{&j1, &j2} {
		if err := s.InsertJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	if j1.ID != "1" || j2.ID != "2" {
		t.Fatalf("ids %q, %q", j1.ID, j2.ID)
	}
	if err := s.UpdateJob(ctx, job.Job{ID: "9", Group: "web"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdateJob of a missing job: %v", err)
	}
	if jobs, err := s.Jobs(ctx, "web", 0); err != nil || len(jobs) != 1 || jobs[0].ID != "1" {
		t.Errorf("Jobs(web) = %+v, %v", jobs, err)
	}
	if jobs, err := s.Jobs(ctx, "", 1); err != nil || len(jobs) != 1 || jobs[0].ID != "2" {
		t.Errorf("Jobs(1) = %+v, %v", jobs, err)
	}
	at := time.Now().UTC()
	failed, err := s.FailUnfinishedJobs(ctx, "leader changed: a → b", at)
	if err != nil || len(failed) != 2 || failed[0].ID != "1" || failed[1].State != job.Failed {
		t.Fatalf("FailUnfinishedJobs = %+v, %v", failed, err)
	}
	if j, err := s.Job(ctx, "1"); err != nil || j.State != job.Failed || j.Reason != "leader changed: a → b" || j.FinishedAt == nil {
		t.Errorf("Job(1) = %+v, %v", j, err)
	}
	if _, err := s.Job(ctx, "x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Job(x): %v", err)
	}

	// Decisions: ids, queries, the last time of each rule's outcome.
	t0 := time.Now().UTC().Add(-time.Minute)
	for i, rule := range []string{"cpu", "cpu", "mem"} {
		d := &decision.Record{Time: t0.Add(time.Duration(i) * time.Second), Group: "web", Rule: rule, Outcome: decision.Accepted}
		if err := s.InsertDecision(ctx, d); err != nil || d.ID != int64(i+1) {
			t.Fatalf("InsertDecision: %v, id %d", err, d.ID)
		}
	}
	if ds, err := s.Decisions(ctx, store.DecisionQuery{Group: "web", AfterID: 1}); err != nil || len(ds) != 2 || ds[0].ID != 2 {
		t.Errorf("Decisions after 1 = %+v, %v", ds, err)
	}
	if ds, err := s.Decisions(ctx, store.DecisionQuery{Limit: 1}); err != nil || len(ds) != 1 || ds[0].ID != 3 {
		t.Errorf("newest decision = %+v, %v", ds, err)
	}
	// Events of no group (a host, HAProxy) join a group's when asked.
	host := &decision.Record{Time: t0.Add(5 * time.Second), Rule: "host.down", Outcome: decision.Accepted}
	if err := s.InsertDecision(ctx, host); err != nil {
		t.Fatal(err)
	}
	if ds, err := s.Decisions(ctx, store.DecisionQuery{Group: "web", Ungrouped: true, AfterID: 2}); err != nil || len(ds) != 2 || ds[0].ID != 3 || ds[1].ID != host.ID {
		t.Errorf("Decisions of web and no group after 2 = %+v, %v", ds, err)
	}
	if ds, err := s.Decisions(ctx, store.DecisionQuery{Group: "web"}); err != nil || len(ds) != 3 {
		t.Errorf("Decisions of web alone = %d, %v", len(ds), err)
	}
	last, err := s.LastDecisionTimes(ctx, "web", decision.Accepted)
	if err != nil || len(last) != 2 || !last["cpu"].Equal(t0.Add(time.Second)) {
		t.Errorf("LastDecisionTimes = %v, %v", last, err)
	}
}

// TestFenced: after the leader's lease is gone, its writes with the old
// fence fail with ErrFenced and change nothing.
func TestFenced(t *testing.T) {
	etcd := testetcd.Start(t)
	n, fence := leader(t, etcd.Endpoint)
	s := New(n.Client(), n.Prefix())
	s.SetFence(fence)
	ctx := t.Context()
	if err := s.PutGroupState(ctx, store.GroupState{Name: "web", Desired: 2}); err != nil {
		t.Fatal(err)
	}
	if err := s.Guard(ctx); err != nil {
		t.Fatalf("Guard while leading: %v", err)
	}
	// The election key goes as when the lease expires in a partition.
	if _, err := n.Client().Delete(ctx, fence.Key); err != nil {
		t.Fatal(err)
	}
	j := job.Job{Group: "web", Kind: job.Size, State: job.Accepted, CreatedAt: time.Now()}
	for what, err := range map[string]error{
		"PutGroupState":  s.PutGroupState(ctx, store.GroupState{Name: "web", Desired: 5}),
		"PutInstance":    s.PutInstance(ctx, store.Instance{Record: instance.Record{Group: "web", Name: "web-1"}}),
		"DeleteInstance": s.DeleteInstance(ctx, "web-1"),
		"InsertJob":      s.InsertJob(ctx, &j),
		"InsertDecision": s.InsertDecision(ctx, &decision.Record{Group: "web", Rule: "cpu"}),
		"Guard":          s.Guard(ctx),
	} {
		if !errors.Is(err, ErrFenced) {
			t.Errorf("%s after the fence moved: %v, want ErrFenced", what, err)
		}
	}
	if g, _, err := s.GroupState(ctx, "web"); err != nil || g.Desired != 2 {
		t.Errorf("the group state changed: %+v, %v", g, err)
	}
	if jobs, err := s.Jobs(ctx, "", 0); err != nil || len(jobs) != 0 {
		t.Errorf("a job was stored: %+v, %v", jobs, err)
	}
}

// TestNodeEvents: a node that does not lead (no fence) records its own
// events, and they are listed with the leader's decisions, by one counter.
func TestNodeEvents(t *testing.T) {
	etcd := testetcd.Start(t)
	n, fence := leader(t, etcd.Endpoint)
	lead := New(n.Client(), n.Prefix())
	lead.SetFence(fence)
	standby := New(n.Client(), n.Prefix())
	ctx := t.Context()

	restart := decision.Record{Time: time.Now(), Rule: "haproxy", Outcome: decision.Event, Code: "restarted", Reason: "node b: exited"}
	if err := standby.InsertNodeEvent(ctx, &restart); err != nil {
		t.Fatalf("a standby's node event: %v", err)
	}
	scaled := decision.Record{Time: time.Now(), Group: "web", Rule: "cpu", Outcome: decision.Accepted}
	if err := lead.InsertDecision(ctx, &scaled); err != nil {
		t.Fatal(err)
	}
	host := decision.Record{Time: time.Now(), Rule: "host", Outcome: decision.Event, Code: "down"}
	if err := lead.InsertNodeEvent(ctx, &host); err != nil {
		t.Fatal(err)
	}
	if !(restart.ID < scaled.ID && scaled.ID < host.ID) {
		t.Fatalf("ids %d, %d, %d: want increasing", restart.ID, scaled.ID, host.ID)
	}
	for _, s := range []*Store{lead, standby} {
		all, err := s.Decisions(ctx, store.DecisionQuery{})
		if err != nil || len(all) != 3 || all[0].Reason != "node b: exited" || all[2].Rule != "host" {
			t.Fatalf("decisions: %+v, %v; want the three, oldest first", all, err)
		}
		web, err := s.Decisions(ctx, store.DecisionQuery{Group: "web", Ungrouped: true, AfterID: restart.ID})
		if err != nil || len(web) != 2 {
			t.Fatalf("web's and the ungrouped after %d: %+v, %v; want 2", restart.ID, web, err)
		}
	}
	if err := standby.InsertNodeEvent(ctx, &decision.Record{Group: "web"}); err == nil {
		t.Fatal("a node event with a group was accepted")
	}
}
