package group

import "testing"

func TestInstanceStatusServing(t *testing.T) {
	for _, c := range []struct {
		state  State
		health string
		want   bool
	}{
		{InService, "UP", true},
		{InService, "UP 1/2", false}, // on its way down
		{InService, "DRAIN", false},
		{InService, "-", false}, // HAProxy did not answer
		{Unhealthy, "UP", false},
		{Starting, "UP", false},
	} {
		in := InstanceStatus{State: c.state, Health: c.health}
		if got := in.Serving(); got != c.want {
			t.Errorf("state %s health %q: Serving() = %v, want %v", c.state, c.health, got, c.want)
		}
	}
}
