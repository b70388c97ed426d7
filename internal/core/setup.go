package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/accesslog"
	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/certstore"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/event"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/ha"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/jobrun"
	"github.com/shoal-lb/shoal/internal/notify"
	"github.com/shoal-lb/shoal/internal/promexp"
	"github.com/shoal-lb/shoal/internal/provider/local"
	"github.com/shoal-lb/shoal/internal/store"
)

// serving is one run of ServeOptions: what its start-up steps produced, for
// the later steps, and the stops they registered.
type serving struct {
	ctx  context.Context
	cfg  *config.Config
	log  *slog.Logger
	opts Options
	// stops run in reverse order when ServeOptions returns.
	stops []func()

	st      *store.Store
	nt      *notify.Notifier
	ha      *ha.Node // nil unless cfg.HA
	shared  sharedStore
	events  eventRecorder
	stopVIP func()
	reader  *accesslog.Reader // nil when the access log is off
	lb      *haproxy.Manager
	certs   *certstore.Store
	local   *local.Provider
	provs   *providers
	reg     *registry
	jm      *jobrun.Manager
	met     *promexp.Metrics
	auto    *autoscaler
	acme    *acmeRunner
	// c exists from the start, so that its reload lock does; setupControl
	// fills it in.
	c           *core
	apiOpts     []api.Option
	srvCtx      context.Context
	stopServers context.CancelCauseFunc // nil until setupControl: nothing serves yet
	servers     *sync.WaitGroup
	// keep is decided when serving ends: HAProxy and the instances are left
	// serving for the next run to adopt.
	keep bool
}

// onStop registers f to run at shutdown, before what earlier steps registered.
func (s *serving) onStop(f func()) { s.stops = append(s.stops, f) }

func (s *serving) stopAll() {
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
}

// locked runs f under the reload lock: a reload (or an HA takeover) in
// progress finishes first, as it may be starting or retiring groups.
func (s *serving) locked(f func()) {
	s.c.reloadMu.Lock()
	defer s.c.reloadMu.Unlock()
	f()
}

// setupStateDir creates the state directory and locks it: one core per
// state_dir.
func (s *serving) setupStateDir() error {
	if err := os.MkdirAll(filepath.Join(s.cfg.StateDir, "logs"), 0o700); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	unlock, err := lockStateDir(s.cfg.StateDir)
	if err != nil {
		return err
	}
	s.onStop(unlock)
	return nil
}

func (s *serving) setupStore() error {
	st, err := store.Open(filepath.Join(s.cfg.StateDir, "shoal.db"))
	if err != nil {
		return err
	}
	s.st = st
	s.onStop(func() { st.Close() })
	return nil
}

// setupNotify delivers notifications from the store's queue until the
// store closes (the delivery stops first).
func (s *serving) setupNotify() error {
	nt, err := notify.New(s.cfg.Notify, s.st, s.log.With("component", "notify"))
	if err != nil {
		return err
	}
	s.nt = nt
	s.st.SetRouter(nt.Route)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { nt.Run(ctx) })
	s.onStop(func() {
		cancel()
		wg.Wait()
	})
	return nil
}

// setupHA joins an HA node to the pair before anything acts: its groups'
// state is the pair's, in etcd (see package ha). What happens to this node
// (HAProxy, hosts, certificates, DNS) is recorded where every node of the
// pair lists it.
func (s *serving) setupHA() error {
	s.shared, s.events = s.st, s.st
	if s.cfg.HA == nil {
		return nil
	}
	node, err := ha.Join(s.ctx, s.cfg, s.st, s.log)
	if err != nil {
		return err
	}
	s.ha = node
	s.onStop(node.Close)
	s.shared, s.events = node.Store(), node.Events()
	return nil
}

// setupVIP starts keepalived before HAProxy, so that a VIP it cannot take
// (no such interface) refuses the start with nothing left running; its
// health check keeps it from the address until this core answers. stopVIP
// hands the address over first thing at shutdown (serve), while this node's
// HAProxy still serves what reaches it.
func (s *serving) setupVIP() error {
	s.stopVIP = func() {}
	if s.ha == nil {
		return nil
	}
	stop, err := s.ha.StartVIP(s.ctx)
	if err != nil {
		return err
	}
	s.stopVIP = sync.OnceFunc(stop)
	s.onStop(s.stopVIP)
	return nil
}

// setupAccessLog has the access log reader up before HAProxy can send to
// it; it stops after HAProxy.
func (s *serving) setupAccessLog() error {
	if s.cfg.AccessLog.Sample <= 0 {
		return nil
	}
	r, stop, err := startAccessLog(s.cfg, s.log)
	if err != nil {
		return err
	}
	s.reader = r
	s.onStop(stop)
	logAccessLog(s.log, s.cfg)
	return nil
}

// logAccessLog says whether HAProxy logs requests, and what for, when the
// config left that to what reads the log.
func logAccessLog(log *slog.Logger, cfg *config.Config) {
	if !cfg.AccessLog.WhenNeeded {
		return
	}
	if r := cfg.LatencyReaders(); len(r) > 0 {
		log.Info("access log on: read for latency", "by", strings.Join(r, ", "))
		return
	}
	log.Info("access log off: nothing reads latency (access_log.sample: auto keeps it on)")
}

// setupHAProxy builds HAProxy's manager (startHAProxy starts it) and writes
// the certificates' files, which HAProxy reads when it starts.
func (s *serving) setupHAProxy() error {
	s.lb = haproxy.NewManager(s.cfg, s.log)
	s.lb.OnRestart(func(reason string) {
		d := event.Record("", event.HAProxyRestarted, time.Now(), "haproxy", reason)
		if err := s.events.InsertDecision(context.Background(), &d); err != nil {
			s.log.Warn("recording the restart of HAProxy failed", "err", err)
		}
	})
	s.certs = certstore.New(s.cfg.StateDir, s.lb, s.log)
	if err := s.certs.Write(s.cfg.Frontends); err != nil {
		return fmt.Errorf("tls certificates: %w", err)
	}
	return nil
}

// setupLocalProvider builds the local provider; instances write their logs
// directly, shoal only rotates and expires them.
func (s *serving) setupLocalProvider() error {
	s.local = local.New(s.cfg.StateDir, s.log.With("component", "provider"))
	if s.cfg.HA != nil {
		// The pair's local instances are the pair's, whichever node started them.
		s.local.MarkAs(s.cfg.HA.Owner())
	}
	for _, g := range s.cfg.Groups {
		if g.Provider == config.ProviderLocal && g.Template.IsContainer() {
			// Where a crashed shoal may have left containers it never recorded.
			s.local.UseRuntimes(g.Template.Runtime)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.local.MaintainLogs(ctx, s.cfg.InstanceLogs) })
	s.onStop(func() {
		cancel()
		wg.Wait()
	})
	return nil
}

// setupProviders connects the ssh providers before the groups adopt their
// instances; they stop after the groups' reconcilers, which stop instances
// through them.
func (s *serving) setupProviders() error {
	provs, err := newProviders(s.cfg, s.local, s.log)
	if err != nil {
		return err
	}
	provs.st, provs.fence = s.events, s.shared
	if err := provs.cordons.load(s.ctx, s.shared); err != nil {
		return err
	}
	provs.start()
	s.provs = provs
	s.onStop(provs.stop)
	return nil
}

// setupGroups builds the groups and the job manager. A single node adopts
// what an earlier run left; a standby adopts nothing (the leader restores on
// takeover) and its job manager only reads.
func (s *serving) setupGroups() error {
	var (
		groups []*group.Group
		err    error
	)
	if s.ha == nil {
		groups, err = restore(s.ctx, s.cfg, s.st, s.lb, s.provs, s.log)
	} else {
		groups, err = openGroups(s.ctx, s.cfg, s.shared, s.lb, s.provs, s.log)
	}
	if err != nil {
		return err
	}
	s.reg = newRegistry(groups)
	s.reg.standby.Store(s.ha != nil)
	s.provs.groups.Store(s.reg)
	if s.ha != nil {
		s.jm = jobrun.NewStandbyManager(s.reg, s.shared, s.log.With("component", "jobs"))
	} else if s.jm, err = jobrun.NewManager(s.ctx, s.reg, s.st, s.log.With("component", "jobs")); err != nil {
		return err
	}
	// Set before startGroups (or an HA node's lead) runs the groups' loops:
	// recycling runs only where the groups run, on the leader.
	s.c.replacer = jobReplacer{jm: s.jm, source: "host-drain"}
	s.reg.replacer = jobReplacer{jm: s.jm, source: "recycle"}
	k := &consolidator{groups: s.reg.All, provs: s.provs, rep: jobReplacer{jm: s.jm, source: "consolidation"},
		st: s.st, log: s.log.With("component", "consolidation")}
	s.reg.consolidate = k.loop
	if s.ha != nil {
		return nil
	}
	// stopGroups closes it on a normal stop; this closes it (again, which
	// is harmless) when a later step fails before the groups started.
	s.onStop(s.jm.Close)
	return nil
}

// setupMetrics builds the /metrics registry over the groups, HAProxy, the
// providers' cloud calls, the certificates, notifications, the access log
// and the jobs.
// MetricCollectors lists the same collectors for the metrics reference.
func (s *serving) setupMetrics() error {
	s.met = promexp.New(s.reg, s.lb.Restarts)
	s.met.SetHostSource(s.provs.Hosts)
	s.met.Registry().MustRegister(cloudCalls{s.provs}, certExpiry{s.certs}, routeDenials{s.lb})
	s.met.Registry().MustRegister(s.nt.Collectors()...)
	if s.reader != nil {
		s.met.Registry().MustRegister(accessLogLines{s.reader})
	}
	s.jm.Observe(s.met.ObserveJob)
	return nil
}

func (s *serving) setupGSLB() error {
	if s.cfg.GSLB == nil {
		return nil
	}
	stop, err := startGSLB(s.cfg.GSLB, s.met, s.events, s.log)
	if err != nil {
		return err
	}
	s.onStop(stop)
	return nil
}

// startHAProxy opens the metrics history, then starts (or adopts) HAProxy
// and keeps its certificates. HAProxy's stop is the groups' (startGroups).
func (s *serving) startHAProxy() error {
	auto, err := openAutoscaler(s.cfg, s.reg, s.lb, s.jm, s.log)
	if err != nil {
		return err
	}
	if err := s.lb.Start(s.ctx); err != nil {
		auto.close()
		return err
	}
	s.auto = auto
	// An adopted HAProxy may hold other certificates than the files.
	if err := s.certs.Push(s.ctx); err != nil {
		s.log.Error("tls certificates not brought in line with the files", "err", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.certs.Run(ctx, certExpiring(s.events, s.log)) })
	s.onStop(func() {
		cancel()
		wg.Wait()
	})
	return nil
}

// startGroups runs the collection and, on a single node, the groups'
// reconcilers and policies (an HA node's run when it leads).
func (s *serving) startGroups() error {
	s.auto.start(s.shared, s.reader, s.met, s.reg.observeLatency)
	if s.ha == nil {
		s.reg.start(s.auto.policy)
	}
	s.onStop(func() { s.locked(s.stopGroups) })
	return nil
}

// stopGroups stops what startGroups and startHAProxy started. Policies stop
// before the jobs they could submit; collection after the jobs, so that
// their last seconds are in the history. With keep, the reconcilers leave
// their instances and HAProxy serving; otherwise HAProxy stops first, then
// the reconcilers stop the instances (an HA node's never: they are the
// pair's).
func (s *serving) stopGroups() {
	s.reg.stopPolicies()
	s.jm.Close()
	s.auto.close()
	if s.keep {
		s.reg.stopReconcilers(true)
		pid := s.lb.PID()
		s.lb.Detach()
		s.log.Info("stopped; HAProxy and the instances keep serving", "haproxy_pid", pid)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Second)
	defer cancel()
	if err := s.lb.Stop(ctx); err != nil {
		s.log.Error("stopping HAProxy failed", "err", err)
	}
	s.reg.stopReconcilers(s.ha != nil)
	s.log.Info("stopped")
}

// setupControl builds what the API, reloads and the HA node act on; from
// here a failure ends serving as a fatal error.
func (s *serving) setupControl() error {
	s.srvCtx, s.stopServers = context.WithCancelCause(s.ctx)
	c := s.c
	c.st, c.lb, c.certs, c.provs, c.groups, c.notify, c.stop = s.shared, s.lb, s.certs, s.provs, s.reg, s.nt, s.stopServers
	c.srvCtx = s.srvCtx
	s.apiOpts = []api.Option{s.auto.apiOption(s.shared, s.cfg), api.WithProviders(c), api.WithHostActs(c), api.WithRateLimits(s.lb), api.WithCerts(s.certs)}
	return nil
}

// setupElection runs an HA node's election and roles. Its stop runs without
// the reload lock (a takeover in progress takes it): it stops leading first
// (the groups then run nothing, their instances serving for the next
// leader), then resigns.
func (s *serving) setupElection() error {
	if s.ha == nil {
		return nil
	}
	s.apiOpts = append(s.apiOpts, api.WithHA(s.ha))
	s.onStop(s.ha.Start(haCore{s}, s.lb, s.jm))
	return nil
}

// setupACME builds the runner of tls.acme, which startACME and reloads run;
// it stops once they have, and before the HA election.
func (s *serving) setupACME() error {
	// Certificates for tls.acme are installed through the TLS frontends'
	// certificate store.
	s.acme = newACMERunner(s.cfg.StateDir, s.certs, s.lb, s.log)
	s.c.acme = s.acme
	s.onStop(func() { s.locked(s.acme.close) })
	return nil
}

// setupReloads applies a reload (SIGHUP) on each receive from opts.Reload
// until serving ends.
func (s *serving) setupReloads() error {
	if s.opts.Reload == nil {
		return nil
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-s.srvCtx.Done():
				return
			case <-s.opts.Reload:
			}
			if s.srvCtx.Err() != nil {
				return
			}
			_, _ = s.c.Reload(s.srvCtx) // it logs what happened
		}
	})
	s.onStop(wg.Wait)
	return nil
}

// setupAPI serves the control API, the dashboard and /metrics until serving
// ends; they (and the frontends) have stopped before anything else stops.
func (s *serving) setupAPI() error {
	servers, err := serveAPI(s.srvCtx, s.cfg, s.jm, s.reg, s.met, s.c, s.log, s.stopServers, s.opts.Pprof, s.apiOpts...)
	s.servers = servers
	s.onStop(servers.Wait)
	return err
}

// resumeDrains resumes the host drains a kill or crash of the previous run
// interrupted (an HA node's when it takes the lead: haCore.Lead).
func (s *serving) resumeDrains() error {
	if s.ha == nil {
		s.c.resumeDrains(s.srvCtx)
	}
	return nil
}

// startACME runs tls.acme once HAProxy routes the challenges to shoal. A
// reload (the API serves already) applies under the same lock.
func (s *serving) startACME() error {
	var err error
	s.locked(func() { err = s.acme.apply(s.cfg) })
	return err
}

// startFrontends runs the extra protocol servers beside the API; one that
// dies ends serving.
func (s *serving) startFrontends() error {
	for _, f := range s.opts.Frontends {
		s.servers.Go(func() {
			if err := f.Serve(s.srvCtx, s.jm, s.reg); err != nil {
				s.stopServers(err)
			}
		})
	}
	s.log.Info("shoal started", "frontends", frontendList(s.cfg.Frontends), "socket", s.cfg.Admin.Socket, "groups", strings.Join(s.reg.Names(), ","), "haproxy_pid", s.lb.PID())
	return nil
}

// serve waits for serving to end, hands the VIP over, and decides what the
// stops do: keep HAProxy and the instances serving, or stop them. It
// returns the fatal error that ended serving, if any.
func (s *serving) serve() error {
	<-s.srvCtx.Done()
	// Host drains run in srvCtx: they end (reported interrupted) before
	// anything below them stops.
	s.c.drains.wg.Wait()
	s.stopVIP()
	cause := context.Cause(s.srvCtx)
	keep := errors.Is(cause, ErrKeepRunning)
	if errors.Is(cause, ErrTerminated) {
		s.locked(func() { keep = s.c.cfg.Shutdown != config.ShutdownStop })
	}
	s.keep = keep
	switch {
	case keep:
		cause = nil
		s.log.Info("shutting down, leaving HAProxy and the instances serving for the next shoal serve to adopt")
	case errors.Is(cause, context.Canceled), errors.Is(cause, errStopAll), errors.Is(cause, ErrTerminated):
		cause = nil
		s.log.Info("shutting down: stopping HAProxy and every instance")
	default:
		s.log.Error("shutting down after a fatal error", "err", cause)
	}
	return cause
}
