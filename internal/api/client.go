package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
	"time"

	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/jobrun"
)

// ErrCoreNotRunning means nothing answers on the socket.
var ErrCoreNotRunning = errors.New("shoal core is not running")

// Error is an error answer from the API.
type Error struct {
	Status int
	ErrorResponse
}

func (e *Error) Error() string { return e.ErrorResponse.Error }

// Client talks to a running core.
type Client struct {
	socket string
	http   *http.Client
}

// NewClient returns a client for the core listening on a unix socket.
func NewClient(socket string) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}
	return &Client{socket: socket, http: &http.Client{Transport: tr}}
}

// Status returns every group's status.
func (c *Client) Status(ctx context.Context) (StatusResponse, error) {
	var s StatusResponse
	return s, c.do(ctx, http.MethodGet, "/v1/status", nil, &s)
}

// Group returns one group's status.
func (c *Client) Group(ctx context.Context, name string) (group.Status, error) {
	var s group.Status
	return s, c.do(ctx, http.MethodGet, "/v1/groups/"+url.PathEscape(name), nil, &s)
}

// Scale submits a scaling request.
func (c *Client) Scale(ctx context.Context, groupName string, req ScaleRequest) (jobrun.Job, error) {
	var j jobrun.Job
	return j, c.do(ctx, http.MethodPost, "/v1/groups/"+url.PathEscape(groupName)+"/scale", req, &j)
}

// Deploy submits a deploy (rolling, or a canary by the group's deploy.strategy).
func (c *Client) Deploy(ctx context.Context, groupName string, req DeployRequest) (jobrun.Job, error) {
	var j jobrun.Job
	return j, c.do(ctx, http.MethodPost, "/v1/groups/"+url.PathEscape(groupName)+"/deploy", req, &j)
}

// Instances submits a day-two act (drain, replace, ...) on named instances.
func (c *Client) Instances(ctx context.Context, act string, req InstancesRequest) (jobrun.Job, error) {
	var j jobrun.Job
	err := c.do(ctx, http.MethodPost, "/v1/instances/"+url.PathEscape(act), req, &j)
	return j, err
}

// Jobs lists the newest jobs.
func (c *Client) Jobs(ctx context.Context, groupName string, limit int) ([]jobrun.Job, error) {
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	if groupName != "" {
		q.Set("group", groupName)
	}
	var r JobsResponse
	return r.Jobs, c.do(ctx, http.MethodGet, "/v1/jobs?"+q.Encode(), nil, &r)
}

// Job returns one job; wait > 0 long-polls until it ends or wait passes.
func (c *Client) Job(ctx context.Context, id string, wait time.Duration) (jobrun.Job, error) {
	path := "/v1/jobs/" + url.PathEscape(id)
	if wait > 0 {
		path += "?wait=" + wait.String()
	}
	var j jobrun.Job
	return j, c.do(ctx, http.MethodGet, path, nil, &j)
}

// WaitJob long-polls job id until it ends and returns it; a job that ended
// other than done (failed, ignored) is an error with its state and reason.
// ctx bounds the wait.
func (c *Client) WaitJob(ctx context.Context, id string) (jobrun.Job, error) {
	for {
		j, err := c.Job(ctx, id, 10*time.Second)
		if err != nil {
			return j, fmt.Errorf("job %s: %w", id, err)
		}
		if j.State.Terminal() {
			if j.State != jobrun.Done {
				return j, fmt.Errorf("job %s %s: %s", id, j.State, j.Reason)
			}
			return j, nil
		}
	}
}

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	if body == nil {
		return c.doRaw(ctx, method, path, "", nil, out)
	}
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	return c.doRaw(ctx, method, path, "application/json", b, out)
}

// doRaw sends body as is (none when contentType is empty) and decodes the
// JSON answer into out, or returns the API's error.
func (c *Client) doRaw(ctx context.Context, method, path, contentType string, body []byte, out any) error {
	resp, err := c.send(ctx, method, path, contentType, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("read answer from shoal core: %w", err)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode answer from shoal core: %w", err)
	}
	return nil
}

// stream sends a GET and returns the answer to read as it arrives, or the
// API's error.
func (c *Client) stream(ctx context.Context, path string) (*http.Response, error) {
	return c.send(ctx, http.MethodGet, path, "", nil)
}

// send sends a request and returns a successful answer unread; an error
// answer is read and returned as an *Error.
func (c *Client) send(ctx context.Context, method, path, contentType string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if contentType != "" {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://shoal"+path, rd)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w (nothing answers on %s; start it with `shoal serve`)", ErrCoreNotRunning, c.socket)
		}
		return nil, fmt.Errorf("talk to shoal core at %s: %w", c.socket, err)
	}
	if resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("read answer from shoal core: %w", err)
	}
	e := &Error{Status: resp.StatusCode}
	if json.Unmarshal(data, &e.ErrorResponse) != nil || e.ErrorResponse.Error == "" {
		e.ErrorResponse.Error = fmt.Sprintf("%s: %s", resp.Status, bytes.TrimSpace(data))
	}
	return nil, e
}
