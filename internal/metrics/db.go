package metrics

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/store"
)

// A level is one down-sampled resolution kept in SQLite.
type level struct {
	table string
	step  time.Duration
	// instances says whether per-instance series are kept at this level.
	instances bool
}

// RollupStep is the spacing of the history older than the ring: its
// finest roll-up.
const RollupStep = 10 * time.Second

// Per-instance series are kept at one-minute resolution only, and for
// metrics.retention.instances: at 10 s for 30 days, 200 instances would
// need gigabytes. The groups' series go coarser as they age (10 s, 1 m,
// 1 h), so a month of them is small.
var (
	level10s = level{table: "rollup_10s", step: RollupStep}
	level1m  = level{table: "rollup_1m", step: time.Minute, instances: true}
	level1h  = level{table: "rollup_1h", step: time.Hour}
	levels   = []level{level10s, level1m, level1h}
)

// SeriesPerGroup and SeriesPerInstance are the most series the collector
// writes for a group (size, ready, 7 of CPU, 5 of HAProxy's queue and
// sessions, 5 rates, 3 latencies) and for an instance (CPU, RSS, sessions,
// 2 rates).
const (
	SeriesPerGroup    = 22
	SeriesPerInstance = 5
)

// schema creates the series table and one roll-up table per level.
func schema() []string {
	stmts := []string{`CREATE TABLE IF NOT EXISTS series (
		id   INTEGER PRIMARY KEY,
		path TEXT NOT NULL UNIQUE
	) STRICT`}
	for _, l := range levels {
		// t is the bucket's start in unix seconds; n the samples averaged in it.
		stmts = append(stmts, `CREATE TABLE IF NOT EXISTS `+l.table+` (
		series INTEGER NOT NULL,
		t      INTEGER NOT NULL,
		n      INTEGER NOT NULL,
		v_avg  REAL NOT NULL,
		v_max  REAL NOT NULL,
		PRIMARY KEY (series, t)
	) STRICT, WITHOUT ROWID`)
	}
	return stmts
}

// db is the metrics history on disk, a SQLite file of its own so that its
// writes never wait for (or delay) the state database's. Reads go through
// read-only connections of their own: in WAL mode they see the last commit
// without waiting for the writer, and the collector's one writing connection
// never waits for a reader (a policy test reading a day of history, say).
type db struct {
	sql *sql.DB          // the collector's writes and prunes
	ro  *sql.DB          // reads
	ids map[string]int64 // series path -> id, owned by the flushing goroutine
}

// maxReaders bounds the read-only connections: the API's requests and the
// policy runners read concurrently.
const maxReaders = 4

func openDB(path string) (*db, error) {
	// Losing the last flush on a power cut is acceptable for metrics.
	s, abs, err := store.OpenSQLite(path, "journal_mode(WAL)", "synchronous(NORMAL)")
	if err != nil {
		return nil, fmt.Errorf("open metrics db %s: %w", path, err)
	}
	s.SetMaxOpenConns(1)
	for _, stmt := range schema() {
		if _, err := s.Exec(stmt); err != nil {
			s.Close()
			return nil, fmt.Errorf("open metrics db %s: %w", abs, err)
		}
	}
	// After the schema and WAL mode are set: a query-only connection may
	// change neither.
	ro, err := sql.Open("sqlite", store.DSN(abs, false, "query_only(true)"))
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("open metrics db %s for reading: %w", abs, err)
	}
	ro.SetMaxOpenConns(maxReaders)
	d := &db{sql: s, ro: ro, ids: make(map[string]int64)}
	rows, err := s.Query(`SELECT id, path FROM series`)
	if err != nil {
		d.close()
		return nil, fmt.Errorf("open metrics db %s: %w", abs, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var p string
		if err := rows.Scan(&id, &p); err != nil {
			d.close()
			return nil, fmt.Errorf("open metrics db %s: %w", abs, err)
		}
		d.ids[p] = id
	}
	if err := rows.Err(); err != nil {
		d.close()
		return nil, fmt.Errorf("open metrics db %s: %w", abs, err)
	}
	return d, nil
}

func (d *db) close() error {
	if err := errors.Join(d.ro.Close(), d.sql.Close()); err != nil {
		return fmt.Errorf("close metrics db: %w", err)
	}
	return nil
}

// row is one finished (or, at shutdown, partial) bucket of one series.
type row struct {
	level *level
	path  string
	t     time.Time
	acc   bucketAcc
}

// write stores rows in one transaction, merging with a bucket already stored
// (one cut short by a restart) by weighted average.
func (d *db) write(ctx context.Context, rows []row) error {
	if len(rows) == 0 {
		return nil
	}
	tx, err := d.sql.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("write metrics: %w", err)
	}
	defer tx.Rollback()
	newSeries, err := tx.PrepareContext(ctx, `INSERT INTO series (path) VALUES (?) RETURNING id`)
	if err != nil {
		return fmt.Errorf("write metrics: %w", err)
	}
	defer newSeries.Close()
	stmts := make(map[string]*sql.Stmt)
	created := make(map[string]int64)
	for _, r := range rows {
		id, ok := d.ids[r.path]
		if !ok {
			if id, ok = created[r.path]; !ok {
				if err := newSeries.QueryRowContext(ctx, r.path).Scan(&id); err != nil {
					return fmt.Errorf("write metrics: series %s: %w", r.path, err)
				}
				created[r.path] = id
			}
		}
		st := stmts[r.level.table]
		if st == nil {
			// The table name comes from levels, not from input.
			st, err = tx.PrepareContext(ctx, `INSERT INTO `+r.level.table+` (series, t, n, v_avg, v_max) VALUES (?, ?, ?, ?, ?)
				ON CONFLICT (series, t) DO UPDATE SET
					v_avg = (v_avg * n + excluded.v_avg * excluded.n) / (n + excluded.n),
					v_max = max(v_max, excluded.v_max),
					n = n + excluded.n`)
			if err != nil {
				return fmt.Errorf("write metrics: %w", err)
			}
			defer st.Close()
			stmts[r.level.table] = st
		}
		if _, err := st.ExecContext(ctx, id, r.t.Unix(), r.acc.n, r.acc.sum/float64(r.acc.n), r.acc.max); err != nil {
			return fmt.Errorf("write metrics: %s: %w", r.path, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("write metrics: %w", err)
	}
	for p, id := range created {
		d.ids[p] = id
	}
	return nil
}

// read returns path's buckets at lv with from <= t < to, oldest first.
func (d *db) read(ctx context.Context, lv *level, path string, from, to time.Time) ([]point, error) {
	rows, err := d.ro.QueryContext(ctx, `SELECT r.t, r.v_avg, r.v_max, r.n FROM `+lv.table+` r
		JOIN series s ON s.id = r.series
		WHERE s.path = ? AND r.t >= ? AND r.t < ? ORDER BY r.t`,
		path, from.Unix(), ceilUnix(to))
	if err != nil {
		return nil, fmt.Errorf("read metrics %s: %w", path, err)
	}
	defer rows.Close()
	var out []point
	for rows.Next() {
		var t int64
		var p point
		if err := rows.Scan(&t, &p.Avg, &p.Max, &p.N); err != nil {
			return nil, fmt.Errorf("read metrics %s: %w", path, err)
		}
		p.T = time.Unix(t, 0)
		if p.T.Before(from) || !p.T.Before(to) {
			continue
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read metrics %s: %w", path, err)
	}
	return out, nil
}

func ceilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

// prune deletes buckets older than each level's retention, series by series
// so that every delete is a range of the primary key.
func (d *db) prune(ctx context.Context, now time.Time, keep map[string]time.Duration, instances time.Duration) error {
	for _, lv := range levels {
		for p, id := range d.ids {
			k := keep[lv.table]
			if isInstancePath(p) {
				if !lv.instances {
					continue
				}
				k = min(k, instances)
			}
			if _, err := d.sql.ExecContext(ctx, `DELETE FROM `+lv.table+` WHERE series = ? AND t < ?`, id, now.Add(-k).Unix()); err != nil {
				return fmt.Errorf("prune metrics: %w", err)
			}
		}
	}
	return nil
}

// isInstancePath tells GROUP/INSTANCE/METRIC from GROUP/METRIC.
func isInstancePath(p string) bool { return strings.Count(p, "/") == 2 }
