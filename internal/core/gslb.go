package core

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/event"
	"github.com/shoal-lb/shoal/internal/gslb"
	"github.com/shoal-lb/shoal/internal/promexp"
)

// startGSLB binds the GSLB DNS server and runs it and its site monitors
// until the returned stop is called; a listener that failed and serves
// again is a gslb.restarted event. It does not depend on HAProxy: the
// sites it checks may be this node's frontends or any other.
func startGSLB(cfg *config.GSLB, met *promexp.Metrics, st eventRecorder, log *slog.Logger) (stop func(), err error) {
	log = log.With("component", "gslb")
	srv, err := gslb.New(cfg, log)
	if err != nil {
		return nil, err
	}
	srv.OnRestart(func(listener, reason string) {
		d := event.Record("", event.GSLBRestarted, time.Now(), listener, reason)
		if err := st.InsertDecision(context.Background(), &d); err != nil {
			log.Warn("recording the restart of a DNS listener failed", "listener", listener, "err", err)
		}
	})
	met.Registry().MustRegister(srv.Collectors()...)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := srv.Run(ctx); err != nil {
			log.Error("gslb stopped", "err", err)
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}, nil
}
