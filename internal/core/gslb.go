package core

import (
	"context"
	"log/slog"
	"sync"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/gslb"
	"github.com/shoal-lb/shoal/internal/promexp"
)

// startGSLB binds the GSLB DNS server and runs it and its site monitors
// until the returned stop is called. It does not depend on HAProxy: the
// sites it checks may be this node's frontends or any other.
func startGSLB(cfg *config.GSLB, met *promexp.Metrics, log *slog.Logger) (stop func(), err error) {
	log = log.With("component", "gslb")
	srv, err := gslb.New(cfg, log)
	if err != nil {
		return nil, err
	}
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
