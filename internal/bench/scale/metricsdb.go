package scale

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"

	"github.com/shoal-lb/shoal/internal/config"

	// The file is an operator's to read as well: through SQLite, not
	// through shoal's store.
	_ "modernc.org/sqlite"
)

// dbSteady is metrics.db's size once its retention holds, with the
// defaults (config.DefaultMetrics: per-instance series, GROUP/INSTANCE/METRIC,
// 1 m roll-ups for 12 h; group series 10 s ones for 12 h, 1 m for 7 days,
// 1 h for 30 days; the rows by config's Retention.Rows). Its
// bytes per row are the file's now (pages over rows: an overestimate
// while the file is young, its fixed part spread over few rows).
type dbSteady struct {
	InstanceSeries int     `json:"instance_series"`
	GroupSeries    int     `json:"group_series"`
	Rows           int64   `json:"rows"`
	BytesPerRow    float64 `json:"bytes_per_row"`
	SteadyRows     int64   `json:"steady_rows"`
	SteadyMiB      float64 `json:"steady_mib"`
}

func estimateDB(ctx context.Context, path string) (dbSteady, error) {
	var e dbSteady
	// Read-only beside shoal's writer (WAL: a reader never waits for it).
	dsn := (&url.URL{Scheme: "file", Path: path, RawQuery: "_pragma=busy_timeout(5000)&_pragma=query_only(true)"}).String()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return e, fmt.Errorf("open %s: %w", path, err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SELECT path FROM series")
	if err != nil {
		return e, fmt.Errorf("read %s: %w", path, err)
	}
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			rows.Close()
			return e, err
		}
		if strings.Count(p, "/") == 2 {
			e.InstanceSeries++
		} else {
			e.GroupSeries++
		}
	}
	rows.Close()
	var r10, r1m, r1h, pages, pageSize int64
	for _, q := range []struct {
		sql string
		out *int64
	}{{"SELECT count(*) FROM rollup_10s", &r10}, {"SELECT count(*) FROM rollup_1m", &r1m}, {"SELECT count(*) FROM rollup_1h", &r1h},
		{"PRAGMA page_count", &pages}, {"PRAGMA page_size", &pageSize}} {
		if err := db.QueryRowContext(ctx, q.sql).Scan(q.out); err != nil {
			return e, fmt.Errorf("%s of %s: %w", q.sql, path, err)
		}
	}
	e.Rows = r10 + r1m + r1h
	if e.Rows == 0 {
		return e, fmt.Errorf("%s has no roll-up yet", path)
	}
	e.BytesPerRow = float64(pages*pageSize) / float64(e.Rows)
	e.SteadyRows = config.DefaultMetrics.Retention.Rows(e.GroupSeries, e.InstanceSeries)
	e.SteadyMiB = float64(e.SteadyRows) * e.BytesPerRow / (1 << 20)
	return e, nil
}
