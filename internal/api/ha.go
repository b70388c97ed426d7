package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/shoal-lb/shoal/internal/ha/election"
)

// HA is an HA node's side of the API (see package ha).
type HA interface {
	// Leader returns the leader's name ("" when none is known) and whether
	// this node leads.
	Leader() (name string, leading bool)
	Status(ctx context.Context) (HAStatus, error)
	// StepDown hands the leadership over (and the VIP, with one) and says
	// to whom; ErrNotLeader on a standby.
	StepDown(ctx context.Context) (StepDownResponse, error)
}

// ErrNotLeader is StepDown's error on a node that does not lead.
var ErrNotLeader = errors.New("this node is not the leader")

// ErrNoStandby is StepDown's error when no other node could serve at once:
// none is registered, or none has every instance UP in its own HAProxy.
var ErrNoStandby = errors.New("no standby is ready to take over")

// HAStatus is GET /v1/ha.
type HAStatus struct {
	Node   string `json:"node"`
	Leader string `json:"leader"`
	// Role is "leader" or "standby".
	Role string `json:"role"`
	// LeaseTTL is what this node's etcd lease has left, in seconds.
	LeaseTTL float64 `json:"lease_ttl_s"`
	// LeaderSince is when this node saw the leader take over.
	LeaderSince *time.Time `json:"leader_since,omitempty"`
	// HAProxyRunning reports that this node's HAProxy answers: keepalived's
	// health check (shoal ha check) needs it.
	HAProxyRunning bool `json:"haproxy_running"`
	// EtcdError, when etcd did not answer, says why; Leader and Nodes are
	// then only what this node knows itself.
	EtcdError string              `json:"etcd_error,omitempty"`
	VIP       *HAVIP              `json:"vip,omitempty"`
	Nodes     []election.NodeInfo `json:"nodes"`
}

// HAVIP is the virtual IP and this node's keepalived state.
type HAVIP struct {
	Address string `json:"address"`
	State   string `json:"state"`
}

// StepDownResponse is the answer of POST /v1/ha/step-down.
type StepDownResponse struct {
	// Leader is the new leader, "" when none took over in time.
	Leader string `json:"leader"`
	// VIPMoved reports that the VIP left this node (keepalived no longer
	// MASTER) within the handover's bound, VIPMovedAfter how many seconds
	// after the request; both are unset on a node without a VIP.
	VIPMoved      bool    `json:"vip_moved,omitempty"`
	VIPMovedAfter float64 `json:"vip_moved_after_s,omitempty"`
}

// WithHA serves GET /v1/ha and POST /v1/ha/step-down, and makes the calls
// that change groups answer 503 on a standby: only the leader acts.
func WithHA(x HA) Option {
	return func(h *Handler) {
		h.ha = x
		h.mux.HandleFunc("GET /v1/ha", func(w http.ResponseWriter, r *http.Request) {
			st, err := x.Status(r.Context())
			if err != nil {
				writeError(w, http.StatusServiceUnavailable, ErrorResponse{Error: fmt.Sprintf("ha status: %v", err)})
				return
			}
			writeJSON(w, http.StatusOK, st)
		})
		h.mux.HandleFunc("POST /v1/ha/step-down", func(w http.ResponseWriter, r *http.Request) {
			resp, err := x.StepDown(r.Context())
			switch {
			case errors.Is(err, ErrNotLeader):
				name, _ := x.Leader()
				writeError(w, http.StatusConflict, ErrorResponse{Error: fmt.Sprintf("this node is not the leader (the leader is %q)", name)})
			case errors.Is(err, ErrNoStandby):
				writeError(w, http.StatusConflict, ErrorResponse{Error: err.Error()})
			case err != nil:
				h.internal(w, err)
			default:
				writeJSON(w, http.StatusOK, resp)
			}
		})
	}
}

// leaderOnly answers 503 on an HA standby, naming the leader to ask.
func (h *Handler) leaderOnly(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.ha != nil {
			if name, leading := h.ha.Leader(); !leading {
				if name == "" {
					name = "not known yet"
				}
				writeError(w, http.StatusServiceUnavailable, ErrorResponse{Error: "standby: the leader is " + name})
				return
			}
		}
		next(w, r)
	}
}

// HA is GET /v1/ha.
func (c *Client) HA(ctx context.Context) (HAStatus, error) {
	var st HAStatus
	err := c.do(ctx, http.MethodGet, "/v1/ha", nil, &st)
	return st, err
}

// StepDown is POST /v1/ha/step-down.
func (c *Client) StepDown(ctx context.Context) (StepDownResponse, error) {
	var resp StepDownResponse
	err := c.do(ctx, http.MethodPost, "/v1/ha/step-down", nil, &resp)
	return resp, err
}
