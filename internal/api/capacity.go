package api

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/shoal-lb/shoal/internal/policy"
)

// CapacityResponse is GET /v1/groups/{group}/capacity: what one instance of
// the group serves at 100 % CPU, measured over the window by the rule
// predictive pre-scaling uses (policy.MeasuredCapacity).
type CapacityResponse struct {
	Group  string `json:"group"`
	Window string `json:"window"`
	// CapacityRPS is null when the window's history cannot tell; Explanation
	// then says why.
	CapacityRPS *float64 `json:"capacity_rps"`
	Explanation string   `json:"explanation"`
}

// DefaultCapacityWindow is the window of GET .../capacity without one;
// capacityPeriods is how many periods it is cut into: enough points for the
// fit, each the mean of several samples in a long window.
const (
	DefaultCapacityWindow = time.Hour
	capacityPeriods       = 60
)

// capacity is GET /v1/groups/{group}/capacity?window=1h.
func (s *autoscaleAPI) capacity(w http.ResponseWriter, r *http.Request) {
	g, ok := s.groupConfig(w, r)
	if !ok {
		return
	}
	window, err := parseWindow(r, "window", DefaultCapacityWindow, MaxMetricsWindow)
	if err != nil {
		badRequest(w, err)
		return
	}
	to := time.Now()
	step := max(window/capacityPeriods, s.a.MetricsInterval, time.Millisecond)
	samples := policy.CapacitySamples(s.a.Metrics.ForGroup(g.Name), to.Add(-window), to, step)
	resp := CapacityResponse{Group: g.Name, Window: window.String()}
	if c, err := policy.MeasuredCapacity(samples); err != nil {
		resp.Explanation = err.Error()
	} else {
		resp.CapacityRPS, resp.Explanation = &c.RPS, c.String()
	}
	writeJSON(w, http.StatusOK, resp)
}

// Capacity measures an instance of group's capacity over window (0: the
// server's default, 1h).
func (c *Client) Capacity(ctx context.Context, group string, window time.Duration) (CapacityResponse, error) {
	q := url.Values{}
	if window > 0 {
		q.Set("window", window.String())
	}
	var resp CapacityResponse
	err := c.do(ctx, http.MethodGet, "/v1/groups/"+url.PathEscape(group)+"/capacity?"+q.Encode(), nil, &resp)
	return resp, err
}
