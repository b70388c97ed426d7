// Package store keeps shoal's state (group sizes, cooldowns, instances and the
// job history) in a SQLite database so that it survives a restart of shoal.
package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/event"
	"github.com/shoal-lb/shoal/internal/instance"
	"github.com/shoal-lb/shoal/internal/job"
)

// ErrNotFound reports that a requested row does not exist.
var ErrNotFound = errors.New("not found")

// ErrFenced reports a write (or a Guard) refused because this node does not
// hold the HA leader's fence (any more): see package etcdstore. A group
// that gets it acts on its provider no more.
var ErrFenced = errors.New("not the leader: refused by the fence")

// ErrNoFence is ErrFenced from a node that holds no fence at all: a
// standby, or a leader stepping down, whose fence may come back if the
// step-down fails. A group is not latched by it (see group.Group.fenced).
var ErrNoFence = fmt.Errorf("%w (this node holds none)", ErrFenced)

// maxJobs is how many of the newest jobs are kept; older ones are pruned on insert.
const maxJobs = 10000

// migrations[i] brings the schema from user_version i to i+1. Append only.
var migrations = [][]string{
	{
		`CREATE TABLE group_state (
			name                TEXT PRIMARY KEY,
			desired             INTEGER NOT NULL,
			up_cooldown_until   TEXT,
			down_cooldown_until TEXT
		) STRICT`,
		`CREATE TABLE instances (
			name       TEXT PRIMARY KEY,
			group_name TEXT NOT NULL,
			idx        INTEGER NOT NULL,
			host       TEXT NOT NULL,
			port       INTEGER NOT NULL,
			pid        INTEGER NOT NULL,
			pid_start  INTEGER NOT NULL,
			started_at TEXT,
			state      TEXT NOT NULL,
			updated_at TEXT
		) STRICT`,
		`CREATE INDEX instances_group_idx ON instances (group_name, idx)`,
		// AUTOINCREMENT so that ids of pruned jobs are never handed out again:
		// clients may hold on to a job id long after it was pruned.
		`CREATE TABLE jobs (
			id          INTEGER PRIMARY KEY AUTOINCREMENT,
			group_name  TEXT NOT NULL,
			source      TEXT NOT NULL,
			kind        TEXT NOT NULL,
			plan        TEXT NOT NULL,
			from_size   INTEGER NOT NULL,
			target_size INTEGER NOT NULL,
			state       TEXT NOT NULL,
			reason      TEXT NOT NULL,
			noop        INTEGER NOT NULL,
			created_at  TEXT,
			started_at  TEXT,
			finished_at TEXT
		) STRICT`,
		`CREATE INDEX jobs_group_id ON jobs (group_name, id)`,
	},
	{
		// When the instance entered its state: a drain interrupted by a
		// restart of shoal resumes with what is left of drain_timeout.
		`ALTER TABLE instances ADD COLUMN state_since TEXT`,
	},
	{
		// The autoscaler's decisions, each explained; see InsertDecision.
		`CREATE TABLE decisions (
			id             INTEGER PRIMARY KEY AUTOINCREMENT,
			group_name     TEXT NOT NULL,
			at             TEXT NOT NULL,
			rule           TEXT NOT NULL,
			sources        TEXT NOT NULL,
			metric_values  TEXT NOT NULL,
			current_size   INTEGER NOT NULL,
			recommendation INTEGER NOT NULL,
			request_kind   TEXT NOT NULL,
			request_plan   TEXT NOT NULL,
			request_size   INTEGER NOT NULL,
			outcome        TEXT NOT NULL,
			code           TEXT NOT NULL,
			reason         TEXT NOT NULL,
			job_id         TEXT NOT NULL
		) STRICT`,
		`CREATE INDEX decisions_group_id ON decisions (group_name, id)`,
	},
	{
		// Rolling deploys: the version each instance runs, the template
		// variables a deploy set (JSON), and the version a deploy job rolls out.
		`ALTER TABLE instances ADD COLUMN version TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE group_state ADD COLUMN template_vars TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE jobs ADD COLUMN version TEXT NOT NULL DEFAULT ''`,
	},
	{
		// The template the group's instances run (JSON), so that
		// replacements start it after a reload or a restart with an edited
		// config, until a deploy succeeds.
		`ALTER TABLE group_state ADD COLUMN serving_template TEXT NOT NULL DEFAULT ''`,
	},
	{
		// One provider-neutral record per instance (instance.Record): an
		// opaque provider id, the address, and what only the provider reads
		// (JSON). host now names the machine the instance runs on; a local
		// instance runs where it serves. The local provider's pid, start
		// time and marker (the instance's name) move into its data.
		`ALTER TABLE instances ADD COLUMN provider_id TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE instances ADD COLUMN addr TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE instances ADD COLUMN provider_data TEXT NOT NULL DEFAULT ''`,
		`UPDATE instances SET
			provider_id = CASE WHEN pid > 0 THEN pid || '-' || pid_start ELSE '' END,
			addr = CASE WHEN port = 0 THEN ''
				WHEN instr(host, ':') > 0 THEN '[' || host || ']:' || port
				ELSE host || ':' || port END,
			provider_data = CASE WHEN pid > 0
				THEN json_object('pid', pid, 'pid_start', pid_start, 'marker', name)
				ELSE '' END`,
		`ALTER TABLE instances DROP COLUMN port`,
		`ALTER TABLE instances DROP COLUMN pid`,
		`ALTER TABLE instances DROP COLUMN pid_start`,
	},
	{
		// What each finished instance ran for, kept usageKept: a group's
		// instance-hours today and its hourly budget count it.
		`CREATE TABLE instance_usage (
			name       TEXT NOT NULL,
			group_name TEXT NOT NULL,
			started_at TEXT NOT NULL,
			ended_at   TEXT NOT NULL
		) STRICT`,
		`CREATE INDEX instance_usage_group_ended ON instance_usage (group_name, ended_at)`,
	},
	{
		// How long each group's newest instances took from their start to
		// in service, startDelaysKept of them: the policy lab's simulator
		// takes their median as its start delay.
		`CREATE TABLE start_delays (
			group_name TEXT NOT NULL,
			at         TEXT NOT NULL,
			seconds    REAL NOT NULL
		) STRICT`,
		`CREATE INDEX start_delays_group_at ON start_delays (group_name, at)`,
	},
	{
		// Notifications waiting for delivery, one row per event and target
		// (see notify.go). Times are Unix nanoseconds: compared, not read.
		`CREATE TABLE notify_queue (
			id         INTEGER PRIMARY KEY AUTOINCREMENT,
			target     TEXT NOT NULL,
			event      TEXT NOT NULL,
			created_at INTEGER NOT NULL,
			next_at    INTEGER NOT NULL,
			attempts   INTEGER NOT NULL DEFAULT 0,
			last_error TEXT NOT NULL DEFAULT ''
		) STRICT`,
		`CREATE INDEX notify_queue_next ON notify_queue (next_at)`,
	},
	{
		// Day-two acts on instances: an instance's operator marks (see
		// Instance.Marks), and the instances a job acts on with its note.
		`ALTER TABLE instances ADD COLUMN marks TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE jobs ADD COLUMN instances TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE jobs ADD COLUMN note TEXT NOT NULL DEFAULT ''`,
	},
	{
		// Recycling and host maintenance (issue 39): the template each
		// instance was started from, and the hosts an operator cordoned
		// (see hosts.go).
		`ALTER TABLE instances ADD COLUMN template TEXT NOT NULL DEFAULT ''`,
		`CREATE TABLE cordoned_hosts (
			provider TEXT NOT NULL,
			host     TEXT NOT NULL,
			since    TEXT NOT NULL,
			PRIMARY KEY (provider, host)
		) STRICT`,
	},
	{
		// A host drain in progress (CordonedHost.Draining): a restart of
		// shoal resumes it.
		`ALTER TABLE cordoned_hosts ADD COLUMN draining INTEGER NOT NULL DEFAULT 0`,
	},
	{
		// A group across providers (issue 42): the provider each instance
		// runs on, its usage (cost per provider) and its start delays.
		`ALTER TABLE instances ADD COLUMN provider TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE instance_usage ADD COLUMN provider TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE start_delays ADD COLUMN provider TEXT NOT NULL DEFAULT ''`,
	},
	{
		// A warm pool's server that left its pool (deleted, or taken by a
		// scale-out): billed for its time there, not one of the group's
		// instances (Usage.Pool).
		`ALTER TABLE instance_usage ADD COLUMN pool INTEGER NOT NULL DEFAULT 0`,
	},
}

// startDelaysKept is how many of a group's newest start delays are kept.
const startDelaysKept = 25

// usageKept is how long a finished instance's usage is kept: today's
// instance-hours need a day of it.
const usageKept = 48 * time.Hour

// Store is shoal's state database. It is safe for concurrent use.
type Store struct {
	db           *sql.DB
	maxJobs      int64
	maxDecisions int64
	outbox       *outbox
}

// Open opens the database at path, creating it (mode 0600) if needed, and
// migrates its schema to the current version.
func Open(path string) (*Store, error) {
	db, abs, err := OpenSQLite(path, "foreign_keys(on)", "journal_mode(WAL)", "synchronous(NORMAL)")
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	// One connection serialises all access: SQLite allows one writer anyway and
	// shoal's load is tiny, and it rules out SQLITE_BUSY between our own
	// connections. Methods therefore read all rows before the next query.
	db.SetMaxOpenConns(1)

	s := &Store{db: db, maxJobs: maxJobs, maxDecisions: maxDecisions, outbox: newOutbox()}
	if err := s.migrate(context.Background()); err != nil {
		db.Close()
		return nil, fmt.Errorf("open store %s: %w", abs, err)
	}
	return s, nil
}

// Guard reports whether this node may act on the providers now: a single
// node always leads, so it always may (see etcdstore.Store.Guard).
func (s *Store) Guard(context.Context) error { return nil }

// Close closes the database.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	return nil
}

func (s *Store) migrate(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback()

	var version int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if version > len(migrations) {
		return fmt.Errorf("schema version %d is newer than this shoal supports (%d)", version, len(migrations))
	}
	for v := version; v < len(migrations); v++ {
		for _, stmt := range migrations[v] {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("migrate schema to version %d: %w", v+1, err)
			}
		}
	}
	if version == len(migrations) {
		return nil
	}
	// PRAGMA takes no bound parameters; the value is an int we control.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", len(migrations))); err != nil {
		return fmt.Errorf("set schema version: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// GroupState is a group's persistent scaling state.
type GroupState struct {
	Name              string
	Desired           int
	UpCooldownUntil   time.Time
	DownCooldownUntil time.Time
	// TemplateVars are the template variables the last deploy set, as the
	// group encodes them ("" for none).
	TemplateVars string
	// ServingTemplate is the template the group's instances run, as
	// config.EncodeTemplate writes it ("" for none yet).
	ServingTemplate string
}

// GroupState returns the state of the named group; ok is false if none was stored.
func (s *Store) GroupState(ctx context.Context, name string) (g GroupState, ok bool, err error) {
	var up, down sql.NullString
	err = s.db.QueryRowContext(ctx,
		`SELECT name, desired, up_cooldown_until, down_cooldown_until, template_vars, serving_template FROM group_state WHERE name = ?`,
		name).Scan(&g.Name, &g.Desired, &up, &down, &g.TemplateVars, &g.ServingTemplate)
	if errors.Is(err, sql.ErrNoRows) {
		return GroupState{}, false, nil
	}
	if err != nil {
		return GroupState{}, false, fmt.Errorf("read group state %q: %w", name, err)
	}
	if g.UpCooldownUntil, err = parseTime(up); err != nil {
		return GroupState{}, false, fmt.Errorf("read group state %q: %w", name, err)
	}
	if g.DownCooldownUntil, err = parseTime(down); err != nil {
		return GroupState{}, false, fmt.Errorf("read group state %q: %w", name, err)
	}
	return g, true, nil
}

// PutGroupState creates or replaces the state of g.Name.
func (s *Store) PutGroupState(ctx context.Context, g GroupState) error {
	_, err := s.db.ExecContext(ctx,
		`INSERT INTO group_state (name, desired, up_cooldown_until, down_cooldown_until, template_vars, serving_template)
		VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET
			desired = excluded.desired,
			up_cooldown_until = excluded.up_cooldown_until,
			down_cooldown_until = excluded.down_cooldown_until,
			template_vars = excluded.template_vars,
			serving_template = excluded.serving_template`,
		g.Name, g.Desired, formatTime(g.UpCooldownUntil), formatTime(g.DownCooldownUntil), g.TemplateVars, g.ServingTemplate)
	if err != nil {
		return fmt.Errorf("write group state %q: %w", g.Name, err)
	}
	return nil
}

// Instance is a stored instance: its provider's record plus shoal's view of it.
type Instance struct {
	instance.Record
	State string
	// StateSince is when the instance entered State.
	StateSince time.Time
	// Version is the template version the instance runs.
	Version string
	// Template is the hash of the rendered template the instance was
	// started from (config.Template.Hash): an instance whose hash is not
	// the serving template's has drifted. Empty when started by an older
	// shoal.
	Template string `json:",omitempty"`
	// Marks are what an operator set on the instance and what must
	// survive a restart of shoal (group.Group's day-two acts: protected,
	// no-replace, decrement; an outlier's ejection: ejected-until=MS,
	// ejected-at=MS); sorted words without commas.
	Marks []string `json:",omitempty"`
	// UpdatedAt is set by PutInstance.
	UpdatedAt time.Time
}

// PutInstance creates or replaces the instance named in.Name and sets its UpdatedAt to now.
func (s *Store) PutInstance(ctx context.Context, in Instance) error {
	_, err := s.db.ExecContext(ctx,
		`INSERT INTO instances (name, group_name, idx, provider_id, addr, host, provider_data, started_at, state, state_since, updated_at, version, marks, template, provider)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET
			group_name = excluded.group_name,
			idx = excluded.idx,
			provider_id = excluded.provider_id,
			addr = excluded.addr,
			host = excluded.host,
			provider_data = excluded.provider_data,
			started_at = excluded.started_at,
			state = excluded.state,
			state_since = excluded.state_since,
			updated_at = excluded.updated_at,
			version = excluded.version,
			marks = excluded.marks,
			template = excluded.template,
			provider = excluded.provider`,
		in.Name, in.Group, in.Index, in.ID, in.Addr, in.Host, string(in.Data),
		formatTime(in.StartedAt), in.State, formatTime(in.StateSince), formatTime(time.Now()), in.Version, joinWords(in.Marks), in.Template, in.Provider)
	if err != nil {
		return fmt.Errorf("write instance %q: %w", in.Name, err)
	}
	return nil
}

// DeleteInstance removes the named instance, keeping what it ran for
// (from its start until now) as its usage; removing a missing one is not
// an error.
func (s *Store) DeleteInstance(ctx context.Context, name string) error {
	now := time.Now()
	err := s.execAll(ctx,
		stmt{`INSERT INTO instance_usage (name, group_name, started_at, ended_at, provider)
			SELECT name, group_name, started_at, ?, provider FROM instances WHERE name = ? AND started_at IS NOT NULL`,
			[]any{formatTime(now), name}},
		stmt{`DELETE FROM instances WHERE name = ?`, []any{name}},
		stmt{`DELETE FROM instance_usage WHERE ended_at < ?`, []any{formatTime(now.Add(-usageKept))}})
	if err != nil {
		return fmt.Errorf("delete instance %q: %w", name, err)
	}
	return nil
}

// stmt is one SQL statement with its arguments.
type stmt struct {
	sql  string
	args []any
}

// execAll runs the statements in one transaction: all of them, or none.
func (s *Store) execAll(ctx context.Context, stmts ...stmt) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, q := range stmts {
		if _, err := tx.ExecContext(ctx, q.sql, q.args...); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// AddStartDelay records that an instance of group went into service at
// at, d after its start on provider, keeping the group's newest
// startDelaysKept.
func (s *Store) AddStartDelay(ctx context.Context, group, provider string, at time.Time, d time.Duration) error {
	err := s.execAll(ctx,
		stmt{`INSERT INTO start_delays (group_name, at, seconds, provider) VALUES (?, ?, ?, ?)`, []any{group, formatTime(at), d.Seconds(), provider}},
		stmt{`DELETE FROM start_delays WHERE group_name = ? AND rowid NOT IN
			(SELECT rowid FROM start_delays WHERE group_name = ? ORDER BY at DESC, rowid DESC LIMIT ?)`,
			[]any{group, group, startDelaysKept}})
	if err != nil {
		return fmt.Errorf("record start delay of group %s: %w", group, err)
	}
	return nil
}

// StartDelays returns group's newest start delays (at most
// startDelaysKept), oldest first: those on provider, or all ("").
func (s *Store) StartDelays(ctx context.Context, group, provider string) ([]time.Duration, error) {
	rows, err := s.db.QueryContext(ctx,
		`SELECT seconds FROM start_delays WHERE group_name = ? AND (? = '' OR provider = ?) ORDER BY at, rowid`, group, provider, provider)
	if err != nil {
		return nil, fmt.Errorf("read start delays of group %s: %w", group, err)
	}
	defer rows.Close()
	var out []time.Duration
	for rows.Next() {
		var sec float64
		if err := rows.Scan(&sec); err != nil {
			return nil, fmt.Errorf("read start delays of group %s: %w", group, err)
		}
		out = append(out, time.Duration(sec*float64(time.Second)))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read start delays of group %s: %w", group, err)
	}
	return out, nil
}

// AddUsage keeps what an instance of group that was never recorded ran
// for (a cloud server created for a start that failed), or what a server
// of its warm pool was the pool's for (Pool).
func (s *Store) AddUsage(ctx context.Context, group string, u Usage) error {
	if _, err := s.db.ExecContext(ctx, `INSERT INTO instance_usage (name, group_name, started_at, ended_at, provider, pool) VALUES (?, ?, ?, ?, ?, ?)`,
		u.Name, group, formatTime(u.Started), formatTime(u.Ended), u.Provider, u.Pool); err != nil {
		return fmt.Errorf("record usage of instance %q: %w", u.Name, err)
	}
	return nil
}

// Usage is what one finished instance ran for.
type Usage struct {
	Name           string
	Started, Ended time.Time
	// Provider is the instance's (see instance.Record.Provider).
	Provider string `json:",omitempty"`
	// Pool marks the time a server was its group's warm pool's: billed,
	// but not one of the group's instances (max_hourly_instances does not
	// count it).
	Pool bool `json:",omitempty"`
}

// Usage returns the usage of group's instances that ended after since
// (at most usageKept ago).
func (s *Store) Usage(ctx context.Context, group string, since time.Time) ([]Usage, error) {
	rows, err := s.db.QueryContext(ctx,
		`SELECT name, started_at, ended_at, provider, pool FROM instance_usage WHERE group_name = ? AND ended_at > ? ORDER BY ended_at`,
		group, formatTime(since))
	if err != nil {
		return nil, fmt.Errorf("read usage of group %s: %w", group, err)
	}
	defer rows.Close()
	var out []Usage
	for rows.Next() {
		var (
			u          Usage
			start, end sql.NullString
		)
		if err := rows.Scan(&u.Name, &start, &end, &u.Provider, &u.Pool); err != nil {
			return nil, fmt.Errorf("read usage of group %s: %w", group, err)
		}
		if u.Started, err = parseTime(start); err != nil {
			return nil, err
		}
		if u.Ended, err = parseTime(end); err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read usage of group %s: %w", group, err)
	}
	return out, nil
}

// Instances returns all stored instances ordered by group, then index.
func (s *Store) Instances(ctx context.Context) ([]Instance, error) {
	rows, err := s.db.QueryContext(ctx,
		`SELECT name, group_name, idx, provider_id, addr, host, provider_data, started_at, state, state_since, updated_at, version, marks, template, provider
		FROM instances ORDER BY group_name, idx, name`)
	if err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	defer rows.Close()
	var out []Instance
	for rows.Next() {
		var (
			in                        Instance
			data, marks               string
			started, since, updatedAt sql.NullString
		)
		if err := rows.Scan(&in.Name, &in.Group, &in.Index, &in.ID, &in.Addr, &in.Host, &data,
			&started, &in.State, &since, &updatedAt, &in.Version, &marks, &in.Template, &in.Provider); err != nil {
			return nil, fmt.Errorf("list instances: %w", err)
		}
		in.Marks = splitWords(marks)
		if data != "" {
			in.Data = []byte(data)
		}
		if in.StartedAt, err = parseTime(started); err != nil {
			return nil, fmt.Errorf("list instances: instance %q: %w", in.Name, err)
		}
		if in.StateSince, err = parseTime(since); err != nil {
			return nil, fmt.Errorf("list instances: instance %q: %w", in.Name, err)
		}
		if in.UpdatedAt, err = parseTime(updatedAt); err != nil {
			return nil, fmt.Errorf("list instances: instance %q: %w", in.Name, err)
		}
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	return out, nil
}

const jobColumns = `id, group_name, source, kind, plan, from_size, target_size, state, reason, noop,
	created_at, started_at, finished_at, version, instances, note`

// InsertJob stores j as a new job and sets j.ID. Ids are never reused. Only the
// newest 10,000 jobs are kept.
func (s *Store) InsertJob(ctx context.Context, j *job.Job) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("insert job: %w", err)
	}
	defer tx.Rollback()

	res, err := tx.ExecContext(ctx,
		`INSERT INTO jobs (group_name, source, kind, plan, from_size, target_size, state, reason, noop,
			created_at, started_at, finished_at, version, instances, note)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		j.Group, j.Source, j.Kind, j.Plan, j.From, j.Target, j.State, j.Reason, j.Noop,
		formatTime(j.CreatedAt), formatOptTime(j.StartedAt), formatOptTime(j.FinishedAt), j.Version, joinWords(j.Instances), j.Note)
	if err != nil {
		return fmt.Errorf("insert job: %w", err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return fmt.Errorf("insert job: %w", err)
	}
	// Ids increase monotonically, so a range delete on the primary key prunes
	// without counting rows. Gaps only make it keep fewer.
	if _, err := tx.ExecContext(ctx, `DELETE FROM jobs WHERE id <= ?`, id-s.maxJobs); err != nil {
		return fmt.Errorf("insert job: prune old jobs: %w", err)
	}
	stored := *j
	stored.ID = strconv.FormatInt(id, 10)
	if ev, ok := event.FromJob("", stored); ok {
		if err := s.enqueue(ctx, tx, ev); err != nil {
			return fmt.Errorf("insert job: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("insert job: %w", err)
	}
	s.outbox.poke()
	j.ID = stored.ID
	return nil
}

// UpdateJob replaces the stored job j.ID with j, or returns ErrNotFound.
func (s *Store) UpdateJob(ctx context.Context, j job.Job) error {
	id, ok := parseJobID(j.ID)
	if !ok {
		return fmt.Errorf("update job %q: %w", j.ID, ErrNotFound)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("update job %d: %w", id, err)
	}
	defer tx.Rollback()
	// The state it had tells whether this update is an event.
	var was job.State
	err = tx.QueryRowContext(ctx, `SELECT state FROM jobs WHERE id = ?`, id).Scan(&was)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("update job %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("update job %d: %w", id, err)
	}
	if _, err := tx.ExecContext(ctx,
		`UPDATE jobs SET group_name = ?, source = ?, kind = ?, plan = ?, from_size = ?, target_size = ?,
			state = ?, reason = ?, noop = ?, created_at = ?, started_at = ?, finished_at = ?, version = ?,
			instances = ?, note = ?
		WHERE id = ?`,
		j.Group, j.Source, j.Kind, j.Plan, j.From, j.Target, j.State, j.Reason, j.Noop,
		formatTime(j.CreatedAt), formatOptTime(j.StartedAt), formatOptTime(j.FinishedAt), j.Version,
		joinWords(j.Instances), j.Note, id); err != nil {
		return fmt.Errorf("update job %d: %w", id, err)
	}
	if ev, ok := event.FromJob(was, j); ok {
		if err := s.enqueue(ctx, tx, ev); err != nil {
			return fmt.Errorf("update job %d: %w", id, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("update job %d: %w", id, err)
	}
	s.outbox.poke()
	return nil
}

// Job returns the job with the given id, or ErrNotFound.
func (s *Store) Job(ctx context.Context, id string) (job.Job, error) {
	n, ok := parseJobID(id)
	if !ok {
		return job.Job{}, fmt.Errorf("read job %q: %w", id, ErrNotFound)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ?`, n)
	if err != nil {
		return job.Job{}, fmt.Errorf("read job %d: %w", n, err)
	}
	jobs, err := scanJobs(rows)
	if err != nil {
		return job.Job{}, fmt.Errorf("read job %d: %w", n, err)
	}
	if len(jobs) == 0 {
		return job.Job{}, fmt.Errorf("read job %d: %w", n, ErrNotFound)
	}
	return jobs[0], nil
}

// parseJobID reads a job's id, the jobs table's key in decimal.
func parseJobID(id string) (int64, bool) {
	n, err := strconv.ParseInt(id, 10, 64)
	return n, err == nil && n > 0
}

// Jobs returns up to limit jobs of group ("" for all groups), newest first.
// A limit of 0 or less means no limit.
func (s *Store) Jobs(ctx context.Context, group string, limit int) ([]job.Job, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	var (
		rows *sql.Rows
		err  error
	)
	if group == "" {
		rows, err = s.db.QueryContext(ctx,
			`SELECT `+jobColumns+` FROM jobs ORDER BY id DESC LIMIT ?`, limit)
	} else {
		rows, err = s.db.QueryContext(ctx,
			`SELECT `+jobColumns+` FROM jobs WHERE group_name = ? ORDER BY id DESC LIMIT ?`, group, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	jobs, err := scanJobs(rows)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return jobs, nil
}

// FailUnfinishedJobs marks every accepted or running job as failed with reason,
// finished at at, and returns them ordered by id. Jobs cannot survive a restart
// of shoal; this records why they ended.
func (s *Store) FailUnfinishedJobs(ctx context.Context, reason string, at time.Time) ([]job.Job, error) {
	rows, err := s.db.QueryContext(ctx,
		`UPDATE jobs SET state = ?, reason = ?, finished_at = ?
		WHERE state IN (?, ?)
		RETURNING `+jobColumns,
		job.Failed, reason, formatTime(at), job.Accepted, job.Running)
	if err != nil {
		return nil, fmt.Errorf("fail unfinished jobs: %w", err)
	}
	jobs, err := scanJobs(rows)
	if err != nil {
		return nil, fmt.Errorf("fail unfinished jobs: %w", err)
	}
	// RETURNING yields rows in no particular order. Ids are decimal without
	// leading zeros: the shorter is the smaller.
	slices.SortFunc(jobs, func(a, b job.Job) int {
		return cmp.Or(cmp.Compare(len(a.ID), len(b.ID)), cmp.Compare(a.ID, b.ID))
	})
	return jobs, nil
}

// scanJobs reads all rows of a jobColumns query and closes rows.
func scanJobs(rows *sql.Rows) ([]job.Job, error) {
	defer rows.Close()
	var out []job.Job
	for rows.Next() {
		var (
			j                          job.Job
			id                         int64
			created, started, finished sql.NullString
			instances                  string
		)
		if err := rows.Scan(&id, &j.Group, &j.Source, &j.Kind, &j.Plan, &j.From, &j.Target,
			&j.State, &j.Reason, &j.Noop, &created, &started, &finished, &j.Version, &instances, &j.Note); err != nil {
			return nil, err
		}
		j.Instances = splitWords(instances)
		j.ID = strconv.FormatInt(id, 10)
		var err error
		if j.CreatedAt, err = parseTime(created); err != nil {
			return nil, fmt.Errorf("job %d: %w", id, err)
		}
		if j.StartedAt, err = parseOptTime(started); err != nil {
			return nil, fmt.Errorf("job %d: %w", id, err)
		}
		if j.FinishedAt, err = parseOptTime(finished); err != nil {
			return nil, fmt.Errorf("job %d: %w", id, err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// formatOptTime stores an optional time: nil as NULL.
func formatOptTime(t *time.Time) sql.NullString {
	if t == nil {
		return sql.NullString{}
	}
	return formatTime(*t)
}

// parseOptTime reads an optional time: NULL as nil.
func parseOptTime(v sql.NullString) (*time.Time, error) {
	if !v.Valid {
		return nil, nil
	}
	t, err := parseTime(v)
	return &t, err
}

// formatTime stores t as UTC RFC 3339 text, readable with the sqlite3 shell; the
// zero time becomes NULL so that it round-trips as zero.
func formatTime(t time.Time) sql.NullString {
	if t.IsZero() {
		return sql.NullString{}
	}
	return sql.NullString{String: t.UTC().Format(time.RFC3339Nano), Valid: true}
}

func parseTime(v sql.NullString) (time.Time, error) {
	if !v.Valid {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v.String)
	if err != nil {
		return time.Time{}, fmt.Errorf("parse time %q: %w", v.String, err)
	}
	return t, nil
}

// joinWords keeps a list of names (instance names, marks: words without
// commas) in one column.
func joinWords(ws []string) string { return strings.Join(ws, ",") }

// splitWords reads what joinWords wrote; "" is no words.
func splitWords(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
