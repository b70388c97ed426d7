package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/metrics"
	"github.com/shoal-lb/shoal/internal/policy"
	"github.com/shoal-lb/shoal/internal/source"
	"github.com/shoal-lb/shoal/internal/store"
)

// Autoscaling is what the metrics, events and policy-test endpoints read.
type Autoscaling struct {
	Metrics *metrics.Collector
	// Sources are metrics.sources, which policies read beside Metrics; nil
	// when the core runs none.
	Sources *source.Set
	Store   DecisionReader
	// MetricsInterval is metrics.interval, for validating candidate policies.
	MetricsInterval time.Duration
	// MetricsRing is metrics.ring, the history held at MetricsInterval, for
	// bounding what a policy test reads.
	MetricsRing time.Duration
	// MetricsKept is metrics.retention's longest, for validating candidate
	// policies.
	MetricsKept time.Duration
}

// DecisionReader is where the events endpoint reads the recorded
// decisions. *store.Store is one.
type DecisionReader interface {
	Decisions(ctx context.Context, q store.DecisionQuery) ([]decision.Record, error)
}

// Bounds of the autoscaling endpoints' parameters.
const (
	// DefaultMetricsWindow is the window of GET .../metrics without one.
	DefaultMetricsWindow = 5 * time.Minute
	// MaxMetricsWindow is the longest history kept (1-minute roll-ups).
	MaxMetricsWindow = 31 * 24 * time.Hour
	// DefaultPolicyTestWindow and MaxPolicyTestWindow bound a replay: one
	// evaluation per autoscale interval over the window.
	DefaultPolicyTestWindow = time.Hour
	MaxPolicyTestWindow     = 24 * time.Hour
	// MaxPolicyTestSteps bounds a replay's evaluations, window ÷ interval: a
	// day at the default 1 s. A candidate chooses its interval (down to
	// 100 ms), so the window alone does not bound the work.
	MaxPolicyTestSteps = 86400
	// MaxPolicyTestSamples bounds the samples a replay scans: evaluations ×
	// the samples of the windows the policy reads back (policy.CostOf). A
	// day at 1 s of a rule `for: 25m` is 129,600,000; about a minute's work
	// on a busy 2-core machine.
	MaxPolicyTestSamples = 200_000_000
	// MaxPolicyTestTime bounds a replay's run time (within the TCP
	// listener's write timeout); a client that goes away stops it sooner.
	MaxPolicyTestTime = MaxWait
	// DefaultEventsLimit and MaxEventsLimit bound GET /v1/events.
	DefaultEventsLimit = 1000
	MaxEventsLimit     = 10000
	// maxPolicyBody bounds a candidate policy.
	maxPolicyBody = 1 << 20
	// DefaultSeriesPoints and MaxSeriesPoints bound the steps of GET
	// .../series: a chart's width in pixels is plenty.
	DefaultSeriesPoints = 360
	MaxSeriesPoints     = 2000
	// eventsPoll is how often a long-polling GET /v1/events looks again.
	eventsPoll = 200 * time.Millisecond
)

// WithAutoscaling serves GET /v1/groups/{group}/metrics, .../series and .../capacity, GET /v1/cpu-usage,
// GET /v1/events and POST /v1/groups/{group}/policy/test from a.
func WithAutoscaling(a Autoscaling) Option {
	return func(h *Handler) {
		s := &autoscaleAPI{Handler: h, a: a}
		// Registered here rather than in NewHandler: these routes exist only
		// when the core runs an autoscaler.
		h.mux.HandleFunc("GET /v1/groups/{group}/metrics", s.metrics)
		h.mux.HandleFunc("GET /v1/groups/{group}/series", s.series)
		h.mux.HandleFunc("GET /v1/groups/{group}/capacity", s.capacity)
		h.mux.HandleFunc("GET /v1/cpu-usage", s.cpuUsage)
		h.mux.HandleFunc("GET /v1/events", s.events)
		h.mux.HandleFunc("POST /v1/groups/{group}/policy/test", s.policyTest)
		h.mux.HandleFunc("GET /v1/sources", s.sources)
		h.mux.HandleFunc("GET /v1/sources/history", s.sourcesHistory)
	}
}

type autoscaleAPI struct {
	*Handler
	a Autoscaling
}

// Event is one explained autoscaling decision, as GET /v1/events and the
// policy test list it: the decision's record itself, whose json tags are
// the wire format.
type Event = decision.Record

// EventsResponse is GET /v1/events.
type EventsResponse struct {
	Events []Event `json:"events"`
}

// PolicyTestResponse is POST /v1/groups/{group}/policy/test.
type PolicyTestResponse struct {
	Decisions []Event `json:"decisions"`
}

// parseWindow reads a duration parameter: Go's syntax ("90s", "5m", "1h30m")
// or whole minutes ("5"), positive and at most most.
func parseWindow(r *http.Request, name string, def, most time.Duration) (time.Duration, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	d, err := ParseWindow(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	if d > most {
		return 0, fmt.Errorf("%s: must be at most %s, got %s", name, most, d)
	}
	return d, nil
}

// ParseWindow reads a window as the API and CLI take it: a Go duration
// ("90s", "5m", "1h") or a whole number of minutes ("5", as
// sacloud-cpu-usage's --time). It must be positive.
func ParseWindow(s string) (time.Duration, error) {
	var d time.Duration
	if n, err := strconv.Atoi(s); err == nil {
		if n > int(MaxMetricsWindow/time.Minute) {
			return 0, fmt.Errorf("must be at most %s, got %s minutes", MaxMetricsWindow, truncate(s))
		}
		d = time.Duration(n) * time.Minute
	} else if d, err = time.ParseDuration(s); err != nil {
		return 0, fmt.Errorf(`must be a duration such as "90s", "5m" or "1h" or a number of minutes, got %q`, truncate(s))
	}
	if d <= 0 {
		return 0, fmt.Errorf("must be positive, got %q", truncate(s))
	}
	return d, nil
}

func (s *autoscaleAPI) groupConfig(w http.ResponseWriter, r *http.Request) (config.Group, bool) {
	name := r.PathValue("group")
	g, ok := s.groups.Group(name)
	if !ok {
		s.unknownGroup(w, name)
		return config.Group{}, false
	}
	return g.Config(), true
}

func badRequest(w http.ResponseWriter, err error) {
	writeError(w, http.StatusBadRequest, ErrorResponse{Error: err.Error()})
}

// metrics is GET /v1/groups/{group}/metrics?window=5m&prefix=NAME.
func (s *autoscaleAPI) metrics(w http.ResponseWriter, r *http.Request) {
	g, ok := s.groupConfig(w, r)
	if !ok {
		return
	}
	window, err := parseWindow(r, "window", DefaultMetricsWindow, MaxMetricsWindow)
	if err != nil {
		badRequest(w, err)
		return
	}
	doc, err := s.a.Metrics.Document(r.Context(), g.Name, window, r.URL.Query().Get("prefix"))
	if err != nil {
		s.internal(w, err)
		return
	}
	writeJSON(w, http.StatusOK, doc)
}

// SeriesMetrics are the metrics GET .../series returns without a metric
// parameter, with those the group's policy watches: what the dashboard
// charts.
var SeriesMetrics = []string{"size", "ready", "cpu.p90", "requests_per_second", "latency_ms.p99"}

// SeriesResponse is GET /v1/groups/{group}/series: the series, and the
// policy's target and thresholds to draw on the metrics they watch.
type SeriesResponse struct {
	metrics.Series
	Policy []PolicyLine `json:"policy"`
}

// PolicyLine is a value the group's policy compares a metric with: its
// target ("target") or a rule's threshold ("above", "below").
type PolicyLine struct {
	Metric string  `json:"metric"`
	Value  float64 `json:"value"`
	Kind   string  `json:"kind"`
	// Rule is "target" or the rule's name; Action what the rule does.
	Rule   string `json:"rule"`
	Action string `json:"action,omitempty"`
}

// policyLines lists a's target and rules' thresholds.
func policyLines(a *config.Autoscale) []PolicyLine {
	out := []PolicyLine{}
	if a == nil {
		return out
	}
	if t := a.Target; t != nil {
		out = append(out, PolicyLine{Metric: t.Metric, Value: t.Value, Kind: "target", Rule: config.TargetName})
	}
	for _, r := range a.Rules {
		if r.HasAbove {
			out = append(out, PolicyLine{Metric: r.Metric, Value: r.Above, Kind: "above", Rule: r.Name, Action: r.Action.String()})
		}
		if r.HasBelow {
			out = append(out, PolicyLine{Metric: r.Metric, Value: r.Below, Kind: "below", Rule: r.Name, Action: r.Action.String()})
		}
	}
	return out
}

// series is GET /v1/groups/{group}/series?window=1h&points=360&metric=M...:
// the group's metrics over the window (from the oldest sample when the
// history is shorter) in equal steps.
func (s *autoscaleAPI) series(w http.ResponseWriter, r *http.Request) {
	g, ok := s.groupConfig(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	window, err := parseWindow(r, "window", time.Hour, MaxMetricsWindow)
	if err != nil {
		badRequest(w, err)
		return
	}
	n := DefaultSeriesPoints
	if v := q.Get("points"); v != "" {
		n, err = strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxSeriesPoints {
			badRequest(w, fmt.Errorf("points: must be from 1 to %d, got %q", MaxSeriesPoints, truncate(v)))
			return
		}
	}
	lines := policyLines(g.Autoscale)
	names := q["metric"]
	if len(names) > len(SeriesMetrics)*2 {
		badRequest(w, fmt.Errorf("metric: at most %d, got %d", len(SeriesMetrics)*2, len(names)))
		return
	}
	if len(names) == 0 {
		names = slices.Clone(SeriesMetrics)
		for _, l := range lines {
			if !slices.Contains(names, l.Metric) {
				names = append(names, l.Metric)
			}
		}
	}
	// A source, or a formula the policy reads, is charted as the policy
	// reads it; a formula in the request is not run (only the config's
	// are checked).
	var h policy.Metrics = s.a.Metrics.ForGroup(g.Name)
	if s.a.Sources != nil {
		h = chartable{Metrics: h, sourced: s.a.Sources.ForGroup(g.Name, s.a.Metrics.ForGroup(g.Name)), lines: lines}
	}
	writeJSON(w, http.StatusOK, SeriesResponse{Series: s.a.Metrics.SeriesOf(h, g.Name, names, time.Now(), window, n), Policy: lines})
}

// chartable reads a group's sources, and the formulas its policy reads,
// from sourced; anything else from its own history.
type chartable struct {
	policy.Metrics
	sourced policy.Metrics
	lines   []PolicyLine
}

func (c chartable) Points(path string, from, to time.Time) []metrics.Point {
	if !config.IsFormula(path) || slices.ContainsFunc(c.lines, func(l PolicyLine) bool { return l.Metric == path }) {
		return c.sourced.Points(path, from, to)
	}
	return c.Metrics.Points(path, from, to)
}

// CPUUsageResponse is GET /v1/cpu-usage: each ready instance's CPU in
// step-long periods, from which the CLI prints sacloud-cpu-usage's log lines
// and JSON (metrics.NewCPUUsage).
type CPUUsageResponse struct {
	Servers []metrics.ServerCPU `json:"servers"`
}

// cpuUsage is GET /v1/cpu-usage?prefix=P&prefix=Q&group=G&window=5m&step=1m:
// the ready instances whose names start with any prefix (all when none is
// given), of group G when given.
func (s *autoscaleAPI) cpuUsage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	grp := q.Get("group")
	if grp != "" {
		if _, ok := s.groups.Group(grp); !ok {
			s.unknownGroup(w, grp)
			return
		}
	}
	window, err := parseWindow(r, "window", DefaultMetricsWindow, MaxMetricsWindow)
	if err != nil {
		badRequest(w, err)
		return
	}
	step, err := parseWindow(r, "step", time.Minute, MaxMetricsWindow)
	if err != nil {
		badRequest(w, err)
		return
	}
	prefixes := q["prefix"]
	if len(prefixes) == 0 {
		prefixes = []string{""}
	}
	out := CPUUsageResponse{Servers: []metrics.ServerCPU{}}
	seen := map[string]bool{}
	for _, p := range prefixes {
		for _, sv := range s.a.Metrics.ServersCPU(p, window, step, time.Local) {
			if seen[sv.Name] || grp != "" && !instanceOf(grp, sv.Name) {
				continue
			}
			seen[sv.Name] = true
			if sv.Samples == nil {
				sv.Samples = []metrics.CPUSample{}
			}
			out.Servers = append(out.Servers, sv)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// instanceOf reports whether name is an instance of group: GROUP-NNN. A
// plain prefix test would count web-api-001 as an instance of web.
func instanceOf(group, name string) bool {
	n, ok := strings.CutPrefix(name, group+"-")
	if !ok || n == "" {
		return false
	}
	return !strings.ContainsFunc(n, func(r rune) bool { return r < '0' || r > '9' })
}

// EventsQuery selects events; zero fields do not restrict.
type EventsQuery struct {
	Group string
	// Since keeps events at or after this time.
	Since time.Time
	// After keeps events with a larger id, oldest first: for following.
	After int64
	// Limit bounds the answer (default 1000, at most 10000): the oldest
	// after After when it is set, else the newest.
	Limit int
	// Wait, when positive, waits up to this long for at least one event.
	Wait time.Duration
}

// events is GET /v1/events?group=G&ungrouped=true&since=10m|RFC3339&after=ID&limit=N&wait=30s.
func (s *autoscaleAPI) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sq := store.DecisionQuery{Group: q.Get("group"), Limit: DefaultEventsLimit}
	if sq.Group != "" {
		if _, ok := s.groups.Group(sq.Group); !ok {
			s.unknownGroup(w, sq.Group)
			return
		}
	}
	if v := q.Get("ungrouped"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			badRequest(w, fmt.Errorf("ungrouped: must be true or false, got %q", truncate(v)))
			return
		}
		sq.Ungrouped = b
	}
	if v := q.Get("since"); v != "" {
		t, err := parseSince(v, time.Now())
		if err != nil {
			badRequest(w, err)
			return
		}
		sq.Since = t
	}
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			badRequest(w, fmt.Errorf("after: must be an event id (a number >= 0), got %q", truncate(v)))
			return
		}
		sq.AfterID = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxEventsLimit {
			badRequest(w, fmt.Errorf("limit: must be from 1 to %d, got %q", MaxEventsLimit, truncate(v)))
			return
		}
		sq.Limit = n
	}
	var wait time.Duration
	if v := q.Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > MaxWait {
			badRequest(w, fmt.Errorf("wait: must be a duration from 0 to %s, got %q", MaxWait, truncate(v)))
			return
		}
		wait = d
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	for {
		rows, err := s.a.Store.Decisions(r.Context(), sq)
		if err != nil {
			s.internal(w, err)
			return
		}
		if len(rows) > 0 || wait == 0 || ctx.Err() != nil {
			if rows == nil {
				rows = []Event{}
			}
			writeJSON(w, http.StatusOK, EventsResponse{Events: rows})
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(eventsPoll):
		}
	}
}

// parseSince reads "10m" (that long before now) or an RFC 3339 time.
func parseSince(v string, now time.Time) (time.Time, error) {
	if d, err := ParseWindow(v); err == nil {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf(`since: must be a duration such as "10m" or an RFC 3339 time such as "2026-01-02T15:04:05Z", got %q`, truncate(v))
	}
	return t, nil
}

// policyTest is POST /v1/groups/{group}/policy/test?window=1h&file=NAME with
// an optional candidate policy (YAML) as the body; file names it in errors.
func (s *autoscaleAPI) policyTest(w http.ResponseWriter, r *http.Request) {
	g, ok := s.groupConfig(w, r)
	if !ok {
		return
	}
	window, err := parseWindow(r, "window", DefaultPolicyTestWindow, MaxPolicyTestWindow)
	if err != nil {
		badRequest(w, err)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPolicyBody))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, ErrorResponse{Error: fmt.Sprintf("policy is larger than %d bytes", maxPolicyBody)})
		return
	case err != nil:
		badRequest(w, fmt.Errorf("read policy: %w", err))
		return
	}
	file := r.URL.Query().Get("file")
	if file == "" {
		file = "policy"
	}
	candidate, err := config.ParseAutoscale(truncate(file), body, g, s.a.MetricsInterval, s.a.MetricsKept, s.sourceList()...)
	if err != nil {
		badRequest(w, err)
		return
	}
	if candidate != nil {
		g.Autoscale = candidate
	}
	if g.Autoscale == nil {
		badRequest(w, fmt.Errorf("group %s has no autoscale policy; send a candidate policy to test", g.Name))
		return
	}
	if err := checkPolicyTestCost(g.Autoscale, window, s.a.MetricsInterval, s.a.MetricsRing); err != nil {
		badRequest(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), MaxPolicyTestTime)
	defer cancel()
	to := time.Now()
	hist, srcErr := s.replayHistory(ctx, g.Name)
	decisions, err := policy.Replay(ctx, g.PolicyGroup(), hist, to.Add(-window), to)
	if err == nil {
		err = srcErr()
		if err != nil {
			writeError(w, http.StatusBadGateway, ErrorResponse{Error: fmt.Sprintf("policy test of %s: %v", g.Name, err)})
			return
		}
	}
	switch {
	case r.Context().Err() != nil:
		// Nobody reads an answer; the log says the work stopped.
		s.log.Info("policy test stopped: the client went away", "group", g.Name, "window", window, "after", time.Since(to).Round(time.Millisecond), "err", err)
		return
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, ErrorResponse{Error: fmt.Sprintf("policy test of %s over %s did not finish within %s: %v; test a shorter window", g.Name, window, MaxPolicyTestTime, err)})
		return
	}
	writeJSON(w, http.StatusOK, policyTestResponse(decisions))
}

// policyTestResponse lists a replay's decisions, which have no store id.
func policyTestResponse(decisions []Event) PolicyTestResponse {
	if decisions == nil {
		decisions = []Event{}
	}
	return PolicyTestResponse{Decisions: decisions}
}

// checkPolicyTestCost refuses a replay over MaxPolicyTestSteps or
// MaxPolicyTestSamples, saying what was asked and the longest window allowed.
func checkPolicyTestCost(a *config.Autoscale, window, interval, ring time.Duration) error {
	c := policy.CostOf(a, window, interval, ring)
	if c.Steps > MaxPolicyTestSteps {
		return fmt.Errorf("window %s at autoscale.interval %s is %d evaluations; a policy test makes at most %d: ask for a window of at most %s, or test a longer interval",
			window, a.Interval, c.Steps, MaxPolicyTestSteps, a.Interval*MaxPolicyTestSteps)
	}
	if c.Total() > MaxPolicyTestSamples {
		allowed := a.Interval * time.Duration(MaxPolicyTestSamples/c.Samples)
		if allowed == 0 {
			return fmt.Errorf("the policy reads %s back, up to %d samples at each evaluation; a policy test scans at most %d in all: test a shorter window in the policy",
				c.Window, c.Samples, MaxPolicyTestSamples)
		}
		return fmt.Errorf("window %s at autoscale.interval %s is %d evaluations, each scanning up to %d samples (the policy reads %s back), %d in all; a policy test scans at most %d: ask for a window of at most %s",
			window, a.Interval, c.Steps, c.Samples, c.Window, c.Total(), MaxPolicyTestSamples, allowed)
	}
	return nil
}
