package jobrun

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/store"
)

// A day-two act that can never succeed as written is an input error, and
// records no job.
func TestSubmitInstancesInputErrors(t *testing.T) {
	g := newGroup(t, ladder)
	st, err := store.Open(filepath.Join(t.TempDir(), "shoal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := NewManager(context.Background(), fixed{g}, st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, tc := range []struct {
		req  InstanceRequest
		is   error
		want string
	}{
		{InstanceRequest{Kind: Drain, Instances: []string{"web-001"}}, ErrUnknownInstance, `unknown instance "web-001"`},
		{InstanceRequest{Kind: "reboot", Instances: []string{"web-001"}}, ErrInvalid, `unknown act "reboot"`},
		{InstanceRequest{Kind: Drain}, ErrInvalid, "name at least one instance"},
		{InstanceRequest{Kind: Replace, Instances: []string{"web-001"}, Options: group.ActOptions{NoReplace: true}}, ErrInvalid, "no_replace is an option of drain only"},
		{InstanceRequest{Kind: Drain, Instances: []string{"web-001"}, Options: group.ActOptions{Decrement: true}}, ErrInvalid, "decrement is an option of standby only"},
		{InstanceRequest{Kind: Protect, Instances: []string{"web-001"}, Options: group.ActOptions{TerminateFirst: true}}, ErrInvalid, "terminate_first is an option of"},
		{InstanceRequest{Kind: Drain, Instances: []string{"web-001"}, Options: group.ActOptions{TerminateFirst: true, NoReplace: true}}, ErrInvalid, "not with no_replace"},
	} {
		_, err := m.SubmitInstances(context.Background(), tc.req)
		var in *InputError
		if !errors.As(err, &in) || !errors.Is(err, tc.is) || !strings.Contains(in.Msg, tc.want) {
			t.Errorf("%+v: %v, want an input error %q", tc.req, err, tc.want)
		}
	}
	if list, _ := m.List(context.Background(), "", 10); len(list) != 0 {
		t.Fatalf("jobs recorded for input errors: %+v", list)
	}
}
