package cloud

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/provider/local"
)

// Options are what a cloud Provider takes from the rest of shoal.
type Options struct {
	// Owner is the value of TagOwner on every server this shoal creates
	// (ssh.OwnerID of its state directory): the servers it lists, adopts
	// and sweeps are only those.
	Owner string
	// Driver names the driver's type (exec, sacloud, ec2) in records.
	Driver string
	// StateDir is shoal's state directory: emulator stand-ins are marked
	// with, and log to, StateDir/standins/NAME.
	StateDir string
	Log      *slog.Logger
	// Guard, if set, is asked before a sweep left for the poller (see
	// StopStrays) deletes anything: an error, and it waits for a later
	// listing (an HA node that does not lead deletes nothing).
	Guard func(ctx context.Context) error
	// ReapEvery is how often a server that should be gone but is still
	// listed is asked to be deleted again; 0 is reapEvery.
	ReapEvery time.Duration
}

const (
	// fastInterval is the listing interval while a server boots or is
	// being deleted (or the configured one, if shorter).
	fastInterval = time.Second
	// maxBackoff caps the back-off of failing API calls (create retries,
	// failing listings).
	maxBackoff = 30 * time.Second
	// listTimeout bounds one List call.
	listTimeout = time.Minute
	// destroyWait bounds a failed Start's own deletion of its server;
	// the poller goes on after it.
	destroyWait = time.Minute
	// reapEvery is how often a server that should be gone but is still
	// listed is asked to be deleted again (Options.ReapEvery).
	reapEvery = 15 * time.Second
)

// Provider runs instances as servers of one cloud provider entry. It is
// safe for concurrent use. Run must run for instances to be watched and
// for Start to see servers boot.
type Provider struct {
	name   string
	d      Driver
	cfg    config.CloudProvider
	opts   Options
	log    *slog.Logger
	fast   time.Duration
	calls  [numCalls]atomic.Int64
	listMu sync.Mutex // one List at a time: Adopt and the poller share results

	// standIns runs the stand-ins of an emulator's servers (nil against a
	// real cloud), marked with a state directory of their own so that the
	// local provider's stray sweep leaves them to this provider.
	standIns *local.Provider
	standIn  config.Template

	mu sync.Mutex
	// listing is the newest successful listing by server ID; nil before
	// the first. listed closes (and is replaced) after every List attempt;
	// listErr is the newest attempt's error, listFrom when it began.
	listing  map[string]Server
	listedAt time.Time
	listErr  error
	listFrom time.Time
	// listingFrom is when the newest successful listing began: a server
	// created since may be missing from it.
	listingFrom time.Time
	listed      chan struct{}
	insts       map[string]*instance // by server ID
	// claims are the instance names with a Start in flight or recently
	// ended, and the server ID each owns ("" for none): a listed server
	// carrying such a name under another ID is a leftover of a create that
	// failed or was retried, and is deleted.
	claims map[string]claim
	// doomed are the servers that must go (stopped, failed to boot,
	// leftovers, strays): asked to be deleted until a listing lacks them.
	doomed map[string]*doom
	// pendingSweep is the keep of a StopStrays that could not list: the
	// poller sweeps with it at its first listing that works.
	pendingSweep map[string]bool
	// pools are the groups' warm pools (pool.go), woken by poolWake.
	pools    map[string]*pool
	poolWake chan struct{}
	// poolLeft are the servers that left a group's pool since its group
	// last asked (WarmPoolLeft), by group: their time there is billed.
	poolLeft map[string][]provider.WarmServer
	// busy counts Starts waiting for a boot and Stops waiting for a
	// deletion: the poller lists at the fast interval meanwhile.
	busy int
	wake chan struct{}
	// stopped closes when Run returns: instances' watchers of their
	// stand-ins end then (the stand-ins keep running, for the next run).
	stopped chan struct{}
	wg      sync.WaitGroup // stand-in stops and watchers
}

type claim struct {
	id    string
	until time.Time // zero while the Start runs
}

type doom struct {
	last     time.Time // last Delete asked
	inFlight bool
}

var (
	_ provider.Provider = (*Provider)(nil)
	_ provider.Deleter  = (*Provider)(nil)
)

// New returns the provider of one cloud entry, driving d. Nothing is
// called until Start, Adopt, StopStrays or Run.
func New(name string, d Driver, cfg config.CloudProvider, opts Options) (*Provider, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.ReapEvery <= 0 {
		opts.ReapEvery = reapEvery
	}
	def := config.DefaultCloud
	for _, f := range []struct {
		v   *time.Duration
		def time.Duration
	}{
		{&cfg.Interval, def.Interval}, {&cfg.BootTimeout, def.BootTimeout},
		{&cfg.CreateTimeout, def.CreateTimeout}, {&cfg.DeleteTimeout, def.DeleteTimeout},
	} {
		if *f.v <= 0 {
			*f.v = f.def
		}
	}
	if opts.Owner == "" {
		return nil, errors.New("cloud provider " + name + ": no owner tag")
	}
	p := &Provider{
		name: name, d: d, cfg: cfg, opts: opts, log: opts.Log,
		fast:   min(fastInterval, cfg.Interval),
		listed: make(chan struct{}), insts: map[string]*instance{}, claims: map[string]claim{}, doomed: map[string]*doom{},
		wake: make(chan struct{}, 1), stopped: make(chan struct{}), poolWake: make(chan struct{}, 1),
	}
	if cfg.Emulator != nil {
		t, err := config.NewTemplate(cfg.Emulator.StandIn, nil)
		if err != nil {
			return nil, fmt.Errorf("cloud provider %s: emulator.stand_in: %w", name, err)
		}
		t.StopTimeout = 5 * time.Second
		p.standIn = t
		p.standIns = local.New(standInDir(opts.StateDir, name), opts.Log.With("stand_ins", name))
	}
	return p, nil
}

func standInDir(stateDir, name string) string { return filepath.Join(stateDir, "standins", name) }

// StopStandIns stops the emulator stand-ins that provider name started
// with stateDir. They outlive the provider on purpose, as a cloud's
// servers outlive shoal; whoever ends the emulated cloud (a test) ends
// them.
func StopStandIns(ctx context.Context, stateDir, name string) error {
	_, err := local.New(standInDir(stateDir, name), nil).StopStrays(ctx, nil)
	return err
}

// Name is the provider entry's name.
func (p *Provider) Name() string { return p.name }

// API call kinds, counted by Calls.
const (
	callCreate = iota
	callDelete
	callList
	numCalls
)

// Calls counts the API calls the provider made, by kind.
type Calls struct {
	Create, Delete, List int64
}

// Calls returns how many API calls of each kind the provider has made:
// what a scale event costs (one listing per interval, never one per
// server).
func (p *Provider) Calls() Calls {
	return Calls{Create: p.calls[callCreate].Load(), Delete: p.calls[callDelete].Load(), List: p.calls[callList].Load()}
}

// data is what a cloud instance's record keeps (Record.Data).
type data struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Driver string `json:"driver"`
	// StandIn is the record of the emulator stand-in serving for it.
	StandIn *provider.Record `json:"stand_in,omitempty"`
	// Tagged is the server's TagInstance when it may wait in a warm pool
	// (a pool member taken carries the name it was created with), and
	// Template the hash of the template it runs.
	Tagged   string `json:"tagged,omitempty"`
	Template string `json:"template,omitempty"`
}

// Run lists the servers every interval (every second while one boots or
// is deleted, backing off while listing fails) until ctx ends, detecting
// servers deleted outside shoal and deleting those that must go.
func (p *Provider) Run(ctx context.Context) {
	defer func() {
		close(p.stopped)
		p.wg.Wait()
	}()
	p.wg.Go(func() { p.runPools(ctx) })
	failures := 0
	for {
		last := time.Now()
		if err := p.refresh(ctx); err != nil {
			failures++
		} else {
			failures = 0
			p.reap(ctx)
			p.mu.Lock()
			kept := p.pendingSweep
			p.mu.Unlock()
			if kept != nil && p.mayDelete(ctx) {
				strays, err := p.sweep(ctx, kept)
				for _, s := range strays {
					p.log.Warn("stray server deleted", "provider", p.name, "instance", s.Name, "id", s.ID, "server", s.Host)
				}
				if err != nil {
					p.log.Warn("deleting stray servers failed; the poller retries", "provider", p.name, "err", err)
				}
			}
		}
		p.mu.Lock()
		wait := p.cfg.Interval
		if p.busy > 0 || len(p.doomed) > 0 || p.poolsBusyLocked() {
			wait = p.fast
		}
		p.mu.Unlock()
		if failures > 0 {
			wait = min(max(wait, time.Second)<<min(failures, 5), maxBackoff)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-p.wake:
			t.Stop()
			// At most one listing per fast interval, however many Starts
			// and Stops ask: a scale event of N servers is not N listings.
			if rest := p.fast - time.Since(last); rest > 0 {
				t := time.NewTimer(rest)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
		case <-t.C:
		}
	}
}

// poke has the poller list now.
func (p *Provider) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// refresh lists the servers once and applies the listing: instances
// whose server is gone or absent exit. A failing List changes nothing:
// the last listing stands, and no instance is taken for gone.
func (p *Provider) refresh(ctx context.Context) error {
	p.listMu.Lock()
	defer p.listMu.Unlock()
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	p.calls[callList].Add(1)
	from := time.Now()
	servers, err := p.d.List(lctx, p.opts.Owner)
	now := time.Now()

	p.mu.Lock()
	p.listFrom = from
	defer func() {
		close(p.listed)
		p.listed = make(chan struct{})
		p.mu.Unlock()
	}()
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("listing servers failed; keeping the last listing", "provider", p.name, "err", err)
		}
		p.listErr = fmt.Errorf("list servers: %w", err)
		return p.listErr
	}
	listing := make(map[string]Server, len(servers))
	for _, s := range servers {
		if s.Tags[TagOwner] == p.opts.Owner {
			listing[s.ID] = s
		}
	}
	p.listing, p.listedAt, p.listErr, p.listingFrom = listing, now, nil, from
	for id, in := range p.insts {
		s, ok := listing[id]
		if ok && s.Phase != Gone {
			in.seen()
			continue
		}
		delete(p.insts, id)
		state := "absent from the listing"
		if ok {
			state = s.State
		}
		p.wg.Go(func() { in.gone(state) })
	}
	for name, c := range p.claims {
		if !c.until.IsZero() && now.After(c.until) {
			delete(p.claims, name)
		}
	}
	for id, s := range listing {
		// A claim with neither an ID nor an end is a create in flight.
		c, ok := p.claims[s.Tags[TagInstance]]
		if ok && (c.id != "" || !c.until.IsZero()) && c.id != id && s.Phase != Gone && p.doomed[id] == nil {
			p.log.Warn("deleting a server left over by a failed or retried create", "provider", p.name, "server", s.Name, "id", id)
			p.doomed[id] = &doom{}
		}
	}
	for id, d := range p.doomed {
		if s, ok := listing[id]; (!ok || s.Phase == Gone) && !d.inFlight {
			delete(p.doomed, id)
		}
	}
	return nil
}

// mayDelete asks Options.Guard, if set, before the poller's sweep.
func (p *Provider) mayDelete(ctx context.Context) bool {
	if p.opts.Guard == nil {
		return true
	}
	if err := p.opts.Guard(ctx); err != nil {
		p.log.Info("stray servers left for now: this node does not lead", "provider", p.name, "err", err)
		return false
	}
	return true
}

// reap asks again for the deletion of servers that must go but are still
// listed, once per Options.ReapEvery each, each call in a goroutine of its own
// bounded by delete_timeout: a driver that waits for a slow shutdown must
// not hold up the listings.
func (p *Provider) reap(ctx context.Context) {
	p.mu.Lock()
	var ids []string
	now := time.Now()
	for id, d := range p.doomed {
		if !d.inFlight && now.Sub(d.last) >= p.opts.ReapEvery {
			d.inFlight, d.last = true, now
			ids = append(ids, id)
		}
	}
	p.mu.Unlock()
	for _, id := range ids {
		p.wg.Go(func() {
			dctx, cancel := context.WithTimeout(ctx, p.cfg.DeleteTimeout)
			err := p.delete(dctx, id)
			cancel()
			p.mu.Lock()
			if d := p.doomed[id]; d != nil {
				d.inFlight, d.last = false, time.Now()
			}
			p.mu.Unlock()
			if err != nil && ctx.Err() == nil {
				p.log.Warn("deleting a server failed; retrying", "provider", p.name, "id", id, "err", err)
			}
		})
	}
}

// delete calls the driver's Delete once, counted.
func (p *Provider) delete(ctx context.Context, id string) error {
	p.calls[callDelete].Add(1)
	if err := p.d.Delete(ctx, id); err != nil {
		return fmt.Errorf("delete server %s: %w", id, err)
	}
	return nil
}

// Delete asks the cloud once to delete pi's server, for a group retiring
// it (see provider.Deleter): nil once the cloud accepted the deletion, or
// the shutdown before it (see Accepted); the API's error if it refused or
// did not answer within a minute. A refused deletion leaves nothing behind,
// so the server goes on serving. An accepted one is never taken back: the
// driver's call goes on after Delete returns, until it ends or
// delete_timeout (a graceful shutdown may take minutes), and the poller
// asks again while the server is listed; a failure after acceptance is a
// deletion still under way, not a refusal.
//
// The call's goroutine ends with ctx or at delete_timeout.
func (p *Provider) Delete(ctx context.Context, pi provider.Instance) error {
	in, ok := pi.(*instance)
	if !ok || in.p != p {
		return fmt.Errorf("delete instance %s: not a server of provider %s", pi.Record().Name, p.name)
	}
	if provider.IsScaleIn(ctx) && p.returnToPool(in) {
		return nil
	}
	p.mu.Lock()
	d := p.doomed[in.id]
	if d != nil {
		// On its way out already: accepted.
		p.mu.Unlock()
		in.markDeleted()
		return nil
	}
	d = &doom{inFlight: true, last: time.Now()}
	p.doomed[in.id] = d
	p.mu.Unlock()

	dctx, cancel := context.WithTimeout(ctx, p.cfg.DeleteTimeout)
	dctx, acc := withAccepted(dctx)
	done := make(chan error, 1)
	go func() {
		defer cancel()
		err := p.delete(dctx, in.id)
		if err == nil {
			acc.accept()
		}
		accepted := acc.accepted()
		p.mu.Lock()
		if p.doomed[in.id] == d {
			if accepted {
				// Asked again by the poller while still listed.
				d.inFlight, d.last = false, time.Now()
			} else {
				delete(p.doomed, in.id)
			}
		}
		p.mu.Unlock()
		if err != nil && accepted && ctx.Err() == nil {
			p.log.Warn("deletion accepted but not finished; the poller asks again", "provider", p.name, "instance", in.rec.Name, "id", in.id, "err", err)
		}
		done <- err
	}()
	// An API that does not answer is refused like one that says no: the
	// instance serves on meanwhile.
	t := time.NewTimer(min(p.cfg.DeleteTimeout, listTimeout))
	defer t.Stop()
	var err error
	select {
	case err = <-done:
	case <-acc.ch:
	case <-t.C:
		if acc.refuse() {
			cancel()
			err = fmt.Errorf("no answer within %s: %w", min(p.cfg.DeleteTimeout, listTimeout), <-done)
		}
	}
	if !acc.accepted() {
		acc.refuse()
		return fmt.Errorf("delete instance %s: %w", in.rec.Name, err)
	}
	in.markDeleted()
	return nil
}

// Reachable waits for a listing that begins after the call (the poller's,
// asked for now: however many ask, one per fast interval) and returns its
// error, nil if the API answered (see provider.Deleter).
func (p *Provider) Reachable(ctx context.Context) error {
	asked := time.Now()
	p.poke()
	for {
		p.mu.Lock()
		from, err, listed := p.listFrom, p.listErr, p.listed
		p.mu.Unlock()
		if from.After(asked) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no listing yet: %w", context.Cause(ctx))
		case <-listed:
		}
	}
}

// DeleteTimeout is the provider's delete_timeout (see provider.Deleter).
func (p *Provider) DeleteTimeout() time.Duration { return p.cfg.DeleteTimeout }

// Preflight checks the driver's config against its cloud's API when the
// driver can (cloud.Preflighter); nothing otherwise.
func (p *Provider) Preflight(ctx context.Context, _ map[string]config.Template) []provider.PreflightResult {
	c, ok := p.d.(Preflighter)
	if !ok {
		return nil
	}
	where, problems, notes := c.Preflight(ctx)
	return []provider.PreflightResult{{Provider: p.name, Host: where, OK: len(problems) == 0, Problems: problems, Notes: notes}}
}

// Interrupted is the notice the newest listing shows for rec's server.
func (p *Provider) Interrupted(rec provider.Record) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.listing[rec.ID].Interrupted
}

// Zone is the zone the newest listing shows rec's server in.
func (p *Provider) Zone(rec provider.Record) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.listing[rec.ID].Zone
}

// destroy marks id doomed and deletes it, retrying any error with
// back-off until ctx ends: deleting is idempotent, and a server left
// running costs money. What destroy cannot finish the poller retries.
func (p *Provider) destroy(ctx context.Context, id string) error {
	p.mu.Lock()
	d := p.doomed[id]
	if d == nil {
		d = &doom{}
		p.doomed[id] = d
	}
	d.inFlight, d.last = true, time.Now()
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		d.inFlight, d.last = false, time.Now()
		p.mu.Unlock()
	}()
	return retry(ctx, func() error { return p.delete(ctx, id) }, func(error) bool { return true })
}

// retry runs f until it succeeds, fails with an error retryable does not
// accept, or ctx ends, sleeping 1 s doubling to maxBackoff in between.
func retry(ctx context.Context, f func() error, retryable func(error) bool) error {
	wait := time.Second
	for {
		err := f()
		if err == nil || !retryable(err) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (gave up: %v)", err, context.Cause(ctx))
		case <-t.C:
		}
		wait = min(2*wait, maxBackoff)
	}
}

// setBusy counts a Start or Stop the poller must watch closely; the first
// has it list now (or once a fast interval after its last listing).
func (p *Provider) setBusy(d int) {
	p.mu.Lock()
	first := d > 0 && p.busy == 0
	p.busy += d
	p.mu.Unlock()
	if first {
		p.poke()
	}
}

// Start creates a server, waits until a listing shows it running with an
// address, and returns it as an instance. Creates the cloud refuses for
// now (ErrRetryable) are retried until create_timeout; a server that does
// not boot within boot_timeout is deleted. Against an emulator the
// instance's stand-in is started last, and serves as the server.
func (p *Provider) Start(ctx context.Context, spec provider.Spec) (provider.Instance, error) {
	if err := provider.CheckName(spec.Name); err != nil {
		return nil, fmt.Errorf("start instance: %w", err)
	}
	if spec.Template.PreStart != nil {
		return nil, fmt.Errorf("start instance %s: provider %s runs no pre_start hooks (a server's image prepares itself)", spec.Name, p.name)
	}
	p.setBusy(1)
	defer p.setBusy(-1)
	p.setClaim(spec.Name, claim{})
	in := p.takeWarm(ctx, spec)
	var err error
	if in == nil {
		in, err = p.start(ctx, spec)
	}
	// For a while after a Start, a server listed under its name and any
	// other ID is a leftover of a create that failed or was retried.
	until := time.Now().Add(p.cfg.BootTimeout)
	if err != nil {
		p.setClaim(spec.Name, claim{until: until})
		return nil, fmt.Errorf("start instance %s: %w", spec.Name, err)
	}
	p.setClaim(spec.Name, claim{id: in.id, until: until})
	return in, nil
}

func (p *Provider) setClaim(name string, c claim) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.claims[name] = c
}

func (p *Provider) start(ctx context.Context, spec provider.Spec) (*instance, error) {
	req := CreateRequest{
		Name: spec.Name, Group: spec.Group, Index: spec.Index, Plan: spec.Plan, Template: spec.Template,
		Tags:  p.tags(spec.Group, spec.Name, spec.Template.Hash(spec.Group)),
		Token: rand.Text(),
	}
	cctx, cancel := context.WithTimeout(ctx, p.cfg.CreateTimeout)
	var srv Server
	err := retry(cctx, func() error {
		p.calls[callCreate].Add(1)
		req.Attempt++
		var err error
		srv, err = p.d.Create(cctx, req)
		if errors.Is(err, ErrRetryable) {
			p.log.Warn("create refused for now; retrying", "provider", p.name, "instance", spec.Name, "err", err)
		}
		return err
	}, func(err error) bool { return errors.Is(err, ErrRetryable) })
	cancel()
	if err != nil {
		return nil, fmt.Errorf("create server: %w", err)
	}
	if srv.ID == "" {
		return nil, errors.New("create server: the cloud returned no server ID")
	}
	// The cloud bills from here: the instance counts from its create, its
	// boot included, and so does a server that fails to boot.
	created := time.Now()
	p.setClaim(spec.Name, claim{id: srv.ID})
	p.log.Info("server created; waiting for it to boot", "provider", p.name, "instance", spec.Name, "id", srv.ID)

	booted, err := p.waitRunning(ctx, srv.ID, false)
	var standIn provider.Instance
	if err == nil && p.standIns != nil {
		standIn, err = p.standIns.Start(ctx, provider.Spec{Group: spec.Group, Name: spec.Name, Index: spec.Index, Template: p.standIn})
		if err != nil {
			err = fmt.Errorf("emulator stand-in: %w", err)
		}
	}
	if err != nil {
		// No leaked spend: a server that cannot serve is deleted now, or
		// by the poller if the cloud does not answer for a while (or by
		// the next run's stray sweep if shoal is stopping).
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(p.cfg.DeleteTimeout, destroyWait))
		defer cancel()
		if derr := p.destroy(dctx, srv.ID); derr != nil {
			err = fmt.Errorf("%w; deleting it failed, retried in the background: %v", err, derr)
		}
		return nil, &provider.CreatedError{Created: created, Err: fmt.Errorf("server %s: %w", srv.ID, err)}
	}
	in := p.newInstance(spec.Group, spec.Name, spec.Index, booted, standIn, spec.Template)
	in.rec.StartedAt = created
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.listing[srv.ID]; !ok || s.Phase == Gone {
		// Gone between the listing that showed it running and now.
		return nil, &provider.CreatedError{Created: created, Err: fmt.Errorf("server %s: gone while booting", srv.ID)}
	}
	p.insts[srv.ID] = in
	return in, nil
}

// waitRunning waits until a listing shows server id running with an IP
// (any running server against an emulator, whose IPs are not used), for
// at most boot_timeout. Resuming (a warm pool's server powered on), a
// listing may still show it stopped.
func (p *Provider) waitRunning(ctx context.Context, id string, resuming bool) (Server, error) {
	errBoot := fmt.Errorf("not running within boot_timeout %s", p.cfg.BootTimeout)
	ctx, cancel := context.WithTimeoutCause(ctx, p.cfg.BootTimeout, errBoot)
	defer cancel()
	start := time.Now()
	for {
		p.mu.Lock()
		s, ok := p.listing[id]
		listed, listErr := p.listed, p.listErr
		p.mu.Unlock()
		switch {
		case ok && s.Phase == Running && (s.IP != "" || p.standIns != nil):
			p.log.Info("server running", "provider", p.name, "id", id, "ip", s.IP, "boot", time.Since(start).Round(time.Millisecond))
			return s, nil
		case ok && (s.Phase == Gone || s.Phase == Stopping || s.Phase == Stopped && !resuming):
			return Server{}, fmt.Errorf("%s while booting (state %s)", s.Phase, s.State)
		}
		select {
		case <-ctx.Done():
			what := "not listed yet"
			if ok {
				what = fmt.Sprintf("state %s, no address", s.State)
				if s.Phase == Running && s.IP == "" {
					what = "running without an address"
				}
			}
			if listErr != nil {
				what += "; last listing failed: " + listErr.Error()
			}
			if cause := context.Cause(ctx); cause == errBoot {
				return Server{}, fmt.Errorf("%w (%s)", errBoot, what)
			}
			return Server{}, fmt.Errorf("waiting for it to boot (%s): %w", what, context.Cause(ctx))
		case <-listed:
		}
	}
}

// addr is where a listed server serves.
func (p *Provider) addr(s Server) string {
	port := p.cfg.Port
	if s.Port > 0 {
		port = s.Port
	}
	return net.JoinHostPort(s.IP, strconv.Itoa(port))
}

func (p *Provider) newInstance(group, name string, index int, s Server, standIn provider.Instance, tmpl config.Template) *instance {
	d := data{ID: s.ID, Name: s.Name, Driver: p.opts.Driver, Template: tmpl.Hash(group)}
	if s.Tags[TagPool] != "" {
		d.Tagged = s.Tags[TagInstance]
	}
	addr := p.addr(s)
	if standIn != nil {
		r := standIn.Record()
		d.StandIn, addr = &r, r.Addr
	}
	raw, _ := json.Marshal(d) // strings and a record: it cannot fail
	in := &instance{
		p:   p,
		rec: provider.Record{Group: group, Name: name, Index: index, ID: s.ID, Addr: addr, Host: s.Name, Data: raw},
		id:  s.ID, standIn: standIn, done: make(chan struct{}), verified: true,
		hash: d.Template, tagged: d.Tagged,
	}
	if standIn != nil {
		// The stand-in is the server's process: its exit is the server's.
		in.watchStandIn()
	}
	return in
}

// Adopt re-attaches to a recorded instance: present in the newest
// listing (one is made if there is none yet) → the instance; absent from
// a successful listing → ErrGone. When listing fails the instance is
// returned unverified, and exits at the first successful listing that
// lacks it: a cloud that cannot be listed right now is no proof its
// servers are gone, and forgetting them would leak them.
func (p *Provider) Adopt(ctx context.Context, rec provider.Record, tmpl config.Template) (provider.Instance, error) {
	var d data
	if err := json.Unmarshal(rec.Data, &d); err != nil || d.ID == "" || d.ID != rec.ID {
		return nil, fmt.Errorf("adopt instance %s: no %s server data: %w", rec.Name, p.name, provider.ErrGone)
	}
	p.mu.Lock()
	in, tracked := p.insts[d.ID]
	haveListing := p.listing != nil
	p.mu.Unlock()
	if tracked {
		return in, nil
	}
	if !haveListing {
		_ = p.refresh(ctx) // its error is logged; an unverified instance follows
	}
	p.mu.Lock()
	s, listed := p.listing[d.ID]
	verified := p.listing != nil
	p.mu.Unlock()
	if verified && (!listed || s.Phase == Gone) {
		state := "absent from the listing"
		if listed {
			state = s.State
		}
		return nil, fmt.Errorf("adopt instance %s: server %s deleted while shoal was down (%s): %w", rec.Name, d.ID, state, provider.ErrGone)
	}
	tagged := rec.Name
	if d.Tagged != "" {
		tagged = d.Tagged // taken from a warm pool
	}
	if s.Tags[TagInstance] != "" && s.Tags[TagInstance] != tagged {
		return nil, fmt.Errorf("adopt instance %s: server %s is tagged as %s: %w", rec.Name, d.ID, s.Tags[TagInstance], provider.ErrGone)
	}
	var standIn provider.Instance
	if p.standIns != nil {
		if d.StandIn == nil {
			return nil, fmt.Errorf("adopt instance %s: recorded without an emulator stand-in: %w", rec.Name, provider.ErrGone)
		}
		var err error
		if standIn, err = p.standIns.Adopt(ctx, *d.StandIn, p.standIn); err != nil {
			// The server's process is gone: so is the server, as far as
			// anyone can tell; StopStrays deletes it.
			return nil, fmt.Errorf("adopt instance %s: emulator stand-in: %w", rec.Name, err)
		}
	}
	in = &instance{p: p, rec: rec, id: d.ID, standIn: standIn, done: make(chan struct{}), verified: verified, hash: d.Template, tagged: d.Tagged}
	if standIn != nil {
		in.watchStandIn()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if other := p.insts[d.ID]; other != nil {
		return other, nil
	}
	p.insts[d.ID] = in
	for _, pl := range p.pools {
		// Recorded as an instance: not the pool's, whatever a listing
		// before this adoption made of it.
		delete(pl.members, d.ID)
	}
	if !verified {
		p.log.Warn("adopting a server unverified: listing fails; verified at the first listing that works", "provider", p.name, "instance", rec.Name, "id", d.ID)
	} else {
		p.log.Info("adopted server", "provider", p.name, "instance", rec.Name, "id", d.ID, "state", s.State)
	}
	return in, nil
}

// StopStrays deletes the servers carrying this shoal's owner tag that
// neither keep nor this provider accounts for (created by a shoal killed
// before it recorded them), and returns them. A failing listing sweeps
// nothing now: the poller sweeps at its first listing that works. Against
// an emulator, stand-ins nobody uses are stopped too.
func (p *Provider) StopStrays(ctx context.Context, keep []provider.Record) ([]provider.Record, error) {
	kept := map[string]bool{}
	for _, r := range keep {
		kept[r.ID] = true
	}
	if err := p.refresh(ctx); err != nil {
		p.mu.Lock()
		p.pendingSweep = kept
		p.mu.Unlock()
		return nil, fmt.Errorf("stop stray servers (swept once listing works): %w", err)
	}
	return p.sweep(ctx, kept)
}

// sweep deletes the listed servers that are not kept, nor tracked or
// claimed by this provider, and has a Sweeper driver sweep its own strays
// (until that works, again at every listing that works).
func (p *Provider) sweep(ctx context.Context, kept map[string]bool) ([]provider.Record, error) {
	var keepStandIns []provider.Record
	p.mu.Lock()
	p.pendingSweep = nil
	for id, in := range p.insts {
		kept[id] = true
		if in.standIn != nil {
			keepStandIns = append(keepStandIns, in.standIn.Record())
		}
	}
	for _, c := range p.claims {
		kept[c.id] = true
	}
	var strays []Server
	for id, s := range p.listing {
		// A server of a group's warm pool is the pool's to adopt or delete.
		if _, pooled := p.pools[s.Tags[TagPool]]; pooled && s.Tags[TagPool] != "" {
			continue
		}
		if !kept[id] && s.Phase != Gone {
			strays = append(strays, s)
		}
	}
	p.mu.Unlock()
	slices.SortFunc(strays, func(a, b Server) int { return strings.Compare(a.Name, b.Name) })

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		stopped []provider.Record
		errs    []error
	)
	dctx, cancel := context.WithTimeout(ctx, p.cfg.DeleteTimeout)
	defer cancel()
	for _, s := range strays {
		p.log.Warn("deleting stray server", "provider", p.name, "server", s.Name, "id", s.ID, "instance", s.Tags[TagInstance])
		wg.Go(func() {
			err := p.destroy(dctx, s.ID)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("stray server %s: %w", s.Name, err))
				return
			}
			stopped = append(stopped, provider.Record{Group: s.Tags[TagGroup], Name: s.Tags[TagInstance], ID: s.ID, Host: s.Name})
		})
	}
	wg.Wait()
	if sw, ok := p.d.(Sweeper); ok {
		swept, err := sw.SweepStrays(dctx, p.opts.Owner)
		for _, what := range swept {
			p.log.Warn("stray left by a create that never finished deleted", "provider", p.name, "what", what)
		}
		if err != nil {
			// Swept again at the poller's next listing that works.
			p.mu.Lock()
			p.pendingSweep = kept
			p.mu.Unlock()
			errs = append(errs, fmt.Errorf("driver's strays: %w", err))
		}
	}
	if p.standIns != nil {
		if _, err := p.standIns.StopStrays(ctx, keepStandIns); err != nil {
			errs = append(errs, fmt.Errorf("emulator stand-ins: %w", err))
		}
	}
	slices.SortFunc(stopped, func(a, b provider.Record) int { return strings.Compare(a.Host, b.Host) })
	return stopped, errors.Join(errs...)
}
