package api

import (
	"context"
	"net/http"
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
	Interval    string     `json:"interval"`
	MaxAge      string     `json:"max_age"`
	OnMissing   string     `json:"on_missing"`
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
				Interval: src.Interval.String(), MaxAge: src.MaxAgeOf().String(), OnMissing: src.OnMissing}
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
