package haproxy

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/shoal-lb/shoal/internal/haproxy/hapword"
)

// WeightOff is Server.Weight for a server out of rotation: HAProxy's
// weight 0, under which it gets no new request while its checks go on and
// it stays UP (a blue/green deploy's idle set). Server.Weight 0 means the
// default, 100.
const WeightOff = -1

// SetWeight sets a registered server's weight (1 to 256, or WeightOff) in
// HAProxy and in the registry, so that a restart of HAProxy or a reload,
// which re-adds the server from the registry, keeps it. A canary deploy
// shares the requests between versions this way (internal/canary).
func (m *Manager) SetWeight(ctx context.Context, backend, name string, weight int) error {
	return m.SetWeights(ctx, backend, []ServerWeight{{Name: name, Weight: weight}})
}

// ServerWeight is one server's weight for SetWeights.
type ServerWeight struct {
	Name   string
	Weight int
}

// SetWeights sets the weights of several registered servers of backend on
// one Runtime API line, in the order given, so that a blue/green switch
// moves every request at once: give the raises first, and the backend
// never has every server at weight 0 in between.
func (m *Manager) SetWeights(ctx context.Context, backend string, weights []ServerWeight) error {
	if !hapword.Name(backend) {
		return fmt.Errorf("set weights in %q: invalid backend name", backend)
	}
	keys := make([]serverKey, 0, len(weights))
	for _, w := range weights {
		if !hapword.Name(w.Name) {
			return fmt.Errorf("set weight of %s/%q: invalid name", backend, w.Name)
		}
		if w.Weight != WeightOff && (w.Weight < 1 || w.Weight > 256) {
			return fmt.Errorf("set weight of %s/%s: weight %d must be 1 to 256 (or off)", backend, w.Name, w.Weight)
		}
		keys = append(keys, serverKey{backend, w.Name})
	}
	if len(keys) == 0 {
		return nil
	}
	// Sorted, so that two callers never wait for each other's keys.
	sorted := slices.Clone(keys)
	slices.SortFunc(sorted, func(a, b serverKey) int { return strings.Compare(a.name, b.name) })
	sorted = slices.Compact(sorted)
	for _, k := range sorted {
		unlock, err := m.servers.lock(ctx, k)
		if err != nil {
			return err
		}
		defer unlock()
	}
	var cmds []string
	m.mu.Lock()
	for _, k := range keys {
		if m.registry[k] == nil {
			m.mu.Unlock()
			return fmt.Errorf("set weight of %s/%s: not registered", backend, k.name)
		}
	}
	for _, w := range weights {
		m.registry[serverKey{backend, w.Name}].srv.Weight = w.Weight
		cmds = append(cmds, "set server "+backend+"/"+w.Name+" weight "+strconv.Itoa(max(w.Weight, 0)))
	}
	up := m.up
	m.mu.Unlock()
	if !up || !m.configured(backend) {
		return nil // a restart or sync adds them with the registered weights
	}
	m.reloadMu.RLock()
	defer m.reloadMu.RUnlock()
	err := m.run(ctx, strings.Join(cmds, "; "), "")
	return m.tolerateDown(ctx, keys, fmt.Sprintf("set weights in %s", backend), err)
}
