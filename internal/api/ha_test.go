package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"testing"
)

// standby is an HA node that does not lead.
type standby struct{ leader string }

func (s standby) Leader() (string, bool) { return s.leader, false }
func (s standby) Status(context.Context) (HAStatus, error) {
	return HAStatus{Node: "b", Leader: s.leader, Role: "standby"}, nil
}
func (s standby) StepDown(context.Context) (StepDownResponse, error) {
	return StepDownResponse{}, ErrNotLeader
}

// TestHAStandby: a standby answers reads, refuses changes with 503 naming
// the leader, and a step-down with 409.
func TestHAStandby(t *testing.T) {
	h := NewHandler(nil, nil, slog.New(slog.DiscardHandler), "", WithHA(standby{leader: "a"}))
	c := serveUnix(t, h)
	ctx := context.Background()
	st, err := c.HA(ctx)
	if err != nil || st.Role != "standby" || st.Leader != "a" {
		t.Fatalf("GET /v1/ha = %+v, %v", st, err)
	}
	two := 2
	for what, err := range map[string]error{
		"scale":  func() error { _, err := c.Scale(ctx, "web", ScaleRequest{Size: &two}); return err }(),
		"deploy": func() error { _, err := c.Deploy(ctx, "web", DeployRequest{}); return err }(),
		"drain": func() error {
			_, err := c.Instances(ctx, "drain", InstancesRequest{Instances: []string{"web-001"}})
			return err
		}(),
	} {
		var ae *Error
		if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || ae.ErrorResponse.Error != "standby: the leader is a" {
			t.Errorf("%s on a standby: %v, want 503 naming the leader", what, err)
		}
	}
	_, err = c.StepDown(ctx)
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict {
		t.Errorf("step-down on a standby: %v, want 409", err)
	}
}
