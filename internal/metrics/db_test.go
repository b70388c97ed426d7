package metrics

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// TestWriteDoesNotWaitForReaders: the collector writes while a reader is in
// the middle of a query (a policy test reading a day of history, say).
func TestWriteDoesNotWaitForReaders(t *testing.T) {
	d, err := openDB(filepath.Join(t.TempDir(), "metrics.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	t0 := time.Unix(1_700_000_000, 0)
	bucket := func(i int) row {
		return row{level: &level10s, path: "web/cpu.avg", t: t0.Add(time.Duration(i) * level10s.step), acc: bucketAcc{n: 10, sum: 100, max: 10}}
	}
	ctx := context.Background()
	if err := d.write(ctx, []row{bucket(0), bucket(1), bucket(2)}); err != nil {
		t.Fatal(err)
	}
	// A read left open on its first row holds a read transaction.
	rows, err := d.ro.QueryContext(ctx, `SELECT t FROM rollup_10s ORDER BY t`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	if !rows.Next() {
		t.Fatal("no rows")
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := d.write(wctx, []row{bucket(3)}); err != nil {
		t.Fatalf("write while a read is open: %v", err)
	}
	rows.Close()
	pts, err := d.read(ctx, &level10s, "web/cpu.avg", t0, t0.Add(time.Minute))
	if err != nil || len(pts) != 4 {
		t.Fatalf("read after the write: %d points, %v; want 4", len(pts), err)
	}
}
