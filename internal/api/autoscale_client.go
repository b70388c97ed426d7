package api

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/shoal-lb/shoal/internal/metrics"
)

// Metrics returns group's metrics document over window (0: the server's
// default, 5m) for the instances whose names start with prefix.
func (c *Client) Metrics(ctx context.Context, group string, window time.Duration, prefix string) (*metrics.Document, error) {
	q := url.Values{}
	if window > 0 {
		q.Set("window", window.String())
	}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	var d metrics.Document
	if err := c.do(ctx, http.MethodGet, "/v1/groups/"+url.PathEscape(group)+"/metrics?"+q.Encode(), nil, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// CPUUsage returns the ready instances whose names start with one of
// prefixes (all when there are none), of group when it is not "", with
// their CPU in step-long periods over window.
func (c *Client) CPUUsage(ctx context.Context, group string, prefixes []string, window, step time.Duration) ([]metrics.ServerCPU, error) {
	q := url.Values{"prefix": prefixes}
	if group != "" {
		q.Set("group", group)
	}
	if window > 0 {
		q.Set("window", window.String())
	}
	if step > 0 {
		q.Set("step", step.String())
	}
	var r CPUUsageResponse
	return r.Servers, c.do(ctx, http.MethodGet, "/v1/cpu-usage?"+q.Encode(), nil, &r)
}

// Events returns the events q selects, oldest first. With q.Wait it
// long-polls: the answer comes as soon as there is one event, or empty
// after q.Wait.
func (c *Client) Events(ctx context.Context, q EventsQuery) ([]Event, error) {
	v := url.Values{}
	if q.Group != "" {
		v.Set("group", q.Group)
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if q.After > 0 {
		v.Set("after", strconv.FormatInt(q.After, 10))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Wait > 0 {
		v.Set("wait", q.Wait.String())
	}
	var r EventsResponse
	return r.Events, c.do(ctx, http.MethodGet, "/v1/events?"+v.Encode(), nil, &r)
}

// PolicyTest replays the stored metrics of group over the last window
// (0: the server's default, 1h) through its policy, or through policyYAML
// when that is not empty, and returns the decisions it would have made.
func (c *Client) PolicyTest(ctx context.Context, group string, window time.Duration, policyYAML []byte) ([]Event, error) {
	return c.PolicyTestFile(ctx, group, window, "", policyYAML)
}

// PolicyTestFile is PolicyTest with the candidate's file name, which the
// server's FILE:LINE:COL errors then name.
func (c *Client) PolicyTestFile(ctx context.Context, group string, window time.Duration, file string, policyYAML []byte) ([]Event, error) {
	q := url.Values{}
	if window > 0 {
		q.Set("window", window.String())
	}
	if file != "" {
		q.Set("file", file)
	}
	var r PolicyTestResponse
	err := c.doRaw(ctx, http.MethodPost, "/v1/groups/"+url.PathEscape(group)+"/policy/test?"+q.Encode(), "application/yaml", policyYAML, &r)
	return r.Decisions, err
}
