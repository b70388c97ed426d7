package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/group"
)

// DeployStatus is GET /v1/groups/{group}/deploy: the serving version, the
// one a running deploy rolls out, a running canary's step, weights and
// both versions' figures (nil when none runs), and the running or last
// blue/green deploy's phase, both sets and their figures.
type DeployStatus struct {
	Group     string                 `json:"group"`
	Version   string                 `json:"version"`
	Deploying string                 `json:"deploying,omitempty"`
	Strategy  string                 `json:"strategy"`
	Canary    *group.CanaryStatus    `json:"canary,omitempty"`
	BlueGreen *group.BlueGreenStatus `json:"blue_green,omitempty"`
}

func (h *Handler) deployStatus(w http.ResponseWriter, r *http.Request) {
	g, ok := h.groups.Group(r.PathValue("group"))
	if !ok {
		h.unknownGroup(w, r.PathValue("group"))
		return
	}
	writeJSON(w, http.StatusOK, deployStatusOf(r.Context(), g))
}

func deployStatusOf(ctx context.Context, g *group.Group) DeployStatus {
	st := g.Status(ctx)
	d := DeployStatus{Group: g.Name(), Version: st.Version, Deploying: st.Deploying, Strategy: g.Config().Deploy.Strategy}
	if c, ok := g.CanaryStatus(); ok {
		d.Canary = &c
	}
	if b, ok := g.BlueGreenStatus(); ok {
		d.BlueGreen = &b
	}
	return d
}

// deployAct is POST /v1/groups/{group}/deploy/{act}: pause, resume,
// promote or abort the group's running canary; rollback, abort or promote
// its blue/green deploy (a canary's rollback is its abort). It answers the
// deploy's status after the act; 409 when no such deploy runs, 400 for an
// act the deploy has no use for (pausing a blue/green deploy).
func (h *Handler) deployAct(w http.ResponseWriter, r *http.Request) {
	act := r.PathValue("act")
	if !slices.Contains(group.DeployActions, act) {
		writeError(w, http.StatusNotFound, ErrorResponse{Error: fmt.Sprintf("unknown deploy act %q", act), Valid: group.DeployActions})
		return
	}
	g, ok := h.groups.Group(r.PathValue("group"))
	if !ok {
		h.unknownGroup(w, r.PathValue("group"))
		return
	}
	command := g.CanaryCommand
	if g.Config().Deploy.Strategy == config.StrategyBlueGreen {
		command = g.BlueGreenCommand
	}
	if err := command(act); err != nil {
		code := http.StatusServiceUnavailable
		switch {
		case errors.Is(err, group.ErrNoCanary), errors.Is(err, group.ErrNoBlueGreen):
			code = http.StatusConflict
		case errors.Is(err, group.ErrUnsupportedAct):
			code = http.StatusBadRequest
		}
		writeError(w, code, ErrorResponse{Error: err.Error()})
		return
	}
	h.log.Info("deploy command", "group", g.Name(), "act", act)
	writeJSON(w, http.StatusOK, deployStatusOf(r.Context(), g))
}

// DeployStatus reads a group's deploy and canary status.
func (c *Client) DeployStatus(ctx context.Context, groupName string) (DeployStatus, error) {
	var d DeployStatus
	return d, c.do(ctx, http.MethodGet, "/v1/groups/"+url.PathEscape(groupName)+"/deploy", nil, &d)
}

// DeployAct pauses, resumes, promotes or aborts a group's running canary,
// or rolls back, aborts or promotes its blue/green deploy.
func (c *Client) DeployAct(ctx context.Context, groupName, act string) (DeployStatus, error) {
	var d DeployStatus
	return d, c.do(ctx, http.MethodPost, "/v1/groups/"+url.PathEscape(groupName)+"/deploy/"+url.PathEscape(strings.ToLower(act)), nil, &d)
}
