package ssh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/shoal-lb/shoal/internal/proc"
	"github.com/shoal-lb/shoal/internal/provider"
)

// Hold-off of a host that came back from down: holdOffBase doubling per
// down within flapWindow, at most holdOffMax.
const (
	holdOffBase = 30 * time.Second
	holdOffMax  = 10 * time.Minute
	flapWindow  = 10 * time.Minute
)

// holdOff is how long a host back from its downs-th down within
// flapWindow is held off.
func holdOff(downs int) time.Duration {
	if downs > 10 {
		return holdOffMax
	}
	return min(holdOffBase<<max(downs-1, 0), holdOffMax)
}

// rotateEvery is how often each host's logs are rotated and expired.
const rotateEvery = 10 * time.Second

// host is one server and what shoal knows of it. Its connection manager
// (manage) owns the connection; everything below first is guarded by the
// Provider's mu.
//
// Its states, as Hosts reports them:
//
//	(start) ──dial fails──► unreachable ◄──── poll or dial fails ──── up ◄──┐
//	   │                     │     │                                  ▲     │
//	   │                     │     └─────────── connected ────────────┘     │
//	   └──────── connected ──┼──────────────────────────────────────────────┤
//	                         │ host_down_after since its last answer        │ hold-off
//	                         │ AND every instance's checks failing (or      │ ends
//	                         ▼ unknown) as long: its instances are Done     │
//	                       down ─────────── connected ───────────────► held-off
//	                                           (30 s, doubling per down within
//	                                            10 min, at most 10 min)
//
// On every connection the host is reconciled: adoptions made while it was
// unreachable are verified, instances stopped while it was unreachable are
// stopped, and after a down each marked process nobody tracks is offered to
// Reclaim, then stopped if no group takes it back.
type host struct {
	name  string
	first chan struct{} // closed after the first connection attempt

	cfg       Host
	clientCfg *gossh.ClientConfig
	cancel    context.CancelFunc

	client    *gossh.Client
	shell     *shell
	facts     machineFacts
	attempted bool
	since     time.Time // of the current state
	lastErr   string
	// lastOK is when the host last answered: an unreachable host has been
	// so since then.
	lastOK       time.Time
	down         bool
	downs        []time.Time // within flapWindow
	heldOffUntil time.Time
	// wasDown: the host went down and its reconciliation is to come.
	wasDown bool
	removed bool
	// insts are the tracked instances by name; pending the starts in
	// progress, which count against capacity and hold their port.
	insts   map[string]*instance
	pending map[string]pendingStart
	// inFlight counts commands running there (see busy).
	inFlight int
	// lost are the records of instances a down ended, offered to Reclaim
	// if they still run when the host is back; stopOnReturn the processes
	// whose Stop found the host unreachable.
	lost         map[procKey]provider.Record
	stopOnReturn map[procKey]string
	// sweepKeep is the keep of the last StopStrays, spared by
	// reconciliations; sweepPending: that StopStrays found the host
	// unreachable. swept: strays have been swept, so a marked process
	// nobody tracks (nor keeps) is one.
	sweepKeep    map[procKey]bool
	sweepPending bool
	swept        bool
	// abandoned are the instances whose launch failed after it may have
	// started their process, by name: what runs of them is stopped by its
	// marker (see stopAbandoned), and a name is forgotten only once the
	// host shows nothing of it left.
	abandoned map[string]*abandonedLaunch
}

// abandonedLaunch is one failed launch (a later failure of the same name
// is another), which failed at at.
type abandonedLaunch struct{ at time.Time }

type pendingStart struct {
	group string
	cpus  float64
	port  int
}

func newHost(name string, hc Host, cc *gossh.ClientConfig) *host {
	return &host{
		name: name, first: make(chan struct{}), cfg: hc, clientCfg: cc, since: time.Now(),
		insts: make(map[string]*instance), pending: make(map[string]pendingStart),
		lost: make(map[procKey]provider.Record), stopOnReturn: make(map[procKey]string),
		abandoned: make(map[string]*abandonedLaunch),
	}
}

// state is h's state for Hosts; p.mu is held.
func (h *host) state(now time.Time) string {
	switch {
	case h.client != nil && now.Before(h.heldOffUntil):
		return provider.HostHeldOff
	case h.client != nil:
		return provider.HostUp
	case h.down:
		return provider.HostDown
	}
	return provider.HostUnreachable
}

// load is what h runs for placement: instances (starts in progress
// included), those of group, and their cores; p.mu is held.
func (h *host) load(group string) (total, ofGroup int, cores float64) {
	for _, in := range h.insts {
		total++
		cores += in.tmpl.CPUs
		if in.rec.Group == group {
			ofGroup++
		}
	}
	for _, ps := range h.pending {
		total++
		cores += ps.cpus
		if ps.group == group {
			ofGroup++
		}
	}
	return total, ofGroup, cores
}

// manage keeps h connected until ctx ends: dial (with back-off), reconcile,
// poll every Interval until the connection fails, and again.
func (p *Provider) manage(ctx context.Context, h *host) {
	backoff := backoffMin
	for {
		p.mu.Lock()
		cc, hc := h.clientCfg, h.cfg
		p.mu.Unlock()
		ct, _, _ := p.settings()
		c, err := dial(ctx, hc, cc, ct)
		if ctx.Err() != nil {
			if c != nil {
				c.Close()
			}
			return
		}
		if err == nil {
			if err = p.connected(ctx, h, c); err != nil {
				c.Close()
			}
		}
		if err != nil {
			p.connFailed(h, err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, p.reconnectMax())
			continue
		}
		backoff = backoffMin
		err = p.pollLoop(ctx, h)
		c.Close()
		if ctx.Err() != nil {
			return
		}
		p.connLost(h, c, err)
	}
}

// connected reads the machine's facts over c, makes it h's connection and
// reconciles the host.
func (p *Provider) connected(ctx context.Context, h *host, c *gossh.Client) error {
	ct, _, _ := p.settings()
	sh, err := startShell(ctx, c, ct)
	if err != nil {
		return fmt.Errorf("ssh: %w", err)
	}
	out, err := sh.run(ctx, c, ct, script(factsScript))
	if err != nil {
		return fmt.Errorf("ssh: read CLK_TCK and PAGESIZE: %w", err)
	}
	facts, err := parseFacts(out)
	if err != nil {
		return fmt.Errorf("ssh: %w", err)
	}
	now := time.Now()
	p.mu.Lock()
	h.client, h.shell, h.facts, h.lastOK, h.since, h.lastErr = c, sh, facts, now, now, ""
	back, until := h.down, time.Time{}
	if back {
		h.down = false
		n := len(h.downs)
		h.heldOffUntil = now.Add(holdOff(n))
		p.log.Warn("host back after being down; held off from placement", "host", h.name, "until", h.heldOffUntil, "downs", n)
		until = h.heldOffUntil
	}
	p.markAttempted(h)
	p.mu.Unlock()
	if back {
		p.hostState(h.name, false, fmt.Sprintf("host %s is back; held off from placement until %s", h.name, until.UTC().Format(time.RFC3339)))
	}
	p.log.Info("connected", "host", h.name)
	if err := p.reconcile(ctx, h); err != nil {
		p.log.Warn("reconciling host failed", "host", h.name, "err", err)
	}
	if err := p.stopAbandoned(ctx, h); err != nil {
		p.log.Warn("stopping what failed launches started failed; asked again", "host", h.name, "in", owedEvery, "err", err)
	}
	p.pullAhead(ctx, h)
	return nil
}

// markAttempted notes the first connection attempt; p.mu is held.
func (p *Provider) markAttempted(h *host) {
	if !h.attempted {
		h.attempted = true
		close(h.first)
	}
}

func (p *Provider) connFailed(h *host, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h.lastErr == "" && !h.attempted {
		h.since = time.Now()
	}
	if h.lastErr != err.Error() {
		p.log.Warn("cannot connect", "host", h.name, "err", err)
	}
	h.lastErr = err.Error()
	p.markAttempted(h)
}

func (p *Provider) connLost(h *host, c *gossh.Client, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h.client == c {
		h.client, h.shell = nil, nil
		h.since = time.Now()
	}
	if err == nil {
		err = errors.New("connection closed")
	}
	h.lastErr = "ssh: " + err.Error()
	p.log.Warn("host unreachable", "host", h.name, "err", err)
}

// pollLoop polls h every Interval, rotating its logs every rotateEvery,
// until a poll fails, ctx ends or h is removed and empty.
func (p *Provider) pollLoop(ctx context.Context, h *host) error {
	t := time.NewTicker(p.opts.Interval)
	defer t.Stop()
	var rotated, owed time.Time
	for {
		if err := p.poll(ctx, h); err != nil {
			return err
		}
		if time.Since(owed) >= owedEvery {
			if err := p.stopOwed(ctx, h); err != nil {
				if errors.Is(err, provider.ErrHostDown) {
					return err
				}
				p.log.Warn("stopping what shoal owes the host failed; asked again", "host", h.name, "in", owedEvery, "err", err)
			}
			owed = time.Now()
		}
		if time.Since(rotated) >= rotateEvery {
			rotated = time.Now()
			if err := p.rotateLogs(ctx, h); err != nil {
				if errors.Is(err, provider.ErrHostDown) {
					return err
				}
				p.log.Warn("rotating instance logs failed", "host", h.name, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// poll reads every process's stat line on h in one command (the liveness
// check too): instances whose leader is gone, or is another process, are
// Done; the others get their group's usage.
func (p *Provider) poll(ctx context.Context, h *host) error {
	began := time.Now()
	out, err := p.sh(ctx, h, 0, script(pollScript))
	if err != nil {
		return err
	}
	p.polled(h, began, out)
	return nil
}

// polled applies a poll of h begun at began, out its stat lines.
func (p *Provider) polled(h *host, began time.Time, out []byte) {
	now := time.Now()
	stats := make(map[int]proc.Stat)
	type sum struct {
		ticks uint64
		rss   int64
	}
	groups := make(map[int]*sum)
	for line := range bytes.Lines(out) {
		st, err := proc.ParseStat(line)
		if err != nil {
			continue // a command name with a newline, say: not one of ours
		}
		stats[st.PID] = st
		g := groups[st.Pgid]
		if g == nil {
			g = &sum{}
			groups[st.Pgid] = g
		}
		g.ticks += st.Ticks
		g.rss += st.RSSPages
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	h.lastOK = now
	for _, in := range h.insts {
		if !in.verified {
			continue // reconcile decides
		}
		st, ok := stats[in.d.PID]
		if !ok && in.verifiedAt.After(began) {
			// Launched (or found) while the poll ran: the host listed
			// /proc before its process was there. Taken for an exit, it
			// was left running beside its replacement.
			continue
		}
		if !ok || st.Zombie || st.StartTicks != in.d.PIDStart {
			p.finishLocked(in, "exited (on host "+h.name+")")
			continue
		}
		g := groups[in.d.PID]
		if g == nil {
			// The leader moved itself to another group: count it alone.
			g = &sum{ticks: st.Ticks, rss: st.RSSPages}
		}
		in.setUsage(provider.Usage{
			CPUSeconds: float64(g.ticks) / float64(h.facts.clkTck),
			RSS:        g.rss * h.facts.pageSize,
			At:         now,
		})
	}
}

// finishLocked ends in's tracking with reason; p.mu is held.
func (p *Provider) finishLocked(in *instance, reason string) {
	if in.h.insts[in.d.Marker] == in {
		delete(in.h.insts, in.d.Marker)
	}
	in.finish(reason)
}

func (p *Provider) finish(in *instance, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finishLocked(in, reason)
}

// unreserve drops a failed start's reservation on h.
func (p *Provider) unreserve(h *host, name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(h.pending, name)
}

// watch evaluates, every Interval, the instances' checks and whether an
// unreachable host is down; it drops removed hosts once empty.
func (p *Provider) watch(ctx context.Context) {
	t := time.NewTicker(p.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.evaluate(time.Now())
	}
}

func (p *Provider) evaluate(now time.Time) {
	// Checks is the core's, called without p.mu. A pool's instance is out
	// of rotation: HAProxy does not check it, the pool does.
	p.mu.Lock()
	var insts []*instance
	passing := map[*instance]bool{}
	for _, h := range p.hosts {
		for _, in := range h.insts {
			if in.pool != "" {
				passing[in] = in.poolPassing
				continue
			}
			insts = append(insts, in)
		}
	}
	p.mu.Unlock()
	for _, in := range insts {
		if p.opts.Checks != nil {
			ok, known := p.opts.Checks(in.rec)
			passing[in] = ok && known
		}
	}

	var downs map[string]string // host → why, told after the unlock
	defer func() {
		for h, why := range downs {
			p.hostState(h, true, why)
		}
	}()
	p.mu.Lock()
	defer p.mu.Unlock()
	downAfter := p.cfg.HostDownAfter
	for name, h := range p.hosts {
		var failingSince time.Time // the latest: since when all have failed
		allFailing := true
		for _, in := range h.insts {
			switch {
			case passing[in]:
				in.failingSince = time.Time{}
			case in.failingSince.IsZero():
				in.failingSince = now
			}
			if in.failingSince.IsZero() {
				allFailing = false
			} else if in.failingSince.After(failingSince) {
				failingSince = in.failingSince
			}
		}
		if h.client == nil && h.attempted && !h.down {
			since := h.lastOK
			if since.IsZero() {
				since = h.since
			}
			if now.Sub(since) >= downAfter && allFailing && (len(h.insts) == 0 || now.Sub(failingSince) >= downAfter) {
				if downs == nil {
					downs = map[string]string{}
				}
				downs[h.name] = p.markDown(h, now, since, failingSince)
			}
		}
		if h.removed && len(h.insts) == 0 && len(h.pending) == 0 && len(h.abandoned) == 0 && h.inFlight == 0 {
			if h.cancel != nil {
				h.cancel()
			}
			delete(p.hosts, name)
			p.log.Info("removed host dropped: nothing of ours runs there", "host", name)
		}
	}
}

// markDown ends every instance on h: the groups replace them elsewhere.
// It returns why h is down. p.mu is held.
func (p *Provider) markDown(h *host, now, unreachableSince, failingSince time.Time) string {
	h.down, h.wasDown, h.since = true, true, now
	recent := h.downs[:0]
	for _, t := range h.downs {
		if now.Sub(t) < flapWindow {
			recent = append(recent, t)
		}
	}
	h.downs = append(recent, now)
	var reason string
	if len(h.insts) == 0 {
		reason = fmt.Sprintf("host %s down: %s; unreachable since %s", h.name, h.lastErr, unreachableSince.UTC().Format(time.RFC3339))
	} else {
		reason = fmt.Sprintf("host %s down: %s; checks failing since %s", h.name, h.lastErr, failingSince.UTC().Format(time.RFC3339))
	}
	p.log.Warn("host down", "host", h.name, "instances", len(h.insts), "reason", reason)
	for _, in := range h.insts {
		if in.pool == "" {
			// A pool's instance is not the group's: not offered back.
			h.lost[in.key()] = in.rec
		}
		p.finishLocked(in, reason)
	}
	return reason
}

// hostState tells Options.HostState, if set.
func (p *Provider) hostState(host string, down bool, reason string) {
	if p.opts.HostState != nil {
		p.opts.HostState(host, down, reason)
	}
}

// guard asks Options.Guard, if set.
func (p *Provider) guard(ctx context.Context) error {
	if p.opts.Guard == nil {
		return nil
	}
	return p.opts.Guard(ctx)
}

// marked is a process carrying our owner and host markers.
type marked struct {
	proc.Stat
	name string
	// pool is its SHOAL_POOL (see poolMarker), "" without one.
	pool string
}

func (m marked) key() procKey { return procKey{m.PID, m.StartTicks} }

// leader: an instance is the leader of its process group (its session).
func (m marked) leader() bool { return m.Pgid == m.PID && !m.Zombie }

// listMarked lists h's processes marked as ours and placed on h.
func (p *Provider) listMarked(ctx context.Context, h *host) ([]marked, error) {
	out, err := p.sh(ctx, h, 0, script(markedScript, p.owner, h.name))
	if err != nil {
		return nil, fmt.Errorf("list marked processes: %w", err)
	}
	var ms []marked
	for line := range strings.Lines(string(out)) {
		name, rest, ok := strings.Cut(line, "\t")
		if !ok || name == "" {
			continue
		}
		pool, stat, ok := strings.Cut(rest, "\t")
		if !ok {
			continue
		}
		st, err := proc.ParseStat([]byte(stat))
		if err != nil {
			continue
		}
		ms = append(ms, marked{Stat: st, name: name, pool: pool})
	}
	return ms, nil
}

// trackedLocked reports whether m is an instance p tracks on h or one
// being started there; p.mu is held.
func (p *Provider) trackedLocked(h *host, m marked) bool {
	if in := h.insts[m.name]; in != nil && in.key() == m.key() {
		return true
	}
	_, starting := h.pending[m.name]
	return starting
}

// nameLiveLocked reports whether an instance called name is tracked on any
// host; p.mu is held.
func (p *Provider) nameLiveLocked(name string) bool {
	for _, h := range p.hosts {
		if h.insts[name] != nil {
			return true
		}
	}
	return false
}

// reconcile makes what runs on h, just connected, agree with what p
// tracks (see host).
func (p *Provider) reconcile(ctx context.Context, h *host) error {
	ms, err := p.listMarked(ctx, h)
	if err != nil {
		return err
	}
	present := make(map[procKey]marked, len(ms))
	for _, m := range ms {
		present[m.key()] = m
	}
	// Stopping (or offering) what nobody tracks acts for the leader: a node
	// that does not lead (an HA standby, a deposed leader) leaves it
	// running, and keeps what it owes for its next connection.
	guardErr := p.guard(ctx)
	var stop []marked
	type offer struct {
		m   marked
		rec provider.Record
	}
	var offers []offer
	p.mu.Lock()
	for _, in := range h.insts {
		if in.verified {
			continue
		}
		if m, ok := present[in.key()]; ok && m.leader() && m.name == in.d.Marker {
			in.verify()
			continue
		}
		p.finishLocked(in, "gone while shoal was down")
	}
	if guardErr != nil {
		p.mu.Unlock()
		p.log.Info("instances nobody tracks on the host left running: this node does not lead", "host", h.name, "err", guardErr)
		return nil
	}
	wasDown, sweeping := h.wasDown, h.swept || h.sweepPending
	for _, m := range ms {
		if !m.leader() || p.trackedLocked(h, m) {
			continue
		}
		_, stopping := h.stopOnReturn[m.key()]
		rec, lost := h.lost[m.key()]
		switch {
		case stopping:
			stop = append(stop, m)
		case lost && !p.nameLiveLocked(m.name):
			offers = append(offers, offer{m, rec})
		case h.sweepKeep[m.key()]:
		case !wasDown && p.adoptPoolLocked(h, m):
		case sweeping || wasDown:
			stop = append(stop, m)
		}
	}
	clear(h.stopOnReturn)
	clear(h.lost)
	h.wasDown = false
	if h.sweepPending {
		h.sweepPending, h.swept = false, true
	}
	p.mu.Unlock()

	for _, o := range offers {
		if p.opts.Reclaim != nil && p.opts.Reclaim(ctx, o.rec) {
			p.log.Info("instance still running on a host back from down taken back", "instance", o.rec.Name, "host", h.name)
			continue
		}
		stop = append(stop, o.m)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, m := range stop {
		wg.Go(func() {
			p.log.Warn("stopping an instance nobody tracks", "instance", m.name, "host", h.name, "pid", m.PID)
			if err := p.stopProcess(ctx, h, m.key(), strayGrace); err != nil && !errors.Is(err, errAlreadyGone) {
				mu.Lock()
				errs = append(errs, fmt.Errorf("stop %s (pid %d): %w", m.name, m.PID, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// owedEvery is how often a connected host is asked again to stop what
// shoal owes it (stopOwed): often enough to end a leftover in seconds,
// seldom enough that a stop that hangs again does not hold up the polls.
const owedEvery = 5 * time.Second

// stopOwed stops, on h that answers, what shoal started there and could
// not stop when it tried: what failed launches may have started, and the
// instances whose Stop found the host unreachable (stopOnReturn), which a
// host that answers again without a reconnection (its stop command hung,
// its polls did not) would otherwise keep running untracked.
func (p *Provider) stopOwed(ctx context.Context, h *host) error {
	err := p.stopAbandoned(ctx, h)
	if errors.Is(err, provider.ErrHostDown) {
		return err
	}
	return errors.Join(err, p.retryStops(ctx, h))
}

// retryStops stops the process groups of stopOnReturn, as reconcile does
// when the host reconnects; a node that does not lead leaves them to its
// next connection, as reconcile does.
func (p *Provider) retryStops(ctx context.Context, h *host) error {
	p.mu.Lock()
	owed := maps.Clone(h.stopOnReturn)
	p.mu.Unlock()
	if len(owed) == 0 || p.guard(ctx) != nil {
		return nil
	}
	var errs []error
	for k, name := range owed {
		err := p.stopProcess(ctx, h, k, strayGrace)
		if err != nil && !errors.Is(err, errAlreadyGone) {
			if errors.Is(err, provider.ErrHostDown) {
				return err
			}
			errs = append(errs, fmt.Errorf("stop %s (pid %d): %w", name, k.pid, err))
			continue
		}
		p.mu.Lock()
		delete(h.stopOnReturn, k)
		p.mu.Unlock()
		if err == nil {
			p.log.Info("instance whose stop had failed stopped", "instance", name, "host", h.name, "pid", k.pid)
		}
	}
	return errors.Join(errs...)
}

// abandon notes that the launch of instance name on h failed after it may
// have started the process.
func (p *Provider) abandon(h *host, name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h.abandoned[name] = &abandonedLaunch{at: time.Now()}
}

// stopAbandoned stops what failed launches on h may have started: the
// process groups led by a process marked with one of their names that
// nothing tracks. A name stays noted (asked again every owedEvery while
// the host answers, and when it is back) while the host cannot be asked, a stop fails, a
// launch of it is still running there, or a new start of the name is
// under way (whose process is told apart from the failed one's only once
// it is tracked): what a failed launch started is never forgotten.
func (p *Provider) stopAbandoned(ctx context.Context, h *host) error {
	p.mu.Lock()
	names := maps.Clone(h.abandoned)
	p.mu.Unlock()
	if len(names) == 0 {
		return nil
	}
	ms, err := p.listMarked(ctx, h)
	if err != nil {
		return err
	}
	left := make(map[string]bool)
	var stop, others []marked
	p.mu.Lock()
	for _, m := range ms {
		if names[m.name] == nil {
			continue
		}
		if _, starting := h.pending[m.name]; starting {
			left[m.name] = true
			continue
		}
		if in := h.insts[m.name]; in != nil && (in.key() == m.key() || m.Pgid == in.d.PID) {
			continue // the instance of that name started since, and its processes
		}
		if m.leader() {
			stop = append(stop, m)
		} else {
			others = append(others, m)
		}
	}
	p.mu.Unlock()
	for _, m := range others {
		// Not in a group stopped now: the launch itself (or its child
		// before setsid), still running, which may yet start the process.
		if !slices.ContainsFunc(stop, func(l marked) bool { return l.PID == m.Pgid }) {
			left[m.name] = true
		}
	}
	var errs []error
	for _, m := range stop {
		p.log.Warn("stopping what a failed launch started", "instance", m.name, "host", h.name, "pid", m.PID, "failed", time.Since(names[m.name].at).Round(time.Second))
		if err := p.stopProcess(ctx, h, m.key(), strayGrace); err != nil && !errors.Is(err, errAlreadyGone) {
			left[m.name] = true
			errs = append(errs, fmt.Errorf("stop %s (pid %d): %w", m.name, m.PID, err))
		}
	}
	p.mu.Lock()
	for name, a := range names {
		if !left[name] && h.abandoned[name] == a {
			delete(h.abandoned, name)
		}
	}
	p.mu.Unlock()
	return errors.Join(errs...)
}

// Hosts reports every host's state, by name.
func (p *Provider) Hosts() []provider.HostStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	var out []provider.HostStatus
	for _, name := range slices.Sorted(maps.Keys(p.hosts)) {
		h := p.hosts[name]
		total, _, cores := h.load("")
		st := provider.HostStatus{
			Provider: p.name, Name: name, State: h.state(now), Since: h.since,
			Labels: maps.Clone(h.cfg.Labels), Instances: total, Cores: cores,
			CapacityInstances: h.cfg.Capacity.Instances, CapacityCores: h.cfg.Capacity.Cores,
			LastError: h.lastErr, Cordoned: p.cordoned(name),
		}
		if now.Before(h.heldOffUntil) {
			st.HeldOffUntil = h.heldOffUntil
		}
		out = append(out, st)
	}
	return out
}
