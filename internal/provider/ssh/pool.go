package ssh

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider"
)

// A group's running warm pool on the hosts (warm_pool.state: running):
// instances started ahead of need and health-checked by the provider, out
// of rotation (HAProxy does not know them). Start takes a warm one into
// service at once (the group adds it to HAProxy ready: Prechecked); the
// pool refills in the background. Its processes are instances in every
// other way: they hold a port and count toward their host's capacity,
// not toward the group's size. One loop (runPools) moves every member,
// each start or stop in a goroutine of its own. A member's life:
//
//	refill (fewer than size, a host with room)     a process carrying
//	      |                                        SHOAL_POOL=HASH PORT GROUP
//	      v                                        that nobody tracks (a shoal
//	+----------+ started +---------+ rise checks   killed, a scale-in's
//	| starting |-------->| booting |------------+  process): adopted, booting
//	+----------+         +---------+            v
//	  | fails: retried     |  ^  fall    +------+  Start takes it (template
//	  | after 1 s doubling |  +----------| warm |  current): an instance,
//	  | (no room: quietly) |   checks    +------+  put in service at once
//	  v                    | failing            |
//	(no member)            | for grace          | drifted (template), surplus
//	                       v                    v (size), pool removed
//	                  +----------+ <------------+
//	                  | deleting |  its process stopped; exited: dropped
//	                  +----------+
//
// A scale-in's Stop (reuse_on_scale_in, the pool's template, room in the
// pool) makes its process a member, booting, instead of stopping it.
type pool struct {
	group string
	cfg   config.WarmPool
	// tmpl and hash are what members start from; a Start with another
	// template moves them (the newest wins: a deploy's instances replace
	// the pool's members too).
	tmpl config.Template
	hash string
	// health and placement are the group's (SetWarmCheck).
	health    config.Health
	placement config.Placement
	members   map[string]*member // by marker (the process's SHOAL_INSTANCE)
	starting  int
	seq       int
	// failed counts the starts that failed in a row; none is tried
	// before retryAt (1 s doubling to a minute). refused is the last
	// placement refusal, logged once.
	failed  int
	retryAt time.Time
	refused string
}

type member struct {
	in            *instance
	hash          string
	state         string // a provider.WarmServer state
	since, joined time.Time
	passes, fails int
	busy          bool
}

// Member states, as provider.WarmServer shows them.
const (
	memberBooting  = "booting"
	memberWarm     = "warm"
	memberDeleting = "deleting"
)

// maxPoolBackoff bounds the wait after failed starts.
const maxPoolBackoff = time.Minute

var (
	_ provider.WarmPooler  = (*Provider)(nil)
	_ provider.WarmChecker = (*Provider)(nil)
)

// poolLocked is group's pool, made if need be; p.mu is held.
func (p *Provider) poolLocked(group string) *pool {
	if p.pools == nil {
		p.pools = map[string]*pool{}
	}
	pl := p.pools[group]
	if pl == nil {
		pl = &pool{group: group, members: map[string]*member{}, health: config.DefaultHealth}
		p.pools[group] = pl
	}
	return pl
}

// SetWarmCheck sets the health check and placement of group's pool (see
// provider.WarmChecker).
func (p *Provider) SetWarmCheck(group string, h config.Health, pl config.Placement) {
	p.mu.Lock()
	defer p.mu.Unlock()
	wp := p.poolLocked(group)
	wp.health, wp.placement = h, pl
}

// SetWarmPool sets group's pool (see provider.WarmPooler): before the
// first sweep (StopStrays) it only registers it, so that its processes
// are adopted rather than stopped as strays, and none is started twice.
func (p *Provider) SetWarmPool(group string, wp *config.WarmPool, tmpl config.Template) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl := p.pools[group]
	if wp == nil {
		if pl != nil {
			pl.cfg.Size = 0 // its members are stopped, then it goes
		}
		return
	}
	pl = p.poolLocked(group)
	pl.cfg = *wp
	pl.tmpl, pl.hash = tmpl, tmpl.Hash(group)
	p.pokePools()
}

// WarmPool lists group's pool instances, by name.
func (p *Provider) WarmPool(group string) []provider.WarmServer {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl := p.pools[group]
	if pl == nil {
		return nil
	}
	var out []provider.WarmServer
	for name, m := range pl.members {
		out = append(out, provider.WarmServer{Name: name, ID: m.in.rec.ID, State: m.state, Template: m.hash, Since: m.since, Joined: m.joined})
	}
	for range pl.starting {
		out = append(out, provider.WarmServer{Name: "(starting)", State: "creating", Template: pl.hash})
	}
	slices.SortFunc(out, func(a, b provider.WarmServer) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// WarmPoolLeft returns, once, the instances that left group's pool.
func (p *Provider) WarmPoolLeft(group string) []provider.WarmServer {
	p.mu.Lock()
	defer p.mu.Unlock()
	left := p.poolLeft[group]
	delete(p.poolLeft, group)
	return left
}

// leftPoolLocked drops m from pl, keeping its time there for
// WarmPoolLeft; p.mu is held.
func (p *Provider) leftPoolLocked(pl *pool, name string, m *member) {
	delete(pl.members, name)
	if p.poolLeft == nil {
		p.poolLeft = map[string][]provider.WarmServer{}
	}
	p.poolLeft[pl.group] = append(p.poolLeft[pl.group], provider.WarmServer{Name: name, ID: m.in.rec.ID, State: m.state,
		Template: m.hash, Since: m.since, Joined: m.joined, Left: time.Now()})
}

// EmptyWarmPool stops group's pool instances and returns once they are
// gone or ctx ends.
func (p *Provider) EmptyWarmPool(ctx context.Context, group string) error {
	p.mu.Lock()
	pl := p.pools[group]
	if pl == nil {
		p.mu.Unlock()
		return nil
	}
	pl.cfg.Size = 0
	p.pokePools()
	p.mu.Unlock()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		p.mu.Lock()
		n := len(pl.members) + pl.starting
		p.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("empty warm pool of %s: %d instances left: %w", group, n, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// poolMarker is the SHOAL_POOL of a process of group started from tmpl on
// port, "" while group has no pool: "HASH PORT GROUP", what a restarted
// shoal needs to take it back into the pool.
func (p *Provider) poolMarker(group string, tmpl config.Template, port int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pl := p.pools[group]; pl == nil || pl.cfg.Size == 0 {
		return ""
	}
	return tmpl.Hash(group) + " " + strconv.Itoa(port) + " " + group
}

// parsePoolMarker reads a SHOAL_POOL.
func parsePoolMarker(v string) (hash string, port int, group string, ok bool) {
	f := strings.SplitN(v, " ", 3)
	if len(f) != 3 || f[0] == "" || f[2] == "" {
		return "", 0, "", false
	}
	port, err := strconv.Atoi(f[1])
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, "", false
	}
	return f[0], port, f[2], true
}

// pokePools has the pool loop look now; p.mu is held.
func (p *Provider) pokePools() {
	select {
	case p.poolWake <- struct{}{}:
	default:
	}
}

// runPools tends the pools every Interval, and when poked, until ctx
// ends; it waits for the actions it started.
func (p *Provider) runPools(ctx context.Context) {
	t := time.NewTicker(p.opts.Interval)
	defer t.Stop()
	for {
		p.tendPools(ctx)
		select {
		case <-ctx.Done():
			p.poolWG.Wait()
			return
		case <-t.C:
		case <-p.poolWake:
		}
	}
}

// tendPools moves each pool's members one step: exited ones are dropped,
// drifted and surplus ones stopped, the others checked, and the pool
// refilled.
func (p *Provider) tendPools(ctx context.Context) {
	type probe struct {
		pl   *pool
		name string
		m    *member
		hc   config.Health
		addr string
	}
	var probes []probe
	p.mu.Lock()
	for _, pl := range p.pools {
		live := pl.starting
		var keep []string
		for name, m := range pl.members {
			select {
			case <-m.in.done:
				if m.state != memberDeleting {
					p.log.Warn("warm pool instance exited", "group", pl.group, "instance", name, "host", m.in.h.name, "reason", m.in.ExitReason())
				}
				p.leftPoolLocked(pl, name, m)
				continue
			default:
			}
			switch {
			case m.state == memberDeleting || m.busy:
				continue
			case m.hash != pl.hash:
				p.poolStopLocked(ctx, pl, name, m, "drifted: started from template "+m.hash+", the group's is "+pl.hash)
				continue
			case m.state == memberBooting && time.Since(m.since) > pl.health.Grace:
				p.poolStopLocked(ctx, pl, name, m, fmt.Sprintf("its check did not pass within health.grace %s", pl.health.Grace))
				continue
			}
			live++
			keep = append(keep, name)
		}
		// Surplus: booting ones first, then the newest.
		slices.SortFunc(keep, func(a, b string) int {
			ma, mb := pl.members[a], pl.members[b]
			if (ma.state == memberWarm) != (mb.state == memberWarm) {
				if ma.state == memberWarm {
					return 1
				}
				return -1
			}
			return mb.joined.Compare(ma.joined)
		})
		for _, name := range keep {
			if live <= pl.cfg.Size {
				break
			}
			p.poolStopLocked(ctx, pl, name, pl.members[name], fmt.Sprintf("surplus: the pool keeps %d", pl.cfg.Size))
			live--
		}
		for _, name := range keep {
			if m := pl.members[name]; m != nil && m.state != memberDeleting {
				probes = append(probes, probe{pl, name, m, pl.health, m.in.rec.Addr})
			}
		}
		// Before the first sweep the killed run's members are not adopted
		// yet: a refill would start them twice.
		for ; p.swept && live < pl.cfg.Size && !time.Now().Before(pl.retryAt); live++ {
			p.poolStartLocked(ctx, pl)
		}
		if pl.cfg.Size == 0 && len(pl.members) == 0 && pl.starting == 0 {
			delete(p.pools, pl.group)
		}
	}
	p.mu.Unlock()

	for _, pr := range probes {
		err := healthCheck(ctx, pr.hc, pr.addr)
		p.mu.Lock()
		m := pr.pl.members[pr.name]
		if m != pr.m || m.state == memberDeleting {
			p.mu.Unlock()
			continue
		}
		if err == nil {
			m.passes, m.fails = m.passes+1, 0
		} else {
			m.passes, m.fails = 0, m.fails+1
		}
		switch {
		case m.state == memberBooting && m.passes >= max(pr.hc.Rise, 1):
			m.state, m.since, m.in.poolPassing = memberWarm, time.Now(), true
			p.log.Info("warm pool instance ready", "group", pr.pl.group, "instance", pr.name, "host", m.in.h.name)
		case m.state == memberWarm && m.fails >= max(pr.hc.Fall, 1):
			m.state, m.since, m.in.poolPassing = memberBooting, time.Now(), false
			p.log.Warn("warm pool instance failing its check; out of the pool until it passes", "group", pr.pl.group, "instance", pr.name, "err", err)
		}
		p.mu.Unlock()
	}
}

// poolStartLocked starts one member of pl in the background; p.mu is
// held. Its name (GROUP-warm-N, N from the clock) is unique across runs.
func (p *Provider) poolStartLocked(ctx context.Context, pl *pool) {
	pl.starting++
	pl.seq++
	name := fmt.Sprintf("%s-warm-%s%d", pl.group, strconv.FormatInt(time.Now().UnixMilli(), 36), pl.seq)
	spec := provider.Spec{Group: pl.group, Name: name, Template: pl.tmpl, Placement: pl.placement}
	hash := pl.hash
	p.poolWG.Go(func() {
		in, err := p.start(ctx, spec, true)
		p.mu.Lock()
		defer p.mu.Unlock()
		pl.starting--
		switch {
		case errors.Is(err, errNoHost):
			// No room (the hosts full, the usual case): asked again at the
			// next look, which costs no command on a host.
		case err != nil:
			pl.failed++
			pl.retryAt = time.Now().Add(min(time.Second<<min(pl.failed-1, 6), maxPoolBackoff))
		}
		if err != nil {
			// A full set of hosts is the usual reason: said once.
			if why := err.Error(); why != pl.refused && ctx.Err() == nil {
				pl.refused = why
				p.log.Info("starting a warm pool instance failed; tried again later", "group", pl.group, "retry_at", pl.retryAt, "err", err)
			}
			return
		}
		pl.failed, pl.retryAt, pl.refused = 0, time.Time{}, ""
		pl.members[name] = &member{in: in, hash: hash, state: memberBooting, since: time.Now(), joined: time.Now()}
		p.pokePools()
	})
}

// poolStopLocked stops m's process in the background; p.mu is held. It
// stays a member, deleting, until its process is gone.
func (p *Provider) poolStopLocked(ctx context.Context, pl *pool, name string, m *member, why string) {
	p.log.Info("stopping warm pool instance", "group", pl.group, "instance", name, "host", m.in.h.name, "why", why)
	m.state, m.since, m.busy, m.in.poolPassing = memberDeleting, time.Now(), true, false
	p.poolWG.Go(func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.in.tmpl.StopTimeout+30*time.Second)
		err := m.in.Stop(sctx) // a host down: stopped when it is back
		cancel()
		if err != nil {
			p.log.Warn("stopping a warm pool instance failed", "group", pl.group, "instance", name, "err", err)
		}
		p.mu.Lock()
		m.busy = false
		p.pokePools()
		p.mu.Unlock()
	})
}

// takeWarm takes a warm (else booting) member of spec's group started
// from spec's template, on a host spec's placement allows, as spec's
// instance; nil when there is none (Start starts one). A member named as spec (a
// scale-in's process returned to the pool) is taken if warm, else
// stopped first: two processes never share a marker.
func (p *Provider) takeWarm(ctx context.Context, spec provider.Spec) *instance {
	hash := spec.Template.Hash(spec.Group)
	p.mu.Lock()
	pl := p.pools[spec.Group]
	if pl == nil || pl.cfg.Size == 0 {
		p.mu.Unlock()
		return nil
	}
	pl.placement = spec.Placement
	if pl.hash != hash {
		p.log.Info("warm pool follows the group's template", "group", spec.Group, "template", hash, "was", pl.hash)
		pl.tmpl, pl.hash = spec.Template, hash
	}
	now := time.Now()
	// A warm member, else one still booting: its process runs already,
	// and it holds a place a new start would not find on full hosts (the
	// group's health gate then waits for its checks).
	ok := func(m *member, state string) bool {
		return m.state == state && !m.busy && m.hash == hash && p.refusalIgnoringLoad(m.in.h, spec, now) == ""
	}
	name := ""
	for _, state := range []string{memberWarm, memberBooting} {
		if m := pl.members[spec.Name]; m != nil && ok(m, state) {
			name = spec.Name
			break
		}
		// Spread: the host with the fewest of the group's instances.
		best := -1
		for _, n := range slices.Sorted(maps.Keys(pl.members)) {
			m := pl.members[n]
			if !ok(m, state) {
				continue
			}
			if _, of, _ := m.in.h.load(spec.Group); best < 0 || of < best {
				best, name = of, n
			}
		}
		if name != "" {
			break
		}
	}
	p.pokePools() // refill
	if name == "" {
		clash := pl.members[spec.Name]
		p.mu.Unlock()
		if clash != nil {
			p.stopClash(ctx, pl, spec.Name, clash)
		}
		return nil
	}
	m := pl.members[name]
	p.leftPoolLocked(pl, name, m)
	old := m.in
	d := old.d
	d.Pool = spec.Group
	rec := d.record(spec.Name)
	rec.Group, rec.Index, rec.StartedAt = spec.Group, spec.Index, now
	in := p.newInstance(old.h, rec, d, spec.Template, true)
	in.placement = fmt.Sprintf("warm pool: %s, started on %s and health-checked out of rotation", name, old.h.name)
	in.prechecked = m.state == memberWarm
	// The process is the instance's now: its marker keeps its pool name.
	old.h.insts[d.Marker] = in
	p.mu.Unlock()
	p.log.Info("took a warm pool instance", "group", spec.Group, "instance", spec.Name, "process", name, "host", old.h.name, "pid", d.PID)
	return in
}

// stopClash stops member m named name, which is not warm, before Start
// starts an instance of that name.
func (p *Provider) stopClash(ctx context.Context, pl *pool, name string, m *member) {
	p.mu.Lock()
	if pl.members[name] != m || m.state == memberDeleting {
		p.mu.Unlock()
		return
	}
	m.state, m.busy = memberDeleting, true
	p.mu.Unlock()
	p.log.Info("stopping warm pool instance: an instance of its name starts", "group", pl.group, "instance", name)
	if err := m.in.Stop(ctx); err != nil {
		p.log.Warn("stopping a warm pool instance failed", "group", pl.group, "instance", name, "err", err)
	}
	p.mu.Lock()
	m.busy = false
	p.mu.Unlock()
}

// refusalIgnoringLoad is refusal without the capacity check: a member
// holds its place already. p.mu is held.
func (p *Provider) refusalIgnoringLoad(h *host, spec provider.Spec, now time.Time) string {
	s := spec
	s.Template.CPUs = 0
	why := p.refusal(h, s, now)
	if strings.HasPrefix(why, "capacity ") {
		return ""
	}
	return why
}

// returnToPool makes in's process a member of its group's pool instead
// of stopping it, if the pool takes servers back (reuse_on_scale_in), has
// room, and in runs the pool's template with its marker; it reports
// whether it did. Only a scale-in's Stop asks (provider.ForScaleIn).
func (p *Provider) returnToPool(in *instance) bool {
	p.mu.Lock()
	pl := p.pools[in.rec.Group]
	ok := pl != nil && pl.cfg.ReuseOnScaleIn && in.d.Pool == in.rec.Group && in.d.Container == "" &&
		in.tmpl.Hash(in.rec.Group) == pl.hash && in.h.insts[in.d.Marker] == in && pl.members[in.d.Marker] == nil
	if ok {
		n := pl.starting
		for _, m := range pl.members {
			if m.state != memberDeleting {
				n++
			}
		}
		ok = n < pl.cfg.Size
	}
	if !ok {
		p.mu.Unlock()
		return false
	}
	d := in.d
	rec := d.record(d.Marker)
	rec.Group, rec.StartedAt = in.rec.Group, in.rec.StartedAt
	m := p.newInstance(in.h, rec, d, in.tmpl, true)
	m.pool = in.rec.Group
	in.h.insts[d.Marker] = m
	pl.members[d.Marker] = &member{in: m, hash: pl.hash, state: memberBooting, since: time.Now(), joined: time.Now()}
	p.pokePools()
	p.mu.Unlock()
	p.log.Info("instance returned to the warm pool", "group", in.rec.Group, "instance", in.rec.Name, "host", in.h.name, "pid", d.PID)
	in.finish("returned to the warm pool")
	return true
}

// adoptPoolLocked makes m, a process on h that nobody tracks, a member
// of its group's pool if it carries the marker of a pool this provider
// keeps (a shoal killed while it waited, or a scale-in's process); it
// reports whether it did. A member of another template is adopted too,
// and then replaced (drift). p.mu is held.
func (p *Provider) adoptPoolLocked(h *host, m marked) bool {
	hash, port, group, ok := parsePoolMarker(m.pool)
	if !ok || !m.leader() || h.insts[m.name] != nil {
		return false
	}
	pl := p.pools[group]
	if pl == nil || pl.cfg.Size == 0 || pl.members[m.name] != nil {
		return false
	}
	d := data{Host: h.name, PID: m.PID, PIDStart: m.StartTicks, Port: port, Marker: m.name, Pool: group}
	rec := d.record(m.name)
	rec.Group = group
	in := p.newInstance(h, rec, d, pl.tmpl, true)
	in.pool = group
	h.insts[m.name] = in
	pl.members[m.name] = &member{in: in, hash: hash, state: memberBooting, since: time.Now(), joined: time.Now()}
	p.pokePools()
	p.log.Info("warm pool instance adopted", "group", group, "instance", m.name, "host", h.name, "pid", m.PID)
	return true
}

// healthCheck runs hc once against addr: an HTTP request or a TCP
// connect (with send/expect), as HAProxy would.
func healthCheck(ctx context.Context, hc config.Health, addr string) error {
	timeout := cmp.Or(hc.Timeout, time.Second)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if hc.Type == "tcp" {
		var dl net.Dialer
		c, err := dl.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		if dl, ok := ctx.Deadline(); ok {
			_ = c.SetDeadline(dl)
		}
		if hc.Send != "" {
			if _, err := io.WriteString(c, hc.Send); err != nil {
				return fmt.Errorf("send: %w", err)
			}
		}
		if hc.Expect == "" {
			return nil
		}
		buf := make([]byte, 0, 4096)
		for !strings.Contains(string(buf), hc.Expect) {
			if len(buf) == cap(buf) {
				return fmt.Errorf("expected %q, not in the first %d bytes", hc.Expect, len(buf))
			}
			n, err := c.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+n]
			if err != nil && !strings.Contains(string(buf), hc.Expect) {
				return fmt.Errorf("expected %q: %w", hc.Expect, err)
			}
		}
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, cmp.Or(hc.Method, http.MethodGet), "http://"+addr+cmp.Or(hc.Path, "/"), nil)
	if err != nil {
		return err
	}
	if hc.Host != "" {
		req.Host = hc.Host
	}
	tr := &http.Transport{DisableKeepAlives: true, Proxy: nil}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	if len(hc.Status) > 0 && !slices.ContainsFunc(hc.Status, func(r config.StatusRange) bool { return resp.StatusCode >= r.Min && resp.StatusCode <= r.Max }) {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	if hc.Body != "" && !strings.Contains(string(body), hc.Body) {
		return fmt.Errorf("body lacks %q", hc.Body)
	}
	if hc.BodyRegex != "" {
		re, err := regexp.Compile(hc.BodyRegex)
		if err != nil {
			return fmt.Errorf("body_regex: %w", err)
		}
		if !re.Match(body) {
			return errors.New("body does not match body_regex")
		}
	}
	return nil
}
