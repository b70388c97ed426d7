package store

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/instance"
)

// openCopy opens a copy of testdata/name, which Open migrates.
func openCopy(t *testing.T, name string) *Store {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "shoal.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestReadsInstancesOfOldSchema opens testdata/before-i23-inst.db, written
// by the store (a88e20b's) while an instance row had the local provider's
// host, port, pid and start time as columns: migration 5 turns each row into
// an instance.Record whose address joins host and port and whose provider
// data holds the pid, start time and marker the local provider adopts by.
func TestReadsInstancesOfOldSchema(t *testing.T) {
	s := openCopy(t, "before-i23-inst.db")
	got, err := s.Instances(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 24, 9, 0, 0, 500_000_000, time.UTC)
	want := []Instance{
		{Record: instance.Record{Group: "api", Name: "api-000", Host: "127.0.0.1"}, State: "starting"},
		{Record: instance.Record{Group: "web", Name: "web-001", Index: 1, ID: "4242-123456", Addr: "127.0.0.1:40001", Host: "127.0.0.1",
			Data: []byte(`{"pid":4242,"pid_start":123456,"marker":"web-001"}`), StartedAt: at},
			State: "in-service", StateSince: at.Add(time.Second), Version: "1a2b3c4d5e6f"},
		{Record: instance.Record{Group: "web", Name: "web-002", Index: 2, ID: "4343-123999", Addr: "127.0.0.1:40002", Host: "127.0.0.1",
			Data: []byte(`{"pid":4343,"pid_start":123999,"marker":"web-002"}`), StartedAt: at},
			State: "draining", StateSince: at.Add(2 * time.Second), Version: "1a2b3c4d5e6f"},
	}
	if len(got) != len(want) {
		t.Fatalf("instances of the old database: %+v, want %+v", got, want)
	}
	for i := range got {
		if got[i].UpdatedAt.IsZero() {
			t.Errorf("instance %s of the old database has no UpdatedAt", got[i].Name)
		}
		got[i].UpdatedAt = time.Time{}
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("instance %d of the old database:\n got %+v (data %s)\nwant %+v (data %s)", i, got[i], got[i].Data, want[i], want[i].Data)
		}
	}
}
