package haproxy

import (
	"context"
	"fmt"
	"strconv"

	"github.com/shoal-lb/shoal/internal/haproxy/hapword"
)

// SetWeight sets a registered server's weight (1 to 256) in HAProxy and in
// the registry, so that a restart of HAProxy or a reload, which re-adds
// the server from the registry, keeps it. A canary deploy shares the
// requests between versions this way (internal/canary).
func (m *Manager) SetWeight(ctx context.Context, backend, name string, weight int) error {
	if !hapword.Name(backend) || !hapword.Name(name) {
		return fmt.Errorf("set weight of %q/%q: invalid name", backend, name)
	}
	if weight < 1 || weight > 256 {
		return fmt.Errorf("set weight of %s/%s: weight %d must be 1 to 256", backend, name, weight)
	}
	k := serverKey{backend, name}
	unlock, err := m.servers.lock(ctx, k)
	if err != nil {
		return err
	}
	defer unlock()
	m.mu.Lock()
	e := m.registry[k]
	if e != nil {
		e.srv.Weight = weight
	}
	up := m.up
	m.mu.Unlock()
	if e == nil {
		return fmt.Errorf("set weight of %s/%s: not registered", backend, name)
	}
	if !up || !m.configured(backend) {
		return nil // a restart or sync adds it with the registered weight
	}
	m.reloadMu.RLock()
	defer m.reloadMu.RUnlock()
	err = m.run(ctx, "set server "+backend+"/"+name+" weight "+strconv.Itoa(weight), "")
	return m.tolerateDown(ctx, &k, fmt.Sprintf("set weight of %s/%s", backend, name), err)
}
