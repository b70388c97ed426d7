package main

import (
	"context"
	"fmt"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/jobs"
	"github.com/shoal-lb/shoal/internal/metrics"
)

// API talks to a running shoal over its unix socket (api.Client), with the
// few calls the benchmarks make every second in the form they use them:
// cheaper than a CLI process per poll, which would itself load the 2 cores
// being measured.
type API struct {
	*api.Client
}

// NewAPI returns a client for the shoal listening on socket.
func NewAPI(socket string) *API { return &API{Client: api.NewClient(socket)} }

// Event is one policy decision, as GET /v1/events lists it.
type Event = api.Event

// Window returns group's metrics document over the window ending now.
func (a *API) Window(ctx context.Context, group string, window time.Duration) (*metrics.Document, error) {
	return a.Metrics(ctx, group, window, "")
}

// EventsAfter returns group's policy decisions after the one with id after
// (0: the newest), oldest first, at most limit.
func (a *API) EventsAfter(ctx context.Context, group string, after int64, limit int) ([]Event, error) {
	return a.Events(ctx, api.EventsQuery{Group: group, After: after, Limit: limit})
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
