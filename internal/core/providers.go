package core

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/event"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/provider/local"
	sshprov "github.com/shoal-lb/shoal/internal/provider/ssh"
)

// checksTimeout bounds one question an ssh provider's poller asks a group
// about HAProxy's checks.
const checksTimeout = 2 * time.Second

// providers is the one registry of providers by name: "local" always, and
// one per entry of the config's providers, each built by its type's
// registered builder (provider.Register). Each built provider's Run goes
// from start until stop; serve starts them before restoring the
// groups (adopting an instance needs its host's connection, or a cloud's
// listing) and stops them after the groups' reconcilers (which stop
// instances through them).
//
// The providers ask the groups back (Checks, Reclaim): groups is set once
// the registry of groups exists; until then they get no answer.
type providers struct {
	local  *local.Provider
	log    *slog.Logger
	opts   provider.Options
	groups atomic.Pointer[registry]
	// st records host events; set before start (nil records none).
	st eventRecorder
	// fence, set before start, is what a provider's own sweep (an ssh
	// host's as it connects, a cloud's left for its poller) asks before it
	// stops or deletes anything (see sshprov.Options.Guard).
	fence interface{ Guard(context.Context) error }
	// cordons are the hosts no new instance is placed on.
	cordons cordons
	// vacating are the hosts a consolidation is emptying.
	vacating vacating

	mu     sync.RWMutex
	built  map[string]provider.Running
	loops  map[string]*loop
	cfgs   map[string]config.Provider
	order  []string // names of the built providers, in config order
	active bool     // start has run; providers added later start at once
}

// newProviders builds the providers of cfg; nothing connects until start.
func newProviders(cfg *config.Config, lp *local.Provider, log *slog.Logger) (*providers, error) {
	p := &providers{local: lp, log: log, built: map[string]provider.Running{},
		loops: map[string]*loop{}, cfgs: map[string]config.Provider{}}
	p.opts = provider.Options{
		StateDir:  cfg.StateDir,
		Owner:     ownerID(cfg),
		Checks:    p.checks,
		Reclaim:   p.reclaim,
		Guard:     p.guard,
		HostState: p.hostState,
		// One batched read of the hosts per sample of the metrics.
		Interval: cfg.Metrics.Interval,
		Logs:     cfg.InstanceLogs,
	}
	for _, pc := range cfg.Providers {
		if err := p.add(pc); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// ownerID marks the instances as this shoal's, for its providers to adopt
// and sweep: its state directory's on a single node, the pair's on an HA
// node (either node adopts what the other started).
func ownerID(cfg *config.Config) string {
	if cfg.HA != nil {
		return cfg.HA.Owner()
	}
	return sshprov.OwnerID(cfg.StateDir)
}

// add builds one provider entry's provider; p.mu must be held or p unshared.
func (p *providers) add(pc config.Provider) error {
	opts := p.opts
	opts.Log = p.log.With("component", "provider", "provider", pc.Name)
	opts.Cordoned = func(host string) bool { return p.cordons.has(pc.Name, host) }
	opts.Vacating = func(host string) bool { return p.vacating.has(pc.Name, host) }
	// Every type marks what it starts with the owner (see ownerID), and
	// Guard fences its sweeps. A builder does no network I/O: the context
	// reads files only.
	bp, err := provider.New(context.Background(), pc, opts)
	if err != nil {
		return fmt.Errorf("provider %s: %w", pc.Name, err)
	}
	p.built[pc.Name] = bp
	p.cfgs[pc.Name] = pc
	p.order = append(p.order, pc.Name)
	if p.active {
		p.loops[pc.Name] = goLoop(bp.Run)
	}
	return nil
}

// byName returns the built provider called name; p.mu is held.
func (p *providers) byName(name string) (provider.Provider, bool) {
	bp, ok := p.built[name]
	return bp, ok
}

// Get returns the provider called name.
func (p *providers) Get(name string) (provider.Provider, bool) {
	if name == config.ProviderLocal {
		return p.local, true
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.byName(name)
}

// forGroup returns the providers of gc's list, by name.
func (p *providers) forGroup(gc config.Group) (group.Providers, error) {
	out := group.Providers{}
	for _, gp := range gc.ProviderList() {
		prov, ok := p.Get(gp.Name)
		if !ok {
			return nil, fmt.Errorf("group %s: no provider %q", gc.Name, gp.Name)
		}
		out[gp.Name] = prov
	}
	return out, nil
}

// all returns every provider by name, local first, then in config order.
func (p *providers) all() []named {
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := []named{{config.ProviderLocal, p.local}}
	for _, n := range p.order {
		prov, _ := p.byName(n)
		out = append(out, named{n, prov})
	}
	return out
}

// named is a provider and its name.
type named struct {
	name string
	prov provider.Provider
}

// start runs every built provider: an ssh provider's connections, a
// cloud provider's listing.
func (p *providers) start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.active = true
	for n, bp := range p.built {
		p.loops[n] = goLoop(bp.Run)
	}
}

// stop ends what start runs and waits for it.
func (p *providers) stop() {
	p.mu.Lock()
	ls := make([]*loop, 0, len(p.loops))
	for n, l := range p.loops {
		ls = append(ls, l)
		delete(p.loops, n)
	}
	p.active = false
	p.mu.Unlock()
	stopAll(ls)
}

// update applies a reloaded config's providers: new entries are built and
// started, changed ones that can take their new settings in place
// (provider.Reloader: an ssh provider's hosts) do. A removed
// entry's provider keeps running until shoal restarts: the groups that used
// it are being retired through it. It is called after validation, and an
// error leaves the providers as they were only for entries not yet done.
func (p *providers) update(cfg *config.Config) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pc := range cfg.Providers {
		old, ok := p.cfgs[pc.Name]
		switch {
		case !ok:
			if err := p.add(pc); err != nil {
				return err
			}
			p.log.Info("provider added from the config", "provider", pc.Name)
		case reflect.DeepEqual(old, pc):
		case old.Type != pc.Type || !reloads(p.built[pc.Name]):
			// A cloud's servers are listed and deleted by the provider as
			// it was: replacing it under running groups would lose them.
			p.log.Warn("a cloud provider's settings, or a provider's type, change when shoal restarts; this reload keeps them", "provider", pc.Name)
		default:
			if err := p.built[pc.Name].(provider.Reloader).Reload(pc); err != nil {
				return fmt.Errorf("provider %s: %w", pc.Name, err)
			}
			p.cfgs[pc.Name] = pc
			p.log.Info("provider updated from the config", "provider", pc.Name)
		}
	}
	return nil
}

// reloads reports whether bp takes a reloaded entry in place.
func reloads(bp provider.Running) bool {
	_, ok := bp.(provider.Reloader)
	return ok
}

// Hosts lists the hosts of every provider that has several.
func (p *providers) Hosts() []provider.HostStatus {
	var out []provider.HostStatus
	for _, n := range p.all() {
		if hl, ok := n.prov.(provider.HostLister); ok {
			out = append(out, hl.Hosts()...)
		}
	}
	return out
}

// preflight checks the hosts of every provider that can be checked, each for
// the templates of the groups that use it.
func (p *providers) preflight(ctx context.Context, cfg *config.Config) []provider.PreflightResult {
	var (
		mu  sync.Mutex
		out []provider.PreflightResult
		wg  sync.WaitGroup
	)
	for _, n := range p.all() {
		c, ok := n.prov.(provider.Preflighter)
		if !ok {
			continue
		}
		tmpls := map[string]config.Template{}
		for _, g := range cfg.Groups {
			if g.UsesProvider(n.name) {
				tmpls[g.Name] = g.Template
			}
		}
		wg.Go(func() {
			res := c.Preflight(ctx, tmpls)
			mu.Lock()
			out = append(out, res...)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.SortStableFunc(out, func(a, b provider.PreflightResult) int {
		if a.Provider != b.Provider {
			return p.index(a.Provider) - p.index(b.Provider)
		}
		return 0
	})
	return out
}

// index is where the provider name is in config order.
func (p *providers) index(name string) int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return slices.Index(p.order, name)
}

// checks answers an ssh provider's question about an instance's checks.
func (p *providers) checks(rec provider.Record) (passing, known bool) {
	g := p.group(rec.Group)
	if g == nil {
		return false, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), checksTimeout)
	defer cancel()
	return g.Checks(ctx, rec.Name)
}

// guard is the fence of an ssh provider's sweep: nil (go ahead) without one.
func (p *providers) guard(ctx context.Context) error {
	if p.fence == nil {
		return nil
	}
	return p.fence.Guard(ctx)
}

// reclaim offers an instance found on a returning host to its group.
func (p *providers) reclaim(ctx context.Context, rec provider.Record) bool {
	g := p.group(rec.Group)
	if g == nil {
		return false
	}
	return g.Reclaim(ctx, rec)
}

func (p *providers) group(name string) *group.Group {
	reg := p.groups.Load()
	if reg == nil {
		return nil
	}
	g, ok := reg.Group(name)
	if !ok {
		return nil
	}
	return g
}

// Hosts implements api.Providers.
func (c *core) Hosts() []provider.HostStatus { return c.provs.Hosts() }

// PreflightProviders implements api.Providers: every provider's hosts, for the
// config in force.
func (c *core) PreflightProviders(ctx context.Context) []provider.PreflightResult {
	c.reloadMu.Lock()
	cfg := c.cfg
	c.reloadMu.Unlock()
	return c.provs.preflight(ctx, cfg)
}

// InstanceLogs implements api.Providers: the log of a running instance,
// read where its provider keeps it.
func (c *core) InstanceLogs(ctx context.Context, name string, opts provider.LogOptions, w io.Writer) error {
	for _, g := range c.groups.All() {
		rec, ok := g.Record(name)
		if !ok {
			continue
		}
		pname := rec.Provider
		if pname == "" {
			pname = g.Config().ProviderList()[0].Name
		}
		prov, _ := c.provs.Get(pname)
		lr, ok := prov.(provider.LogReader)
		if !ok {
			return fmt.Errorf("instance %s: provider %s keeps no logs", name, pname)
		}
		return lr.Logs(ctx, rec, opts, w)
	}
	return fmt.Errorf("%w %q: no group has it (`shoal status` lists them)", api.ErrUnknownInstance, name)
}

// hostState records an ssh host going down or coming back. A host serves
// every group of its provider, so the event names none.
func (p *providers) hostState(host string, down bool, reason string) {
	if p.st == nil {
		return
	}
	t := event.HostUp
	if down {
		t = event.HostDown
	}
	d := event.Record("", t, time.Now(), host, reason)
	if err := p.st.InsertDecision(context.Background(), &d); err != nil {
		p.log.Warn("recording a host event failed", "host", host, "err", err)
	}
}
