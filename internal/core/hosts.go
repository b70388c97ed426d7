package core

import (
	"context"
	"errors"
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

// vacating are the hosts a consolidation is emptying, by "provider/host":
// placement puts nothing there meanwhile (provider.Options.Vacating). They
// are this run's only, not the store's: a restart ends the consolidation.
type vacating struct {
	mu  sync.RWMutex
	set map[string]bool
}

func (v *vacating) has(prov, host string) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.set[cordonKey(prov, host)]
}

func (v *vacating) put(prov, host string, on bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.set == nil {
		v.set = map[string]bool{}
	}
	if on {
		v.set[cordonKey(prov, host)] = true
	} else {
		delete(v.set, cordonKey(prov, host))
	}
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
		c.hostEvent(ctx, t, h.Name, fmt.Sprintf("host %s (provider %s) %s", h.Name, h.Provider, what))
	}
	return changed, nil
}

// Host drains wait this long for a group's disruption budget per
// instance, asking it every drainPoll.
const (
	drainMaxWait = 10 * time.Minute
	drainPoll    = 2 * time.Second
)

// errNotLeading ends an HA node's host drains when it stops leading: the
// next leader resumes them from the store.
var errNotLeading = errors.New("this node no longer leads the HA pair")

// A host drain is recorded in the store (store.CordonedHost.Draining)
// from its start to its end, so that a kill of shoal, or an HA failover,
// does not lose it:
//
//	DrainHost ──► cordon, Draining=true ──► running ──► done / incomplete: Draining=false, event
//	                                           │
//	                    stop, kill -9, failover│ (Draining stays true)
//	                                           ▼
//	   next start (resumeDrains) or next leader (haCore.Lead) ──► running again, with the
//	   instances the host has then (those already moved are gone from it)

// drains are the host drains of this run of shoal: one at a time per host.
type drains struct {
	mu   sync.Mutex
	list []*hostDrain // newest last
	wg   sync.WaitGroup
}

// hostDrain is one drain and what ends it early.
type hostDrain struct {
	api.HostDrain
	cancel context.CancelCauseFunc
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

// interrupt ends every running drain with cause (they stay recorded in the
// store, for the next leader).
func (d *drains) interrupt(cause error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range d.list {
		if r.State == "running" {
			r.cancel(cause)
		}
	}
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
	if _, err := c.st.SetHostDraining(ctx, h.Provider, h.Name, true); err != nil {
		return api.HostResponse{}, err
	}
	d, err := c.startDrain(h, "")
	if err != nil {
		return api.HostResponse{}, err
	}
	resp := api.HostResponse{Host: h, Changed: true, Drain: &d}
	resp.Message = fmt.Sprintf("host %s cordoned; moving its %d instance(s) one at a time (`shoal hosts drains` shows how it goes)", h.Name, len(d.Instances))
	return resp, nil
}

// resumeDrains starts again each host drain the store records as running:
// a kill of the previous run, or of the previous HA leader, interrupted
// it. A drain of a host no provider has any more ends there, reported.
func (c *core) resumeDrains(ctx context.Context) {
	hs, err := c.st.CordonedHosts(ctx)
	if err != nil {
		c.log.Error("host drains to resume: reading the store failed", "err", err)
		return
	}
	for _, ch := range hs {
		if !ch.Draining {
			continue
		}
		h, err := c.findHost(api.HostRequest{Host: ch.Host, Provider: ch.Provider})
		if err != nil {
			c.log.Warn("a host drain cannot resume", "provider", ch.Provider, "host", ch.Host, "err", err)
			c.hostEvent(ctx, event.HostDrainFailed, ch.Host, fmt.Sprintf("host %s drain could not resume after a restart: %v", ch.Host, err))
			if _, err := c.st.SetHostDraining(ctx, ch.Provider, ch.Host, false); err != nil {
				c.log.Warn("ending a host drain's record failed", "host", ch.Host, "err", err)
			}
			continue
		}
		d, err := c.startDrain(h, "resumed: ")
		if err != nil {
			c.log.Warn("a host drain cannot resume", "host", ch.Host, "err", err)
			continue
		}
		c.log.Info("host drain resumed", "provider", h.Provider, "host", h.Name, "instances", len(d.Instances))
	}
}

// startDrain moves h's instances (as they are now) in the background, the
// drain's record set already.
func (c *core) startDrain(h provider.HostStatus, note string) (api.HostDrain, error) {
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
	ctx, cancel := context.WithCancelCause(c.srvCtx)
	d := &hostDrain{HostDrain: api.HostDrain{Provider: h.Provider, Host: h.Name, State: "running", Moved: []string{},
		Progress: fmt.Sprintf("%smoving %d instance(s)", note, len(ins))}, cancel: cancel}
	for _, in := range ins {
		d.Instances = append(d.Instances, in.Name)
	}
	// Checked again with the drain's entry added under one lock: two
	// requests at once start one drain.
	c.drains.mu.Lock()
	if err := c.drains.runningLocked(h); err != nil {
		c.drains.mu.Unlock()
		cancel(nil)
		return api.HostDrain{}, err
	}
	c.drains.list = append(c.drains.list, d)
	out := d.snapshot()
	c.drains.mu.Unlock()
	waited := map[string]string{} // group → the reason last recorded; the drain's goroutine only
	run := hostdrain.Drain{
		Host: h.Name, Instances: ins, Replacer: c.replacer, Poll: drainPoll, MaxWait: drainMaxWait,
		Budget: func(name string) (bool, string) {
			g := groups[name]
			if g == nil {
				return false, "group " + name + " is gone"
			}
			ok, why := g.VoluntaryAllowed()
			// shoal events says why the drain's replacement waits, once
			// per reason, as recycling does.
			if !ok && waited[name] != why {
				waited[name] = why
				rec := event.Record(name, event.RecycleWaiting, time.Now(), h.Name, fmt.Sprintf("host %s drain: the next replacement waits: %s", h.Name, why))
				if err := c.st.InsertDecision(ctx, &rec); err != nil {
					c.log.Warn("recording a host drain's wait failed", "host", h.Name, "err", err)
				}
			}
			return ok, why
		},
		Progress: func(r hostdrain.Report) {
			c.drains.mu.Lock()
			defer c.drains.mu.Unlock()
			d.Progress = note + r.Progress
		},
	}
	// The drain belongs to the API servers' context: a stop of shoal ends
	// it (its record stays, for the next start) before the groups stop.
	c.drains.wg.Go(func() {
		defer cancel(nil)
		c.finishDrain(ctx, d, run.Run(ctx))
	})
	return out, nil
}

// finishDrain records a host drain's end: its outcome and event, and the
// end of its record in the store, unless it was interrupted (a stop of
// shoal, a lost leadership), which the next start or leader resumes.
func (c *core) finishDrain(ctx context.Context, d *hostDrain, r hostdrain.Report) {
	c.drains.mu.Lock()
	for _, in := range r.Moved {
		d.Moved = append(d.Moved, in.Name)
	}
	if ctx.Err() != nil {
		d.State, d.Progress = "interrupted", fmt.Sprintf("%d moved; interrupted (%v): resumes when shoal starts again or another node leads", len(d.Moved), context.Cause(ctx))
		c.drains.mu.Unlock()
		c.log.Info("host drain interrupted; it resumes at the next start", "host", d.Host, "moved", len(r.Moved), "cause", context.Cause(ctx))
		return
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
	bg := context.WithoutCancel(ctx)
	if _, err := c.st.SetHostDraining(bg, d.Provider, d.Host, false); err != nil {
		c.log.Warn("ending a host drain's record failed", "host", d.Host, "err", err)
	}
	c.hostEvent(bg, t, d.Host, msg)
}

// hostEvent records an event of a host (of no group).
func (c *core) hostEvent(ctx context.Context, t event.Type, host, msg string) {
	rec := event.Record("", t, time.Now(), host, msg)
	if err := c.st.InsertDecision(ctx, &rec); err != nil {
		c.log.Warn("recording a host event failed", "host", host, "err", err)
	}
}

// snapshot copies the drain's report; c.drains.mu must be held.
func (d *hostDrain) snapshot() api.HostDrain {
	cp := d.HostDrain
	cp.Instances, cp.Moved, cp.Left = slices.Clone(d.Instances), slices.Clone(d.Moved), slices.Clone(d.Left)
	return cp
}

// HostDrains implements api.HostActs.
func (c *core) HostDrains() []api.HostDrain {
	c.drains.mu.Lock()
	defer c.drains.mu.Unlock()
	out := make([]api.HostDrain, 0, len(c.drains.list))
	for _, d := range slices.Backward(c.drains.list) {
		out = append(out, d.snapshot())
	}
	return out
}
