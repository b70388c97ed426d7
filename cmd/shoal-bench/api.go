package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/jobs"
	"github.com/shoal-lb/shoal/internal/metrics"
)

// API talks to a running shoal over its unix socket: api.Client for status
// and scaling, and plain GETs for the metrics and policy events the
// benchmarks poll every second (cheaper than a CLI process per poll, which
// would itself load the 2 cores being measured).
type API struct {
	*api.Client
	socket string
	http   *http.Client
}

// NewAPI returns a client for the shoal listening on socket.
func NewAPI(socket string) *API {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}
	return &API{Client: api.NewClient(socket), socket: socket, http: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

// get decodes the JSON answer to GET path into out.
func (a *API) get(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://shoal"+path, nil)
	if err != nil {
		return err
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("shoal at %s: %w", a.socket, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e api.ErrorResponse
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return fmt.Errorf("GET %s: %s: %s", path, resp.Status, e.Error)
		}
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

// Metrics returns group's metrics document over the window ending now.
func (a *API) Metrics(ctx context.Context, group string, window time.Duration) (*metrics.Document, error) {
	var d metrics.Document
	q := url.Values{"window": {window.String()}}
	return &d, a.get(ctx, "/v1/groups/"+url.PathEscape(group)+"/metrics?"+q.Encode(), &d)
}

// Event is one policy decision, as GET /v1/events lists it.
type Event struct {
	ID             int64              `json:"id"`
	Time           time.Time          `json:"time"`
	Group          string             `json:"group"`
	Rule           string             `json:"rule"`
	Sources        []string           `json:"sources"`
	Values         map[string]float64 `json:"values"`
	Current        int                `json:"current"`
	Recommendation int                `json:"recommendation"`
	Request        *struct {
		Kind   string `json:"kind"`
		Plan   string `json:"plan"`
		Size   int    `json:"size"`
		Source string `json:"source"`
	} `json:"request"`
	Outcome string `json:"outcome"`
	Code    string `json:"code"`
	Reason  string `json:"reason"`
	JobID   string `json:"job_id"`
}

// Events returns group's policy decisions after the one with id after
// (0: from the start), oldest first, at most limit.
func (a *API) Events(ctx context.Context, group string, after int64, limit int) ([]Event, error) {
	q := url.Values{"group": {group}, "limit": {strconv.Itoa(limit)}}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	var r struct {
		Events []Event `json:"events"`
	}
	return r.Events, a.get(ctx, "/v1/events?"+q.Encode(), &r)
}

// InService counts the instances of group in service (api.Client.Group,
// without a CLI process per poll).
func (a *API) InService(ctx context.Context, group string) (int, error) {
	st, err := a.Group(ctx, group)
	if err != nil {
		return 0, err
	}
	return st.InService, nil
}

// Size scales group to n with a job and waits until the job ends.
func (a *API) Size(ctx context.Context, group string, n int, timeout time.Duration) error {
	j, err := a.Scale(ctx, group, api.ScaleRequest{Size: &n, Source: "shoal-bench"})
	if err != nil {
		return fmt.Errorf("scale %s to %d: %w", group, n, err)
	}
	deadline := time.Now().Add(timeout)
	for {
		j, err = a.Job(ctx, j.ID, 10*time.Second)
		if err != nil {
			return fmt.Errorf("scale %s to %d: job %s: %w", group, n, j.ID, err)
		}
		if j.State != jobs.Accepted && j.State != jobs.Running {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("scale %s to %d: job %s still %s after %v", group, n, j.ID, j.State, timeout)
		}
	}
	if j.State != jobs.Done {
		return fmt.Errorf("scale %s to %d: job %s %s: %s", group, n, j.ID, j.State, j.Reason)
	}
	return nil
}
