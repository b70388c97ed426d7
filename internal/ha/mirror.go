package ha

import (
	"context"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/store"
)

// startMirror keeps HAProxy's servers in step with the shared instance
// records until the returned func is called.
func (h *Node) startMirror() func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.mirror(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// mirrored is a server the mirror put into HAProxy.
type mirrored struct{ backend, name, addr string }

// mirror adds the instances in service or draining (each gated by its own
// checks here) and removes the others, after each change in etcd. The node
// counts as synced once its HAProxy has them all and its own checks have
// every instance in service on the leader UP: a server added here starts
// DOWN, and a VIP that moved to a node whose servers were still DOWN would
// queue its requests until they came up. Until synced it rechecks every
// second, reading what HAProxy serves again and applying the newest set to
// it: what HAProxy has, not what this node believes it added, is the truth
// (the groups of a node that just stopped leading may name instances that
// never made it into HAProxy).
func (h *Node) mirror(ctx context.Context) {
	sets := h.shared.WatchInstances(ctx)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var (
		last      []store.Instance // the newest set, applied again until synced
		seen      bool
		applied   bool // whether the last apply went into HAProxy whole
		inService map[mirrored]bool
		synced    bool
	)
	for {
		select {
		case <-ctx.Done():
			return
		case set, ok := <-sets:
			if !ok {
				return
			}
			last, seen = set, true
		case <-tick.C:
			if synced || !seen {
				continue
			}
		}
		// One read of HAProxy per pass: a server apply adds starts DOWN,
		// so what was UP before it is what counts.
		known, up, err := h.served(ctx)
		if err != nil {
			h.log.Warn("mirror: reading HAProxy's servers failed", "err", err)
			applied = false
		} else {
			applied, inService = h.apply(ctx, last, known)
		}
		if ctx.Err() != nil {
			return
		}
		synced = applied && allIn(inService, up)
		h.publish(ctx, synced, len(known))
	}
}

// served lists the servers of the groups' backends in HAProxy: each with
// whether it is in maintenance, and those of them that are UP.
func (h *Node) served(ctx context.Context) (known, up map[mirrored]bool, err error) {
	h.core.Lock()
	cfg := h.core.Config()
	h.core.Unlock()
	known, up = map[mirrored]bool{}, map[mirrored]bool{}
	for _, g := range cfg.Groups {
		stats, err := h.lb.Stats(ctx, g.Name)
		if err != nil {
			return nil, nil, err
		}
		for _, st := range stats {
			if st.Type != haproxy.TypeServer {
				continue
			}
			k := mirrored{g.Name, st.Name, st.Addr}
			known[k] = st.Status.InMaint()
			if st.Status.IsUp() {
				up[k] = true
			}
		}
	}
	return known, up, nil
}

// apply makes HAProxy serve what set says and reports whether every change
// was made, and which servers are in service on the leader. known is what
// served read: each server HAProxy has, true when it is in maintenance. A
// server wanted but in maintenance was added and never enabled (an add cut
// short, as when this node stopped leading mid-way): adding it again
// finishes the job, where skipping it would leave it out of rotation and
// the node never synced.
func (h *Node) apply(ctx context.Context, set []store.Instance, known map[mirrored]bool) (bool, map[mirrored]bool) {
	h.core.Lock()
	cfg := h.core.Config()
	h.core.Unlock()
	groups := map[string]config.Group{}
	for _, g := range cfg.Groups {
		groups[g.Name] = g
	}
	want := map[mirrored]haproxy.Server{}
	inService := map[mirrored]bool{}
	for _, in := range set {
		gc, ok := groups[in.Group]
		if !ok || in.Addr == "" || (in.State != string(group.InService) && in.State != string(group.Draining) && in.State != string(group.Unhealthy)) {
			continue
		}
		k := mirrored{in.Group, in.Name, in.Addr}
		want[k] = haproxy.Server{Backend: in.Group, Name: in.Name, Addr: in.Addr}.WithGroup(gc)
		if in.State == string(group.InService) {
			inService[k] = true
		}
	}
	applied := true
	for k := range known {
		if _, ok := want[k]; ok {
			continue
		}
		if err := h.lb.RemoveServer(ctx, k.backend, k.name); err != nil {
			applied = false
			h.log.Warn("mirror: removing a server failed", "group", k.backend, "instance", k.name, "err", err)
			continue
		}
		delete(known, k)
	}
	for k, s := range want {
		if maint, ok := known[k]; ok && !maint {
			continue
		}
		if err := h.lb.AddServer(ctx, s, false); err != nil {
			applied = false
			h.log.Warn("mirror: adding a server failed", "group", k.backend, "instance", k.name, "err", err)
			continue
		}
		known[k] = false
	}
	return applied, inService
}

// allIn reports whether every key of want is in have.
func allIn(want, have map[mirrored]bool) bool {
	for k := range want {
		if !have[k] {
			return false
		}
	}
	return true
}
