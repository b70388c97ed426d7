package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/event"
)

// The notification queue is an outbox: an event is queued for each target
// that wants it in the transaction that records what it is derived from,
// so nothing recorded goes untold and a restart loses nothing queued. The
// notifier (package notify) delivers, retries and expires the rows.

// Router names the notification targets that want an event.
type Router func(event.Event) []string

// outbox holds the router and wakes the notifier after a commit.
type outbox struct {
	mu     sync.Mutex
	route  Router
	queued chan struct{}
}

func newOutbox() *outbox { return &outbox{queued: make(chan struct{}, 1)} }

func (o *outbox) poke() {
	select {
	case o.queued <- struct{}{}:
	default:
	}
}

// SetRouter makes every event recorded from now on queued for the targets
// route names; nil queues nothing.
func (s *Store) SetRouter(route Router) {
	s.outbox.mu.Lock()
	s.outbox.route = route
	s.outbox.mu.Unlock()
}

// Poke wakes the notifier as a queued notification would.
func (s *Store) Poke() { s.outbox.poke() }

// Queued receives after a notification may have been queued.
func (s *Store) Queued() <-chan struct{} { return s.outbox.queued }

// enqueue queues ev in tx for each target that wants it.
func (s *Store) enqueue(ctx context.Context, tx *sql.Tx, ev event.Event) error {
	s.outbox.mu.Lock()
	route := s.outbox.route
	s.outbox.mu.Unlock()
	if route == nil {
		return nil
	}
	targets := route(ev)
	if len(targets) == 0 {
		return nil
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("queue %s event: %w", ev.Type, err)
	}
	now := time.Now().UnixNano()
	for _, t := range targets {
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO notify_queue (target, event, created_at, next_at) VALUES (?, ?, ?, ?)`,
			t, string(body), now, now); err != nil {
			return fmt.Errorf("queue %s event for %s: %w", ev.Type, t, err)
		}
	}
	return nil
}

// Notification is a queued event for one target.
type Notification struct {
	ID      int64
	Target  string
	Event   event.Event
	Created time.Time
	// Attempts counts the failed deliveries so far.
	Attempts int
}

// DueNotifications returns up to limit notifications for target ("" for
// every target) due at now, oldest first. A target's queue is a FIFO: a
// notification is due only when every older one of its target is, so one
// waiting to be retried holds back those queued after it (for a target ""
// the limit counts the held-back rows read too).
func (s *Store) DueNotifications(ctx context.Context, target string, now time.Time, limit int) ([]Notification, error) {
	rows, err := s.db.QueryContext(ctx,
		`SELECT id, target, event, created_at, next_at, attempts FROM notify_queue
		 WHERE (? = '' OR target = ?) ORDER BY id LIMIT ?`,
		target, target, limit)
	if err != nil {
		return nil, fmt.Errorf("read notification queue: %w", err)
	}
	defer rows.Close()
	var out []Notification
	blocked := map[string]bool{} // targets whose head is not due
	for rows.Next() {
		var (
			n             Notification
			body          string
			created, next int64
		)
		if err := rows.Scan(&n.ID, &n.Target, &body, &created, &next, &n.Attempts); err != nil {
			return nil, fmt.Errorf("read notification queue: %w", err)
		}
		if blocked[n.Target] || next > now.UnixNano() {
			blocked[n.Target] = true
			continue
		}
		if err := json.Unmarshal([]byte(body), &n.Event); err != nil {
			return nil, fmt.Errorf("read notification queue: notification %d: %w", n.ID, err)
		}
		n.Created = time.Unix(0, created)
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read notification queue: %w", err)
	}
	return out, nil
}

// NextNotifications returns when each target's oldest queued notification
// (the head of its FIFO) is due; a target with none queued is absent.
func (s *Store) NextNotifications(ctx context.Context) (map[string]time.Time, error) {
	// SQLite takes a bare column of an aggregate query from the row MIN chose.
	rows, err := s.db.QueryContext(ctx, `SELECT target, next_at, MIN(id) FROM notify_queue GROUP BY target`)
	if err != nil {
		return nil, fmt.Errorf("read notification queue: %w", err)
	}
	defer rows.Close()
	out := map[string]time.Time{}
	for rows.Next() {
		var (
			target   string
			next, id int64
		)
		if err := rows.Scan(&target, &next, &id); err != nil {
			return nil, fmt.Errorf("read notification queue: %w", err)
		}
		out[target] = time.Unix(0, next)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read notification queue: %w", err)
	}
	return out, nil
}

// TrimNotifications removes the oldest notifications of each target beyond
// its newest keep and returns how many of each target's it removed.
func (s *Store) TrimNotifications(ctx context.Context, keep int) (map[string]int, error) {
	rows, err := s.db.QueryContext(ctx,
		`DELETE FROM notify_queue WHERE id IN (
		   SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY target ORDER BY id DESC) AS newer FROM notify_queue)
		   WHERE newer > ?)
		 RETURNING target`, keep)
	if err != nil {
		return nil, fmt.Errorf("trim notification queue: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, fmt.Errorf("trim notification queue: %w", err)
		}
		out[t]++
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("trim notification queue: %w", err)
	}
	return out, nil
}

// DeleteNotification removes a delivered (or dropped) notification.
func (s *Store) DeleteNotification(ctx context.Context, id int64) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM notify_queue WHERE id = ?`, id); err != nil {
		return fmt.Errorf("delete notification %d: %w", id, err)
	}
	return nil
}

// RetryNotification records a failed delivery and when to try again.
func (s *Store) RetryNotification(ctx context.Context, id int64, next time.Time, reason string) error {
	if _, err := s.db.ExecContext(ctx,
		`UPDATE notify_queue SET attempts = attempts + 1, next_at = ?, last_error = ? WHERE id = ?`,
		next.UnixNano(), reason, id); err != nil {
		return fmt.Errorf("reschedule notification %d: %w", id, err)
	}
	return nil
}

// ExpireNotifications removes the notifications queued before before and
// returns how many of each target's it removed.
func (s *Store) ExpireNotifications(ctx context.Context, before time.Time) (map[string]int, error) {
	rows, err := s.db.QueryContext(ctx,
		`DELETE FROM notify_queue WHERE created_at < ? RETURNING target`, before.UnixNano())
	if err != nil {
		return nil, fmt.Errorf("expire notifications: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, fmt.Errorf("expire notifications: %w", err)
		}
		out[t]++
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("expire notifications: %w", err)
	}
	return out, nil
}

// Notify queues ev for the targets that want it, on its own: for what is
// recorded elsewhere (an HA pair's jobs, in etcd) but told from this node.
func (s *Store) Notify(ctx context.Context, ev event.Event) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("queue %s event: %w", ev.Type, err)
	}
	defer tx.Rollback()
	if err := s.enqueue(ctx, tx, ev); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("queue %s event: %w", ev.Type, err)
	}
	s.outbox.poke()
	return nil
}
