package core

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/event"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/hostdrain"
	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/store"
)

// cordons is the set of cordoned hosts as the store has them, which the
// providers' placement reads (provider.Options.Cordoned) under their own
// locks: hence a copy here, never a store read there.
type cordons struct {
	mu  sync.RWMutex
	set map[string]time.Time // "provider/host" → since
}

func cordonKey(prov, host string) string { return prov + "/" + host }

func (c *cordons) has(prov, host string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	_, ok := c.set[cordonKey(prov, host)]
	return ok
}

func (c *cordons) put(prov, host string, since time.Time, on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.set == nil {
		c.set = map[string]time.Time{}
	}
	if on {
		c.set[cordonKey(prov, host)] = since
	} else {
		delete(c.set, cordonKey(prov, host))
	}
}

// count is how many hosts are cordoned (for /metrics).
func (c *cordons) count() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.set)
}

// cordonStore is where cordons are kept: the node's SQLite, or etcd for an
// HA pair (sharedStore).
type cordonStore interface {
	CordonHost(ctx context.Context, h store.CordonedHost) (bool, error)
	UncordonHost(ctx context.Context, provider, host string) (bool, error)
	CordonedHosts(ctx context.Context) ([]store.CordonedHost, error)
}

// load replaces the set with what st has: at start, and when an HA node
// takes over (the pair's cordons are in etcd).
func (c *cordons) load(ctx context.Context, st cordonStore) error {
	hs, err := st.CordonedHosts(ctx)
	if err != nil {
		return fmt.Errorf("read cordoned hosts: %w", err)
	}
	set := make(map[string]time.Time, len(hs))
	for _, h := range hs {
		set[cordonKey(h.Provider, h.Host)] = h.Since
	}
	c.mu.Lock()
	c.set = set
	c.mu.Unlock()
	return nil
}

// findHost resolves a request's host among every provider's hosts.
func (c *core) findHost(req api.HostRequest) (provider.HostStatus, error) {
	var found []provider.HostStatus
	var known []string
	for _, h := range c.provs.Hosts() {
		known = append(known, h.Provider+"/"+h.Name)
		if h.Name == req.Host && (req.Provider == "" || h.Provider == req.Provider) {
			found = append(found, h)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		where := "no provider has it"
		if req.Provider != "" {
			where = "provider " + req.Provider + " has no such host"
		}
		if len(known) == 0 {
			return provider.HostStatus{}, fmt.Errorf("%w %q: %s (no provider places instances on hosts; only ssh providers do)", api.ErrUnknownHost, req.Host, where)
		}
		return provider.HostStatus{}, fmt.Errorf("%w %q: %s; the hosts are %s", api.ErrUnknownHost, req.Host, where, strings.Join(known, ", "))
	}
	var provs []string
	for _, h := range found {
		provs = append(provs, h.Provider)
	}
	return provider.HostStatus{}, fmt.Errorf("%w %q: providers %s each have one; name the provider (--provider)", api.ErrAmbiguousHost, req.Host, strings.Join(provs, ", "))
}

// CordonHost implements api.HostActs.
func (c *core) CordonHost(ctx context.Context, req api.HostRequest, on bool) (api.HostResponse, error) {
	h, err := c.findHost(req)
	if err != nil {
		return api.HostResponse{}, err
	}
	changed, err := c.cordon(ctx, h, on)
	if err != nil {
		return api.HostResponse{}, err
	}
	h.Cordoned = on
	msg := fmt.Sprintf("host %s (provider %s) cordoned: no new instances are placed there; its %d instance(s) keep running (`shoal hosts drain %s` moves them)", h.Name, h.Provider, h.Instances, h.Name)
	switch {
	case on && !changed:
		msg = fmt.Sprintf("host %s (provider %s) was cordoned already", h.Name, h.Provider)
	case !on && changed:
		msg = fmt.Sprintf("host %s (provider %s) uncordoned: new instances may be placed there again", h.Name, h.Provider)
	case !on:
		msg = fmt.Sprintf("host %s (provider %s) was not cordoned", h.Name, h.Provider)
	}
	return api.HostResponse{Host: h, Changed: changed, Message: msg}, nil
}

// cordon records the host's cordon (or its end) in the store, then in the
// set placement reads, and records the event.
func (c *core) cordon(ctx context.Context, h provider.HostStatus, on bool) (changed bool, err error) {
	now := time.Now().UTC()
	if on {
		changed, err = c.st.CordonHost(ctx, store.CordonedHost{Provider: h.Provider, Host: h.Name, Since: now})
	} else {
		changed, err = c.st.UncordonHost(ctx, h.Provider, h.Name)
	}
	if err != nil {
		return false, err
	}
	c.provs.cordons.put(h.Provider, h.Name, now, on)
	if changed {
		t, what := event.HostCordoned, "cordoned: no new instances are placed there"
		if !on {
			t, what = event.HostUncordoned, "uncordoned: new instances may be placed there again"
		}
		c.log.Info("host "+what, "provider", h.Provider, "host", h.Name)
		d := event.Record("", t, now, h.Name, fmt.Sprintf("host %s (provider %s) %s", h.Name, h.Provider, what))
		if err := c.st.InsertDecision(ctx, &d); err != nil {
			c.log.Warn("recording a host event failed", "host", h.Name, "err", err)
		}
	}
	return changed, nil
}

// Host drains wait this long for a group's disruption budget per
// instance, asking it every drainPoll.
const (
	drainMaxWait = 10 * time.Minute
	drainPoll    = 2 * time.Second
)

// drains are the host drains of this run of shoal: one at a time per host.
type drains struct {
	mu   sync.Mutex
	list []*api.HostDrain // newest last
	wg   sync.WaitGroup
}

// running refuses a drain of h while one runs.
func (d *drains) running(h provider.HostStatus) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.runningLocked(h)
}

func (d *drains) runningLocked(h provider.HostStatus) error {
	for _, r := range d.list {
		if r.Provider == h.Provider && r.Host == h.Name && r.State == "running" {
			return fmt.Errorf("%w: %s (provider %s), %s", api.ErrDrainRunning, h.Name, h.Provider, r.Progress)
		}
	}
	return nil
}

// DrainHost implements api.HostActs: cordon, then move the host's
// instances in the background (its progress in HostDrains).
func (c *core) DrainHost(ctx context.Context, req api.HostRequest) (api.HostResponse, error) {
	h, err := c.findHost(req)
	if err != nil {
		return api.HostResponse{}, err
	}
	if err := c.drains.running(h); err != nil {
		return api.HostResponse{}, err
	}
	if _, err := c.cordon(ctx, h, true); err != nil {
		return api.HostResponse{}, err
	}
	h.Cordoned = true
	if c.replacer == nil {
		return api.HostResponse{}, fmt.Errorf("%w: host %s is cordoned (no new instances there), but its instances stay: moving them needs instance replacement (`shoal instances replace`), which this build lacks", api.ErrNoReplace, h.Name)
	}
	var ins []hostdrain.Instance
	groups := map[string]*group.Group{}
	for _, g := range c.groups.All() {
		if !g.Config().UsesProvider(h.Provider) {
			continue
		}
		groups[g.Name()] = g
		for _, name := range g.InstancesOn(h.Provider, h.Name) {
			ins = append(ins, hostdrain.Instance{Group: g.Name(), Name: name})
		}
	}
	d := &api.HostDrain{Provider: h.Provider, Host: h.Name, State: "running", Moved: []string{},
		Progress: fmt.Sprintf("moving %d instance(s)", len(ins))}
	for _, in := range ins {
		d.Instances = append(d.Instances, in.Name)
	}
	// Checked again with the drain's entry added under one lock: two
	// requests at once start one drain.
	c.drains.mu.Lock()
	if err := c.drains.runningLocked(h); err != nil {
		c.drains.mu.Unlock()
		return api.HostResponse{}, err
	}
	c.drains.list = append(c.drains.list, d)
	c.drains.mu.Unlock()
	run := hostdrain.Drain{
		Host: h.Name, Instances: ins, Replacer: c.replacer, Poll: drainPoll, MaxWait: drainMaxWait,
		Budget: func(name string) (bool, string) {
			g := groups[name]
			if g == nil {
				return false, "group " + name + " is gone"
			}
			return g.VoluntaryAllowed()
		},
		Progress: func(r hostdrain.Report) {
			c.drains.mu.Lock()
			defer c.drains.mu.Unlock()
			d.Progress = r.Progress
		},
	}
	// The drain belongs to the API servers' context: a stop of shoal ends
	// it (reported as interrupted) before the groups stop.
	c.drains.wg.Go(func() { c.finishDrain(c.srvCtx, d, run.Run(c.srvCtx)) })
	resp := api.HostResponse{Host: h, Changed: true, Drain: d}
	resp.Message = fmt.Sprintf("host %s cordoned; moving its %d instance(s) one at a time (`shoal hosts drains` shows how it goes)", h.Name, len(ins))
	return resp, nil
}

// finishDrain records a host drain's end.
func (c *core) finishDrain(ctx context.Context, d *api.HostDrain, r hostdrain.Report) {
	c.drains.mu.Lock()
	for _, in := range r.Moved {
		d.Moved = append(d.Moved, in.Name)
	}
	for _, l := range r.Left {
		d.Left = append(d.Left, api.HostDrainLeft{Instance: l.Name, Group: l.Group, Reason: l.Reason})
	}
	d.State, d.Progress = "done", ""
	t, msg := event.HostDrained, fmt.Sprintf("host %s drained: %d instance(s) moved", d.Host, len(d.Moved))
	if len(d.Left) > 0 {
		d.State = "incomplete"
		var why []string
		for _, l := range d.Left {
			why = append(why, l.Instance+": "+l.Reason)
		}
		t, msg = event.HostDrainFailed, fmt.Sprintf("host %s drain ended with %d instance(s) left (%s); %d moved", d.Host, len(d.Left), strings.Join(why, "; "), len(d.Moved))
	}
	c.drains.mu.Unlock()
	c.log.Info("host drain ended", "host", d.Host, "moved", len(r.Moved), "left", len(r.Left))
	rec := event.Record("", t, time.Now(), d.Host, msg)
	if err := c.st.InsertDecision(context.WithoutCancel(ctx), &rec); err != nil {
		c.log.Warn("recording a host event failed", "host", d.Host, "err", err)
	}
}

// HostDrains implements api.HostActs.
func (c *core) HostDrains() []api.HostDrain {
	c.drains.mu.Lock()
	defer c.drains.mu.Unlock()
	out := make([]api.HostDrain, 0, len(c.drains.list))
	for _, d := range slices.Backward(c.drains.list) {
		cp := *d
		cp.Instances, cp.Moved, cp.Left = slices.Clone(d.Instances), slices.Clone(d.Moved), slices.Clone(d.Left)
		out = append(out, cp)
	}
	return out
}
