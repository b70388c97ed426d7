package api

import (
	"context"
	"net/http"
	"time"

	"github.com/shoal-lb/shoal/internal/certstore"
)

// Certs lists the certificates the TLS frontends serve (certstore.Store).
type Certs interface {
	Certs() []certstore.Cert
}

// CertsResponse is the answer of GET /v1/certs.
type CertsResponse struct {
	Certificates []Certificate `json:"certificates"`
}

// Certificate is one certificate a frontend serves, with its expiry.
type Certificate struct {
	certstore.Cert
	// ExpiresIn is the time left, in seconds (negative once expired).
	ExpiresIn float64 `json:"expires_in_seconds"`
	// Expiring is set within certstore.ExpiryWarning of NotAfter.
	Expiring bool `json:"expiring"`
}

// WithCerts serves GET /v1/certs from src.
func WithCerts(src Certs) Option {
	return func(h *Handler) {
		h.mux.HandleFunc("GET /v1/certs", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, certsResponse(src.Certs(), time.Now()))
		})
	}
}

func certsResponse(list []certstore.Cert, now time.Time) CertsResponse {
	resp := CertsResponse{Certificates: []Certificate{}}
	for _, c := range list {
		resp.Certificates = append(resp.Certificates, Certificate{
			Cert:      c,
			ExpiresIn: c.NotAfter.Sub(now).Seconds(),
			Expiring:  c.ExpiresWithin(now, certstore.ExpiryWarning),
		})
	}
	return resp
}

// Certs lists the certificates the TLS frontends serve.
func (c *Client) Certs(ctx context.Context) (CertsResponse, error) {
	var r CertsResponse
	return r, c.do(ctx, http.MethodGet, "/v1/certs", nil, &r)
}
