package local

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/store"
)

// TestAdoptsRecordOfOldSchema: an instance recorded before the record was
// provider-neutral (pid, start time and port as columns of the instances
// table) is still adopted once the store has migrated the row: its pid,
// start time and marker are read from the provider data migration 5 wrote.
// The database is the store's testdata written by a88e20b's store, with
// web-001's row pointed at a live instance as the old store would have
// recorded it; web-002's pid does not run with its start time.
func TestAdoptsRecordOfOldSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stateDir := t.TempDir()
	tmpl := helperTemplate(t, "serve")
	live := start(t, New(stateDir, nil), "web-001", tmpl)
	d := mustDecode(t, live.Record())
	port := addrPort(live.Record().Addr)
	get(t, port)

	b, err := os.ReadFile(filepath.Join("..", "..", "store", "testdata", "before-i23-inst.db"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "shoal.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// The old schema, written with SQL as the old store did.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE instances SET port = ?, pid = ?, pid_start = ? WHERE name = 'web-001'`,
		port, d.PID, int64(d.PIDStart)); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	st, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rows, err := st.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byName := make(map[string]provider.Record)
	for _, r := range rows {
		byName[r.Name] = r.Record
	}

	// A second Provider for the same state dir stands in for the new shoal.
	p2 := New(stateDir, nil)
	adopted, err := p2.Adopt(ctx, byName["web-001"], tmpl)
	if err != nil {
		t.Fatalf("adopt the migrated record %+v (data %s): %v", byName["web-001"], byName["web-001"].Data, err)
	}
	if adopted.PID() != live.PID() || adopted.Record().Addr != live.Record().Addr {
		t.Errorf("adopted pid %d at %s, want pid %d at %s", adopted.PID(), adopted.Record().Addr, live.PID(), live.Record().Addr)
	}
	if _, ok := p2.ports[port]; !ok {
		t.Errorf("adopted port %d not tracked", port)
	}
	for _, name := range []string{"web-002", "api-000"} {
		if got, err := p2.Adopt(ctx, byName[name], tmpl); !errors.Is(err, provider.ErrGone) {
			if got != nil {
				stop(t, got)
			}
			t.Errorf("adopt the migrated record of %s: error = %v, want ErrGone", name, err)
		}
	}
}
