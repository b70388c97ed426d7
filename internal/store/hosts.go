package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// CordonedHost is a provider's host an operator cordoned: no new instance
// is placed there until it is uncordoned. Its instances keep running
// (`shoal hosts drain` moves them).
type CordonedHost struct {
	Provider string    `json:"provider"`
	Host     string    `json:"host"`
	Since    time.Time `json:"since"`
	// Draining: a drain of the host (`shoal hosts drain`) started and has
	// not ended; the next start of shoal, or the next leader of an HA
	// pair, resumes it.
	Draining bool `json:"draining,omitempty"`
}

// CordonHost records h as cordoned; cordoning a cordoned host keeps its
// first Since and reports false.
func (s *Store) CordonHost(ctx context.Context, h CordonedHost) (added bool, err error) {
	res, err := s.db.ExecContext(ctx,
		`INSERT INTO cordoned_hosts (provider, host, since, draining) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING`,
		h.Provider, h.Host, formatTime(h.Since), h.Draining)
	if err != nil {
		return false, fmt.Errorf("cordon host %s/%s: %w", h.Provider, h.Host, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// UncordonHost forgets the host's cordon; removed is false when it had none.
func (s *Store) UncordonHost(ctx context.Context, provider, host string) (removed bool, err error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM cordoned_hosts WHERE provider = ? AND host = ?`, provider, host)
	if err != nil {
		return false, fmt.Errorf("uncordon host %s/%s: %w", provider, host, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// SetHostDraining records that a drain of the cordoned host runs (or no
// longer does); found is false when the host is not cordoned.
func (s *Store) SetHostDraining(ctx context.Context, provider, host string, draining bool) (found bool, err error) {
	res, err := s.db.ExecContext(ctx, `UPDATE cordoned_hosts SET draining = ? WHERE provider = ? AND host = ?`, draining, provider, host)
	if err != nil {
		return false, fmt.Errorf("mark host %s/%s draining: %w", provider, host, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// CordonedHosts lists the cordoned hosts by provider, then host.
func (s *Store) CordonedHosts(ctx context.Context) ([]CordonedHost, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT provider, host, since, draining FROM cordoned_hosts ORDER BY provider, host`)
	if err != nil {
		return nil, fmt.Errorf("list cordoned hosts: %w", err)
	}
	defer rows.Close()
	var out []CordonedHost
	for rows.Next() {
		var (
			h     CordonedHost
			since sql.NullString
		)
		if err := rows.Scan(&h.Provider, &h.Host, &since, &h.Draining); err != nil {
			return nil, fmt.Errorf("list cordoned hosts: %w", err)
		}
		if h.Since, err = parseTime(since); err != nil {
			return nil, fmt.Errorf("list cordoned hosts: %w", err)
		}
		out = append(out, h)
	}
	return out, rows.Err()
}
