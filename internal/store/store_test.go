package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/instance"
	"github.com/shoal-lb/shoal/internal/job"
)

func openTest(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "shoal.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func TestOpenFileModeAndWAL(t *testing.T) {
	s, path := openTest(t)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode().Perm(); m != 0o600 {
		t.Errorf("database mode = %o, want 600", m)
	}

	var mode string
	if err := s.db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" {
		t.Errorf("journal_mode = %q, want wal", mode)
	}
	var fk, busy, sync int
	if err := s.db.QueryRow("PRAGMA foreign_keys").Scan(&fk); err != nil {
		t.Fatal(err)
	}
	if err := s.db.QueryRow("PRAGMA busy_timeout").Scan(&busy); err != nil {
		t.Fatal(err)
	}
	if err := s.db.QueryRow("PRAGMA synchronous").Scan(&sync); err != nil {
		t.Fatal(err)
	}
	if fk != 1 || busy != 5000 || sync != 1 {
		t.Errorf("foreign_keys=%d busy_timeout=%d synchronous=%d, want 1 5000 1 (NORMAL)", fk, busy, sync)
	}
	var version int
	if err := s.db.QueryRow("PRAGMA user_version").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version != len(migrations) {
		t.Errorf("user_version = %d, want %d", version, len(migrations))
	}

	// A write creates the WAL file, which must not be more permissive.
	if err := s.PutGroupState(context.Background(), GroupState{Name: "web", Desired: 1}); err != nil {
		t.Fatal(err)
	}
	fi, err = os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode().Perm(); m != 0o600 {
		t.Errorf("WAL mode = %o, want 600", m)
	}
}

func TestOpenPathWithSpecialCharacters(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a dir?with#odd%chars")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "shoal.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.PutGroupState(context.Background(), GroupState{Name: "web"}); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "shoal.db" && e.Name() != "shoal.db-wal" && e.Name() != "shoal.db-shm" {
			t.Errorf("unexpected file %q in %s", e.Name(), dir)
		}
	}
}

func TestOpenNewerSchema(t *testing.T) {
	s, path := openTest(t)
	if _, err := s.db.Exec(fmt.Sprintf("PRAGMA user_version = %d", len(migrations)+1)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s2, err := Open(path); err == nil {
		s2.Close()
		t.Fatal("Open of a newer schema succeeded")
	}
}

func TestGroupState(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)

	if _, ok, err := s.GroupState(ctx, "web"); err != nil || ok {
		t.Fatalf("GroupState of missing group = ok %v, err %v", ok, err)
	}

	up := time.Date(2026, 3, 4, 5, 6, 7, 891011121, time.FixedZone("JST", 9*3600))
	want := GroupState{Name: "web", Desired: 3, UpCooldownUntil: up}
	if err := s.PutGroupState(ctx, want); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.GroupState(ctx, "web")
	if err != nil || !ok {
		t.Fatalf("GroupState = ok %v, err %v", ok, err)
	}
	if got.Name != "web" || got.Desired != 3 || !got.UpCooldownUntil.Equal(up) || !got.DownCooldownUntil.IsZero() {
		t.Errorf("GroupState = %+v, want %+v", got, want)
	}

	// Upsert, and a set time back to zero stays zero.
	want = GroupState{Name: "web", Desired: 5, DownCooldownUntil: up}
	if err := s.PutGroupState(ctx, want); err != nil {
		t.Fatal(err)
	}
	got, _, err = s.GroupState(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	if got.Desired != 5 || !got.UpCooldownUntil.IsZero() || !got.DownCooldownUntil.Equal(up) {
		t.Errorf("GroupState after update = %+v, want %+v", got, want)
	}
}

func TestInstances(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)

	started := time.Now()
	ins := []Instance{
		{Record: instance.Record{Group: "web", Name: "web-2", Index: 2, ID: "12-9223372036854775808", Addr: "127.0.0.1:4002", Host: "127.0.0.1",
			Data: []byte(`{"pid":12,"pid_start":9223372036854775808}`), StartedAt: started}, State: "up", StateSince: started.Add(time.Second)},
		{Record: instance.Record{Group: "api", Name: "api-0", Index: 0, ID: "20-7", Addr: "127.0.0.1:5000", Host: "127.0.0.1", Data: []byte(`{"pid":20}`)}, State: "starting"},
		{Record: instance.Record{Group: "web", Name: "web-0", Index: 0, ID: "10-99", Addr: "127.0.0.1:4000", Host: "127.0.0.1", Data: []byte(`{"pid":10}`), StartedAt: started}, State: "up"},
	}
	before := time.Now()
	for _, in := range ins {
		if err := s.PutInstance(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantOrder := []string{"api-0", "web-0", "web-2"}
	if len(got) != len(wantOrder) {
		t.Fatalf("Instances returned %d, want %d", len(got), len(wantOrder))
	}
	for i, name := range wantOrder {
		if got[i].Name != name {
			t.Errorf("Instances[%d] = %q, want %q", i, got[i].Name, name)
		}
		if got[i].UpdatedAt.Before(before.Add(-time.Millisecond)) || got[i].UpdatedAt.After(time.Now()) {
			t.Errorf("%s: UpdatedAt = %v, want about now", name, got[i].UpdatedAt)
		}
	}
	w2 := got[2]
	if w2.Group != "web" || w2.Index != 2 || w2.Host != "127.0.0.1" || w2.Addr != "127.0.0.1:4002" || w2.ID != "12-9223372036854775808" ||
		string(w2.Data) != `{"pid":12,"pid_start":9223372036854775808}` || !w2.StartedAt.Equal(started) || w2.State != "up" || !w2.StateSince.Equal(started.Add(time.Second)) {
		t.Errorf("web-2 = %+v, want %+v", w2, ins[0])
	}
	if !got[0].StartedAt.IsZero() {
		t.Errorf("api-0 StartedAt = %v, want zero", got[0].StartedAt)
	}

	// Upsert by name.
	upd := ins[1]
	upd.State = "up"
	upd.ID, upd.Data = "21-7", []byte(`{"pid":21}`)
	if err := s.PutInstance(ctx, upd); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteInstance(ctx, "web-0"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteInstance(ctx, "no-such"); err != nil {
		t.Errorf("DeleteInstance of a missing instance: %v", err)
	}
	got, err = s.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "api-0" || got[0].ID != "21-7" || string(got[0].Data) != `{"pid":21}` || got[0].State != "up" || got[1].Name != "web-2" {
		t.Errorf("Instances after upsert and delete = %+v", got)
	}
}

func TestJobs(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)

	created := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	j := job.Job{Group: "web", Source: "api", Kind: "up", Plan: "large", From: 1, Target: 3,
		State: job.Accepted, CreatedAt: created}
	if err := s.InsertJob(ctx, &j); err != nil {
		t.Fatal(err)
	}
	if j.ID == "" {
		t.Fatal("InsertJob did not assign an ID")
	}
	got, err := s.Job(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !jobsEqual(got, j) {
		t.Errorf("Job = %+v, want %+v", got, j)
	}
	if got.StartedAt != nil || got.FinishedAt != nil {
		t.Errorf("zero times did not round-trip: %+v", got)
	}

	j.State = "succeeded"
	j.Noop = true
	j.Reason = "already at size"
	started, finished := created.Add(time.Second), created.Add(2*time.Second)
	j.StartedAt, j.FinishedAt = &started, &finished
	if err := s.UpdateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	if got, err = s.Job(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if !jobsEqual(got, j) {
		t.Errorf("Job after update = %+v, want %+v", got, j)
	}

	if _, err := s.Job(ctx, "9999"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Job(9999) error = %v, want ErrNotFound", err)
	}
	if err := s.UpdateJob(ctx, job.Job{ID: "9999"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("UpdateJob(9999) error = %v, want ErrNotFound", err)
	}
}

func TestJobsListing(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)

	var ids []string
	for i, g := range []string{"web", "api", "web", "web", "api"} {
		j := job.Job{Group: g, Kind: "up", Target: i, State: "succeeded"}
		if err := s.InsertJob(ctx, &j); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}

	all, err := s.Jobs(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := jobIDs(all), []string{ids[4], ids[3], ids[2], ids[1], ids[0]}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Jobs(all) ids = %v, want %v", got, want)
	}
	web, err := s.Jobs(ctx, "web", 2)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := jobIDs(web), []string{ids[3], ids[2]}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Jobs(web, 2) ids = %v, want %v", got, want)
	}
	none, err := s.Jobs(ctx, "nope", 10)
	if err != nil || len(none) != 0 {
		t.Errorf("Jobs(nope) = %v, %v; want none", none, err)
	}
}

func TestJobsPruneAndIDsNotReused(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	s.maxJobs = 3

	var last int64
	for i := 0; i < 5; i++ {
		j := job.Job{Group: "web", State: "succeeded"}
		if err := s.InsertJob(ctx, &j); err != nil {
			t.Fatal(err)
		}
		n := idNum(t, j.ID)
		if n <= last {
			t.Fatalf("job id %d after %d", n, last)
		}
		last = n
	}
	all, err := s.Jobs(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := jobIDs(all), idStrings(last, last-1, last-2); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after pruning ids = %v, want %v", got, want)
	}

	// Deleting the newest rows must not make their ids available again.
	if _, err := s.db.Exec("DELETE FROM jobs"); err != nil {
		t.Fatal(err)
	}
	j := job.Job{Group: "web", State: "succeeded"}
	if err := s.InsertJob(ctx, &j); err != nil {
		t.Fatal(err)
	}
	if idNum(t, j.ID) <= last {
		t.Errorf("id %s reused (last was %d)", j.ID, last)
	}
}

func TestFailUnfinishedJobs(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)

	states := []job.State{job.Accepted, "succeeded", job.Running, job.Failed, job.Accepted}
	var ids []string
	for _, st := range states {
		j := job.Job{Group: "web", State: st, Reason: "orig"}
		if err := s.InsertJob(ctx, &j); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	at := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	failed, err := s.FailUnfinishedJobs(ctx, "shoal restarted", at)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := jobIDs(failed), []string{ids[0], ids[2], ids[4]}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("failed ids = %v, want %v", got, want)
	}
	for _, j := range failed {
		if j.State != job.Failed || j.Reason != "shoal restarted" || j.FinishedAt == nil || !j.FinishedAt.Equal(at) {
			t.Errorf("returned job = %+v", j)
		}
	}
	for i, id := range ids {
		j, err := s.Job(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		switch states[i] {
		case job.Accepted, job.Running:
			if j.State != job.Failed || j.Reason != "shoal restarted" || j.FinishedAt == nil || !j.FinishedAt.Equal(at) {
				t.Errorf("job %s = %+v, want failed", id, j)
			}
		default:
			if j.State != states[i] || j.Reason != "orig" || j.FinishedAt != nil {
				t.Errorf("finished job %s changed: %+v", id, j)
			}
		}
	}
	again, err := s.FailUnfinishedJobs(ctx, "again", at)
	if err != nil || len(again) != 0 {
		t.Errorf("second FailUnfinishedJobs = %v, %v; want none", again, err)
	}
}

func TestReopenKeepsData(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "shoal.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutGroupState(ctx, GroupState{Name: "web", Desired: 4}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutInstance(ctx, Instance{Record: instance.Record{Group: "web", Name: "web-0", ID: "1-2", Data: []byte(`{"pid":1,"pid_start":2}`)}, State: "up"}); err != nil {
		t.Fatal(err)
	}
	j := job.Job{Group: "web", State: job.Running}
	if err := s.InsertJob(ctx, &j); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g, ok, err := s.GroupState(ctx, "web")
	if err != nil || !ok || g.Desired != 4 {
		t.Errorf("GroupState after reopen = %+v, %v, %v", g, ok, err)
	}
	ins, err := s.Instances(ctx)
	if err != nil || len(ins) != 1 || ins[0].Name != "web-0" || string(ins[0].Data) != `{"pid":1,"pid_start":2}` {
		t.Errorf("Instances after reopen = %+v, %v", ins, err)
	}
	got, err := s.Job(ctx, j.ID)
	if err != nil || got.State != job.Running {
		t.Errorf("Job after reopen = %+v, %v", got, err)
	}
	j2 := job.Job{Group: "web"}
	if err := s.InsertJob(ctx, &j2); err != nil {
		t.Fatal(err)
	}
	if idNum(t, j2.ID) <= idNum(t, j.ID) {
		t.Errorf("id after reopen = %s, want > %s", j2.ID, j.ID)
	}
}

func TestConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)

	const workers, each = 16, 40
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for i := 0; i < each; i++ {
				j := job.Job{Group: fmt.Sprintf("g%d", w), State: job.Running}
				if err := s.InsertJob(ctx, &j); err != nil {
					errs <- err
					continue
				}
				j.State = "succeeded"
				if err := s.UpdateJob(ctx, j); err != nil {
					errs <- err
				}
				in := Instance{Record: instance.Record{Group: "web", Name: fmt.Sprintf("w%d-%d", w, i%4), Index: i}, State: "up"}
				if err := s.PutInstance(ctx, in); err != nil {
					errs <- err
				}
				if err := s.PutGroupState(ctx, GroupState{Name: "web", Desired: i}); err != nil {
					errs <- err
				}
				if _, err := s.Instances(ctx); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	all, err := s.Jobs(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != workers*each {
		t.Errorf("%d jobs, want %d", len(all), workers*each)
	}
	ins, err := s.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ins) != workers*4 {
		t.Errorf("%d instances, want %d", len(ins), workers*4)
	}
}

// TestConcurrentStores checks that two Stores on one file (e.g. shoal and a CLI
// reading state) wait for each other instead of failing with "database is locked".
func TestConcurrentStores(t *testing.T) {
	ctx := context.Background()
	s1, path := openTest(t)
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()

	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for _, s := range []*Store{s1, s2} {
		for w := 0; w < 4; w++ {
			wg.Go(func() {
				for i := 0; i < 50; i++ {
					j := job.Job{Group: "web", State: job.Running}
					if err := s.InsertJob(ctx, &j); err != nil {
						errs <- err
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	all, err := s1.Jobs(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 400 {
		t.Errorf("%d jobs, want 400", len(all))
	}
}

func jobsEqual(a, b job.Job) bool {
	return a.ID == b.ID && a.Group == b.Group && a.Source == b.Source && a.Kind == b.Kind &&
		a.Plan == b.Plan && a.From == b.From && a.Target == b.Target &&
		a.State == b.State && a.Reason == b.Reason && a.Noop == b.Noop &&
		a.CreatedAt.Equal(b.CreatedAt) && optTimeEqual(a.StartedAt, b.StartedAt) && optTimeEqual(a.FinishedAt, b.FinishedAt)
}

func optTimeEqual(a, b *time.Time) bool {
	return a == nil && b == nil || a != nil && b != nil && a.Equal(*b)
}

// idNum reads a job id as the number the store assigned.
func idNum(t *testing.T, id string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		t.Fatalf("job id %q: %v", id, err)
	}
	return n
}

func idStrings(ns ...int64) []string {
	var out []string
	for _, n := range ns {
		out = append(out, strconv.FormatInt(n, 10))
	}
	return out
}

func jobIDs(jobs []job.Job) []string {
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids
}

// TestDeployFields: migration 3's and 4's columns round-trip: an instance's
// version, a group's deployed variables and serving template, and a deploy
// job's version.
func TestDeployFields(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	if err := s.PutInstance(ctx, Instance{Record: instance.Record{Group: "web", Name: "web-001", Index: 1, Addr: "127.0.0.1:4000", Host: "127.0.0.1"}, State: "in-service", Version: "1a2b3c4d5e6f"}); err != nil {
		t.Fatal(err)
	}
	ins, err := s.Instances(ctx)
	if err != nil || len(ins) != 1 || ins[0].Version != "1a2b3c4d5e6f" {
		t.Fatalf("instances %+v, %v", ins, err)
	}
	if err := s.PutGroupState(ctx, GroupState{Name: "web", Desired: 2, TemplateVars: `{"tag":"v2"}`, ServingTemplate: `{"command":["app"]}`}); err != nil {
		t.Fatal(err)
	}
	if g, ok, err := s.GroupState(ctx, "web"); err != nil || !ok || g.TemplateVars != `{"tag":"v2"}` || g.ServingTemplate != `{"command":["app"]}` {
		t.Fatalf("group state %+v, %v, %v", g, ok, err)
	}
	j := job.Job{Group: "web", Source: "cli", Kind: "deploy", State: "accepted", Version: "v2"}
	if err := s.InsertJob(ctx, &j); err != nil {
		t.Fatal(err)
	}
	j.State = "done"
	if err := s.UpdateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Job(ctx, j.ID); err != nil || got.Version != "v2" || got.State != "done" {
		t.Fatalf("job %+v, %v", got, err)
	}
}

// TestUsage: a deleted instance that had started leaves its usage (start
// to deletion) for its group; one that never started leaves none.
func TestUsage(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	before := time.Now()
	started := before.Add(-90 * time.Minute)
	for _, in := range []Instance{
		{Record: instance.Record{Group: "web", Name: "web-001", StartedAt: started}, State: "in-service"},
		{Record: instance.Record{Group: "web", Name: "web-002"}, State: "starting"},
		{Record: instance.Record{Group: "api", Name: "api-001", StartedAt: started}, State: "in-service"},
	} {
		if err := s.PutInstance(ctx, in); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteInstance(ctx, in.Name); err != nil {
			t.Fatal(err)
		}
	}
	us, err := s.Usage(ctx, "web", before.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(us) != 1 || us[0].Name != "web-001" || !us[0].Started.Equal(started) || us[0].Ended.Before(before) || us[0].Ended.After(time.Now()) {
		t.Fatalf("usage of web = %+v, want web-001 from %s until its deletion", us, started)
	}
	if us, err := s.Usage(ctx, "web", time.Now().Add(time.Second)); err != nil || len(us) != 0 {
		t.Errorf("usage ended after now = %+v, %v; want none", us, err)
	}

	// A failed start's server, never recorded as an instance.
	if err := s.AddUsage(ctx, "api", Usage{Name: "api-002", Started: started, Ended: before}); err != nil {
		t.Fatal(err)
	}
	us, err = s.Usage(ctx, "api", before.Add(-time.Hour))
	if err != nil || len(us) != 2 || us[0].Name != "api-002" || !us[0].Started.Equal(started) || !us[0].Ended.Equal(before) {
		t.Fatalf("usage of api = %+v, %v; want api-002 from %s to %s, then api-001", us, err, started, before)
	}
}

// TestStartDelaysKeepsNewest: a group's start delays are kept, newest
// startDelaysKept of them, per group, across a reopen.
func TestStartDelaysKeepsNewest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shoal.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC)
	for i := range startDelaysKept + 5 {
		if err := s.AddStartDelay(ctx, "web", "", t0.Add(time.Duration(i)*time.Minute), time.Duration(i+1)*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddStartDelay(ctx, "api", "", t0, 210*time.Second); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = Open(path); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	web, err := s.StartDelays(ctx, "web", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(web) != startDelaysKept || web[0] != 6*time.Second || web[len(web)-1] != time.Duration(startDelaysKept+5)*time.Second {
		t.Fatalf("web's start delays %v; want the newest %d, 6s to %ds", web, startDelaysKept, startDelaysKept+5)
	}
	if api, err := s.StartDelays(ctx, "api", ""); err != nil || len(api) != 1 || api[0] != 210*time.Second {
		t.Fatalf("api's start delays %v, %v; want [3m30s]", api, err)
	}
}

// TestInstanceProvider: an instance's provider (a group across
// providers) is kept with it, in its usage once it ends, and with each
// start delay, which are read by provider or all together.
func TestInstanceProvider(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	started := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	in := Instance{Record: instance.Record{Group: "web", Name: "web-003", Provider: "sakura", StartedAt: started}, State: "in-service"}
	if err := s.PutInstance(ctx, in); err != nil {
		t.Fatal(err)
	}
	ins, err := s.Instances(ctx)
	if err != nil || len(ins) != 1 || ins[0].Provider != "sakura" {
		t.Fatalf("instances %+v, %v; want web-003 on sakura", ins, err)
	}
	if err := s.DeleteInstance(ctx, "web-003"); err != nil {
		t.Fatal(err)
	}
	if err := s.AddUsage(ctx, "web", Usage{Name: "web-004", Provider: "sakura", Started: started, Ended: time.Now(), Pool: true}); err != nil {
		t.Fatal(err)
	}
	us, err := s.Usage(ctx, "web", started.Add(-time.Minute))
	if err != nil || len(us) != 2 || us[0].Provider != "sakura" || us[1].Provider != "sakura" {
		t.Fatalf("usage %+v, %v; want both on sakura", us, err)
	}
	if us[0].Pool || !us[1].Pool {
		t.Errorf("usage %+v: want only web-004's marked as a warm pool server's", us)
	}
	t0 := time.Now()
	for i, p := range []string{"rack", "sakura", "rack"} {
		if err := s.AddStartDelay(ctx, "web", p, t0.Add(time.Duration(i)*time.Second), time.Duration(i+1)*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if rack, err := s.StartDelays(ctx, "web", "rack"); err != nil || len(rack) != 2 || rack[1] != 3*time.Second {
		t.Errorf("rack's start delays %v, %v; want [1s 3s]", rack, err)
	}
	if all, err := s.StartDelays(ctx, "web", ""); err != nil || len(all) != 3 {
		t.Errorf("all start delays %v, %v; want 3", all, err)
	}
}
