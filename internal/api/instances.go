package api

import (
	"errors"
	"net/http"

	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/jobrun"
)

// InstancesRequest is the body of POST /v1/instances/{act}, a day-two act
// (drain, undrain, replace, protect, unprotect, standby, resume) on named
// instances of one group.
type InstancesRequest struct {
	Instances []string `json:"instances"`
	// NoReplace: a drain starts no replacement (refused below min_size).
	NoReplace bool `json:"no_replace,omitempty"`
	// TerminateFirst: a replacement serves only after the old one is out.
	TerminateFirst bool `json:"terminate_first,omitempty"`
	// Decrement: a standby lowers the desired size instead of being replaced.
	Decrement bool   `json:"decrement,omitempty"`
	Source    string `json:"source,omitempty"`
}

// instances answers a day-two act like a scale request (see submitted),
// and 404 with the known instances for an unknown one.
func (h *Handler) instances(w http.ResponseWriter, r *http.Request) {
	var body InstancesRequest
	if !decodeBody(w, r, &body) {
		return
	}
	req := jobrun.InstanceRequest{Kind: jobrun.Kind(r.PathValue("act")), Instances: body.Instances, Source: body.Source,
		Options: group.ActOptions{NoReplace: body.NoReplace, TerminateFirst: body.TerminateFirst, Decrement: body.Decrement}}
	if req.Source == "" {
		req.Source = "api"
	}
	job, err := h.jobs.SubmitInstances(r.Context(), req)
	var inErr *jobrun.InputError
	if errors.As(err, &inErr) && errors.Is(err, jobrun.ErrUnknownInstance) {
		writeError(w, http.StatusNotFound, ErrorResponse{Error: inErr.Msg, Valid: inErr.Valid})
		return
	}
	h.submitted(w, job.Group, job, err)
}
