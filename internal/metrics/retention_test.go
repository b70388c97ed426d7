package metrics

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

// TestDefaultRetentionBound: with the default metrics.retention, metrics.db
// for 1,000 instances in 50 groups over 30 days holds at most ~1 GB. The
// rows kept are counted from the retention (config's Retention.Rows); the bytes a row
// takes are measured by writing rows as the collector does (every series'
// bucket of one time together, so the table's pages fill in the order they
// do in use) and reading SQLite's page count.
func TestDefaultRetentionBound(t *testing.T) {
	r := config.DefaultMetrics.Retention
	const instances, groups = 1000, 50
	gs, is := groups*SeriesPerGroup, instances*SeriesPerInstance
	rows := r.Rows(gs, is)
	// 10 s for 12 h, 1 m for 7 days, 1 h for 30 days a group series;
	// 1 m for 12 h an instance series.
	want := int64(gs)*(12*360+7*24*60+30*24) + int64(is)*12*60
	if rows != want {
		t.Fatalf("Rows = %d, want %d", rows, want)
	}
	if r.Kept() < 30*24*time.Hour {
		t.Fatalf("the defaults keep %v of history, want 30 days", r.Kept())
	}

	d, err := openDB(filepath.Join(t.TempDir(), "metrics.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	ctx := context.Background()
	// 200 group and 1,000 instance series, 60 buckets each.
	t0 := time.Unix(1_800_000_000, 0)
	var written int64
	for b := range 60 {
		var batch []row
		for s := range 1200 {
			lv, path := &level10s, fmt.Sprintf("g%02d/metric%02d", s/22, s%22)
			if s >= 200 {
				lv, path = &level1m, fmt.Sprintf("g%02d/g%02d-%03d/metric%d", s%50, s%50, s, s%5)
			}
			v := float64(s*7+b) * 1.37
			batch = append(batch, row{level: lv, path: path, t: t0.Add(time.Duration(b) * lv.step), acc: bucketAcc{n: 10, sum: 10 * v, max: v * 1.5}})
		}
		if err := d.write(ctx, batch); err != nil {
			t.Fatal(err)
		}
		written += int64(len(batch))
	}
	if _, err := d.sql.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
	var pages, free, size int64
	for q, out := range map[string]*int64{"PRAGMA page_count": &pages, "PRAGMA freelist_count": &free, "PRAGMA page_size": &size} {
		if err := d.sql.QueryRowContext(ctx, q).Scan(out); err != nil {
			t.Fatal(err)
		}
	}
	perRow := float64((pages-free)*size) / float64(written)
	bytes := float64(rows) * perRow
	t.Logf("%d group and %d instance series keep %d rows at %.1f bytes a row (measured over %d rows): %.0f MB", gs, is, rows, perRow, written, bytes/1e6)
	if perRow < 20 || perRow > 80 {
		t.Fatalf("%.1f bytes a row: the measurement is off", perRow)
	}
	if bytes > 1e9 {
		t.Fatalf("metrics.db with the default retention, 1,000 instances in 50 groups: %.0f MB, want at most 1 GB", bytes/1e6)
	}
}
