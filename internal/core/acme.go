package core

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"

	"github.com/shoal-lb/shoal/internal/acme"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy"
)

// acmeRunner owns the goroutine that keeps the tls.acme certificates: it
// runs while a frontend has tls.acme, restarts when a reload changes those
// sections, and stops with the core. The core calls it under reloadMu.
type acmeRunner struct {
	stateDir string
	inst     acme.Installer
	gate     acme.Gate
	log      *slog.Logger

	sections []config.ACME
	stop     func() // nil when not running
}

func newACMERunner(stateDir string, inst acme.Installer, gate acme.Gate, log *slog.Logger) *acmeRunner {
	return &acmeRunner{stateDir: stateDir, inst: inst, gate: gate, log: log.With("component", "acme")}
}

// apply runs the manager for cfg's tls.acme sections, restarting it if they
// changed. A certificate being obtained when it restarts is asked for again.
func (r *acmeRunner) apply(cfg *config.Config) error {
	sections := acme.Sections(cfg)
	if r.stop != nil && reflect.DeepEqual(sections, r.sections) {
		return nil
	}
	if len(sections) == 0 {
		r.close()
		r.sections = nil
		return nil
	}
	m, err := acme.New(sections, acme.Options{
		StateDir:  r.stateDir,
		Socket:    haproxy.ACMESocket(haproxy.PathsFor(r.stateDir)),
		Installer: r.inst,
		Gate:      r.gate,
		Log:       r.log,
	})
	if err != nil {
		return fmt.Errorf("tls.acme: %w", err)
	}
	r.close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := m.Run(ctx); err != nil {
			r.log.Error("acme certificates are not kept", "err", err)
		}
	}()
	r.stop = func() {
		cancel()
		<-done
	}
	r.sections = sections
	return nil
}

// close stops the manager, if it runs.
func (r *acmeRunner) close() {
	if r.stop != nil {
		r.stop()
		r.stop = nil
	}
}
