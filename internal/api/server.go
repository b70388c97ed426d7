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
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/connlimit"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/jobrun"
	"github.com/shoal-lb/shoal/internal/promexp"
	"github.com/shoal-lb/shoal/internal/provider"
)

// maxBody bounds request bodies; scale requests are a few bytes.
const maxBody = 64 << 10

var errTrailing = errors.New("unexpected data after the JSON object")

// MaxWait bounds a long-poll on a job; a TCP listener must allow writes that late.
const MaxWait = 5 * time.Minute

// StatusResponse is GET /v1/status.
type StatusResponse struct {
	Groups []group.Status `json:"groups"`
	// Hosts are the hosts of providers with several (none for local).
	Hosts []provider.HostStatus `json:"hosts,omitempty"`
	// RateLimited are the clients the frontends' rate limits refused
	// lately, the most refused first (at most haproxy.TopLimited a
	// frontend).
	RateLimited []haproxy.LimitedClient `json:"rate_limited,omitempty"`
	// MeasuredLimits is the largest fleet shoal was measured at, and its
	// cost there.
	MeasuredLimits *MeasuredLimits `json:"measured_limits,omitempty"`
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
	Jobs []jobrun.Job `json:"jobs"`
}

// ErrorResponse is every error's body.
type ErrorResponse struct {
	Error string `json:"error"`
	// Valid lists accepted names when a group or plan was unknown.
	Valid []string `json:"valid,omitempty"`
	// Errors lists every problem of an invalid config (POST /v1/reload),
	// each as FILE:LINE:COL: field: what was expected.
	Errors []string `json:"errors,omitempty"`
	// Job is the ignored job recorded for a request that named an unknown plan.
	Job *jobrun.Job `json:"job,omitempty"`
}

// Groups are the running groups the API reads: core's registry, which a
// config reload changes.
type Groups interface {
	jobrun.Groups
	// All returns them, sorted by name.
	All() []*group.Group
}

// Handler serves the API from a job manager and the running groups.
type Handler struct {
	jobs    *jobrun.Manager
	groups  Groups
	log     *slog.Logger
	mux     *http.ServeMux
	metrics *promexp.Metrics
	// providers, when set, adds hosts to the status.
	providers Providers
	// rateLimits, when set, adds the rate-limited clients to the status.
	rateLimits RateLimits
	// newUI, when set, builds the browser UI served beside a token.
	newUI NewUI
	// ha, on a node of an HA pair, refuses changes on a standby.
	ha HA
}

// NewHandler returns the API handler. token, when non-empty, is required as
// "Authorization: Bearer TOKEN" on every request (for TCP listeners).
func NewHandler(m *jobrun.Manager, groups Groups, log *slog.Logger, token string, opts ...Option) http.Handler {
	h := &Handler{jobs: m, groups: groups, log: log, mux: http.NewServeMux()}
	for _, o := range opts {
		o(h)
	}
	h.registerMonitoring()
	h.mux.HandleFunc("GET /healthz", h.health)
	h.mux.HandleFunc("GET /v1/status", h.status)
	h.mux.HandleFunc("GET /status", h.statusPage)
	h.mux.HandleFunc("GET /v1/groups/{group}", h.groupStatus)
	h.mux.HandleFunc("POST /v1/groups/{group}/scale", h.leaderOnly(h.scale))
	h.mux.HandleFunc("POST /v1/groups/{group}/deploy", h.leaderOnly(h.deploy))
	h.mux.HandleFunc("GET /v1/groups/{group}/deploy", h.deployStatus)
	h.mux.HandleFunc("POST /v1/groups/{group}/deploy/{act}", h.leaderOnly(h.deployAct))
	h.mux.HandleFunc("POST /v1/instances/{act}", h.leaderOnly(h.instances))
	h.mux.HandleFunc("GET /v1/jobs", h.listJobs)
	h.mux.HandleFunc("GET /v1/jobs/{id}", h.getJob)
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, ErrorResponse{Error: fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path)})
	})
	if token == "" {
		return h.mux
	}
	var ui UI
	if h.newUI != nil {
		// Built before the UI's own routes exist: it calls the API, never itself.
		ui = h.newUI(h.mux)
		h.mux.Handle("GET /{$}", ui)
		h.mux.Handle("GET /favicon.ico", ui)
		h.mux.Handle("/ui/", ui)
	}
	return requireToken(token, h.mux, ui, log, newFailureLimiter(maxAuthFailures, time.Minute, time.Now))
}

// maxAuthFailures is how many wrong tokens one address may send a minute
// before it is answered 429 without its token being checked.
const maxAuthFailures = 10

// requireToken serves next to requests with the bearer token or, when ui is
// set, a session of the UI; the UI's own pages and its login to anyone.
func requireToken(token string, next http.Handler, ui UI, log *slog.Logger, lim *failureLimiter) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		if wait := lim.blocked(host); wait > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(wait.Round(time.Second)/time.Second)+1))
			writeError(w, http.StatusTooManyRequests, ErrorResponse{Error: fmt.Sprintf("too many authentication failures from %s: more than %d a minute; retry in %s", host, lim.max, wait.Round(time.Second))})
			return
		}
		// The listener keeps room for connections that proved the token
		// (connlimit): each is told so.
		if ui != nil && r.Method == http.MethodPost && r.URL.Path == uiLogin {
			if ui.Login(w, r) {
				connlimit.Authorized(r.Context())
			} else {
				authFailed(log, lim, host, r)
			}
			return
		}
		if ui != nil && isUIPath(r.URL.Path) {
			if ui.Authorized(r) {
				connlimit.Authorized(r.Context())
			}
			next.ServeHTTP(w, r)
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 && (ui == nil || !ui.Authorized(r)) {
			authFailed(log, lim, host, r)
			w.Header().Set("WWW-Authenticate", `Bearer realm="shoal"`)
			writeError(w, http.StatusUnauthorized, ErrorResponse{Error: "missing or wrong bearer token"})
			return
		}
		connlimit.Authorized(r.Context())
		next.ServeHTTP(w, r)
	})
}

// authFailed counts a wrong token from host and logs it.
func authFailed(log *slog.Logger, lim *failureLimiter, host string, r *http.Request) {
	n := lim.fail(host)
	// Logged until the limit, then once: a flood cannot fill the log.
	if n <= lim.max {
		log.Warn("api authentication failed", "remote", r.RemoteAddr, "method", r.Method, "path", truncate(r.URL.Path), "failures_this_minute", n)
	}
	if n == lim.max {
		log.Warn("api authentication failures limited: answering 429 without checking", "remote", host, "for", lim.window)
	}
}

// failureLimiter counts authentication failures per remote address in fixed
// windows. It remembers at most maxTracked addresses, forgetting expired
// ones first, so that many addresses cannot grow it without bound.
type failureLimiter struct {
	max    int
	window time.Duration
	now    func() time.Time

	mu    sync.Mutex
	addrs map[string]*failures
}

type failures struct {
	start time.Time
	n     int
}

const maxTracked = 10000

func newFailureLimiter(max int, window time.Duration, now func() time.Time) *failureLimiter {
	return &failureLimiter{max: max, window: window, now: now, addrs: make(map[string]*failures)}
}

// blocked returns how long host must still wait, or 0.
func (l *failureLimiter) blocked(host string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.addrs[host]
	if f == nil || f.n < l.max {
		return 0
	}
	left := f.start.Add(l.window).Sub(l.now())
	if left <= 0 {
		delete(l.addrs, host)
		return 0
	}
	return left
}

// fail records a failure from host and returns the count in its window.
func (l *failureLimiter) fail(host string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	f := l.addrs[host]
	if f == nil || now.Sub(f.start) >= l.window {
		if f == nil && len(l.addrs) >= maxTracked {
			for k, v := range l.addrs {
				if now.Sub(v.start) >= l.window {
					delete(l.addrs, k)
				}
			}
			if len(l.addrs) >= maxTracked {
				// Every tracked address is active: drop an arbitrary one
				// rather than grow.
				for k := range l.addrs {
					delete(l.addrs, k)
					break
				}
			}
		}
		f = &failures{start: now}
		l.addrs[host] = f
	}
	f.n++
	return f.n
}

func (h *Handler) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (h *Handler) status(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, h.collectStatus(r.Context()))
}

func (h *Handler) groupStatus(w http.ResponseWriter, r *http.Request) {
	g, ok := h.groups.Group(r.PathValue("group"))
	if !ok {
		h.unknownGroup(w, r.PathValue("group"))
		return
	}
	writeJSON(w, http.StatusOK, g.Status(r.Context()))
}

func (h *Handler) unknownGroup(w http.ResponseWriter, name string) {
	writeError(w, http.StatusNotFound, ErrorResponse{Error: fmt.Sprintf("unknown group %q", name), Valid: h.groups.Names()})
}

func (h *Handler) scale(w http.ResponseWriter, r *http.Request) {
	var body ScaleRequest
	if !decodeBody(w, r, &body) {
		return
	}
	req := jobrun.Request{Group: r.PathValue("group"), Source: body.Source}
	if req.Source == "" {
		req.Source = "api"
	}
	n := 0
	if body.Direction != "" {
		n++
		switch body.Direction {
		case "up":
			req.Kind = jobrun.Up
		case "down":
			req.Kind = jobrun.Down
		case "keep":
			req.Kind = jobrun.Keep
		default:
			writeError(w, http.StatusBadRequest, ErrorResponse{Error: fmt.Sprintf("direction must be up, down or keep, got %q", body.Direction)})
			return
		}
	}
	if body.Plan != "" {
		n++
		req.Kind, req.Plan = jobrun.Plan, body.Plan
	}
	if body.Size != nil {
		n++
		req.Kind, req.Size = jobrun.Size, *body.Size
	}
	if n != 1 {
		writeError(w, http.StatusBadRequest, ErrorResponse{Error: `give exactly one of "direction", "plan" or "size"`})
		return
	}
	job, err := h.jobs.Submit(r.Context(), req)
	h.submitted(w, req.Group, job, err)
}

// submitted answers a scale or deploy request: 202 with the job, 200 with
// one that was ignored (its reason inside), 404 for an unknown group, 400
// for a request the job manager refused (with the refused job, if one was
// recorded).
func (h *Handler) submitted(w http.ResponseWriter, group string, job jobrun.Job, err error) {
	var inErr *jobrun.InputError
	switch {
	case errors.As(err, &inErr) && errors.Is(err, jobrun.ErrUnknownGroup):
		h.unknownGroup(w, group)
	case errors.As(err, &inErr):
		resp := ErrorResponse{Error: inErr.Msg, Valid: inErr.Valid}
		if job.ID != "" {
			resp.Job = &job
		}
		writeError(w, http.StatusBadRequest, resp)
	case err != nil:
		h.internal(w, err)
	case job.State == jobrun.Ignored:
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
	if _, ok := h.groups.Group(name); name != "" && !ok {
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
	id := canonicalID(r.PathValue("id"))
	var (
		job jobrun.Job
		err error
	)
	if q := r.URL.Query(); q.Has("wait") {
		s := q.Get("wait")
		d, perr := time.ParseDuration(s)
		if perr != nil || d < 0 || len(q["wait"]) > 1 {
			writeError(w, http.StatusBadRequest, ErrorResponse{Error: fmt.Sprintf("wait must be one non-negative duration such as 30s (longer waits are cut to %s), got %q", MaxWait, truncate(s))})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), min(d, MaxWait))
		defer cancel()
		job, err = h.jobs.Wait(ctx, id)
	} else {
		job, err = h.jobs.Get(r.Context(), id)
	}
	switch {
	case errors.Is(err, jobrun.ErrNotFound):
		writeError(w, http.StatusNotFound, ErrorResponse{Error: err.Error()})
	case err != nil:
		h.internal(w, err)
	default:
		writeJSON(w, http.StatusOK, job)
	}
}

// canonicalID turns "001" into "1", the form jobs are recorded and waited
// on by; anything else is passed on for the job manager to refuse.
func canonicalID(id string) string {
	if id == "" || strings.ContainsFunc(id, func(r rune) bool { return r < '0' || r > '9' }) {
		return id
	}
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return id
	}
	return strconv.FormatInt(n, 10)
}

// truncate keeps echoed input short.
func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
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
