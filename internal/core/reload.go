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

// Reload implements api.Control: it re-reads the config file, runs every
// check `shoal validate` runs, refuses changes only a restart applies, and
// then applies the rest: changed groups take their new settings, removed
// groups are drained and stopped, HAProxy is reloaded if its configuration
// changed, and added groups start. Nothing changes if the file is invalid.
func (c *core) Reload(ctx context.Context) (resp api.ReloadResponse, err error) {
	c.reloadMu.Lock()
	defer c.reloadMu.Unlock()
	defer func() {
		if err != nil {
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

	c.mu.Lock()
	running := make(map[string]*groupRun, len(c.runs))
	for name, r := range c.runs {
		running[name] = r
	}
	c.mu.Unlock()
	wanted := map[string]config.Group{}
	for _, gc := range cfg.Groups {
		wanted[gc.Name] = gc
	}

	for name, r := range running {
		gc, ok := wanted[name]
		if !ok {
			continue
		}
		if sameGroup(r.g.Config(), gc) {
			continue
		}
		if err := r.g.Update(ctx, gc); err != nil {
			return resp, fmt.Errorf("reload: %w", err)
		}
		resp.Changed = append(resp.Changed, name)
	}

	for name, r := range running {
		if _, ok := wanted[name]; ok {
			continue
		}
		c.log.Info("group removed from the config: draining and stopping its instances", "group", name)
		c.jm.RemoveGroup(name)
		gc := r.g.Config()
		rctx, cancel := context.WithTimeout(ctx, gc.DrainTimeout+gc.Template.StopTimeout+time.Minute)
		err := r.g.RetireAll(rctx)
		cancel()
		r.cancel()
		<-r.done
		c.mu.Lock()
		delete(c.runs, name)
		c.mu.Unlock()
		if err != nil {
			return resp, fmt.Errorf("reload: remove group %s: %w", name, err)
		}
		resp.Removed = append(resp.Removed, name)
	}

	reloaded, err := c.lb.Reload(ctx, cfg)
	if err != nil {
		if len(resp.Changed)+len(resp.Removed) > 0 {
			return resp, fmt.Errorf("reload: group changes applied (changed %v, removed %v), but: %w", resp.Changed, resp.Removed, err)
		}
		return resp, fmt.Errorf("reload: %w", err)
	}
	resp.HAProxyReloaded = reloaded

	for _, gc := range cfg.Groups {
		if _, ok := running[gc.Name]; ok {
			continue
		}
		g, err := group.New(ctx, gc, c.prov, c.lb, c.st, c.log)
		if err != nil {
			return resp, fmt.Errorf("reload: add group %s: %w", gc.Name, err)
		}
		c.jm.AddGroup(g)
		c.run(g)
		c.log.Info("group added from the config", "group", gc.Name, "min_size", gc.MinSize)
		resp.Added = append(resp.Added, gc.Name)
	}
	c.cfg = cfg
	// Policies follow: a changed group's runner restarts with its new policy.
	c.auto.syncRunners(resp.Changed)
	slices.Sort(resp.Changed)
	slices.Sort(resp.Removed)
	c.log.Info("config reloaded", "haproxy_reloaded", resp.HAProxyReloaded, "added", strings.Join(resp.Added, ","),
		"removed", strings.Join(resp.Removed, ","), "changed", strings.Join(resp.Changed, ","))
	return resp, nil
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
