// Package core is `shoal serve`: it adopts what an earlier run left running,
// starts HAProxy, runs one reconciler per group and serves the control API,
// applies a reloaded config, and on shutdown either stops HAProxy and every
// instance or leaves them serving for the next run to adopt.
package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shoal-lb/shoal/internal/accesslog"
	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/certstore"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/connlimit"
	"github.com/shoal-lb/shoal/internal/dashboard"
	"github.com/shoal-lb/shoal/internal/event"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/ha"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/jobs"
	"github.com/shoal-lb/shoal/internal/keepalived"
	"github.com/shoal-lb/shoal/internal/notify"
	"github.com/shoal-lb/shoal/internal/promexp"
	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/provider/local"
	"github.com/shoal-lb/shoal/internal/store"
	"github.com/shoal-lb/shoal/internal/store/etcdstore"
	"github.com/shoal-lb/shoal/internal/unixsock"
)

// Frontend is an extra protocol server (such as the sacloud/autoscaler
// compatibility socket) that drives the same job manager as the API.
type Frontend interface {
	// Serve runs until ctx ends; it returns an error only if it cannot start or dies.
	Serve(ctx context.Context, m *jobs.Manager, groups jobs.Groups) error
}

// ErrKeepRunning, as the cause of the context given to Serve, makes Serve
// leave HAProxy and the instances serving when it returns, for the next
// `shoal serve` (possibly a new binary) to adopt. Any other end of the
// context stops them all.
var ErrKeepRunning = errors.New("shoal is restarting: HAProxy and the instances keep serving")

// ErrTerminated, as the cause of the context given to Serve (SIGTERM), does
// what the config's shutdown setting says: ErrKeepRunning's or a full stop.
var ErrTerminated = errors.New("terminated")

// Options are Serve's optional inputs.
type Options struct {
	// Frontends are extra protocol servers run beside the API.
	Frontends []Frontend
	// Reload, on each receive, re-reads the config file as POST /v1/reload
	// does (SIGHUP).
	Reload <-chan struct{}
}

// Serve runs the core until ctx ends. Extra frontends run beside the API.
func Serve(ctx context.Context, cfg *config.Config, log *slog.Logger, frontends ...Frontend) error {
	return ServeOptions(ctx, cfg, log, Options{Frontends: frontends})
}

// ServeOptions is Serve with every option.
func ServeOptions(ctx context.Context, cfg *config.Config, log *slog.Logger, opts Options) error {
	frontends := opts.Frontends
	if err := os.MkdirAll(filepath.Join(cfg.StateDir, "logs"), 0o700); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	unlock, err := lockStateDir(cfg.StateDir)
	if err != nil {
		return err
	}
	defer unlock()

	st, err := store.Open(filepath.Join(cfg.StateDir, "shoal.db"))
	if err != nil {
		return err
	}
	defer st.Close()

	// Notifications are delivered from the store's queue until the store
	// closes (deferred: the delivery stops first).
	nt, err := notify.New(cfg.Notify, st, log.With("component", "notify"))
	if err != nil {
		return err
	}
	st.SetRouter(nt.Route)
	notifyCtx, stopNotify := context.WithCancel(context.Background())
	var notifyWG sync.WaitGroup
	notifyWG.Go(func() { nt.Run(notifyCtx) })
	defer func() {
		stopNotify()
		notifyWG.Wait()
	}()

	// An HA node joins the pair before anything that acts: its groups'
	// state is the pair's, in etcd (see haNode).
	var (
		shared sharedStore = st
		hst    *haStore
		node   *ha.Node
	)
	if cfg.HA != nil {
		node, err = ha.Open(ctx, *cfg.HA, log.With("component", "ha"))
		if err != nil {
			return err
		}
		defer node.Close()
		hst = &haStore{Store: st, shared: etcdstore.New(node.Client(), node.Prefix()), log: log.With("component", "ha")}
		shared = hst
	}
	// What happens to this node (HAProxy, hosts, certificates, DNS) is
	// recorded where every node of the pair lists it.
	var events eventRecorder = st
	if hst != nil {
		events = nodeEvents{s: hst, node: cfg.HA.Node}
	}
	// keepalived starts before HAProxy, so that a VIP it cannot take (no
	// such interface) refuses the start with nothing left running; its
	// health check keeps it from the address until this core answers.
	// stopVIP hands the address over first thing at shutdown, while this
	// node's HAProxy still serves what reaches it.
	var vip *keepalived.Supervisor
	stopVIP := func() {}
	if cfg.HA != nil && cfg.HA.VIP != nil {
		vip, err = startKeepalived(ctx, cfg, log)
		if err != nil {
			return err
		}
		stopVIP = sync.OnceFunc(func() { stopKeepalived(vip, log) })
		defer stopVIP()
	}

	// The access log reader is up before HAProxy can send to it and stops
	// after HAProxy (deferred: HAProxy is stopped before Serve returns).
	var reader *accesslog.Reader
	if cfg.AccessLog.Sample > 0 {
		r, stopAccessLog, err := startAccessLog(cfg, log)
		if err != nil {
			return err
		}
		defer stopAccessLog()
		reader = r
	}

	lb := haproxy.NewManager(cfg, log)
	lb.OnRestart(func(reason string) {
		d := event.Record("", event.HAProxyRestarted, time.Now(), "haproxy", reason)
		if err := events.InsertDecision(context.Background(), &d); err != nil {
			log.Warn("recording the restart of HAProxy failed", "err", err)
		}
	})
	// HAProxy reads the certificates from the store's files when it starts.
	certs := certstore.New(cfg.StateDir, lb, log)
	if err := certs.Write(cfg.Frontends); err != nil {
		return fmt.Errorf("tls certificates: %w", err)
	}
	prov := local.New(cfg.StateDir, log.With("component", "provider"))
	if cfg.HA != nil {
		// The pair's local instances are the pair's, whichever node started them.
		prov.MarkAs(cfg.HA.Owner())
	}
	// Instances write their logs directly; shoal only rotates and expires them.
	logsCtx, stopLogs := context.WithCancel(context.Background())
	var logsWG sync.WaitGroup
	logsWG.Add(1)
	go func() {
		defer logsWG.Done()
		prov.MaintainLogs(logsCtx, cfg.InstanceLogs)
	}()
	defer func() {
		stopLogs()
		logsWG.Wait()
	}()

	// The ssh providers connect before the groups adopt their instances,
	// and stop after the groups' reconcilers, which stop instances through
	// them (deferred: the reconcilers stop before Serve returns).
	provs, err := newProviders(cfg, prov, log)
	if err != nil {
		return err
	}
	provs.st, provs.fence = events, shared
	provs.start()
	defer provs.stop()

	var (
		groups []*group.Group
		jm     *jobs.Manager
	)
	if node == nil {
		groups, err = restore(ctx, cfg, st, lb, provs, log)
	} else {
		// A standby adopts nothing: the leader restores on takeover.
		groups, err = openGroups(ctx, cfg, shared, lb, provs, log)
	}
	if err != nil {
		return err
	}
	reg := newRegistry(groups)
	reg.standby.Store(node != nil)
	provs.groups.Store(reg)
	if node == nil {
		jm, err = jobs.NewManager(ctx, reg, st, log.With("component", "jobs"))
		if err != nil {
			return err
		}
	} else {
		jm = jobs.NewStandbyManager(reg, shared, log.With("component", "jobs"))
	}
	met := promexp.New(reg, lb.Restarts)
	met.Registry().MustRegister(cloudCalls{provs}, certExpiry{certs})
	met.Registry().MustRegister(nt.Collectors()...)
	if reader != nil {
		met.Registry().MustRegister(accessLogLines{reader})
	}
	if cfg.GSLB != nil {
		stopGSLB, err := startGSLB(cfg.GSLB, met, events, log)
		if err != nil {
			return err
		}
		defer stopGSLB()
	}
	jm.Observe(met.ObserveJob)
	auto, err := openAutoscaler(cfg, reg, lb, jm, log)
	if err != nil {
		return err
	}
	if err := lb.Start(ctx); err != nil {
		auto.close()
		return err
	}
	// An adopted HAProxy may hold other certificates than the files.
	if err := certs.Push(ctx); err != nil {
		log.Error("tls certificates not brought in line with the files", "err", err)
	}
	certsCtx, stopCerts := context.WithCancel(context.Background())
	var certsWG sync.WaitGroup
	certsWG.Go(func() { certs.Run(certsCtx, certExpiring(events, log)) })
	defer func() {
		stopCerts()
		certsWG.Wait()
	}()
	auto.start(shared, reader, met)
	if node == nil {
		reg.start(auto.policy)
	}
	// Certificates for tls.acme are installed through the TLS frontends'
	// certificate store.
	acmeRun := newACMERunner(cfg.StateDir, certs, lb, log)

	srvCtx, stopServers := context.WithCancelCause(ctx)
	c := &core{cfg: cfg, log: log, st: shared, lb: lb, certs: certs, acme: acmeRun, provs: provs, groups: reg, notify: nt, stop: stopServers}
	apiOpts := []api.Option{auto.apiOption(shared, cfg), api.WithProviders(c), api.WithRateLimits(lb), api.WithCerts(certs)}
	stopHA := func() {}
	if node != nil {
		h := &haNode{node: node, shared: hst.shared, st: hst, c: c, reg: reg, jm: jm, policy: auto.policy, log: log.With("component", "ha"),
			api: cfg.Admin.Listen, vip: cfg.HA.VIP, lease: cfg.HA.Lease}
		apiOpts = append(apiOpts, api.WithHA(h))
		if vip != nil {
			h.ka = vip
		}
		stopHA = h.start()
	}
	defer stopHA()
	var reloads sync.WaitGroup
	if opts.Reload != nil {
		reloads.Go(func() {
			for {
				select {
				case <-srvCtx.Done():
					return
				case <-opts.Reload:
				}
				if srvCtx.Err() != nil {
					return
				}
				_, _ = c.Reload(srvCtx) // it logs what happened
			}
		})
	}

	servers, err := serveAPI(srvCtx, cfg, jm, reg, met, c, log, stopServers, apiOpts...)
	if err == nil {
		// HAProxy routes the challenges to shoal by now. A reload (the API
		// serves already) applies under the same lock.
		c.reloadMu.Lock()
		err = acmeRun.apply(cfg)
		c.reloadMu.Unlock()
	}
	if err == nil {
		for _, f := range frontends {
			servers.Add(1)
			go func() {
				defer servers.Done()
				if err := f.Serve(srvCtx, jm, reg); err != nil {
					stopServers(err)
				}
			}()
		}
		log.Info("shoal started", "frontends", frontendList(cfg.Frontends), "socket", cfg.Admin.Socket, "groups", strings.Join(reg.Names(), ","), "haproxy_pid", lb.PID())
		<-srvCtx.Done()
	} else {
		stopServers(err)
	}
	stopVIP()
	cause := context.Cause(srvCtx)
	keep := errors.Is(cause, ErrKeepRunning)
	if errors.Is(cause, ErrTerminated) {
		c.reloadMu.Lock()
		keep = c.cfg.Shutdown != config.ShutdownStop
		c.reloadMu.Unlock()
	}
	switch {
	case keep:
		cause = nil
		log.Info("shutting down, leaving HAProxy and the instances serving for the next shoal serve to adopt")
	case errors.Is(cause, context.Canceled), errors.Is(cause, errStopAll), errors.Is(cause, ErrTerminated):
		cause = nil
		log.Info("shutting down: stopping HAProxy and every instance")
	default:
		log.Error("shutting down after a fatal error", "err", cause)
	}
	servers.Wait()
	reloads.Wait()
	// A reload in progress (from the API) finishes first: it may be starting
	// or retiring groups.
	c.reloadMu.Lock()
	defer c.reloadMu.Unlock()
	acmeRun.close()
	// An HA node stops leading first (its groups then run nothing, their
	// instances serving for the next leader), then resigns.
	c.reloadMu.Unlock() // a takeover in progress takes it
	stopHA()
	c.reloadMu.Lock()
	// Policies stop before the jobs they could submit; collection after the
	// jobs, so that their last seconds are in the history.
	reg.stopPolicies()
	jm.Close()
	auto.close()
	if keep {
		reg.stopReconcilers(true)
		pid := lb.PID()
		lb.Detach()
		log.Info("stopped; HAProxy and the instances keep serving", "haproxy_pid", pid)
		return nil
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 35*time.Second)
	defer cancel()
	if err := lb.Stop(stopCtx); err != nil {
		log.Error("stopping HAProxy failed", "err", err)
	}
	// An HA node never stops the instances: they are the pair's.
	reg.stopReconcilers(node != nil)
	log.Info("stopped")
	return cause
}

// startAccessLog reads HAProxy's access log into STATE_DIR/logs/access.log
// until the returned function is called.
func startAccessLog(cfg *config.Config, log *slog.Logger) (*accesslog.Reader, func(), error) {
	r, err := accesslog.Open(accesslog.Options{
		Socket:     haproxy.PathsFor(cfg.StateDir).LogSocket,
		File:       filepath.Join(cfg.StateDir, "logs", "access.log"),
		MaxSize:    cfg.AccessLog.MaxSize,
		MaxFiles:   cfg.AccessLog.MaxFiles,
		SampleRate: cfg.AccessLog.Sample,
		Log:        log,
	})
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(ctx); err != nil {
			log.Error("access log stopped", "err", err)
		}
	}()
	return r, func() {
		cancel()
		<-done
		s := r.Stats()
		log.Info("access log stopped", "lines", s.Lines, "notices", s.Notices, "unparsed", s.Malformed, "dropped", s.Dropped, "write_errors", s.WriteErrors)
	}, nil
}

// restore builds the groups, each with its provider, adopting instances
// recorded by an earlier run, and has every provider stop its processes
// that no group of it records.
func restore(ctx context.Context, cfg *config.Config, st sharedStore, lb *haproxy.Manager, provs *providers, log *slog.Logger) ([]*group.Group, error) {
	recs, err := st.Instances(ctx)
	if err != nil {
		return nil, err
	}
	byGroup := map[string][]store.Instance{}
	for _, r := range recs {
		byGroup[r.Group] = append(byGroup[r.Group], r)
	}
	var groups []*group.Group
	kept := map[string][]provider.Record{} // by provider
	for _, gc := range cfg.Groups {
		prov, ok := provs.Get(gc.Provider)
		if !ok {
			return nil, fmt.Errorf("group %s: no provider %q", gc.Name, gc.Provider)
		}
		g, err := group.New(ctx, gc, prov, lb, st, log)
		if err != nil {
			return nil, err
		}
		kept[gc.Provider] = append(kept[gc.Provider], g.Restore(ctx, byGroup[gc.Name])...)
		delete(byGroup, gc.Name)
		groups = append(groups, g)
	}
	for name, rs := range byGroup {
		for _, r := range rs {
			log.Warn("instance of a group no longer configured will be stopped", "group", name, "instance", r.Name, "id", r.ID)
			if err := st.DeleteInstance(ctx, r.Name); err != nil {
				return nil, err
			}
		}
	}
	// Stopping strays acts on the providers: only while this node leads.
	if err := st.Guard(ctx); err != nil {
		return nil, fmt.Errorf("stop stray instances: %w", err)
	}
	for _, n := range provs.all() {
		stopped, err := n.prov.StopStrays(ctx, kept[n.name])
		switch {
		case err != nil && n.name == config.ProviderLocal:
			return nil, fmt.Errorf("stop stray instances: %w", err)
		case err != nil:
			// A host that is down now is swept when it comes back.
			log.Warn("stopping stray instances failed on some hosts", "provider", n.name, "err", err)
		}
		for _, r := range stopped {
			log.Warn("stray instance stopped", "provider", n.name, "instance", r.Name, "id", r.ID, "host", r.Host)
		}
	}
	return groups, nil
}

// openGroups builds the groups of cfg with their stored state and no
// instances: an HA standby's, for the API to read.
func openGroups(ctx context.Context, cfg *config.Config, st sharedStore, lb *haproxy.Manager, provs *providers, log *slog.Logger) ([]*group.Group, error) {
	var groups []*group.Group
	for _, gc := range cfg.Groups {
		prov, ok := provs.Get(gc.Provider)
		if !ok {
			return nil, fmt.Errorf("group %s: no provider %q", gc.Name, gc.Provider)
		}
		g, err := group.Open(ctx, gc, prov, lb, st, log)
		if err != nil {
			return nil, err
		}
		groups = append(groups, g)
	}
	return groups, nil
}

// serveAPI serves the control API on the unix socket and, if configured, TCP
// with the dashboard.
// A listener that dies calls fail. The WaitGroup ends when all have stopped.
func serveAPI(ctx context.Context, cfg *config.Config, jm *jobs.Manager, groups api.Groups, met *promexp.Metrics, ctl api.Control, log *slog.Logger, fail context.CancelCauseFunc, opts ...api.Option) (*sync.WaitGroup, error) {
	opts = append(opts, api.WithMetrics(met), api.WithControl(ctl))
	var wg sync.WaitGroup
	alog := log.With("component", "api")
	ul, err := unixsock.Listen(cfg.Admin.Socket, 0o600, "")
	if err != nil {
		return &wg, err
	}
	serve(ctx, &wg, &http.Server{Handler: api.NewHandler(jm, groups, alog, "", opts...), ReadHeaderTimeout: 10 * time.Second}, ul, fail)
	if cfg.Admin.Listen != "" {
		dlog := log.With("component", "dashboard")
		ui := api.WithUI(func(a http.Handler) api.UI { return dashboard.New(ctx, a, cfg.Admin.Token, dlog) })
		h := api.NewHandler(jm, groups, alog, cfg.Admin.Token, append(slices.Clip(opts), ui)...)
		srv, tl, err := listenAdmin(cfg.Admin, h, alog, defaultAdminLimits)
		if err != nil {
			return &wg, err
		}
		serve(ctx, &wg, srv, tl, fail)
	}
	if cfg.Metrics.Listen != "" {
		// Loopback only (the config insists): exporters serve without a token.
		ml, err := net.Listen("tcp", cfg.Metrics.Listen)
		if err != nil {
			return &wg, fmt.Errorf("metrics.listen: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", met.Handler())
		lim := defaultAdminLimits
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: lim.readHeader, ReadTimeout: lim.read,
			WriteTimeout: 30 * time.Second, IdleTimeout: lim.idle, MaxHeaderBytes: 16 << 10}
		// No token here, so no reserve: idle connections make room.
		conns := lim.conns
		conns.Reserve = 0
		cl := connlimit.New(ml, "metrics.listen", conns, log)
		cl.Track(srv)
		serve(ctx, &wg, srv, cl, fail)
	}
	return &wg, nil
}

func serve(ctx context.Context, wg *sync.WaitGroup, srv *http.Server, l net.Listener, fail context.CancelCauseFunc) {
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fail(fmt.Errorf("api on %s: %w", l.Addr(), err))
		}
	}()
	go func() {
		defer wg.Done()
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
}

// lockStateDir makes sure only one core uses a state directory.
func lockStateDir(dir string) (func(), error) {
	path := filepath.Join(dir, "shoal.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		return nil, fmt.Errorf("another shoal core (pid %s) is using state_dir %s", strings.TrimSpace(string(b)), dir)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() { f.Close() }, nil
}

// frontendList names each frontend with its binds, for the start log:
// "shoal=127.0.0.1:8080 tls=:443,[::]:443".
func frontendList(fes []config.Frontend) string {
	parts := make([]string, len(fes))
	for i, fe := range fes {
		parts[i] = fe.Name + "=" + strings.Join(fe.Bind, ",")
	}
	return strings.Join(parts, " ")
}

// certExpiring records a certificate.expiring event (and so notifies) once
// per certificate served, not at each of the store's hourly checks.
func certExpiring(st eventRecorder, log *slog.Logger) func(certstore.Cert) {
	told := map[string]bool{}
	return func(c certstore.Cert) {
		key := c.Frontend + "/" + c.Site + "/" + c.Serial
		if told[key] {
			return
		}
		told[key] = true
		reason := fmt.Sprintf("certificate %s of frontend %s (%s, serial %s) expires at %s",
			c.Site, c.Frontend, strings.Join(c.Names, ", "), c.Serial, c.NotAfter.UTC().Format(time.RFC3339))
		d := event.Record("", event.CertificateExpiring, time.Now(), c.Frontend+"/"+c.Site, reason)
		if err := st.InsertDecision(context.Background(), &d); err != nil {
			log.Warn("recording an expiring certificate failed", "err", err)
		}
	}
}
