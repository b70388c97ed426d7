package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/policy"
)

// SourceStatus is one of metrics.sources as GET /v1/sources shows it: never
// its credentials, only whether it answers.
type SourceStatus struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Errors counts failed reads since shoal started; LastError is the
	// latest read's, empty after a good one.
	Errors    uint64 `json:"errors"`
	LastError string `json:"last_error,omitempty"`
	// Last is when it last gave a value, Value that value (absent for a
	// per-instance source, whose values are its groups' averages).
	Last        *time.Time `json:"last,omitempty"`
	Value       *float64   `json:"value,omitempty"`
	PerInstance bool       `json:"per_instance"`
	// Stale is true while its newest value is older than MaxAge (or it
	// has none): a policy reading it acts by its OnMissing.
	Stale     bool   `json:"stale"`
	Interval  string `json:"interval"`
	MaxAge    string `json:"max_age"`
	OnMissing string `json:"on_missing"`
}

// SourcesResponse is GET /v1/sources.
type SourcesResponse struct {
	Sources []SourceStatus `json:"sources"`
}

// sources is GET /v1/sources.
func (s *autoscaleAPI) sources(w http.ResponseWriter, _ *http.Request) {
	out := SourcesResponse{Sources: []SourceStatus{}}
	if s.a.Sources != nil {
		for i, st := range s.a.Sources.Statuses() {
			src := s.a.Sources.Sources()[i]
			ss := SourceStatus{Name: st.Name, Kind: st.Kind, Errors: st.Errors, LastError: st.LastError, PerInstance: st.PerInstance,
				Interval: src.Interval.String(), MaxAge: src.MaxAgeOf().String(), OnMissing: src.OnMissing,
				Stale: st.Last.IsZero() || time.Since(st.Last) > src.MaxAgeOf()}
			if !st.Last.IsZero() {
				last := st.Last
				ss.Last = &last
				if !st.PerInstance {
					v := st.Value
					ss.Value = &v
				}
			}
			out.Sources = append(out.Sources, ss)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// SourcePoint is one value of a source, at the time it was read.
type SourcePoint struct {
	T time.Time `json:"t"`
	V float64   `json:"v"`
}

// SourceHistory is one source's values for a group over a window.
type SourceHistory struct {
	Name        string        `json:"name"`
	PerInstance bool          `json:"per_instance"`
	Points      []SourcePoint `json:"points"`
}

// SourcesHistoryResponse is GET /v1/sources/history.
type SourcesHistoryResponse struct {
	Group   string          `json:"group"`
	Sources []SourceHistory `json:"sources"`
}

// sourcesHistory is GET /v1/sources/history?group=G&from=T&to=T: each
// source's values for group over [from, to] (RFC 3339; at most a policy
// test's longest window), as a policy test replays them: a Prometheus
// source's asked of Prometheus (query_range), a command's or an HTTP
// endpoint's what this shoal read since it started (metrics.retention.ring,
// at least an hour). The simulator (shoal policy simulate) runs a policy reading
// sources on them.
func (s *autoscaleAPI) sourcesHistory(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	group := q.Get("group")
	if _, ok := s.groups.Group(group); !ok {
		s.unknownGroup(w, group)
		return
	}
	var from, to time.Time
	for _, p := range []struct {
		name string
		t    *time.Time
	}{{"from", &from}, {"to", &to}} {
		t, err := time.Parse(time.RFC3339Nano, q.Get(p.name))
		if err != nil {
			badRequest(w, fmt.Errorf("%s: want an RFC 3339 time such as 2026-01-02T15:04:05Z, got %q", p.name, truncate(q.Get(p.name))))
			return
		}
		*p.t = t
	}
	if !from.Before(to) || to.Sub(from) > MaxPolicyTestWindow {
		badRequest(w, fmt.Errorf("from %s to %s: want from before to, at most %s apart", from.Format(time.RFC3339), to.Format(time.RFC3339), MaxPolicyTestWindow))
		return
	}
	out := SourcesHistoryResponse{Group: group, Sources: []SourceHistory{}}
	if s.a.Sources == nil {
		writeJSON(w, http.StatusOK, out)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), MaxPolicyTestTime)
	defer cancel()
	h := s.a.Sources.Replay(ctx, group, s.a.Metrics.ForGroup(group))
	sts := s.a.Sources.Statuses()
	for i, src := range s.a.Sources.Sources() {
		sh := SourceHistory{Name: src.Name, PerInstance: sts[i].PerInstance, Points: []SourcePoint{}}
		for _, p := range h.Points(src.Name, from, to) {
			sh.Points = append(sh.Points, SourcePoint{T: p.T, V: p.V})
		}
		out.Sources = append(out.Sources, sh)
	}
	if err := h.Err(); err != nil {
		writeError(w, http.StatusBadGateway, ErrorResponse{Error: fmt.Sprintf("sources of %s: %v", group, err)})
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// sourceList are the running sources, which a candidate policy may name.
func (s *autoscaleAPI) sourceList() []config.Source {
	if s.a.Sources == nil {
		return nil
	}
	return s.a.Sources.Sources()
}

// replayHistory is what a policy test of group replays: its own history
// and its sources' (a Prometheus source's asked of Prometheus), and the
// error, once replayed, of a source that could not be read back.
func (s *autoscaleAPI) replayHistory(ctx context.Context, group string) (policy.Metrics, func() error) {
	base := s.a.Metrics.ForGroup(group)
	if s.a.Sources == nil || len(s.a.Sources.Sources()) == 0 {
		return base, func() error { return nil }
	}
	h := s.a.Sources.Replay(ctx, group, base)
	return h, h.Err
}

// Sources returns the metrics sources' states (GET /v1/sources).
func (c *Client) Sources(ctx context.Context) ([]SourceStatus, error) {
	var r SourcesResponse
	return r.Sources, c.do(ctx, http.MethodGet, "/v1/sources", nil, &r)
}

// SourcesHistory returns each source's values for group over [from, to]
// (GET /v1/sources/history).
func (c *Client) SourcesHistory(ctx context.Context, group string, from, to time.Time) (SourcesHistoryResponse, error) {
	var r SourcesHistoryResponse
	q := url.Values{"group": {group}, "from": {from.UTC().Format(time.RFC3339Nano)}, "to": {to.UTC().Format(time.RFC3339Nano)}}
	return r, c.do(ctx, http.MethodGet, "/v1/sources/history?"+q.Encode(), nil, &r)
}
