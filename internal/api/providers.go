package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/shoal-lb/shoal/internal/provider"
)

// MaxLogLines bounds ?lines= of GET /v1/instances/{name}/logs.
const MaxLogLines = 100000

// PreflightTimeout bounds POST /v1/providers/check: a host that hangs is
// reported as such, not waited for.
const PreflightTimeout = 30 * time.Second

// Providers is what the API reads of the core's providers.
type Providers interface {
	// Hosts lists the hosts of every provider that has several.
	Hosts() []provider.HostStatus
	// PreflightProviders connects to every host and checks what the groups
	// using it need there.
	PreflightProviders(ctx context.Context) []provider.PreflightResult
	// InstanceLogs writes an instance's log; ErrUnknownInstance when no
	// group has it, an error wrapping provider.ErrHostDown when its host
	// cannot be reached.
	InstanceLogs(ctx context.Context, name string, opts provider.LogOptions, w io.Writer) error
}

// ErrUnknownInstance is InstanceLogs' error for a name no group has.
var ErrUnknownInstance = errors.New("unknown instance")

// HostsResponse is GET /v1/hosts.
type HostsResponse struct {
	Hosts []provider.HostStatus `json:"hosts"`
}

// PreflightResponse is POST /v1/providers/check: OK is false when any host
// has a problem.
type PreflightResponse struct {
	OK      bool                       `json:"ok"`
	Results []provider.PreflightResult `json:"results"`
}

// WithProviders serves GET /v1/hosts, POST /v1/providers/check and GET
// /v1/instances/{name}/logs from p, and adds the hosts to GET /v1/status.
func WithProviders(p Providers) Option {
	return func(h *Handler) {
		h.providers = p
		h.mux.HandleFunc("GET /v1/hosts", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, HostsResponse{Hosts: hostsOf(p)})
		})
		h.mux.HandleFunc("POST /v1/providers/check", func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), PreflightTimeout)
			defer cancel()
			resp := PreflightResponse{OK: true, Results: p.PreflightProviders(ctx)}
			if resp.Results == nil {
				resp.Results = []provider.PreflightResult{}
			}
			for _, c := range resp.Results {
				resp.OK = resp.OK && c.OK
			}
			writeJSON(w, http.StatusOK, resp)
		})
		h.mux.HandleFunc("GET /v1/instances/{name}/logs", func(w http.ResponseWriter, r *http.Request) { h.logs(w, r, p) })
	}
}

func hostsOf(p Providers) []provider.HostStatus {
	hs := p.Hosts()
	if hs == nil {
		hs = []provider.HostStatus{}
	}
	return hs
}

// logs streams an instance's log as text/plain. Errors before the first
// byte are JSON with their status; once streaming, an error ends the body
// with a last line saying so.
func (h *Handler) logs(w http.ResponseWriter, r *http.Request, p Providers) {
	q := r.URL.Query()
	opts := provider.LogOptions{}
	if s := q.Get("lines"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > MaxLogLines {
			writeError(w, http.StatusBadRequest, ErrorResponse{Error: fmt.Sprintf("lines must be a number from 0 (all kept) to %d, got %q", MaxLogLines, s)})
			return
		}
		opts.Lines = n
	}
	switch f := q.Get("follow"); f {
	case "", "0", "false":
	case "1", "true":
		opts.Follow = true
	default:
		writeError(w, http.StatusBadRequest, ErrorResponse{Error: fmt.Sprintf("follow must be 1 or 0, got %q", f)})
		return
	}
	sw := &streamWriter{w: w}
	err := p.InstanceLogs(r.Context(), r.PathValue("name"), opts, sw)
	if err != nil && r.Context().Err() != nil && sw.started {
		return // the client went away while following
	}
	switch {
	case err == nil:
		if !sw.started {
			sw.begin()
		}
	case sw.started:
		fmt.Fprintf(w, "\nshoal: log read ended: %v\n", err)
	case errors.Is(err, ErrUnknownInstance):
		writeError(w, http.StatusNotFound, ErrorResponse{Error: err.Error()})
	case errors.Is(err, provider.ErrHostDown):
		writeError(w, http.StatusServiceUnavailable, ErrorResponse{Error: err.Error()})
	default:
		h.internal(w, err)
	}
}

// streamWriter sends the status and headers with the first write, and
// flushes every write, so that a followed log arrives as it is written.
type streamWriter struct {
	w       http.ResponseWriter
	started bool
}

func (s *streamWriter) begin() {
	s.started = true
	s.w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	s.w.Header().Set("X-Content-Type-Options", "nosniff")
	s.w.WriteHeader(http.StatusOK)
}

func (s *streamWriter) Write(b []byte) (int, error) {
	if !s.started {
		s.begin()
	}
	n, err := s.w.Write(b)
	if f, ok := s.w.(http.Flusher); ok {
		f.Flush()
	}
	return n, err
}

// Hosts asks for every provider's hosts.
func (c *Client) Hosts(ctx context.Context) (HostsResponse, error) {
	var resp HostsResponse
	return resp, c.do(ctx, http.MethodGet, "/v1/hosts", nil, &resp)
}

// PreflightProviders asks the core to check every provider's hosts.
func (c *Client) PreflightProviders(ctx context.Context) (PreflightResponse, error) {
	var resp PreflightResponse
	return resp, c.do(ctx, http.MethodPost, "/v1/providers/check", struct{}{}, &resp)
}

// Logs copies an instance's log to w until it ends (or, following, until
// ctx ends).
func (c *Client) Logs(ctx context.Context, name string, opts provider.LogOptions, w io.Writer) error {
	q := url.Values{}
	q.Set("lines", strconv.Itoa(opts.Lines))
	if opts.Follow {
		q.Set("follow", "1")
	}
	resp, err := c.stream(ctx, "/v1/instances/"+url.PathEscape(name)+"/logs?"+q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, bufio.NewReader(resp.Body))
	if err != nil && ctx.Err() != nil {
		return nil // interrupted while following: that is how it ends
	}
	return err
}
