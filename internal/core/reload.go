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
	"github.com/shoal-lb/shoal/internal/certstore"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/notify"
)

// errStopAll is the cause of a `shoal stop` that stops everything.
var errStopAll = errors.New("stopped by request")

// core is a running `shoal serve`: what a reload and a shutdown act on.
type core struct {
	log *slog.Logger
	// st is the groups' store: SQLite, or an HA node's ha.Store.
	st     sharedStore
	lb     *haproxy.Manager
	certs  *certstore.Store
	acme   *acmeRunner
	provs  *providers
	groups *registry
	notify *notify.Notifier
	stop   context.CancelCauseFunc

	// replacer replaces one instance, launch before terminate: what host
	// drains (and the groups' recycling) move instances with. nil while
	// this build has no instance replacement: a drain then only cordons.
	replacer group.Replacer
	// srvCtx is the API servers' context: host drains run in it.
	srvCtx context.Context
	drains drains

	// reloadMu makes reloads one at a time, and shutdown wait for one.
	reloadMu sync.Mutex
	cfg      *config.Config
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
//	providers new provider entries are built and connect, changed hosts
//	          apply (capacity, labels, ports, added and removed hosts); a
//	          removed entry runs on until shoal restarts, for the groups
//	          retiring on it
//	prepare   the groups to change, remove and add are found; added groups
//	          are built from their stored state (nothing runs, nothing is
//	          written)
//	certs     the TLS frontends' certificates and crt-lists are written
//	          (rewritten as they were if HAProxy's step fails)
//	HAProxy   takes the new config, reloaded if what it runs changed: added
//	          groups' backends and routes appear, removed groups' leave (the
//	          old worker finishes the requests in flight on them); changed,
//	          added and removed certificates are then pushed over the
//	          Runtime API, without a reload
//	commit    cannot fail: the registry of groups takes the change in one
//	          apply — changed groups take their new settings and their
//	          policy runner restarts with them, removed groups leave it (no
//	          more jobs, metrics or policy), added groups start — and the
//	          config in force is replaced
//	retire    removed groups' instances are drained (until no old worker has
//	          a request on them, at most drain_timeout) and stopped
//
// An error up to HAProxy's step changes nothing — groups, policy runners
// and HAProxy keep the running config — and says so; only the providers'
// step may have applied (new hosts are harmless to groups that do not use
// them yet). HAProxy's step is the
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
			c.log.Error("config reloaded, but not all of it applied", "err", err)
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
	if _, err := Preflight(ctx, cfg); err != nil {
		return resp, err
	}
	if err := reloadable(old, cfg); err != nil {
		return resp, err
	}
	targets, err := notify.NewTargets(cfg.Notify)
	if err != nil {
		return resp, fmt.Errorf("reload: %w; nothing changed: the running config stays in force", err)
	}

	// Once the file is valid, the caller going away (a CLI interrupted)
	// must not stop the reload half way.
	ctx = context.WithoutCancel(ctx)
	// Providers first: an added group may use an added provider.
	if err := c.provs.update(cfg); err != nil {
		return resp, fmt.Errorf("reload: %w; groups and HAProxy keep the running config", err)
	}
	plan, err := c.prepare(ctx, cfg)
	if err != nil {
		return resp, fmt.Errorf("reload: %w; nothing changed: the running config stays in force", err)
	}
	// The certificates' files first: a reloaded HAProxy reads them, a
	// running one gets them pushed below.
	if err := c.certs.Write(cfg.Frontends); err != nil {
		return resp, fmt.Errorf("reload: tls certificates: %w; nothing changed: the running config stays in force", err)
	}
	reloaded, err := c.lb.Reload(ctx, cfg)
	if err != nil {
		if werr := c.certs.Rollback(); werr != nil {
			c.log.Error("the running config's certificates not written back", "err", werr)
		}
		return resp, fmt.Errorf("reload: %w; nothing changed: groups, policies and HAProxy keep the running config", err)
	}
	resp.HAProxyReloaded = reloaded
	// Changed certificates alone change no HAProxy configuration: they are
	// served without a reload.
	var errs []error
	if err := c.certs.Push(ctx); err != nil {
		errs = append(errs, fmt.Errorf("tls certificates: %w", err))
	}

	removed := c.groups.apply(ctx, plan)
	for _, ch := range plan.changed {
		resp.Changed = append(resp.Changed, ch.g.Name())
	}
	for _, g := range plan.added {
		c.log.Info("group added from the config", "group", g.Name(), "min_size", g.Config().MinSize)
		resp.Added = append(resp.Added, g.Name())
	}
	c.notify.Use(targets)
	if old.LogsRequests() != cfg.LogsRequests() {
		logAccessLog(c.log, cfg)
	}
	c.cfg = cfg
	applied = true

	// After HAProxy's step: a new domain's challenges must reach shoal.
	if err := c.acme.apply(cfg); err != nil {
		errs = append(errs, err)
	}
	for _, m := range removed {
		c.log.Info("group removed from the config: draining and stopping its instances", "group", m.g.Name())
		if err := c.retire(ctx, m); err != nil {
			errs = append(errs, err)
		}
		resp.Removed = append(resp.Removed, m.g.Name())
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

// prepare compares cfg's groups with the running ones and builds the added
// ones, ready to run. It changes nothing.
func (c *core) prepare(ctx context.Context, cfg *config.Config) (change, error) {
	running := map[string]*group.Group{}
	for _, g := range c.groups.All() {
		running[g.Name()] = g
	}
	var ch change
	wanted := map[string]bool{}
	for _, gc := range cfg.Groups {
		wanted[gc.Name] = true
		g, ok := running[gc.Name]
		switch {
		case !ok:
			gp, err := c.provs.forGroup(gc)
			if err != nil {
				return ch, fmt.Errorf("add %w", err)
			}
			g, err := group.Open(ctx, gc, gp, c.lb, c.st, c.log)
			if err != nil {
				return ch, fmt.Errorf("add group %s: %w", gc.Name, err)
			}
			ch.added = append(ch.added, g)
		case !sameGroup(g.Config(), gc):
			ch.changed = append(ch.changed, groupChange{g: g, cfg: gc})
		}
	}
	for name, g := range running {
		if !wanted[name] {
			ch.removed = append(ch.removed, g)
		}
	}
	slices.SortFunc(ch.removed, func(a, b *group.Group) int { return strings.Compare(a.Name(), b.Name()) })
	return ch, nil
}

// retire drains and stops a removed group's instances and ends its
// reconciler; whatever is still running when the time is up is stopped.
func (c *core) retire(ctx context.Context, m *member) error {
	if c.groups.Standby() {
		return nil // an HA standby runs no group: the leader retires it
	}
	name, gc := m.g.Name(), m.g.Config()
	rctx, cancel := context.WithTimeout(ctx, gc.DrainTimeout+gc.Template.StopTimeout+time.Minute)
	err := m.g.RetireAll(rctx)
	cancel()
	m.run.stop() // m has left the registry: nothing else starts or stops it
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
		// The DNS sockets are bound and the monitors started once.
		{"gslb", old.GSLB, cfg.GSLB},
		// The node's election, lease and VIP are set up once.
		{"ha", old.HA, cfg.HA},
	} {
		if !reflect.DeepEqual(f.old, f.new) {
			changed = append(changed, f.name)
		}
	}
	// An instance's provider is fixed at its start: moving a running group
	// to another provider would leave its instances where no one watches.
	for _, g := range cfg.Groups {
		for _, o := range old.Groups {
			if was, is := providerNames(o), providerNames(g); o.Name == g.Name && was != is {
				return fmt.Errorf("group %s: provider changed from %s to %s: %w; the running config stays in force. Its instances run on %s: add a group on %s, move the traffic to it, then remove this one",
					g.Name, was, is, api.ErrNotReloadable, was, is)
			}
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

// providerNames is g's providers in order ("rack, sakura"); their max
// and cost_per_hour reload, the list itself does not.
func providerNames(g config.Group) string {
	var names []string
	for _, gp := range g.ProviderList() {
		names = append(names, gp.Name)
	}
	return strings.Join(names, ", ")
}
