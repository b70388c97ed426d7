package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/shoal-lb/shoal/internal/jobs"
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
	req := jobs.DeployRequest{Group: r.PathValue("group"), Set: body.Set, Source: body.Source}
	if req.Source == "" {
		req.Source = "api"
	}
	job, err := h.jobs.SubmitDeploy(r.Context(), req)
	var inErr *jobs.InputError
	switch {
	case errors.As(err, &inErr) && errors.Is(err, jobs.ErrUnknownGroup):
		h.unknownGroup(w, req.Group)
	case errors.As(err, &inErr):
		writeError(w, http.StatusBadRequest, ErrorResponse{Error: inErr.Msg, Valid: inErr.Valid})
	case err != nil:
		h.internal(w, err)
	case job.State == jobs.Ignored:
		writeJSON(w, http.StatusOK, job)
	default:
		writeJSON(w, http.StatusAccepted, job)
	}
}

// decodeBody reads one JSON object of at most maxBody bytes into v, with
// no unknown fields and nothing after it; an empty body leaves v as it is.
// It answers the error itself and reports whether v may be used.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
			err = errTrailing
			if terr != nil && !errors.As(terr, new(*json.SyntaxError)) {
				err = terr
			}
		}
	}
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, ErrorResponse{Error: fmt.Sprintf("request body is larger than %d bytes", maxBody)})
		return false
	case err != nil && !errors.Is(err, io.EOF):
		writeError(w, http.StatusBadRequest, ErrorResponse{Error: "invalid JSON body: " + err.Error()})
		return false
	}
	return true
}
