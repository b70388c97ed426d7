package api

import (
	"context"

	"github.com/shoal-lb/shoal/internal/haproxy"
)

// RateLimits is what the API reads of the frontends' rate limits.
type RateLimits interface {
	// LimitedClients returns the clients the rate limits refused lately,
	// the most refused first.
	LimitedClients(ctx context.Context) ([]haproxy.LimitedClient, error)
}

// WithRateLimits adds the rate-limited clients to GET /v1/status.
func WithRateLimits(r RateLimits) Option {
	return func(h *Handler) { h.rateLimits = r }
}

// limitedClients is the status's list: empty rather than failing when
// HAProxy cannot answer (it is restarting, say).
func (h *Handler) limitedClients(ctx context.Context) []haproxy.LimitedClient {
	if h.rateLimits == nil {
		return nil
	}
	clients, err := h.rateLimits.LimitedClients(ctx)
	if err != nil {
		h.log.Debug("rate-limited clients unavailable", "err", err)
		return nil
	}
	return clients
}
