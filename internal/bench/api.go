package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
)

// API talks to a running shoal over its unix socket with api.Client, the
// client the CLI uses, adding the few calls the benchmarks make every second
// in the form they use them: cheaper than a CLI process per poll, which
// would itself load the 2 cores being measured.
type API struct {
	*api.Client
}

// NewAPI returns a client for the shoal listening on socket.
func NewAPI(socket string) *API { return &API{Client: api.NewClient(socket)} }

// Event is one policy decision, as GET /v1/events lists it.
type Event = api.Event

// EventsAfter returns group's policy decisions after the one with id after
// (0: the newest), oldest first, at most limit.
func (a *API) EventsAfter(ctx context.Context, group string, after int64, limit int) ([]Event, error) {
	return a.Events(ctx, api.EventsQuery{Group: group, After: after, Limit: limit})
}

// InService counts the instances of group in service, as shoal counts them
// (GET /v1/groups/NAME): the one answer to "how many are in service".
func (a *API) InService(ctx context.Context, group string) (int, error) {
	st, err := a.Group(ctx, group)
	if err != nil {
		return 0, err
	}
	return st.InService, nil
}

// Instances counts every instance of group whatever its state: each one
// costs, starting or draining.
func (a *API) Instances(ctx context.Context, group string) (int, error) {
	st, err := a.Group(ctx, group)
	if err != nil {
		return 0, err
	}
	return len(st.Instances), nil
}

// Size scales group to n with a job and waits until the job ends.
func (a *API) Size(ctx context.Context, group string, n int, timeout time.Duration) error {
	j, err := a.Scale(ctx, group, api.ScaleRequest{Size: &n, Source: "shoal-bench"})
	if err != nil {
		return fmt.Errorf("scale %s to %d: %w", group, n, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := a.WaitJob(ctx, j.ID); err != nil {
		return fmt.Errorf("scale %s to %d: %w", group, n, err)
	}
	return nil
}
