// Package source reads the metrics shoal does not measure itself
// (metrics.sources): a Prometheus query, a command, an HTTP endpoint's JSON.
// A Set reads each source once per its interval, in a goroutine of its own
// with a timeout, so a slow or hanging source delays neither the collector
// nor another source; a History puts the values beside a group's own
// metrics and evaluates formulas over both, for the policies.
//
// Per-instance values: a reading may give one value per instance (a
// Prometheus vector whose samples carry an `instance` label, a command's or
// endpoint's {"instances": {...}} object). Each key is matched to shoal's
// instances by name, by address (host:port: the label Prometheus gives a
// target it scrapes at the instance's port), or, for a key that is a bare
// host, to every instance on that host; keys matching none are ignored. The
// group's value is the average over its matched in-service instances: a
// per-instance metric, as cpu.avg is. A single value is the group's total,
// as queue is.
package source

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/itchyny/gojq"
	"github.com/shoal-lb/shoal/internal/config"
)

// Reading is what one read of a source gave: one value, or one per
// instance (by the label or key the source gave).
type Reading struct {
	// Value is the one value when Single.
	Value  float64
	Single bool
	// Instances are the values by instance label or key, if it gave any
	// (a Prometheus sample keeps its target's instance label even when it
	// is the only one).
	Instances map[string]float64
}

// maxBody bounds what a read takes from a server or a command.
const maxBody = 4 << 20

// Read reads s once, within s.Timeout.
func Read(ctx context.Context, s config.Source) (Reading, error) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	var (
		r   Reading
		err error
	)
	switch {
	case s.Prometheus != nil:
		r, err = readProm(ctx, s.Prometheus)
	case s.HTTP != nil:
		r, err = readHTTP(ctx, s.HTTP)
	default:
		r, err = readCommand(ctx, s.Command)
	}
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("no answer within %s: %w", s.Timeout, err)
	}
	if err != nil {
		return Reading{}, fmt.Errorf("source %s: %w", s.Name, err)
	}
	return r, nil
}

// readCommand runs argv and parses what it prints; a failure says what the
// command wrote to stderr.
func readCommand(ctx context.Context, argv []string) (Reading, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stdout, stderr limited
	stdout.max, stderr.max = maxBody, 2048
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second // a child holding the pipes open does not hang the read
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return Reading{}, fmt.Errorf("command %s: %w; stderr: %s", argv[0], err, msg)
		}
		return Reading{}, fmt.Errorf("command %s: %w", argv[0], err)
	}
	r, err := parseOutput(stdout.Bytes())
	if err != nil {
		return Reading{}, fmt.Errorf("command %s: %w", argv[0], err)
	}
	return r, nil
}

// limited is a buffer that keeps the first max bytes.
type limited struct {
	bytes.Buffer
	max int
}

func (l *limited) Write(p []byte) (int, error) {
	if room := l.max - l.Len(); room > 0 {
		l.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// parseOutput reads a number, {"value": N} or {"instances": {"NAME": N}}.
func parseOutput(out []byte) (Reading, error) {
	s := strings.TrimSpace(string(out))
	if v, err := strconv.ParseFloat(s, 64); err == nil {
		return checked(Reading{Value: v, Single: true})
	}
	var doc struct {
		Value     *float64           `json:"value"`
		Instances map[string]float64 `json:"instances"`
	}
	if err := json.Unmarshal([]byte(s), &doc); err != nil || (doc.Value == nil) == (doc.Instances == nil) {
		return Reading{}, fmt.Errorf(`printed %q; want a number, {"value": N} or {"instances": {"NAME": N, ...}}`, clip(s))
	}
	if doc.Value != nil {
		return checked(Reading{Value: *doc.Value, Single: true})
	}
	return checked(Reading{Instances: doc.Instances})
}

func checked(r Reading) (Reading, error) {
	if math.IsNaN(r.Value) || math.IsInf(r.Value, 0) {
		return Reading{}, fmt.Errorf("value %v is not a finite number", r.Value)
	}
	for k, v := range r.Instances {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return Reading{}, fmt.Errorf("value %v of instance %s is not a finite number", v, k)
		}
	}
	return r, nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// readHTTP gets u and applies the jq expression to its JSON.
func readHTTP(ctx context.Context, h *config.HTTPSource) (Reading, error) {
	body, err := get(ctx, http.DefaultClient, h.URL, nil)
	if err != nil {
		return Reading{}, err
	}
	var doc any
	if err := json.Unmarshal(body, &doc); err != nil {
		return Reading{}, fmt.Errorf("GET %s: not JSON: %w", redact(h.URL), err)
	}
	q, err := gojq.Parse(h.JSONPath)
	if err != nil {
		return Reading{}, fmt.Errorf("json_path: %w", err)
	}
	it := q.RunWithContext(ctx, doc)
	v, ok := it.Next()
	if !ok {
		return Reading{}, fmt.Errorf("json_path %s gave nothing", h.JSONPath)
	}
	if err, isErr := v.(error); isErr {
		return Reading{}, fmt.Errorf("json_path %s: %w", h.JSONPath, err)
	}
	switch x := v.(type) {
	case float64:
		return checked(Reading{Value: x, Single: true})
	case int:
		return Reading{Value: float64(x), Single: true}, nil
	case map[string]any:
		r := Reading{Instances: map[string]float64{}}
		for k, e := range x {
			f, ok := e.(float64)
			if i, isInt := e.(int); isInt {
				f, ok = float64(i), true
			}
			if !ok {
				return Reading{}, fmt.Errorf("json_path %s: instance %s has %v, not a number", h.JSONPath, k, e)
			}
			r.Instances[k] = f
		}
		return checked(r)
	}
	return Reading{}, fmt.Errorf("json_path %s gave %v; want a number or an object of instance → number", h.JSONPath, v)
}

// get fetches u with auth applied, failing on a status other than 200.
func get(ctx context.Context, c *http.Client, u string, auth func(*http.Request) error) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if auth != nil {
		if err := auth(req); err != nil {
			return nil, err
		}
	}
	resp, err := c.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is named once, redacted, below
		}
		return nil, fmt.Errorf("GET %s: %w", redact(u), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", redact(u), err)
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusUnprocessableEntity {
		return nil, fmt.Errorf("GET %s: %s: %s", redact(u), resp.Status, clip(strings.TrimSpace(string(body))))
	}
	return body, nil
}

// redact is u without its query (a PromQL query is long, and an endpoint's
// query string may carry a key).
func redact(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i]
	}
	return u
}

// prom is a Prometheus server's client for one source.
type prom struct {
	cfg    *config.PromSource
	client *http.Client
}

func newProm(p *config.PromSource) (*prom, error) {
	c := &http.Client{}
	if p.CAFile != "" {
		pem, err := os.ReadFile(p.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %s holds no PEM certificate", p.CAFile)
		}
		// A client per read (the CA file may be replaced): no idle
		// connections left behind in a transport nobody uses again.
		c.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, DisableKeepAlives: true}
	}
	return &prom{cfg: p, client: c}, nil
}

// auth sets the request's credentials, read from their files now so that a
// rotated token is used at the next read.
func (p *prom) auth(req *http.Request) error {
	a := p.cfg.Auth
	switch {
	case a == nil:
	case a.BearerFile != "":
		tok, err := config.ReadSecret(a.BearerFile)
		if err != nil {
			return fmt.Errorf("bearer_file: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	case a.BearerEnv != "":
		tok, err := config.ReadSecretEnv(a.BearerEnv)
		if err != nil {
			return fmt.Errorf("bearer_env: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	case a.Basic != nil:
		read, what, from := config.ReadSecret, "password_file", a.Basic.PasswordFile
		if a.Basic.PasswordEnv != "" {
			read, what, from = config.ReadSecretEnv, "password_env", a.Basic.PasswordEnv
		}
		pw, err := read(from)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		req.SetBasicAuth(a.Basic.Username, pw)
	}
	return nil
}

// promAnswer is the API's envelope; Data is a query's result, or
// format_query's string.
type promAnswer struct {
	Status    string          `json:"status"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Data      json.RawMessage `json:"data"`
}

// promResult is a query's data.
type promResult struct {
	ResultType string          `json:"resultType"`
	Result     json.RawMessage `json:"result"`
}

func (a *promAnswer) result() (promResult, error) {
	var r promResult
	if err := json.Unmarshal(a.Data, &r); err != nil {
		return r, fmt.Errorf("not a query's result: %w", err)
	}
	return r, nil
}

type promSeries struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
	Values [][2]any          `json:"values"`
}

func (p *prom) call(ctx context.Context, path string, q url.Values) (*promAnswer, error) {
	u := strings.TrimRight(p.cfg.URL, "/") + path + "?" + q.Encode()
	body, err := get(ctx, p.client, u, p.auth)
	if err != nil {
		return nil, err
	}
	var a promAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, fmt.Errorf("GET %s: not Prometheus's API: %w", redact(u), err)
	}
	if a.Status != "success" {
		return nil, &RefusedError{Query: p.cfg.Query, Type: a.ErrorType, Msg: a.Error}
	}
	return &a, nil
}

// readProm runs the instant query.
func readProm(ctx context.Context, ps *config.PromSource) (Reading, error) {
	p, err := newProm(ps)
	if err != nil {
		return Reading{}, err
	}
	a, err := p.call(ctx, "/api/v1/query", url.Values{"query": {ps.Query}})
	if err != nil {
		return Reading{}, err
	}
	data, err := a.result()
	if err != nil {
		return Reading{}, err
	}
	switch data.ResultType {
	case "scalar":
		var s [2]any
		if err := json.Unmarshal(data.Result, &s); err != nil {
			return Reading{}, fmt.Errorf("query %q: %w", clip(ps.Query), err)
		}
		v, err := sampleValue(s[1])
		if err != nil {
			return Reading{}, err
		}
		return checked(Reading{Value: v, Single: true})
	case "vector":
	default:
		return Reading{}, fmt.Errorf("query %q gave a %s; want an instant vector of one sample, or one per instance", clip(ps.Query), data.ResultType)
	}
	var series []promSeries
	if err := json.Unmarshal(data.Result, &series); err != nil {
		return Reading{}, fmt.Errorf("query %q: %w", clip(ps.Query), err)
	}
	return vectorReading(ps.Query, series, func(s promSeries) any { return s.Value[1] })
}

// vectorReading makes one reading of a vector's samples: one sample is
// the value (and its instance's, if labelled); several must each have a
// distinct instance label.
func vectorReading(query string, series []promSeries, value func(promSeries) any) (Reading, error) {
	if len(series) == 0 {
		return Reading{}, fmt.Errorf("query %q gave no sample", clip(query))
	}
	r := Reading{Single: len(series) == 1}
	for _, s := range series {
		v, err := sampleValue(value(s))
		if err != nil {
			return Reading{}, err
		}
		r.Value = v
		inst, ok := s.Metric["instance"]
		switch {
		case !ok && r.Single:
			continue
		case !ok:
			return Reading{}, fmt.Errorf("query %q gave %d series, not all with an instance label; aggregate it to one (sum(...)) or by (instance)", clip(query), len(series))
		}
		if r.Instances == nil {
			r.Instances = map[string]float64{}
		}
		if _, dup := r.Instances[inst]; dup {
			return Reading{}, fmt.Errorf("query %q gave %d series, several for instance %s; aggregate it to one (sum(...)) or by (instance)", clip(query), len(series), inst)
		}
		r.Instances[inst] = v
	}
	return checked(r)
}

func sampleValue(v any) (float64, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("sample value %v is not a string", v)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("sample value %q: %w", s, err)
	}
	return f, nil
}

// RangeReading is one step of a query_range: the readings at T.
type RangeReading struct {
	T time.Time
	Reading
}

// QueryRange replays a Prometheus source over [from, to] at step, as the
// instant query would have read it at each step.
func QueryRange(ctx context.Context, s config.Source, from, to time.Time, step time.Duration) ([]RangeReading, error) {
	p, err := newProm(s.Prometheus)
	if err != nil {
		return nil, err
	}
	// Steps start at from to the millisecond: a replay evaluating at from
	// plus whole intervals sees at each step what an instant query then
	// would have.
	unix := func(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMilli())/1e3, 'f', 3, 64) }
	q := url.Values{"query": {s.Prometheus.Query}, "start": {unix(from)}, "end": {unix(to)},
		"step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)}}
	a, err := p.call(ctx, "/api/v1/query_range", q)
	if err != nil {
		return nil, fmt.Errorf("source %s: %w", s.Name, err)
	}
	data, err := a.result()
	if err != nil {
		return nil, fmt.Errorf("source %s: %w", s.Name, err)
	}
	if data.ResultType != "matrix" {
		return nil, fmt.Errorf("source %s: query_range gave a %s", s.Name, data.ResultType)
	}
	var series []promSeries
	if err := json.Unmarshal(data.Result, &series); err != nil {
		return nil, fmt.Errorf("source %s: %w", s.Name, err)
	}
	// Regroup by time: each step is what the instant query read then.
	byT := map[float64][]promSeries{}
	for _, s := range series {
		for _, v := range s.Values {
			t, _ := v[0].(float64)
			byT[t] = append(byT[t], promSeries{Metric: s.Metric, Value: v})
		}
	}
	ts := make([]float64, 0, len(byT))
	for t := range byT {
		ts = append(ts, t)
	}
	sort.Float64s(ts)
	var out []RangeReading
	for _, t := range ts {
		r, err := vectorReading(s.Prometheus.Query, byT[t], func(s promSeries) any { return s.Value[1] })
		if err != nil {
			return nil, fmt.Errorf("source %s: at %s: %w", s.Name, time.Unix(int64(t), 0).UTC().Format(time.RFC3339), err)
		}
		sec, frac := math.Modf(t)
		out = append(out, RangeReading{T: time.Unix(int64(sec), int64(frac*1e9)), Reading: r})
	}
	return out, nil
}

// CheckQuery asks s's server to parse its query (GET /api/v1/format_query,
// Prometheus 2.38 and later): a syntax error is an error; reached is false
// when the server could not be asked, so that the caller can say the query
// is checked at the first read instead.
func CheckQuery(ctx context.Context, s config.Source) (reached bool, err error) {
	p, err := newProm(s.Prometheus)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	_, err = p.call(ctx, "/api/v1/format_query", url.Values{"query": {s.Prometheus.Query}})
	var refused *RefusedError
	if err == nil || errors.As(err, &refused) {
		return true, err
	}
	return false, err
}

// RefusedError is Prometheus's refusal of a query (a syntax error, say).
type RefusedError struct{ Query, Type, Msg string }

func (e *RefusedError) Error() string {
	return fmt.Sprintf("prometheus refused the query %q: %s: %s", clip(e.Query), e.Type, e.Msg)
}
