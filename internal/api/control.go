package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/shoal-lb/shoal/internal/config"
)

// Control is what the core does besides jobs: re-read its config and stop.
type Control interface {
	// Reload re-reads the config file and applies it. An invalid file is a
	// config.ErrorList; a change only a restart can apply wraps
	// ErrNotReloadable. Either way the running config stays in force.
	Reload(ctx context.Context) (ReloadResponse, error)
	// Shutdown makes the core exit once the answer is sent; with keepRunning
	// HAProxy and the instances stay up for the next `shoal serve` to adopt.
	Shutdown(keepRunning bool)
}

// ErrConfigUnreadable is wrapped by Reload's error when the config file
// cannot be read at all.
var ErrConfigUnreadable = errors.New("cannot read the config file")

// ErrNotReloadable is wrapped by Reload's error for settings that only a
// restart of shoal applies.
var ErrNotReloadable = errors.New("only a restart of shoal applies this")

// ReloadResponse is the answer of POST /v1/reload.
type ReloadResponse struct {
	// HAProxyReloaded is false when HAProxy's configuration did not change.
	HAProxyReloaded bool     `json:"haproxy_reloaded"`
	Added           []string `json:"added,omitempty"`
	Removed         []string `json:"removed,omitempty"`
	Changed         []string `json:"changed,omitempty"`
}

// ShutdownRequest is the body of POST /v1/shutdown.
type ShutdownRequest struct {
	KeepRunning bool `json:"keep_running"`
}

// ShutdownResponse is the answer of POST /v1/shutdown.
type ShutdownResponse struct {
	Stopping    bool `json:"stopping"`
	KeepRunning bool `json:"keep_running"`
}

// WithControl serves POST /v1/reload and POST /v1/shutdown from ctl.
func WithControl(ctl Control) Option {
	return func(h *Handler) {
		h.mux.HandleFunc("POST /v1/reload", func(w http.ResponseWriter, r *http.Request) { h.reload(w, r, ctl) })
		h.mux.HandleFunc("POST /v1/shutdown", func(w http.ResponseWriter, r *http.Request) { h.shutdown(w, r, ctl) })
	}
}

func (h *Handler) reload(w http.ResponseWriter, r *http.Request, ctl Control) {
	resp, err := ctl.Reload(r.Context())
	var el config.ErrorList
	switch {
	case errors.As(err, &el):
		msgs := make([]string, len(el))
		for i, e := range el {
			msgs[i] = e.Error()
		}
		writeError(w, http.StatusBadRequest, ErrorResponse{Error: fmt.Sprintf("invalid config: %d error(s); the running config stays in force", len(el)), Errors: msgs})
	case errors.Is(err, ErrConfigUnreadable):
		writeError(w, http.StatusBadRequest, ErrorResponse{Error: err.Error() + "; the running config stays in force"})
	case errors.Is(err, ErrNotReloadable):
		writeError(w, http.StatusConflict, ErrorResponse{Error: err.Error()})
	case err != nil:
		h.internal(w, err)
	default:
		writeJSON(w, http.StatusOK, resp)
	}
}

func (h *Handler) shutdown(w http.ResponseWriter, r *http.Request, ctl Control) {
	var body ShutdownRequest
	if !decodeBody(w, r, &body) {
		return
	}
	writeJSON(w, http.StatusAccepted, ShutdownResponse{Stopping: true, KeepRunning: body.KeepRunning})
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	ctl.Shutdown(body.KeepRunning)
}

// Reload asks the core to re-read its config file.
func (c *Client) Reload(ctx context.Context) (ReloadResponse, error) {
	var resp ReloadResponse
	return resp, c.do(ctx, http.MethodPost, "/v1/reload", struct{}{}, &resp)
}

// Shutdown asks the core to stop; keepRunning leaves the data plane up.
func (c *Client) Shutdown(ctx context.Context, keepRunning bool) (ShutdownResponse, error) {
	var resp ShutdownResponse
	return resp, c.do(ctx, http.MethodPost, "/v1/shutdown", ShutdownRequest{KeepRunning: keepRunning}, &resp)
}
