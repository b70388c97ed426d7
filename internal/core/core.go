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
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/jobrun"
	"github.com/shoal-lb/shoal/internal/promexp"
	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/store"
	"github.com/shoal-lb/shoal/internal/unixsock"
)

// Frontend is an extra protocol server (such as the sacloud/autoscaler
// compatibility socket) that drives the same job manager as the API.
type Frontend interface {
	// Serve runs until ctx ends; it returns an error only if it cannot start or dies.
	Serve(ctx context.Context, m *jobrun.Manager, groups jobrun.Groups) error
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
	// Pprof serves Go's profiles on the admin socket (`serve --pprof`).
	Pprof bool
}

// Serve runs the core until ctx ends. Extra frontends run beside the API.
func Serve(ctx context.Context, cfg *config.Config, log *slog.Logger, frontends ...Frontend) error {
	return ServeOptions(ctx, cfg, log, Options{Frontends: frontends})
}

// ServeOptions is Serve with every option. It runs the start-up steps
// below in order (setup.go); each registers what stops it, and the shutdown
// runs those stops in reverse: the last started stops first. serve waits,
// hands the VIP over and decides whether HAProxy and the instances keep
// serving (--keep-running, shutdown: keep) before the stops run.
//
// A step that fails before setupControl returns its error, the stops so far
// undoing the start; one that fails after ends serving as a fatal error:
// everything stops (never kept running) and Serve returns the error.
func ServeOptions(ctx context.Context, cfg *config.Config, log *slog.Logger, opts Options) error {
	s := &serving{ctx: ctx, cfg: cfg, log: log, opts: opts, c: &core{cfg: cfg, log: log}}
	defer s.stopAll()
	for _, step := range []func() error{
		s.setupStateDir, // locked first, released last: one core per state_dir
		s.setupStore,
		s.setupNotify,        // delivers from the store's queue: stops before it closes
		s.setupHA,            // joins the pair before anything acts: the groups' state is the pair's
		s.setupVIP,           // before HAProxy: a VIP it cannot take refuses the start with nothing running; handed over first at shutdown (serve)
		s.setupAccessLog,     // up before HAProxy sends to it, stops after HAProxy
		s.setupHAProxy,       // the manager, and the certificate files HAProxy reads when it starts
		s.setupLocalProvider, // and its instance logs' upkeep
		s.setupProviders,     // ssh connects before the groups adopt; stops after the reconcilers, which stop instances through them
		s.setupGroups,        // adopts (a standby: opens) the groups; the job manager
		s.setupMetrics,
		s.setupGSLB,
		s.startHAProxy,  // starts or adopts HAProxy; keeps its certificates (their loop stops after the groups)
		s.startGroups,   // collection, reconcilers, policies; their stop, under the reload lock, stops policies, jobs, collection, then stops HAProxy (or leaves it and the instances for the next run)
		s.setupControl,  // from here a failure ends serving
		s.setupElection, // an HA node stops leading (its groups then run nothing) and resigns before the groups stop, without the reload lock: a takeover in progress takes it
		s.setupACME,     // its runner stops once the reloads and the API, which run it, have
		s.setupReloads,  // reloads and the API stop first: a reload in progress finishes before anything it may start or retire stops
		s.setupAPI,
		s.resumeDrains, // host drains a kill of the previous run interrupted
		s.startACME,    // once HAProxy routes the challenges to shoal
		s.startFrontends,
	} {
		if err := step(); err != nil {
			if s.stopServers == nil {
				return err
			}
			s.stopServers(err)
			break
		}
	}
	return s.serve()
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
		gp, err := provs.forGroup(gc)
		if err != nil {
			return nil, err
		}
		g, err := group.New(ctx, gc, gp, lb, st, log)
		if err != nil {
			return nil, err
		}
		for _, r := range g.Restore(ctx, byGroup[gc.Name]) {
			kept[r.Provider] = append(kept[r.Provider], r)
		}
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
		gp, err := provs.forGroup(gc)
		if err != nil {
			return nil, err
		}
		g, err := group.Open(ctx, gc, gp, lb, st, log)
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
func serveAPI(ctx context.Context, cfg *config.Config, jm *jobrun.Manager, groups api.Groups, met *promexp.Metrics, ctl api.Control, log *slog.Logger, fail context.CancelCauseFunc, pprof bool, opts ...api.Option) (*sync.WaitGroup, error) {
	opts = append(opts, api.WithMetrics(met), api.WithControl(ctl))
	var wg sync.WaitGroup
	alog := log.With("component", "api")
	ul, err := unixsock.Listen(cfg.Admin.Socket, 0o600, "")
	if err != nil {
		return &wg, err
	}
	sockOpts := opts
	if pprof {
		sockOpts = append(slices.Clip(opts), api.WithPprof())
	}
	serve(ctx, &wg, &http.Server{Handler: api.NewHandler(jm, groups, alog, "", sockOpts...), ReadHeaderTimeout: 10 * time.Second}, ul, fail)
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
