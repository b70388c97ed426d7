package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/event"
)

// maxDecisions is how many of each group's newest decisions are kept.
const maxDecisions = 10000

const decisionColumns = `id, group_name, at, rule, sources, metric_values, current_size, recommendation,
	request_kind, request_plan, request_size, outcome, code, reason, job_id`

// InsertDecision stores d and sets d.ID. Only the newest 10,000 decisions of
// each group are kept. A request's source is not stored (see
// decision.SourcePrefix).
func (s *Store) InsertDecision(ctx context.Context, d *decision.Record) error {
	var req decision.Request
	if d.Request != nil {
		req = *d.Request
	}
	values, err := json.Marshal(d.Values)
	if err != nil {
		return fmt.Errorf("insert decision: %w", err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("insert decision: %w", err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx,
		`INSERT INTO decisions (group_name, at, rule, sources, metric_values, current_size, recommendation,
			request_kind, request_plan, request_size, outcome, code, reason, job_id)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		d.Group, formatTime(d.Time), d.Rule, strings.Join(d.Sources, ","), string(values), d.Current, d.Recommendation,
		req.Kind, req.Plan, req.Size, d.Outcome, d.Code, d.Reason, d.JobID)
	if err != nil {
		return fmt.Errorf("insert decision: %w", err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return fmt.Errorf("insert decision: %w", err)
	}
	// Ids are shared by all groups, so count this group's rows back from the
	// newest: the index on (group_name, id) makes the OFFSET a short walk.
	if _, err := tx.ExecContext(ctx,
		`DELETE FROM decisions WHERE group_name = ? AND id <= (
			SELECT id FROM decisions WHERE group_name = ? ORDER BY id DESC LIMIT 1 OFFSET ?)`,
		d.Group, d.Group, s.maxDecisions); err != nil {
		return fmt.Errorf("insert decision: prune old decisions: %w", err)
	}
	stored := *d
	stored.ID = id
	if ev, ok := event.FromDecision(stored); ok {
		if err := s.enqueue(ctx, tx, ev); err != nil {
			return fmt.Errorf("insert decision: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("insert decision: %w", err)
	}
	s.outbox.poke()
	d.ID = id
	return nil
}

// DecisionQuery selects decisions. Zero fields do not restrict.
type DecisionQuery struct {
	Group string
	// Ungrouped, with Group, keeps the decisions of no group too: host,
	// HAProxy and certificate events, which concern every group.
	Ungrouped bool
	// Since keeps decisions at or after this time.
	Since time.Time
	// AfterID keeps decisions with a larger id: for following new ones.
	AfterID int64
	// Limit bounds the result: the oldest Limit after AfterID when it is set
	// (so a follower misses nothing), else the newest Limit.
	Limit int
}

// Decisions returns the decisions q selects, oldest first.
func (s *Store) Decisions(ctx context.Context, q DecisionQuery) ([]decision.Record, error) {
	var (
		where []string
		args  []any
	)
	switch {
	case q.Group != "" && q.Ungrouped:
		where, args = append(where, "group_name IN (?, '')"), append(args, q.Group)
	case q.Group != "":
		where, args = append(where, "group_name = ?"), append(args, q.Group)
	}
	if !q.Since.IsZero() {
		// RFC 3339 in UTC with nanoseconds does not sort as text (trailing
		// zeros are dropped), so compare as julian days.
		where, args = append(where, "julianday(at) >= julianday(?)"), append(args, formatTime(q.Since))
	}
	if q.AfterID > 0 {
		where, args = append(where, "id > ?"), append(args, q.AfterID)
	}
	query := `SELECT ` + decisionColumns + ` FROM decisions`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	limit := q.Limit
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	if q.AfterID > 0 {
		query += ` ORDER BY id LIMIT ?`
	} else {
		query += ` ORDER BY id DESC LIMIT ?`
	}
	args = append(args, limit)
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list decisions: %w", err)
	}
	out, err := scanDecisions(rows)
	if err != nil {
		return nil, fmt.Errorf("list decisions: %w", err)
	}
	if q.AfterID <= 0 {
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out, nil
}

// LastDecisionTimes returns, for each rule of group, when its newest decision with the
// given outcome was made: the autoscaler's per-rule cooldowns start there.
func (s *Store) LastDecisionTimes(ctx context.Context, group string, outcome decision.Outcome) (map[string]time.Time, error) {
	rows, err := s.db.QueryContext(ctx,
		`SELECT rule, at FROM decisions WHERE id IN (
			SELECT MAX(id) FROM decisions WHERE group_name = ? AND outcome = ? GROUP BY rule)`,
		group, outcome)
	if err != nil {
		return nil, fmt.Errorf("read last decisions of %s: %w", group, err)
	}
	defer rows.Close()
	out := map[string]time.Time{}
	for rows.Next() {
		var (
			rule string
			at   sql.NullString
		)
		if err := rows.Scan(&rule, &at); err != nil {
			return nil, fmt.Errorf("read last decisions of %s: %w", group, err)
		}
		t, err := parseTime(at)
		if err != nil {
			return nil, fmt.Errorf("read last decisions of %s: %w", group, err)
		}
		out[rule] = t
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read last decisions of %s: %w", group, err)
	}
	return out, nil
}

func scanDecisions(rows *sql.Rows) ([]decision.Record, error) {
	defer rows.Close()
	var out []decision.Record
	for rows.Next() {
		var (
			d               decision.Record
			at              sql.NullString
			sources, values string
			req             decision.Request
		)
		if err := rows.Scan(&d.ID, &d.Group, &at, &d.Rule, &sources, &values, &d.Current, &d.Recommendation,
			&req.Kind, &req.Plan, &req.Size, &d.Outcome, &d.Code, &d.Reason, &d.JobID); err != nil {
			return nil, err
		}
		var err error
		if d.Time, err = parseTime(at); err != nil {
			return nil, fmt.Errorf("decision %d: %w", d.ID, err)
		}
		if sources != "" {
			d.Sources = strings.Split(sources, ",")
		}
		if err := json.Unmarshal([]byte(values), &d.Values); err != nil {
			return nil, fmt.Errorf("decision %d: values: %w", d.ID, err)
		}
		if req.Kind != "" {
			req.Source = decision.SourcePrefix + d.Rule
			d.Request = &req
		}
		out = append(out, d)
	}
	return out, rows.Err()
}
