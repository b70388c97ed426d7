package haproxy

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy/hapword"
)

// WithGroup returns s with the settings its group gives every server: the
// health check, the protocol, limits.max_conn and slow_start. default-server
// does not apply to servers added over the Runtime API, so each one carries
// them on its own line, and a reload writes them again from the group's
// current config.
func (s Server) WithGroup(g config.Group) Server {
	s.Health, s.Proto = g.Health, g.Proto
	s.MaxConn, s.SlowStart = 0, g.SlowStart
	if g.Limits != nil {
		s.MaxConn = g.Limits.MaxConn
	}
	return s
}

// limitArgs are the words of a server line that cap its concurrent requests
// (the rest wait in the backend's queue) and ramp its weight once it is UP.
func limitArgs(s Server) string {
	var a string
	if s.MaxConn > 0 {
		a += " maxconn " + strconv.Itoa(s.MaxConn)
	}
	if s.SlowStart > 0 {
		a += " slowstart " + ms(s.SlowStart)
	}
	return a
}

// limitLines are a group's backend lines for its limits: how long a request
// may wait in the queue for a server under its maxconn.
func limitLines(g config.Group) []string {
	if g.Limits == nil || g.Limits.QueueTimeout <= 0 {
		return nil
	}
	return []string{"timeout queue " + ms(min(g.Limits.QueueTimeout, maxTimer))}
}

// queueWait is the longest a request waits in a queue for a server under
// its maxconn (0 without limits: no server has a maxconn then).
func queueWait(cfg *config.Config) time.Duration {
	var longest time.Duration
	for _, g := range cfg.Groups {
		if g.Limits != nil {
			longest = max(longest, g.Limits.QueueTimeout)
		}
	}
	return longest
}

// BackendStat returns backend's own line of "show stat": its queue (qcur,
// qmax, qtime) holds the requests no server under its maxconn could take.
func (m *Manager) BackendStat(ctx context.Context, backend string) (ServerStat, error) {
	m.mu.Lock()
	up := m.up
	m.mu.Unlock()
	if !up {
		return ServerStat{}, fmt.Errorf("haproxy stats for %s: %w", backend, ErrNotRunning)
	}
	if !hapword.Name(backend) {
		return ServerStat{}, fmt.Errorf("haproxy stats: invalid backend name %q", backend)
	}
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	stats, err := m.client.showStat(ctx, backend+" 2 -1")
	if err != nil {
		return ServerStat{}, err
	}
	for _, s := range stats {
		if s.Backend == backend && s.Type == TypeBackend {
			return s, nil
		}
	}
	return ServerStat{}, fmt.Errorf("haproxy stats: no backend %q", backend)
}
