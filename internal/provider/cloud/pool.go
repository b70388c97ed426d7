package cloud

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider"
)

// A group's warm pool: servers created ahead of need and kept out of
// rotation, stopped (warm_pool.state: stopped, a PowerDriver's) or
// running. Start takes a warm one before creating a server; a retirement
// may return its server (reuse_on_scale_in). One loop (tendPools, run by
// Run at every listing) moves every member; each action (create, power
// off or on, delete) runs in a goroutine of its own, at most one per
// member (member.busy). A member's life:
//
//	refill (fewer than size)    listed with TagPool=GROUP, neither an
//	      |                     instance nor claimed (a shoal killed
//	      v                     mid-refill, a Start never recorded): adopted
//	+----------+ Create ok +---------+ listed running, state running
//	| creating |---------->| booting |-------------------------------+
//	+----------+           +---------+                               |
//	  | create fails:         |  ^ listed running,                   v
//	  | dropped, retried      |  | state stopped: PowerOff   +------+
//	  | after 1 s doubling    |  +--------->+----------+     | warm |
//	                          |   listed    | stopping |---->|      |
//	                          |   stopped   +----------+     +------+
//	                          |   (state stopped)  listed stopped |
//	                          | boot_timeout, gone       Start takes it (template
//	                          v                          current): PowerOn if stopped,
//	                     +----------+                    wait running, stand-in
//	  drifted, surplus,  | deleting |              +--------+  ok: an instance
//	  pool removed ----->+----------+              | taking |------------------> (the group's)
//	                          | listed gone        +--------+  fails: deleted, Start
//	                          v                                 creates a server instead
//	                     (no member)
//
// A scale-in's Delete (reuse_on_scale_in, the pool's template, room in
// the pool) makes its server a member, booting: a listing that shows it
// running then powers it off, or has it warm. A member absent from, or
// gone in, a successful listing is dropped; a failing listing moves
// nothing, and neither does one that began before the member's last
// change. Pool servers count toward cost, not
// toward the group's size: they are not the group's instances.
type pool struct {
	group string
	cfg   config.WarmPool
	// tmpl and hash are what members are created from; a Start with
	// another template moves them (the newest template wins: a deploy's
	// new instances replace the pool's members too).
	tmpl    config.Template
	hash    string
	members map[string]*member // by server ID
	// creating counts creates in flight (their servers have no ID yet).
	creating int
	seq      int
	// failed counts the creates that failed in a row; none is tried
	// before retryAt (1 s doubling to maxBackoff).
	failed  int
	retryAt time.Time
}

type member struct {
	id, name, hash string
	state          string // a provider.WarmServer state
	since, joined  time.Time
	busy           bool
	// fresh: created by a refill and not warm yet; a surplus loses these
	// first, and they leave room for a server a scale-in returns.
	fresh bool
}

// Member states, as provider.WarmServer shows them.
const (
	memberBooting  = "booting"
	memberStopping = "stopping"
	memberWarm     = "warm"
	memberTaking   = "taking"
	memberDeleting = "deleting"
)

var _ provider.WarmPooler = (*Provider)(nil)

// SetWarmPool sets group's warm pool (see provider.WarmPooler). Before
// the first listing it only registers the pool: StopStrays keeps the
// servers tagged for it, and the next listing adopts them.
func (p *Provider) SetWarmPool(group string, wp *config.WarmPool, tmpl config.Template) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pools == nil {
		p.pools = map[string]*pool{}
	}
	pl := p.pools[group]
	if wp == nil {
		if pl != nil {
			pl.cfg.Size = 0 // its members are deleted, then it goes
		}
		return
	}
	if pl == nil {
		pl = &pool{group: group, members: map[string]*member{}}
		p.pools[group] = pl
	}
	pl.cfg = *wp
	pl.tmpl, pl.hash = tmpl, tmpl.Hash(group)
	p.pokePools()
}

// WarmPool lists group's pool servers, by name.
func (p *Provider) WarmPool(group string) []provider.WarmServer {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl := p.pools[group]
	if pl == nil {
		return nil
	}
	var out []provider.WarmServer
	for _, m := range pl.members {
		out = append(out, provider.WarmServer{Name: m.name, ID: m.id, State: m.state, Template: m.hash, Since: m.since, Joined: m.joined})
	}
	for range pl.creating {
		out = append(out, provider.WarmServer{Name: "(creating)", State: "creating", Template: pl.hash})
	}
	slices.SortFunc(out, func(a, b provider.WarmServer) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// leftPoolLocked drops m from pl, keeping its time there for
// WarmPoolLeft; p.mu is held.
func (p *Provider) leftPoolLocked(pl *pool, m *member) {
	delete(pl.members, m.id)
	if p.poolLeft == nil {
		p.poolLeft = map[string][]provider.WarmServer{}
	}
	p.poolLeft[pl.group] = append(p.poolLeft[pl.group], provider.WarmServer{Name: m.name, ID: m.id, State: m.state, Template: m.hash, Since: m.since, Joined: m.joined, Left: time.Now()})
}

// WarmPoolLeft returns, once, the servers that left group's pool (see
// provider.WarmPooler).
func (p *Provider) WarmPoolLeft(group string) []provider.WarmServer {
	p.mu.Lock()
	defer p.mu.Unlock()
	left := p.poolLeft[group]
	delete(p.poolLeft, group)
	return left
}

// EmptyWarmPool deletes group's pool servers and waits until listings
// no longer show them (see provider.WarmPooler).
func (p *Provider) EmptyWarmPool(ctx context.Context, group string) error {
	p.mu.Lock()
	pl := p.pools[group]
	if pl == nil {
		p.mu.Unlock()
		return nil
	}
	pl.cfg.Size = 0
	var ids []string
	for id, m := range pl.members {
		if m.state != memberTaking {
			ids = append(ids, id)
		}
	}
	p.mu.Unlock()
	p.setBusy(1)
	defer p.setBusy(-1)
	var errs []error
	for _, id := range ids {
		// destroy marks it doomed: the poller asks again while listed.
		if err := p.destroy(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("warm pool server %s: %w", id, err))
		}
	}
	for {
		p.mu.Lock()
		left, creating := 0, pl.creating
		for _, id := range ids {
			if s, ok := p.listing[id]; ok && s.Phase != Gone {
				left++
			}
		}
		wait := p.listed
		p.mu.Unlock()
		if left == 0 && creating == 0 {
			return errors.Join(errs...)
		}
		select {
		case <-ctx.Done():
			return errors.Join(append(errs, fmt.Errorf("empty warm pool of %s: %d servers still listed: %w", group, left, context.Cause(ctx)))...)
		case <-wait:
		}
	}
}

// pokePools has the pool loop look now; p.mu is held.
func (p *Provider) pokePools() {
	select {
	case p.poolWake <- struct{}{}:
	default:
	}
}

// runPools tends the pools after every listing, and when poked, until
// ctx ends.
func (p *Provider) runPools(ctx context.Context) {
	for {
		p.mu.Lock()
		listed := p.listed
		p.mu.Unlock()
		p.tendPools(ctx)
		select {
		case <-ctx.Done():
			return
		case <-listed:
		case <-p.poolWake:
		}
	}
}

// poolsBusyLocked reports whether a pool member is on its way somewhere
// (the poller lists at the fast interval meanwhile); p.mu is held.
func (p *Provider) poolsBusyLocked() bool {
	for _, pl := range p.pools {
		if pl.creating > 0 {
			return true
		}
		for _, m := range pl.members {
			if m.state != memberWarm {
				return true
			}
		}
	}
	return false
}

// tendPools moves each pool's members one step, as the newest listing
// shows them (nothing before the first listing).
func (p *Provider) tendPools(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.listing == nil {
		return
	}
	_, canPower := p.d.(PowerDriver)
	for _, pl := range p.pools {
		p.adoptPoolLocked(pl)
		p.trimPoolLocked(ctx, pl)
		live := pl.creating
		for id, m := range pl.members {
			if m.busy || m.state == memberTaking {
				// A member being taken is the group's already: refilled.
				if m.state != memberDeleting && m.state != memberTaking {
					live++
				}
				continue
			}
			s, ok := p.listing[id]
			if p.listingFrom.Before(m.since) {
				// The listing predates its last change (its create, a
				// power call): the next one tells.
				if m.state != memberDeleting {
					live++
				}
				continue
			}
			if !ok || s.Phase == Gone {
				if m.state != memberDeleting {
					p.log.Warn("warm pool server gone", "provider", p.name, "group", pl.group, "server", m.name, "id", id)
				}
				p.leftPoolLocked(pl, m)
				continue
			}
			if m.state == memberDeleting {
				continue
			}
			if m.hash != pl.hash {
				p.poolDeleteLocked(ctx, pl, m, "drifted: created from template "+m.hash+", the group's is "+pl.hash)
				continue
			}
			live++
			stopped := pl.cfg.State == config.WarmStopped && canPower
			switch {
			case s.Phase == Running && (s.IP != "" || p.standIns != nil) && stopped:
				p.poolActLocked(ctx, pl, m, memberStopping, "power off", func(ctx context.Context) error {
					return p.d.(PowerDriver).PowerOff(ctx, id)
				})
			case s.Phase == Running && (s.IP != "" || p.standIns != nil):
				p.setMemberLocked(pl, m, memberWarm)
			case s.Phase == Stopped && stopped:
				p.setMemberLocked(pl, m, memberWarm)
			case s.Phase == Stopped && canPower:
				// The pool waits running now (its state changed).
				p.poolActLocked(ctx, pl, m, memberBooting, "power on", func(ctx context.Context) error {
					return p.d.(PowerDriver).PowerOn(ctx, id)
				})
			case m.state != memberWarm && time.Since(m.since) > p.cfg.BootTimeout:
				p.poolDeleteLocked(ctx, pl, m, fmt.Sprintf("%s for longer than boot_timeout %s (state %s)", m.state, p.cfg.BootTimeout, s.State))
				live--
			}
		}
		for ; live < pl.cfg.Size && !time.Now().Before(pl.retryAt); live++ {
			p.poolCreateLocked(ctx, pl)
		}
		if pl.cfg.Size == 0 && len(pl.members) == 0 && pl.creating == 0 {
			delete(p.pools, pl.group)
		}
	}
}

// trimPoolLocked deletes pl's members beyond its size, those furthest
// from warm first: fresh ones, booting, stopping, then warm, the newest
// first. Members in action are left for a later listing. p.mu is held.
func (p *Provider) trimPoolLocked(ctx context.Context, pl *pool) {
	var ms []*member
	for _, m := range pl.members {
		if m.state != memberDeleting && m.state != memberTaking {
			ms = append(ms, m)
		}
	}
	extra := len(ms) - pl.cfg.Size
	if extra <= 0 {
		return
	}
	rank := func(m *member) int {
		switch {
		case m.fresh:
			return 0
		case m.state == memberBooting:
			return 1
		case m.state == memberStopping:
			return 2
		}
		return 3
	}
	slices.SortFunc(ms, func(a, b *member) int {
		if r := rank(a) - rank(b); r != 0 {
			return r
		}
		return b.joined.Compare(a.joined)
	})
	for _, m := range ms[:extra] {
		if !m.busy {
			p.poolDeleteLocked(ctx, pl, m, fmt.Sprintf("surplus: the pool keeps %d", pl.cfg.Size))
		}
	}
}

// adoptPoolLocked makes pl's members of the listed servers tagged for it
// that are neither an instance, nor claimed by a Start, nor on their way
// out: those a shoal killed mid-refill (or mid-Start) left. p.mu is held.
func (p *Provider) adoptPoolLocked(pl *pool) {
	for id, s := range p.listing {
		if s.Tags[TagPool] != pl.group || s.Phase == Gone || s.Phase == Stopping ||
			p.insts[id] != nil || p.doomed[id] != nil || pl.members[id] != nil {
			continue
		}
		if _, claimed := p.claims[s.Tags[TagInstance]]; claimed {
			continue
		}
		state := memberBooting
		if s.Phase == Stopped {
			state = memberStopping // becomes warm at once if the pool waits stopped
		}
		joined := s.Created // billed since its create, when the cloud says
		if joined.IsZero() {
			joined = time.Now()
		}
		pl.members[id] = &member{id: id, name: s.Tags[TagInstance], hash: s.Tags[TagTemplate], state: state, since: p.listingFrom, joined: joined}
		p.log.Info("warm pool server adopted", "provider", p.name, "group", pl.group, "server", s.Tags[TagInstance], "id", id, "state", s.State)
	}
}

func (p *Provider) setMemberLocked(pl *pool, m *member, state string) {
	if m.state == state {
		return
	}
	if state == memberWarm {
		m.fresh = false
		p.log.Info("warm pool server ready", "provider", p.name, "group", pl.group, "server", m.name, "id", m.id, "state", pl.cfg.State)
	}
	m.state, m.since = state, time.Now()
}

// poolActLocked runs act for m in the background, m moving to state;
// p.mu is held. A failure is logged and tried again at a later listing.
func (p *Provider) poolActLocked(ctx context.Context, pl *pool, m *member, state, what string, act func(context.Context) error) {
	p.setMemberLocked(pl, m, state)
	m.busy = true
	p.wg.Go(func() {
		actx, cancel := context.WithTimeout(ctx, p.cfg.CreateTimeout)
		err := retry(actx, func() error { return act(actx) }, func(err error) bool { return errors.Is(err, ErrRetryable) })
		cancel()
		if err != nil && ctx.Err() == nil {
			p.log.Warn("warm pool server: "+what+" failed; retried", "provider", p.name, "group", pl.group, "server", m.name, "id", m.id, "err", err)
		}
		p.mu.Lock()
		// Acted on from now: listings that began before say nothing of it.
		m.busy, m.since = false, time.Now()
		p.mu.Unlock()
	})
}

// poolDeleteLocked deletes m's server in the background; p.mu is held.
func (p *Provider) poolDeleteLocked(ctx context.Context, pl *pool, m *member, why string) {
	p.log.Info("deleting warm pool server", "provider", p.name, "group", pl.group, "server", m.name, "id", m.id, "why", why)
	m.state, m.since, m.busy = memberDeleting, time.Now(), true
	p.wg.Go(func() {
		dctx, cancel := context.WithTimeout(ctx, p.cfg.DeleteTimeout)
		err := p.destroy(dctx, m.id) // the poller retries what this cannot finish
		cancel()
		if err != nil && ctx.Err() == nil {
			p.log.Warn("deleting a warm pool server failed; the poller retries", "provider", p.name, "server", m.name, "id", m.id, "err", err)
		}
		p.mu.Lock()
		m.busy = false
		p.mu.Unlock()
	})
}

// poolCreateLocked creates one server for pl in the background; p.mu is
// held. Its name (GROUP-warm-N, N from the clock) is unique across runs.
func (p *Provider) poolCreateLocked(ctx context.Context, pl *pool) {
	pl.creating++
	pl.seq++
	name := fmt.Sprintf("%s-warm-%s%d", pl.group, strconv.FormatInt(time.Now().UnixMilli(), 36), pl.seq)
	req := CreateRequest{Name: name, Group: pl.group, Template: pl.tmpl, Tags: map[string]string{
		TagOwner: p.opts.Owner, TagGroup: pl.group, TagInstance: name, TagPool: pl.group, TagTemplate: pl.hash,
	}}
	// Claimed while it runs: a listing that shows the server before the
	// create returns must not adopt it as well.
	p.claims[name] = claim{}
	p.wg.Go(func() {
		cctx, cancel := context.WithTimeout(ctx, p.cfg.CreateTimeout)
		var srv Server
		err := retry(cctx, func() error {
			p.calls[callCreate].Add(1)
			var err error
			srv, err = p.d.Create(cctx, req)
			return err
		}, func(err error) bool { return errors.Is(err, ErrRetryable) })
		cancel()
		p.mu.Lock()
		defer p.mu.Unlock()
		pl.creating--
		// A server the failed create left is adopted at the next listing.
		delete(p.claims, name)
		if err != nil || srv.ID == "" {
			pl.failed++
			pl.retryAt = time.Now().Add(min(time.Second<<min(pl.failed-1, 5), maxBackoff))
		} else {
			pl.failed, pl.retryAt = 0, time.Time{}
		}
		switch {
		case err != nil:
			if ctx.Err() == nil {
				p.log.Warn("creating a warm pool server failed; retried after a back-off", "provider", p.name, "group", pl.group, "retry_at", pl.retryAt, "err", err)
			}
		case srv.ID == "":
			p.log.Warn("creating a warm pool server: the cloud returned no server ID", "provider", p.name, "group", pl.group)
		default:
			p.log.Info("warm pool server created", "provider", p.name, "group", pl.group, "server", name, "id", srv.ID)
			pl.members[srv.ID] = &member{id: srv.ID, name: name, hash: req.Tags[TagTemplate], state: memberBooting, since: time.Now(), joined: time.Now(), fresh: true}
		}
	})
}

// tags are the marker tags of a server of group named name, created
// from the template of hash: with the pool tags while group has a pool.
func (p *Provider) tags(group, name, hash string) map[string]string {
	t := map[string]string{TagOwner: p.opts.Owner, TagGroup: group, TagInstance: name}
	p.mu.Lock()
	_, pooled := p.pools[group]
	p.mu.Unlock()
	if pooled {
		t[TagPool], t[TagTemplate] = group, hash
	}
	return t
}

// takeWarm takes a warm server of spec's group created from spec's
// template, boots it if stopped, waits for it to run, and returns it as
// spec's instance; nil (and no error) when the pool has none, or taking
// one failed (its server is deleted): Start creates one instead.
func (p *Provider) takeWarm(ctx context.Context, spec provider.Spec) *instance {
	hash := spec.Template.Hash(spec.Group)
	p.mu.Lock()
	pl := p.pools[spec.Group]
	if pl == nil || pl.cfg.Size == 0 {
		p.mu.Unlock()
		return nil
	}
	if pl.hash != hash {
		// The newest template wins: members of the old one are replaced.
		p.log.Info("warm pool follows the group's template", "provider", p.name, "group", spec.Group, "template", hash, "was", pl.hash)
		pl.tmpl, pl.hash = spec.Template, hash
	}
	var m *member
	for _, id := range slices.Sorted(maps.Keys(pl.members)) {
		c := pl.members[id]
		if c.state == memberWarm && !c.busy && c.hash == hash {
			m = c
			break
		}
	}
	if m == nil {
		p.pokePools()
		p.mu.Unlock()
		return nil
	}
	m.state, m.since, m.busy = memberTaking, time.Now(), true
	s := p.listing[m.id]
	p.pokePools() // refill
	p.mu.Unlock()
	p.log.Info("taking a warm pool server", "provider", p.name, "instance", spec.Name, "server", m.name, "id", m.id, "state", s.State)

	in, err := p.boot(ctx, spec, m, s)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.leftPoolLocked(pl, m)
	if err != nil {
		p.log.Warn("taking a warm pool server failed; creating one instead", "provider", p.name, "instance", spec.Name, "server", m.name, "id", m.id, "err", err)
		p.doomed[m.id] = &doom{} // the poller deletes it
		return nil
	}
	p.insts[m.id] = in
	return in
}

// boot brings pool member m (listed as s) into service as spec's
// instance.
func (p *Provider) boot(ctx context.Context, spec provider.Spec, m *member, s Server) (*instance, error) {
	if s.Phase == Stopped {
		pd, ok := p.d.(PowerDriver)
		if !ok {
			return nil, errors.New("stopped, and the driver cannot boot servers")
		}
		cctx, cancel := context.WithTimeout(ctx, p.cfg.CreateTimeout)
		err := retry(cctx, func() error { return pd.PowerOn(cctx, m.id) }, func(err error) bool { return errors.Is(err, ErrRetryable) })
		cancel()
		if err != nil {
			return nil, fmt.Errorf("power on: %w", err)
		}
	}
	booted, err := p.waitRunning(ctx, m.id, true)
	if err != nil {
		return nil, err
	}
	var standIn provider.Instance
	if p.standIns != nil {
		if standIn, err = p.standIns.Start(ctx, provider.Spec{Group: spec.Group, Name: spec.Name, Index: spec.Index, Template: p.standIn}); err != nil {
			return nil, fmt.Errorf("emulator stand-in: %w", err)
		}
	}
	in := p.newInstance(spec.Group, spec.Name, spec.Index, booted, standIn, spec.Template)
	in.rec.StartedAt = time.Now()
	return in, nil
}

// returnToPool makes in's server a member of its group's pool instead of
// deleting it, if the pool returns servers (reuse_on_scale_in), has room,
// and in runs the pool's template; it reports whether it did. Only a
// scale-in's Delete asks (provider.ForScaleIn). in exits
// ("returned to the warm pool"); its emulator stand-in stops.
func (p *Provider) returnToPool(in *instance) bool {
	p.mu.Lock()
	pl := p.pools[in.rec.Group]
	s, listed := p.listing[in.id]
	ok := pl != nil && pl.cfg.ReuseOnScaleIn && in.hash != "" && in.hash == pl.hash && in.tagged != "" &&
		listed && s.Phase == Running && p.doomed[in.id] == nil
	if ok {
		// Creates in flight and fresh members leave room: a server booted
		// already is worth more than one on its way (trimPoolLocked
		// deletes the surplus, fresh ones first).
		n := 0
		for _, m := range pl.members {
			if m.state != memberDeleting && !m.fresh {
				n++
			}
		}
		ok = n < pl.cfg.Size
	}
	if ok {
		delete(p.insts, in.id)
		pl.members[in.id] = &member{id: in.id, name: in.tagged, hash: in.hash, state: memberBooting, since: time.Now(), joined: time.Now()}
		p.pokePools()
	}
	p.mu.Unlock()
	if !ok {
		return false
	}
	p.log.Info("server returned to the warm pool", "provider", p.name, "instance", in.rec.Name, "server", in.tagged, "id", in.id)
	in.mu.Lock()
	in.returned, in.stopping = true, true
	in.mu.Unlock()
	in.stopStandIn()
	in.exit("returned to the warm pool")
	return true
}
