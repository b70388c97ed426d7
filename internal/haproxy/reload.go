package haproxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

// reloadTimeout bounds the wait for the new worker after the master's reload.
const reloadTimeout = 15 * time.Second

// Reload makes HAProxy run cfg. When the configuration HAProxy runs (Render's
// output and the servers' check keywords) is unchanged, only the registry's
// health settings are updated and HAProxy is left alone. Otherwise every registered server is
// written into the new configuration as a static line — HAProxy loses the
// servers added at runtime on a reload — checked with `haproxy -c`, and the
// master is told to reload: the new worker takes the listening sockets over
// from the old one, which finishes its requests (bounded by hard-stop-after).
// Servers not yet in service, or DOWN, are written disabled and gated again
// afterwards; draining ones with weight 0 and set to drain again. If the new
// worker does not come up, the old one keeps serving and Reload says why.
// It reports whether HAProxy was reloaded.
func (m *Manager) Reload(ctx context.Context, cfg *config.Config) (bool, error) {
	m.life.Lock()
	defer m.life.Unlock()
	text, err := render(cfg, m.paths, nil, m.hardStopFloor)
	if err != nil {
		return false, fmt.Errorf("render haproxy config: %w", err)
	}
	hash := configHash(text)

	m.mu.Lock()
	same := hash == m.hash && sameServerChecks(m.cfg, cfg)
	p, running := m.proc, m.up && m.supervisorDone != nil
	if same || !running {
		// Not running (stopped, or restarting after a crash): the next
		// start uses the new configuration.
		m.cfg, m.text, m.hash = cfg, text, hash
		m.setHealthLocked(cfg)
	}
	m.mu.Unlock()
	if same || !running {
		return false, nil
	}

	if err := m.replaceWorker(ctx, cfg, text, hash, p.PID()); err != nil {
		return false, err
	}
	return true, nil
}

// replaceWorker reloads the master with pid master into cfg (text and hash
// are Render's) and puts the registry's servers back in their states.
func (m *Manager) replaceWorker(ctx context.Context, cfg *config.Config, text, hash string, master int) error {
	m.reloadMu.Lock()
	down, err := m.reload(ctx, cfg, text, hash, master)
	m.reloadMu.Unlock()
	if err != nil {
		return err
	}
	// Servers that were DOWN come back behind the gate, as new ones do:
	// they take traffic again only after rise passing checks.
	for _, k := range down {
		m.regate(ctx, k)
	}
	// Gate again what was written disabled, drain again what was draining,
	// and catch anything that changed while the worker was replaced.
	m.sync(ctx, true)
	return nil
}

// reload does Reload's work with reloadMu held. It returns the registered
// servers that were ready but DOWN, which it wrote disabled.
func (m *Manager) reload(ctx context.Context, cfg *config.Config, text, hash string, master int) ([]serverKey, error) {
	m.mu.Lock()
	entries := make([]entry, 0, len(m.registry))
	for _, e := range m.registry {
		entries = append(entries, *e)
	}
	m.mu.Unlock()
	slices.SortFunc(entries, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.srv.Backend, b.srv.Backend), cmp.Compare(a.srv.Name, b.srv.Name))
	})
	groups := map[string]config.Group{}
	for _, g := range cfg.Groups {
		groups[g.Name] = g
	}
	// A server HAProxy has DOWN must not come back UP untested.
	down := map[serverKey]bool{}
	for b := range groups {
		sctx, cancel := context.WithTimeout(ctx, cmdTimeout)
		stats, err := m.client.Stats(sctx, b)
		cancel()
		if err != nil {
			continue // a new backend: no servers yet
		}
		for _, st := range stats {
			if !st.Status.CheckedUp() {
				down[serverKey{b, st.Name}] = true
			}
		}
	}
	servers := map[string][]string{}
	var wasDown []serverKey
	for _, e := range entries {
		g, ok := groups[e.srv.Backend]
		if !ok {
			continue // its group was removed: it is retired after the reload
		}
		s := e.srv.WithGroup(g)
		_, args, err := serverArgs(s)
		if err != nil {
			return nil, fmt.Errorf("reload haproxy: %w", err)
		}
		switch {
		case !e.ready:
			args += " disabled"
		case down[serverKey{s.Backend, s.Name}]:
			args += " disabled"
			wasDown = append(wasDown, serverKey{s.Backend, s.Name})
		case e.draining:
			args += " weight 0" // the last weight keyword wins
		}
		servers[s.Backend] = append(servers[s.Backend], s.Name+" "+args)
	}
	full, err := render(cfg, m.paths, servers, m.hardStopFloor)
	if err != nil {
		return nil, fmt.Errorf("reload haproxy: render config: %w", err)
	}
	bin, err := m.binary(ctx)
	if err != nil {
		return nil, err
	}
	next := m.paths.Config + ".next"
	if err := writeFileAtomic(next, []byte(full)); err != nil {
		return nil, fmt.Errorf("reload haproxy: write config: %w", err)
	}
	if out, err := checkConfig(ctx, bin, next, cmdTimeout); err != nil {
		_ = os.Remove(next)
		if errors.Is(err, errCheckTimeout) {
			return nil, fmt.Errorf("reload haproxy: checking the new configuration: %w: %s; haproxy keeps the old one", err, out)
		}
		return nil, fmt.Errorf("reload haproxy: the new configuration was refused (%w): %s; haproxy keeps the old one", err, out)
	}

	before, err := m.showProc(ctx)
	if err != nil {
		_ = os.Remove(next)
		return nil, fmt.Errorf("reload haproxy: %w", err)
	}
	m.mu.Lock()
	oldText := m.text
	m.mu.Unlock()
	if err := os.Rename(next, m.paths.Config); err != nil {
		_ = os.Remove(next)
		return nil, fmt.Errorf("reload haproxy: install config: %w", err)
	}
	logStart := fileSize(m.paths.LogFile)
	m.log.Info("reloading haproxy", "pid", master, "worker", before.current, "servers", len(entries))
	start := time.Now()
	worker, err := m.masterReload(ctx, before)
	if err != nil {
		// The master keeps the old worker; the file must say what runs, and
		// a restart after a crash must start what ran.
		_ = writeFileAtomic(m.paths.Config, []byte(oldText))
		if tail := logTail(m.paths.LogFile, logStart); tail != "" {
			err = fmt.Errorf("%w; %s says: %s", err, m.paths.LogFile, tail)
		}
		m.log.Error("haproxy reload failed; the old worker keeps serving", "pid", master, "worker", before.current, "err", err)
		return nil, fmt.Errorf("reload haproxy: %w (the old worker %d keeps serving)", err, before.current)
	}
	m.mu.Lock()
	m.cfg, m.text, m.hash = cfg, text, hash
	m.setHealthLocked(cfg)
	p := m.proc
	m.mu.Unlock()
	if p != nil {
		if err := m.writeRecord(p, hash); err != nil {
			m.log.Error("cannot record the reloaded haproxy's configuration; the next start of shoal replaces haproxy", "err", err)
		}
	}
	m.log.Info("haproxy reloaded", "pid", master, "worker", worker, "old_worker", before.current, "took", time.Since(start).Round(time.Millisecond))
	return wasDown, nil
}

// regate puts a server that was DOWN before a reload behind the health gate:
// out of rotation until rise checks pass.
func (m *Manager) regate(ctx context.Context, k serverKey) {
	unlock, err := m.servers.lock(ctx, k)
	if err != nil {
		return
	}
	defer unlock()
	m.mu.Lock()
	_, registered := m.registry[k]
	m.mu.Unlock()
	if !registered {
		return
	}
	id := k.backend + "/" + k.name
	m.reloadMu.RLock()
	err = m.run(ctx, "enable health "+id+"; enable server "+id+"; set server "+id+" health down", "")
	m.reloadMu.RUnlock()
	if err != nil {
		m.log.Error("cannot gate a server that was down before the reload", "backend", k.backend, "server", k.name, "err", err)
	}
}

// sameServerChecks reports whether every group in both configs has the same
// group-wide keywords on its server lines (interval, rise, fall, passive
// checks, proto): Render's output does not show them, a reloaded
// configuration does.
func sameServerChecks(old, cfg *config.Config) bool {
	before := map[string]string{}
	for _, g := range old.Groups {
		before[g.Name] = groupServerArgs(g)
	}
	for _, g := range cfg.Groups {
		if prev, ok := before[g.Name]; ok && prev != groupServerArgs(g) {
			return false
		}
	}
	return true
}

// groupServerArgs is what a group's config puts on each of its server lines.
func groupServerArgs(g config.Group) string {
	checks, _ := serverCheckArgs(g.Health)
	proto, _ := protoArgs(g.Proto)
	return checks + proto + limitArgs(Server{}.WithGroup(g))
}

// setHealthLocked gives registered servers their group's health settings,
// proto and limits from cfg, so that the next static line or re-add uses them.
// m.mu is held.
func (m *Manager) setHealthLocked(cfg *config.Config) {
	for _, g := range cfg.Groups {
		for k, e := range m.registry {
			if k.backend == g.Name {
				e.srv = e.srv.WithGroup(g)
			}
		}
	}
}

// masterReload sends "reload" to the master and waits until a new worker
// answers on the admin socket. It fails when the master counts a failed
// reload (the old worker then keeps serving) or nothing new comes up.
func (m *Manager) masterReload(ctx context.Context, before procList) (int, error) {
	rctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	_, err := m.master.Exec(rctx, "reload")
	cancel()
	if err != nil {
		return 0, fmt.Errorf("send reload to the master: %w", err)
	}
	ctx, cancel = context.WithTimeout(ctx, reloadTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last := errors.New("no answer yet")
	for {
		// The master's socket refuses connections for a moment after a reload.
		pl, err := m.showProc(ctx)
		switch {
		case err != nil:
			last = err
		case pl.failed > before.failed:
			return 0, fmt.Errorf("haproxy refused the new configuration (show proc: failed reloads %d → %d)", before.failed, pl.failed)
		case pl.current != 0 && pl.current != before.current:
			actx, acancel := context.WithTimeout(ctx, time.Second)
			out, err := m.client.Exec(actx, "show info")
			acancel()
			if err == nil && infoPID(out) == pl.current {
				return pl.current, nil
			}
			last = fmt.Errorf("new worker %d does not answer on %s yet", pl.current, m.paths.AdminSocket)
		default:
			last = errors.New("no new worker in show proc yet")
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("no new worker within %s after the reload: %v", reloadTimeout, last)
		case <-tick.C:
		}
	}
}

// procList is the master's "show proc": the current worker, the old ones
// still finishing their requests, and the count of failed reloads.
type procList struct {
	current int
	old     []int
	failed  int
}

func (m *Manager) showProc(ctx context.Context) (procList, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	out, err := m.master.Exec(ctx, "show proc")
	if err != nil {
		return procList{}, err
	}
	return parseShowProc(out)
}

// parseShowProc reads HAProxy 2.6's "show proc":
//
//	#<PID>   <type>   <reloads>       <uptime> <version>
//	15870    master   1 [failed: 0]   ...
//	# workers
//	16127    worker   0               ...
//	# old workers
//	15873    worker   1               ...
//
// Workers a reload replaced and that still finish requests are listed under
// "old workers". A worker's reload count is how many reloads it has
// outlived; of those under "workers" the current one has the lowest (a
// failed reload counts too, so it may not be 0).
func parseShowProc(out string) (procList, error) {
	var pl procList
	type worker struct{ pid, reloads int }
	var workers []worker
	section := ""
	master := false
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") {
			section = strings.TrimSpace(strings.TrimPrefix(line, "#"))
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		switch {
		case f[1] == "master":
			master = true
			if i := strings.Index(line, "[failed: "); i >= 0 {
				n, _, _ := strings.Cut(line[i+len("[failed: "):], "]")
				pl.failed, _ = strconv.Atoi(n)
			}
		case section == "workers" && f[1] == "worker":
			n, err := strconv.Atoi(f[2])
			if err != nil {
				return pl, fmt.Errorf("show proc: worker %d: reloads %q is not a number", pid, f[2])
			}
			workers = append(workers, worker{pid, n})
		case section == "old workers" && f[1] == "worker":
			pl.old = append(pl.old, pid)
		}
	}
	if !master {
		return pl, fmt.Errorf("show proc: no master line in %q", firstLine(out))
	}
	slices.SortStableFunc(workers, func(a, b worker) int { return cmp.Compare(a.reloads, b.reloads) })
	for i, w := range workers {
		if i == 0 {
			pl.current = w.pid
		} else {
			pl.old = append(pl.old, w.pid)
		}
	}
	return pl, nil
}

// infoPID returns the Pid line of "show info", or 0.
func infoPID(info string) int {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "Pid: "); ok {
			pid, _ := strconv.Atoi(strings.TrimSpace(v))
			return pid
		}
	}
	return 0
}
