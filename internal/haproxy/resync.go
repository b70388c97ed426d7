package haproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// A command that cannot reach a running HAProxy is not lost. The Runtime
// API's socket refuses connections with EAGAIN while its accept queue is
// full (hundreds of servers added at once), and dial retries only until the
// command's timeout: HAProxy is then busy, not down, and no restart will
// come to apply the change. So tolerateDown records the server it was for,
// and the resync loop (run beside the supervisor) brings that server in
// line with the registry, with back-off, until HAProxy takes it:
//
//	change fails (net error) ─► unsynced[k] ─► kick ─► wait backoff
//	      ▲                                               │
//	      └──── still failing: double backoff ◄── resync k┤
//	                                         done: forget k┘
//
// A restart of HAProxy re-adds every registered server anyway (sync), and
// the loop only acts while HAProxy is up.
const (
	resyncMin = 200 * time.Millisecond
	resyncMax = 10 * time.Second
)

// tolerateDown lets a command fail when HAProxy cannot be reached: the
// registry changed anyway, and keys (none for an act, such as ending sessions,
// that a later sync cannot redo) is brought in line with it by the resync
// loop, or by the supervisor's sync after a restart.
func (m *Manager) tolerateDown(ctx context.Context, keys []serverKey, what string, err error) error {
	if err == nil {
		return nil
	}
	var netErr *net.OpError
	if ctx.Err() != nil || !errors.As(err, &netErr) {
		return fmt.Errorf("%s: %w", what, err)
	}
	if len(keys) == 0 {
		m.log.Warn("haproxy unreachable; the command is not repeated", "op", what, "err", err)
		return nil
	}
	m.log.Warn("haproxy unreachable or too busy to take a command; the server is re-synced when it answers", "op", what, "err", err)
	m.mu.Lock()
	if m.unsynced == nil {
		m.unsynced = make(map[serverKey]struct{})
	}
	for _, k := range keys {
		m.unsynced[k] = struct{}{}
	}
	m.mu.Unlock()
	select {
	case m.resyncKick <- struct{}{}:
	default: // one is pending already
	}
	return nil
}

// resyncLoop re-syncs the servers tolerateDown recorded until ctx ends.
func (m *Manager) resyncLoop(ctx context.Context) {
	delay := resyncMin
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.resyncKick:
		}
		for {
			if sleepCtx(ctx, delay) != nil {
				return
			}
			if m.resync(ctx) {
				delay = resyncMin
				break
			}
			delay = min(2*delay, resyncMax)
		}
	}
}

// resync brings each recorded server in line with the registry: a
// registered one is added (if missing) with its drain state and weight, an
// unregistered one removed. It reports whether none is left.
func (m *Manager) resync(ctx context.Context) bool {
	m.mu.Lock()
	keys := make([]serverKey, 0, len(m.unsynced))
	for k := range m.unsynced {
		keys = append(keys, k)
	}
	up := m.up
	m.mu.Unlock()
	if !up {
		return false
	}
	for _, k := range keys {
		err := m.resyncServer(ctx, k)
		if ctx.Err() != nil {
			return false
		}
		if err != nil {
			m.log.Warn("re-sync of server with haproxy failed; trying again", "backend", k.backend, "server", k.name, "err", err)
			continue
		}
		m.mu.Lock()
		delete(m.unsynced, k)
		m.mu.Unlock()
		m.log.Info("server re-synced with haproxy", "backend", k.backend, "server", k.name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.unsynced) == 0
}

func (m *Manager) resyncServer(ctx context.Context, k serverKey) error {
	unlock, err := m.servers.lock(ctx, k)
	if err != nil {
		return err
	}
	defer unlock()
	m.mu.Lock()
	e, registered := m.registry[k]
	var cur entry
	if registered {
		cur = *e
	}
	m.mu.Unlock()
	if !m.configured(k.backend) {
		return nil // its backend left HAProxy with its group
	}
	m.reloadMu.RLock()
	defer m.reloadMu.RUnlock()
	if !registered {
		return m.removeFromHAProxy(ctx, k.backend, k.name)
	}
	if err := m.addToHAProxy(ctx, cur.srv, cur.ready); err != nil {
		return err
	}
	state := "ready"
	if cur.draining {
		state = "drain"
	}
	weight := cur.srv.Weight
	switch weight {
	case 0:
		weight = 100
	case WeightOff:
		weight = 0
	}
	id := k.backend + "/" + k.name
	return m.run(ctx, "set server "+id+" state "+state+"; set server "+id+" weight "+strconv.Itoa(weight), "")
}
