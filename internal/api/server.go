// Package api is shoal's control API: HTTP+JSON over a unix socket (and,
// optionally, TCP with a bearer token), and the client the CLI uses.
package api

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/jobs"
	"github.com/shoal-lb/shoal/internal/promexp"
)

// maxBody bounds request bodies; scale requests are a few bytes.
const maxBody = 64 << 10

// maxWait bounds a long-poll on a job.
const maxWait = 5 * time.Minute

// StatusResponse is GET /v1/status.
type StatusResponse struct {
	Groups []group.Status `json:"groups"`
}

// ScaleRequest is the body of POST /v1/groups/{name}/scale: exactly one of
// Direction ("up", "down", "keep"), Plan or Size.
type ScaleRequest struct {
	Direction string `json:"direction,omitempty"`
	Plan      string `json:"plan,omitempty"`
	Size      *int   `json:"size,omitempty"`
	Source    string `json:"source,omitempty"`
}

// JobsResponse is GET /v1/jobs.
type JobsResponse struct {
	Jobs []jobs.Job `json:"jobs"`
}

// ErrorResponse is every error's body.
type ErrorResponse struct {
	Error string `json:"error"`
	// Valid lists accepted names when a group or plan was unknown.
	Valid []string `json:"valid,omitempty"`
	// Job is the ignored job recorded for a request that named an unknown plan.
	Job *jobs.Job `json:"job,omitempty"`
}

// Handler serves the API from a job manager.
type Handler struct {
	jobs    *jobs.Manager
	log     *slog.Logger
	mux     *http.ServeMux
	metrics *promexp.Metrics
}

// NewHandler returns the API handler. token, when non-empty, is required as
// "Authorization: Bearer TOKEN" on every request (for TCP listeners).
func NewHandler(m *jobs.Manager, log *slog.Logger, token string, opts ...Option) http.Handler {
	h := &Handler{jobs: m, log: log, mux: http.NewServeMux()}
	for _, o := range opts {
		o(h)
	}
	h.registerMonitoring()
	h.mux.HandleFunc("GET /healthz", h.health)
	h.mux.HandleFunc("GET /v1/status", h.status)
	h.mux.HandleFunc("GET /v1/groups/{group}", h.groupStatus)
	h.mux.HandleFunc("POST /v1/groups/{group}/scale", h.scale)
	h.mux.HandleFunc("GET /v1/jobs", h.listJobs)
	h.mux.HandleFunc("GET /v1/jobs/{id}", h.getJob)
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, ErrorResponse{Error: fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path)})
	})
	if token == "" {
		return h.mux
	}
	return requireToken(token, h.mux)
}

func requireToken(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="shoal"`)
			writeError(w, http.StatusUnauthorized, ErrorResponse{Error: "missing or wrong bearer token"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (h *Handler) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (h *Handler) status(w http.ResponseWriter, r *http.Request) {
	resp := StatusResponse{Groups: []group.Status{}}
	for _, name := range h.jobs.GroupNames() {
		g, _ := h.jobs.Group(name)
		resp.Groups = append(resp.Groups, g.Status(r.Context()))
	}
	writeJSON(w, http.StatusOK, resp)
}

func (h *Handler) groupStatus(w http.ResponseWriter, r *http.Request) {
	g, ok := h.jobs.Group(r.PathValue("group"))
	if !ok {
		h.unknownGroup(w, r.PathValue("group"))
		return
	}
	writeJSON(w, http.StatusOK, g.Status(r.Context()))
}

func (h *Handler) unknownGroup(w http.ResponseWriter, name string) {
	writeError(w, http.StatusNotFound, ErrorResponse{Error: fmt.Sprintf("unknown group %q", name), Valid: h.jobs.GroupNames()})
}

func (h *Handler) scale(w http.ResponseWriter, r *http.Request) {
	var body ScaleRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil && !errors.Is(err, io.EOF) {
		writeError(w, http.StatusBadRequest, ErrorResponse{Error: "invalid JSON body: " + err.Error()})
		return
	}
	req := jobs.Request{Group: r.PathValue("group"), Source: body.Source}
	if req.Source == "" {
		req.Source = "api"
	}
	n := 0
	if body.Direction != "" {
		n++
		switch body.Direction {
		case "up":
			req.Kind = jobs.Up
		case "down":
			req.Kind = jobs.Down
		case "keep":
			req.Kind = jobs.Keep
		default:
			writeError(w, http.StatusBadRequest, ErrorResponse{Error: fmt.Sprintf("direction must be up, down or keep, got %q", body.Direction)})
			return
		}
	}
	if body.Plan != "" {
		n++
		req.Kind, req.Plan = jobs.Plan, body.Plan
	}
	if body.Size != nil {
		n++
		req.Kind, req.Size = jobs.Size, *body.Size
	}
	if n != 1 {
		writeError(w, http.StatusBadRequest, ErrorResponse{Error: `give exactly one of "direction", "plan" or "size"`})
		return
	}
	job, err := h.jobs.Submit(r.Context(), req)
	var inErr *jobs.InputError
	switch {
	case errors.As(err, &inErr) && errors.Is(err, jobs.ErrUnknownGroup):
		h.unknownGroup(w, req.Group)
	case errors.As(err, &inErr):
		resp := ErrorResponse{Error: inErr.Msg, Valid: inErr.Valid}
		if job.ID != "" {
			resp.Job = &job
		}
		writeError(w, http.StatusBadRequest, resp)
	case err != nil:
		h.internal(w, err)
	case job.State == jobs.Ignored:
		writeJSON(w, http.StatusOK, job)
	default:
		writeJSON(w, http.StatusAccepted, job)
	}
}

func (h *Handler) listJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 50
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			writeError(w, http.StatusBadRequest, ErrorResponse{Error: "limit must be a number from 1 to 1000"})
			return
		}
		limit = n
	}
	name := q.Get("group")
	if _, ok := h.jobs.Group(name); name != "" && !ok {
		h.unknownGroup(w, name)
		return
	}
	list, err := h.jobs.List(r.Context(), name, limit)
	if err != nil {
		h.internal(w, err)
		return
	}
	writeJSON(w, http.StatusOK, JobsResponse{Jobs: list})
}

// getJob returns a job; with ?wait=DURATION it long-polls until the job ends.
func (h *Handler) getJob(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var (
		job jobs.Job
		err error
	)
	if s := r.URL.Query().Get("wait"); s != "" {
		d, perr := time.ParseDuration(s)
		if perr != nil || d < 0 {
			writeError(w, http.StatusBadRequest, ErrorResponse{Error: fmt.Sprintf("wait must be a duration like 30s, got %q", s)})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), min(d, maxWait))
		defer cancel()
		job, err = h.jobs.Wait(ctx, id)
	} else {
		job, err = h.jobs.Get(r.Context(), id)
	}
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		writeError(w, http.StatusNotFound, ErrorResponse{Error: err.Error()})
	case err != nil:
		h.internal(w, err)
	default:
		writeJSON(w, http.StatusOK, job)
	}
}

func (h *Handler) internal(w http.ResponseWriter, err error) {
	h.log.Error("api request failed", "err", err)
	writeError(w, http.StatusInternalServerError, ErrorResponse{Error: err.Error()})
}

func writeError(w http.ResponseWriter, code int, e ErrorResponse) {
	writeJSON(w, code, e)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
