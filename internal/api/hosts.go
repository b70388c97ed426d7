package api

import (
	"context"
	"errors"
	"net/http"
	"net/url"

	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/store"
)

// Errors of HostActs, which the API answers with their status.
var (
	// ErrUnknownHost: no provider has a host of that name (404).
	ErrUnknownHost = errors.New("unknown host")
	// ErrAmbiguousHost: several providers have a host of that name, and
	// the request named none of them (400).
	ErrAmbiguousHost = errors.New("ambiguous host")
	// ErrNoReplace: the build cannot replace instances yet, so a host
	// drain can only cordon (501).
	ErrNoReplace = errors.New("instances cannot be replaced in this build")
	// ErrDrainRunning: the host is being drained already (409).
	ErrDrainRunning = errors.New("a drain of this host is running")
)

// HostActs is what `shoal hosts cordon|uncordon|drain` act on.
type HostActs interface {
	// CordonHost cordons (or uncordons) a provider's host: new instances
	// are placed elsewhere. changed is false when it already was.
	CordonHost(ctx context.Context, req HostRequest, cordon bool) (HostResponse, error)
	// DrainHost cordons the host, then replaces its instances elsewhere
	// in the background; HostDrains reports how it goes.
	DrainHost(ctx context.Context, req HostRequest) (HostResponse, error)
	// HostDrains lists the host drains of this run of shoal, newest first.
	HostDrains() []HostDrain
}

// HostRequest names a host: Provider is needed only when several
// providers have a host of that name.
type HostRequest struct {
	Host     string `json:"-"`
	Provider string `json:"provider,omitempty"`
}

// HostResponse is a host act's answer: the host as it is now.
type HostResponse struct {
	Host    provider.HostStatus `json:"host"`
	Changed bool                `json:"changed"`
	Message string              `json:"message"`
	Drain   *HostDrain          `json:"drain,omitempty"`
}

// HostDrain is the progress of one host's drain: its instances moved, those
// left with why, and whether it ended.
type HostDrain struct {
	Provider string `json:"provider"`
	Host     string `json:"host"`
	// State is "running", "done" (every instance moved), "incomplete"
	// (some could not move: Left says why) or "interrupted" (shoal stopped
	// or this HA node stopped leading: the drain stays recorded in the
	// store, and the next start or leader resumes it).
	State     string          `json:"state"`
	Instances []string        `json:"instances"`
	Moved     []string        `json:"moved"`
	Left      []HostDrainLeft `json:"left,omitempty"`
	Progress  string          `json:"progress"`
}

// HostDrainLeft is an instance a host drain could not move.
type HostDrainLeft struct {
	Instance string `json:"instance"`
	Group    string `json:"group"`
	Reason   string `json:"reason"`
}

// HostDrainsResponse is GET /v1/hosts/drains.
type HostDrainsResponse struct {
	Drains []HostDrain `json:"drains"`
}

// WithHostActs serves POST /v1/hosts/{host}/cordon, /uncordon and /drain
// (body: optional {"provider": NAME}; on an HA standby 503 naming the
// leader, as every act) and GET /v1/hosts/drains.
func WithHostActs(a HostActs) Option {
	return func(h *Handler) {
		act := func(w http.ResponseWriter, r *http.Request, do func(HostRequest) (HostResponse, error)) {
			req := HostRequest{}
			if !decodeBody(w, r, &req) {
				return
			}
			req.Host = r.PathValue("host")
			resp, err := do(req)
			switch {
			case err == nil:
				writeJSON(w, http.StatusOK, resp)
			case errors.Is(err, ErrUnknownHost):
				writeError(w, http.StatusNotFound, ErrorResponse{Error: err.Error()})
			case errors.Is(err, ErrAmbiguousHost):
				writeError(w, http.StatusBadRequest, ErrorResponse{Error: err.Error()})
			case errors.Is(err, ErrDrainRunning), errors.Is(err, store.ErrFenced):
				writeError(w, http.StatusConflict, ErrorResponse{Error: err.Error()})
			case errors.Is(err, ErrNoReplace):
				writeError(w, http.StatusNotImplemented, ErrorResponse{Error: err.Error()})
			default:
				h.internal(w, err)
			}
		}
		h.mux.HandleFunc("POST /v1/hosts/{host}/cordon", h.leaderOnly(func(w http.ResponseWriter, r *http.Request) {
			act(w, r, func(req HostRequest) (HostResponse, error) { return a.CordonHost(r.Context(), req, true) })
		}))
		h.mux.HandleFunc("POST /v1/hosts/{host}/uncordon", h.leaderOnly(func(w http.ResponseWriter, r *http.Request) {
			act(w, r, func(req HostRequest) (HostResponse, error) { return a.CordonHost(r.Context(), req, false) })
		}))
		h.mux.HandleFunc("POST /v1/hosts/{host}/drain", h.leaderOnly(func(w http.ResponseWriter, r *http.Request) {
			act(w, r, func(req HostRequest) (HostResponse, error) { return a.DrainHost(r.Context(), req) })
		}))
		h.mux.HandleFunc("GET /v1/hosts/drains", func(w http.ResponseWriter, r *http.Request) {
			d := a.HostDrains()
			if d == nil {
				d = []HostDrain{}
			}
			writeJSON(w, http.StatusOK, HostDrainsResponse{Drains: d})
		})
	}
}

// HostAct sends `shoal hosts cordon|uncordon|drain HOST`; prov may be "".
func (c *Client) HostAct(ctx context.Context, act, host, prov string) (HostResponse, error) {
	var out HostResponse
	err := c.do(ctx, http.MethodPost, "/v1/hosts/"+url.PathEscape(host)+"/"+act, HostRequest{Provider: prov}, &out)
	return out, err
}

// HostDrains lists this run's host drains (GET /v1/hosts/drains).
func (c *Client) HostDrains(ctx context.Context) ([]HostDrain, error) {
	var out HostDrainsResponse
	err := c.do(ctx, http.MethodGet, "/v1/hosts/drains", nil, &out)
	return out.Drains, err
}
