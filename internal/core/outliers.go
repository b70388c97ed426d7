package core

import "github.com/shoal-lb/shoal/internal/accesslog"

// observeLatency hands one sampled request to its group's outlier
// detector: the instance's time to its response headers (%Tr), or the
// whole request's when it sent none (a timeout is slow too).
func (r *registry) observeLatency(e accesslog.Entry) {
	g, ok := r.Group(e.Backend)
	if !ok || e.Server == "" || e.Server == "<NOSRV>" {
		return
	}
	took := e.Tr
	if took < 0 {
		took = e.Ta
	}
	if took >= 0 {
		g.ObserveLatency(e.Server, e.Time, took)
	}
}
