package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/jobs"
	"github.com/shoal-lb/shoal/internal/provider/local"
	"github.com/shoal-lb/shoal/internal/store"
)

// errStopAll is the cause of a `shoal stop` that stops everything.
var errStopAll = errors.New("stopped by request")

// core is a running `shoal serve`: what a reload and a shutdown act on.
type core struct {
	log  *slog.Logger
	st   *store.Store
	lb   *haproxy.Manager
	prov *local.Provider
	jm   *jobs.Manager
	auto *autoscaler
	stop context.CancelCauseFunc

	// reloadMu makes reloads one at a time, and shutdown wait for one.
	reloadMu sync.Mutex
	cfg      *config.Config
	mu       sync.Mutex
	runs     map[string]*groupRun
}

// groupRun is a group's reconciler goroutine.
type groupRun struct {
	g      *group.Group
	cancel context.CancelFunc
	done   chan struct{}
}

// run starts g's reconciler. Groups outlive Serve's context: they stop only
// after HAProxy is down (or detached), so no request reaches a stopped
// instance.
func (c *core) run(g *group.Group) {
	ctx, cancel := context.WithCancel(context.Background())
	r := &groupRun{g: g, cancel: cancel, done: make(chan struct{})}
	c.mu.Lock()
	c.runs[g.Name()] = r
	c.mu.Unlock()
	go func() {
		defer close(r.done)
		g.Run(ctx)
	}()
}

// stopGroups ends every reconciler; with keep, their instances are left
// running for the next run of shoal to adopt.
func (c *core) stopGroups(keep bool) {
	c.mu.Lock()
	runs := make([]*groupRun, 0, len(c.runs))
	for _, r := range c.runs {
		runs = append(runs, r)
	}
	c.mu.Unlock()
	for _, r := range runs {
		if keep {
			r.g.KeepInstances()
		}
		r.cancel()
	}
	for _, r := range runs {
		<-r.done
	}
}

// Shutdown implements api.Control.
func (c *core) Shutdown(keepRunning bool) {
	if keepRunning {
		c.stop(ErrKeepRunning)
		return
	}
	c.stop(errStopAll)
}

// Reload implements api.Control: it re-reads the config file and applies it
// all or nothing, in this order:
//
//	validate  the file loads, passes every check `shoal validate` runs and
//	          changes nothing only a restart applies
//	prepare   the groups to change, remove and add are found; added groups
//	          are built from their stored state (nothing runs, nothing is
//	          written)
//	HAProxy   takes the new config, reloaded if what it runs changed: added
//	          groups' backends and routes appear, removed groups' leave (the
//	          old worker finishes the requests in flight on them)
//	commit    cannot fail: changed groups take their new settings, removed
//	          groups take no more jobs, added groups start, the config in
//	          force is replaced and the policy runners follow it (a changed
//	          group's restarts with its new policy and bounds)
//	retire    removed groups' instances are drained (until no old worker has
//	          a request on them, at most drain_timeout) and stopped
//
// An error up to HAProxy's step changes nothing — groups, policy runners
// and HAProxy keep the running config — and says so. HAProxy's step is the
// only one a valid file can still fail (a listen port taken, a file HAProxy
// refuses), so nothing else changes before it. An error while retiring
// comes after the new config is in force, and says that instead.
func (c *core) Reload(ctx context.Context) (resp api.ReloadResponse, err error) {
	c.reloadMu.Lock()
	defer c.reloadMu.Unlock()
	applied := false
	defer func() {
		switch {
		case err != nil && applied:
			c.log.Error("config reloaded, but a removed group did not retire in time", "err", err)
		case err != nil:
			c.log.Error("config reload failed; the running config stays in force", "err", err)
		}
	}()
	old := c.cfg
	cfg, err := config.Load(old.Path)
	var el config.ErrorList
	if err != nil && !errors.As(err, &el) {
		return resp, fmt.Errorf("%w: %w", api.ErrConfigUnreadable, err)
	}
	if err != nil {
		return resp, err
	}
	if _, err := Check(ctx, cfg); err != nil {
		return resp, err
	}
	if err := reloadable(old, cfg); err != nil {
		return resp, err
	}

	// Once the file is valid, the caller going away (a CLI interrupted)
	// must not stop the reload half way.
	ctx = context.WithoutCancel(ctx)
	plan, err := c.prepare(ctx, cfg)
	if err != nil {
		return resp, fmt.Errorf("reload: %w; nothing changed: the running config stays in force", err)
	}
	reloaded, err := c.lb.Reload(ctx, cfg)
	if err != nil {
		return resp, fmt.Errorf("reload: %w; nothing changed: groups, policies and HAProxy keep the running config", err)
	}
	resp.HAProxyReloaded = reloaded

	for _, ch := range plan.changed {
		ch.g.Update(ctx, ch.cfg)
		resp.Changed = append(resp.Changed, ch.g.Name())
	}
	for _, r := range plan.removed {
		c.log.Info("group removed from the config: draining and stopping its instances", "group", r.g.Name())
		c.jm.RemoveGroup(r.g.Name())
	}
	for _, g := range plan.added {
		c.jm.AddGroup(g)
		c.run(g)
		c.log.Info("group added from the config", "group", g.Name(), "min_size", g.Config().MinSize)
		resp.Added = append(resp.Added, g.Name())
	}
	c.cfg = cfg
	applied = true
	// Policies follow: a changed group's runner restarts with its new
	// policy, a removed group's stops before its instances are retired.
	c.auto.syncRunners(resp.Changed)

	var errs []error
	for _, r := range plan.removed {
		if err := c.retire(ctx, r); err != nil {
			errs = append(errs, err)
		}
		resp.Removed = append(resp.Removed, r.g.Name())
	}
	slices.Sort(resp.Changed)
	slices.Sort(resp.Removed)
	if len(errs) > 0 {
		return resp, fmt.Errorf("config reloaded (haproxy reloaded %t, added %v, removed %v, changed %v), but: %w",
			resp.HAProxyReloaded, resp.Added, resp.Removed, resp.Changed, errors.Join(errs...))
	}
	c.log.Info("config reloaded", "haproxy_reloaded", resp.HAProxyReloaded, "added", strings.Join(resp.Added, ","),
		"removed", strings.Join(resp.Removed, ","), "changed", strings.Join(resp.Changed, ","))
	return resp, nil
}

// reloadPlan is what a reload changes, found before anything changes.
type reloadPlan struct {
	changed []groupChange
	removed []*groupRun
	added   []*group.Group
}

// groupChange is a running group and its reloaded config.
type groupChange struct {
	g   *group.Group
	cfg config.Group
}

// prepare compares cfg's groups with the running ones and builds the added
// ones, ready to run. It changes nothing.
func (c *core) prepare(ctx context.Context, cfg *config.Config) (reloadPlan, error) {
	c.mu.Lock()
	running := make(map[string]*groupRun, len(c.runs))
	for name, r := range c.runs {
		running[name] = r
	}
	c.mu.Unlock()
	var p reloadPlan
	wanted := map[string]bool{}
	for _, gc := range cfg.Groups {
		wanted[gc.Name] = true
		r, ok := running[gc.Name]
		switch {
		case !ok:
			g, err := group.Open(ctx, gc, c.prov, c.lb, c.st, c.log)
			if err != nil {
				return p, fmt.Errorf("add group %s: %w", gc.Name, err)
			}
			p.added = append(p.added, g)
		case !sameGroup(r.g.Config(), gc):
			p.changed = append(p.changed, groupChange{g: r.g, cfg: gc})
		}
	}
	for name, r := range running {
		if !wanted[name] {
			p.removed = append(p.removed, r)
		}
	}
	slices.SortFunc(p.removed, func(a, b *groupRun) int { return strings.Compare(a.g.Name(), b.g.Name()) })
	return p, nil
}

// retire drains and stops a removed group's instances and ends its
// reconciler; whatever is still running when the time is up is stopped.
func (c *core) retire(ctx context.Context, r *groupRun) error {
	name, gc := r.g.Name(), r.g.Config()
	rctx, cancel := context.WithTimeout(ctx, gc.DrainTimeout+gc.Template.StopTimeout+time.Minute)
	err := r.g.RetireAll(rctx)
	cancel()
	r.cancel()
	<-r.done
	c.mu.Lock()
	delete(c.runs, name)
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("remove group %s: %w (they were stopped when the time was up)", name, err)
	}
	return nil
}

// reloadable refuses changes to what is bound or opened once, at start.
func reloadable(old, cfg *config.Config) error {
	var changed []string
	for _, f := range []struct {
		name     string
		old, new any
	}{
		{"state_dir", old.StateDir, cfg.StateDir},
		{"admin", old.Admin, cfg.Admin},
		{"haproxy.binary", old.HAProxy.Binary, cfg.HAProxy.Binary},
		{"compat", old.Compat, cfg.Compat},
		{"access_log", old.AccessLog, cfg.AccessLog},
		{"instance_logs", old.InstanceLogs, cfg.InstanceLogs},
		{"metrics", old.Metrics, cfg.Metrics},
	} {
		if !reflect.DeepEqual(f.old, f.new) {
			changed = append(changed, f.name)
		}
	}
	if len(changed) == 0 {
		return nil
	}
	return fmt.Errorf("%s changed: %w; the running config stays in force. Restart without dropping anything: `shoal stop --keep-running`, then `shoal serve`",
		strings.Join(changed, ", "), api.ErrNotReloadable)
}

// sameGroup compares two loads of a group's config. Templates are compared by
// their source: each load compiles its own.
func sameGroup(a, b config.Group) bool {
	at, bt := a.Template, b.Template
	a.Template, b.Template = config.Template{}, config.Template{}
	return reflect.DeepEqual(a, b) && at.SameSource(bt)
}
