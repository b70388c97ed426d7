package api

import (
	"net/http"

	"github.com/shoal-lb/shoal/internal/jobrun"
)

// DeployRequest is the body of POST /v1/groups/{name}/deploy: template
// variables to override (each must be declared in the group's
// template.vars); an empty body rolls out the template as it is.
type DeployRequest struct {
	Set    map[string]string `json:"set,omitempty"`
	Source string            `json:"source,omitempty"`
}

func (h *Handler) deploy(w http.ResponseWriter, r *http.Request) {
	var body DeployRequest
	if !decodeBody(w, r, &body) {
		return
	}
	req := jobrun.DeployRequest{Group: r.PathValue("group"), Set: body.Set, Source: body.Source}
	if req.Source == "" {
		req.Source = "api"
	}
	job, err := h.jobs.SubmitDeploy(r.Context(), req)
	h.submitted(w, req.Group, job, err)
}
