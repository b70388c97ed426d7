package haproxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy/hapword"
)

// ErrNotRunning reports that HAProxy is stopped or being restarted.
var ErrNotRunning = errors.New("haproxy is not running")

const (
	pollInterval = 100 * time.Millisecond
	// streamWait bounds the wait for streams to leave a server in maintenance;
	// shutdownWait the wait after they were shut down.
	streamWait   = 10 * time.Second
	shutdownWait = 2 * time.Second
	// purgeDelay is how often HAProxy closes some of a server's idle
	// connections (pool-purge-delay); "del server" is refused while any
	// is left, so delRetry spans four purges and a margin (one was seen
	// take 6.3 s on a loaded machine, and beside make test's whole load
	// two purges left a server's last idle connections in place).
	purgeDelay = 5 * time.Second
	delRetry   = 4*purgeDelay + 2*time.Second
)

// AddServer registers s and, if HAProxy runs, adds it. Unless ready, the
// server is marked down until it passes Health.Rise checks, so a dead instance
// never takes a request; the caller polls Stats to see it UP. A server that
// already exists in HAProxy with the same address is left as it is.
func (m *Manager) AddServer(ctx context.Context, s Server, ready bool) error {
	s, err := m.check(s)
	if err != nil {
		return err
	}
	k := serverKey{s.Backend, s.Name}
	unlock, err := m.servers.lock(ctx, k)
	if err != nil {
		return err
	}
	defer unlock()

	m.mu.Lock()
	prev := m.registry[k]
	m.registry[k] = &entry{srv: s, ready: ready}
	up := m.up
	m.mu.Unlock()
	if !up {
		return nil
	}
	m.reloadMu.RLock()
	err = m.addToHAProxy(ctx, s, ready)
	m.reloadMu.RUnlock()
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		// HAProxy refuses this server: re-adding it after a restart would fail too.
		m.mu.Lock()
		if prev != nil {
			m.registry[k] = prev
		} else {
			delete(m.registry, k)
		}
		m.mu.Unlock()
	}
	return m.tolerateDown(ctx, []serverKey{k}, fmt.Sprintf("add server %s/%s", s.Backend, s.Name), err)
}

// MarkReady records that a server passed its checks, so that re-adding it
// after a restart of HAProxy skips the gate. It sends nothing to HAProxy.
func (m *Manager) MarkReady(backend, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.registry[serverKey{backend, name}]; e != nil {
		e.ready = true
	}
}

// Drain stops sending new requests to a registered server and waits until
// none are in flight, or timeout (which is logged, not an error: the caller
// removes the server either way). A sticky group's server keeps taking its
// clients' requests while it drains, and counts as drained only once they
// have stopped coming for stickyQuiet.
func (m *Manager) Drain(ctx context.Context, backend, name string, timeout time.Duration) error {
	k := serverKey{backend, name}
	e, up := m.registered(k, func(e *entry) { e.draining = true })
	if e == nil {
		return fmt.Errorf("drain server %q/%q: not registered", backend, name)
	}
	if !up {
		return nil
	}

	what := fmt.Sprintf("drain server %s/%s", backend, name)
	// A server of a group a reload removed has no backend in the current
	// worker, which sends it nothing: only an old worker may still have
	// requests on it, and idle waits for those.
	if m.configured(backend) {
		unlock, err := m.servers.lock(ctx, k)
		if err != nil {
			return err
		}
		m.reloadMu.RLock()
		err = m.run(ctx, "set server "+backend+"/"+name+" state drain", "")
		m.reloadMu.RUnlock()
		unlock()
		if isAPIError(err, msgNoSuchServer) {
			return nil
		}
		if err != nil {
			return m.tolerateDown(ctx, []serverKey{k}, what, err)
		}
	}

	start := time.Now()
	g, _ := m.group(backend)
	q := quiet{sticky: g.Sticky != nil, since: start, total: -1}
	for {
		m.reloadMu.RLock()
		idle, err := m.idle(ctx, backend, name)
		quiet := idle
		if err == nil && idle && q.sticky {
			quiet, err = m.quiet(ctx, backend, name, &q)
		}
		m.reloadMu.RUnlock()
		if err != nil {
			return m.tolerateDown(ctx, []serverKey{k}, what, err)
		}
		if quiet {
			m.log.Debug("server drained", "backend", backend, "server", name, "took", time.Since(start))
			return nil
		}
		if time.Since(start) >= timeout {
			if idle {
				m.log.Info("drain timed out with sticky clients still coming; they move to another server", "backend", backend, "server", name, "timeout", timeout)
			} else {
				m.log.Warn("drain timed out; requests in flight will be cut", "backend", backend, "server", name, "timeout", timeout)
			}
			return nil
		}
		if err := sleepCtx(ctx, pollInterval); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
}

// stickyQuiet is how long a draining server of a sticky group must go
// without a new request to count as drained: its clients come back between
// their requests, and while it drains they keep it (drain_timeout bounds
// the wait).
const stickyQuiet = 5 * time.Second

// quiet tracks when a draining server last took a request.
type quiet struct {
	sticky bool
	since  time.Time
	total  int64 // the server's stot when last seen; -1 before
}

// quiet reports whether a sticky group's draining server took no request
// for stickyQuiet; a server HAProxy no longer has is quiet.
func (m *Manager) quiet(ctx context.Context, backend, name string, q *quiet) (bool, error) {
	if !m.configured(backend) {
		return true, nil
	}
	st, found, err := m.stat(ctx, backend, name)
	if err != nil || !found {
		return err == nil, err
	}
	if st.Total != q.total {
		if q.total >= 0 {
			q.since = time.Now()
		}
		q.total = st.Total
	}
	return time.Since(q.since) >= stickyQuiet, nil
}

// registered changes the registered server k with set, under m.mu, and
// returns its entry (nil when it is not registered) and whether HAProxy is up.
func (m *Manager) registered(k serverKey, set func(*entry)) (e *entry, up bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e = m.registry[k]
	if e != nil {
		set(e)
	}
	return e, m.up
}

// Undrain puts a draining server back into rotation: its retirement could
// not go on (its cloud refused to delete it), and it still serves.
func (m *Manager) Undrain(ctx context.Context, backend, name string) error {
	k := serverKey{backend, name}
	e, up := m.registered(k, func(e *entry) { e.draining = false })
	if e == nil {
		return fmt.Errorf("undrain server %q/%q: not registered", backend, name)
	}
	if !up || !m.configured(backend) {
		return nil // a restart or sync adds it back as it is registered now
	}
	unlock, err := m.servers.lock(ctx, k)
	if err != nil {
		return err
	}
	defer unlock()
	m.reloadMu.RLock()
	defer m.reloadMu.RUnlock()
	err = m.run(ctx, "set server "+backend+"/"+name+" state ready", "")
	return m.tolerateDown(ctx, []serverKey{k}, fmt.Sprintf("undrain server %s/%s", backend, name), err)
}

// RemoveServer unregisters a server and deletes it from HAProxy once no
// stream refers to it; a server HAProxy does not have counts as removed.
func (m *Manager) RemoveServer(ctx context.Context, backend, name string) error {
	if !hapword.Name(backend) || !hapword.Name(name) {
		return fmt.Errorf("remove server %q/%q: invalid name", backend, name)
	}
	k := serverKey{backend, name}
	unlock, err := m.servers.lock(ctx, k)
	if err != nil {
		return err
	}
	defer unlock()

	m.mu.Lock()
	delete(m.registry, k)
	up := m.up
	m.mu.Unlock()
	if !up || !m.configured(backend) {
		return nil // not running, or its backend left HAProxy with its group
	}
	m.reloadMu.RLock()
	defer m.reloadMu.RUnlock()
	return m.tolerateDown(ctx, []serverKey{k}, fmt.Sprintf("remove server %s/%s", backend, name), m.removeFromHAProxy(ctx, backend, name))
}

// ShutdownSessions ends every request a server holds. A request that got no
// response is then retried on another server if its method allows it (see
// defaultsLines: the stream ends as an empty response, so the idempotent ones
// are retried and redispatched, the others get 502). The server stays where it
// is: a hung instance that HAProxy has DOWN lets go of the requests it holds
// at once, not when its process is stopped or timeout server ends them.
func (m *Manager) ShutdownSessions(ctx context.Context, backend, name string) error {
	if !hapword.Name(backend) || !hapword.Name(name) {
		return fmt.Errorf("shutdown sessions of %q/%q: invalid name", backend, name)
	}
	m.mu.Lock()
	up := m.up
	m.mu.Unlock()
	if !up {
		return nil
	}
	m.reloadMu.RLock()
	defer m.reloadMu.RUnlock()
	err := m.run(ctx, "shutdown sessions server "+backend+"/"+name, "")
	if isAPIError(err, msgNoSuchServer) {
		return nil
	}
	return m.tolerateDown(ctx, nil, fmt.Sprintf("shutdown sessions server %s/%s", backend, name), err)
}

// Stats returns backend's servers as HAProxy sees them, or ErrNotRunning.
func (m *Manager) Stats(ctx context.Context, backend string) ([]ServerStat, error) {
	if err := m.statsOf(backend); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	return m.client.Stats(ctx, backend)
}

// SharedStats is Stats as HAProxy saw it at most StatsMaxAge ago, from one
// answer for every backend (see serverStats): what the groups' health
// polls and `shoal status` read, many times a second each.
func (m *Manager) SharedStats(ctx context.Context, backend string) ([]ServerStat, error) {
	if err := m.statsOf(backend); err != nil {
		return nil, err
	}
	return m.stats.backend(ctx, backend, m.fetchShared)
}

// SharedBackendStat is BackendStat from the same answer as SharedStats.
func (m *Manager) SharedBackendStat(ctx context.Context, backend string) (ServerStat, error) {
	if err := m.statsOf(backend); err != nil {
		return ServerStat{}, err
	}
	s, ok, err := m.stats.backendLine(ctx, backend, m.fetchShared)
	if err != nil {
		return ServerStat{}, err
	}
	if !ok {
		return ServerStat{}, fmt.Errorf("haproxy stats: no backend %q", backend)
	}
	return s, nil
}

func (m *Manager) fetchShared(ctx context.Context) ([]ServerStat, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	return m.client.BackendStats(ctx)
}

// statsOf says why backend's stats cannot be read, if they cannot.
func (m *Manager) statsOf(backend string) error {
	m.mu.Lock()
	up := m.up
	m.mu.Unlock()
	if !up {
		return fmt.Errorf("haproxy stats for %s: %w", backend, ErrNotRunning)
	}
	if !hapword.Name(backend) {
		return fmt.Errorf("haproxy stats: invalid backend name %q", backend)
	}
	return nil
}

// check validates s, which ends up in runtime API command lines, and fills
// in defaults.
func (m *Manager) check(s Server) (Server, error) {
	if s.Weight == 0 {
		s.Weight = 100
	}
	fail := func(format string, args ...any) (Server, error) {
		return s, fmt.Errorf("server %q/%q: %s", s.Backend, s.Name, fmt.Sprintf(format, args...))
	}
	if !m.configured(s.Backend) {
		return fail("no group %q", s.Backend)
	}
	if !hapword.Name(s.Name) {
		return fail("name must be letters, digits, '-', '_', '.' or ':'")
	}
	if ap, err := netip.ParseAddrPort(s.Addr); err != nil || ap.Addr().Zone() != "" || ap.Port() == 0 {
		return fail("address %q must be an IP address and a port 1 to 65535", s.Addr)
	}
	if s.Weight != WeightOff && (s.Weight < 1 || s.Weight > 256) {
		return fail("weight %d must be 1 to 256 (or off)", s.Weight)
	}
	if s.MaxConn < 0 || s.SlowStart < 0 || s.SlowStart > maxTimer {
		return fail("maxconn %d must be >= 0 and slowstart %s from 0 to %s", s.MaxConn, s.SlowStart, maxTimer)
	}
	if _, err := serverCheckArgs(s.Health); err != nil {
		return fail("%v", err)
	}
	if _, err := protoArgs(s.Proto); err != nil {
		return fail("%v", err)
	}
	return s, nil
}

// configured reports whether the configuration HAProxy runs has backend. A
// group a reload removed leaves HAProxy with that reload, before its
// instances are retired: its servers stay registered until then.
func (m *Manager) configured(backend string) bool {
	_, ok := m.group(backend)
	return ok
}

// group returns the configured group of backend.
func (m *Manager) group(backend string) (config.Group, bool) {
	groups := m.config().Groups
	if i := slices.IndexFunc(groups, func(g config.Group) bool { return g.Name == backend }); i >= 0 {
		return groups[i], true
	}
	return config.Group{}, false
}

// addToHAProxy adds s and takes it out of maintenance. The caller holds the
// server's lock.
func (m *Manager) addToHAProxy(ctx context.Context, s Server, ready bool) error {
	id := s.Backend + "/" + s.Name
	addr, args, err := serverArgs(s)
	if err != nil {
		return err
	}
	add := "add server " + id + " " + args

	err = m.run(ctx, add, msgServerAdded)
	// The id is checked before the name: a server that exists is refused
	// for its id, "custom id N already used at ... ('server NAME')".
	if isAPIError(err, msgAlreadyExists) || isAPIError(err, msgIDUsed) && isAPIError(err, "('server "+s.Name+"')") {
		st, found, serr := m.stat(ctx, s.Backend, s.Name)
		switch {
		case serr != nil:
			return serr
		case !found:
			return err
		case sameAddr(st.Addr, addr) && !st.Status.InMaint():
			return nil
		case sameAddr(st.Addr, addr):
			// Added earlier but never enabled: finish the job below.
		default:
			m.log.Info("replacing server with a new address", "backend", s.Backend, "server", s.Name, "old", st.Addr, "new", addr)
			if err := m.removeFromHAProxy(ctx, s.Backend, s.Name); err != nil {
				return err
			}
			if err := m.run(ctx, add, msgServerAdded); err != nil {
				return err
			}
		}
	} else if err != nil {
		return err
	}

	// A new server is in maintenance with checks off, and leaving maintenance
	// counts as UP before the first check. One line, so no request can reach
	// it between "enable server" and "health down".
	enable := "enable health " + id + "; enable server " + id
	if !ready {
		enable += "; set server " + id + " health down"
	}
	if g, ok := m.group(s.Backend); ok {
		enable += stickyCommand(g)
	}
	return m.run(ctx, enable, "")
}

// serverArgs returns s's address and the words that follow "server NAME" on
// an "add server" line or a static server line in the configuration.
func serverArgs(s Server) (netip.AddrPort, string, error) {
	addr, err := netip.ParseAddrPort(s.Addr)
	if err != nil {
		return netip.AddrPort{}, "", fmt.Errorf("server %s/%s: %w", s.Backend, s.Name, err)
	}
	// default-server does not apply to dynamic servers: every setting goes here.
	checkArgs, err := serverCheckArgs(s.Health)
	if err != nil {
		return addr, "", fmt.Errorf("server %s/%s: %w", s.Backend, s.Name, err)
	}
	proto, err := protoArgs(s.Proto)
	if err != nil {
		return addr, "", fmt.Errorf("server %s/%s: %w", s.Backend, s.Name, err)
	}
	weight := s.Weight
	switch weight {
	case 0:
		weight = 100
	case WeightOff:
		weight = 0
	}
	// HAProxy 2.6 gives dynamic servers no idle-connection pool (static ones get
	// these values by default): without them every request opens a new backend
	// connection and throughput drops to about 0.45x.
	return addr, addr.String() + " id " + strconv.Itoa(serverID(s.Name)) + checkArgs + proto + limitArgs(s) + " weight " + strconv.Itoa(weight) + " pool-max-conn -1 pool-purge-delay " + ms(purgeDelay), nil
}

// serverID is a server's HAProxy id, derived from its name. A consistent
// hash places servers on its ring by id, and HAProxy 2.6 numbers dynamic
// servers so that they share positions: with four added at runtime, two got
// every key (measured with balance uri). An id from the name also keeps a
// server's keys after a reload or restart. Two names of a backend that hash
// alike (about 2 in a million for 100 servers) make the second "add server"
// fail, as any refused server does.
func serverID(name string) int {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int(h.Sum32()%(1<<31-1)) + 1
}

// removeFromHAProxy puts a server in maintenance and deletes it once no
// stream refers to it: deleting a server that streams still point to crashes
// HAProxy 2.6. The caller holds the server's lock.
func (m *Manager) removeFromHAProxy(ctx context.Context, backend, name string) error {
	id := backend + "/" + name
	err := m.run(ctx, "set server "+id+" state maint", "")
	if isAPIError(err, msgNoSuchServer) {
		return nil
	}
	if err != nil {
		return err
	}
	n, err := m.waitStreams(ctx, backend, name, streamWait)
	if err != nil {
		return err
	}
	if n > 0 {
		m.log.Warn("server still has streams after maintenance; shutting them down", "backend", backend, "server", name, "streams", n)
		if err := m.run(ctx, "shutdown sessions server "+id, ""); err != nil {
			return err
		}
		if n, err = m.waitStreams(ctx, backend, name, shutdownWait); err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("delete server %s: %d streams still attached; left in maintenance", id, n)
		}
	}

	deadline := time.Now().Add(delRetry)
	for {
		err := m.run(ctx, "del server "+id, msgServerDeleted)
		if err == nil || isAPIError(err, msgNoSuchServer) {
			return nil
		}
		if !isAPIError(err, msgStillInUse) || time.Now().After(deadline) {
			return err
		}
		if err := sleepCtx(ctx, pollInterval); err != nil {
			return fmt.Errorf("delete server %s: %w", id, err)
		}
		// The connections HAProxy still counted may have had streams.
		if n, err := m.waitStreams(ctx, backend, name, time.Until(deadline)); err != nil {
			return err
		} else if n > 0 {
			return fmt.Errorf("delete server %s: %d streams still attached; left in maintenance", id, n)
		}
	}
}

// waitStreams polls until no stream refers to the server or limit has passed,
// and returns the last count.
func (m *Manager) waitStreams(ctx context.Context, backend, name string, limit time.Duration) (int, error) {
	deadline := time.Now().Add(limit)
	for {
		cctx, cancel := context.WithTimeout(ctx, cmdTimeout)
		n, err := m.client.StreamsOn(cctx, backend, name)
		cancel()
		if err != nil || n == 0 || time.Now().After(deadline) {
			return n, err
		}
		if err := sleepCtx(ctx, pollInterval); err != nil {
			return n, fmt.Errorf("wait for streams on %s/%s: %w", backend, name, err)
		}
	}
}

// idle reports whether a server has neither sessions nor streams; a server
// HAProxy no longer has is idle. The current worker's counts do not cover
// requests an old worker (one a reload replaced) still serves, so each old
// worker is asked too. A server whose backend left HAProxy with its group
// has only old workers' requests.
func (m *Manager) idle(ctx context.Context, backend, name string) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	if m.configured(backend) {
		st, found, err := m.stat(ctx, backend, name)
		if err != nil || !found || st.Sessions > 0 {
			return err == nil && !found, err
		}
		n, err := m.client.StreamsOn(cctx, backend, name)
		if err != nil || n > 0 {
			return false, err
		}
	}
	procs, err := m.showProc(cctx)
	if err != nil {
		return false, err
	}
	for _, pid := range procs.old {
		if busy, err := m.busyOn(cctx, pid, backend, name); err != nil || busy {
			return false, err
		}
	}
	return true, nil
}

// busyOn reports whether the old worker pid has sessions or streams on a
// server. An old worker lives until its last connection closes, idle
// keep-alive ones included (measured: 10 s, timeout http-keep-alive, after
// a request in flight at the reload ended), so only what it still has on
// the server counts. One that has exited, or that never had the backend,
// has nothing on it.
//
// Right after the reload that made it old, and as it exits, an old worker
// may answer nothing through the master: that is asked again until it
// answers or is no longer an old worker.
func (m *Manager) busyOn(ctx context.Context, pid int, backend, name string) (bool, error) {
	c := &Client{Socket: m.paths.MasterSocket, Process: pid}
	gone := func(err error) bool {
		return errors.Is(err, errWorkerGone) || strings.Contains(err.Error(), msgNoProcess) || strings.Contains(err.Error(), msgNoSuchProxy)
	}
	var stats []ServerStat
	err := m.askOld(ctx, pid, func() (err error) {
		stats, err = c.Stats(ctx, backend)
		return err
	})
	if err != nil {
		if gone(err) {
			return false, nil
		}
		return false, fmt.Errorf("old worker %d: %w", pid, err)
	}
	i := slices.IndexFunc(stats, func(s ServerStat) bool { return s.Name == name })
	if i < 0 {
		return false, nil
	}
	if stats[i].Sessions > 0 {
		return true, nil
	}
	var n int
	err = m.askOld(ctx, pid, func() (err error) {
		n, err = c.StreamsOn(ctx, backend, name)
		return err
	})
	if err != nil {
		if gone(err) {
			return false, nil
		}
		return false, fmt.Errorf("old worker %d: %w", pid, err)
	}
	return n > 0, nil
}

// errWorkerGone is an old worker that left "show proc" while it was asked.
var errWorkerGone = errors.New("old worker exited")

// askOld runs ask, a command to the old worker pid, again while it gets an
// empty answer and the worker is still listed, until ctx ends.
func (m *Manager) askOld(ctx context.Context, pid int, ask func() error) error {
	for {
		err := ask()
		if !errors.Is(err, errEmptyAnswer) {
			return err
		}
		if procs, perr := m.showProc(ctx); perr == nil && !slices.Contains(procs.old, pid) {
			return errWorkerGone
		}
		if sleepCtx(ctx, pollInterval) != nil {
			return err
		}
	}
}

func (m *Manager) stat(ctx context.Context, backend, name string) (ServerStat, bool, error) {
	cctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	stats, err := m.client.Stats(cctx, backend)
	if err != nil {
		return ServerStat{}, false, err
	}
	i := slices.IndexFunc(stats, func(s ServerStat) bool { return s.Name == name })
	if i < 0 {
		return ServerStat{}, false, nil
	}
	return stats[i], true, nil
}

// run sends one command line with a bounded wait and checks the answer.
// Every change to a server goes through it, so the next Stats sees it.
func (m *Manager) run(ctx context.Context, cmd, want string) error {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	defer m.stats.forget()
	return m.client.expect(ctx, cmd, want)
}

// sync makes HAProxy's servers match the registry: it adds what is missing
// and, on an adopted HAProxy, removes what is not registered.
func (m *Manager) sync(ctx context.Context, adopted bool) {
	if adopted {
		m.removeUnregistered(ctx)
	}
	m.mu.Lock()
	keys := make([]serverKey, 0, len(m.registry))
	for k := range m.registry {
		keys = append(keys, k)
	}
	m.mu.Unlock()
	slices.SortFunc(keys, func(a, b serverKey) int {
		return cmp.Or(cmp.Compare(a.backend, b.backend), cmp.Compare(a.name, b.name))
	})
	for _, k := range keys {
		if ctx.Err() != nil {
			return
		}
		m.syncServer(ctx, k)
	}
}

func (m *Manager) syncServer(ctx context.Context, k serverKey) {
	unlock, err := m.servers.lock(ctx, k)
	if err != nil {
		return
	}
	defer unlock()
	m.mu.Lock()
	e, ok := m.registry[k]
	var cur entry
	if ok {
		cur = *e
	}
	up := m.up
	m.mu.Unlock()
	if !ok || !up {
		return // removed meanwhile, or HAProxy died again: the next sync covers it
	}
	if !m.configured(k.backend) {
		return // its group was removed: the backend is gone, the server is retiring
	}
	m.reloadMu.RLock()
	err = m.addToHAProxy(ctx, cur.srv, cur.ready)
	if err == nil && cur.draining {
		err = m.run(ctx, "set server "+k.backend+"/"+k.name+" state drain", "")
	}
	m.reloadMu.RUnlock()
	if err != nil {
		m.log.Error("cannot restore server in haproxy", "backend", k.backend, "server", k.name, "err", err)
	}
}

// removeUnregistered removes the servers an adopted HAProxy has that the
// registry does not.
func (m *Manager) removeUnregistered(ctx context.Context) {
	for _, g := range m.config().Groups {
		cctx, cancel := context.WithTimeout(ctx, cmdTimeout)
		stats, err := m.client.Stats(cctx, g.Name)
		cancel()
		if err != nil {
			m.log.Error("cannot list servers of adopted haproxy", "backend", g.Name, "err", err)
			continue
		}
		for _, st := range stats {
			k := serverKey{g.Name, st.Name}
			unlock, err := m.servers.lock(ctx, k)
			if err != nil {
				return
			}
			m.mu.Lock()
			_, registered := m.registry[k]
			m.mu.Unlock()
			if !registered {
				m.log.Info("removing unregistered server from haproxy", "backend", g.Name, "server", st.Name, "addr", st.Addr)
				m.reloadMu.RLock()
				if err := m.removeFromHAProxy(ctx, g.Name, st.Name); err != nil {
					m.log.Error("cannot remove unregistered server", "backend", g.Name, "server", st.Name, "err", err)
				}
				m.reloadMu.RUnlock()
			}
			unlock()
		}
	}
}

func sameAddr(haproxyAddr string, want netip.AddrPort) bool {
	got, err := netip.ParseAddrPort(haproxyAddr)
	return err == nil && got == want
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
