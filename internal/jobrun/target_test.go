package jobrun

import (
	"context"
	"errors"
	"testing"
)

func TestTarget(t *testing.T) {
	g := newGroup(t, ladder)
	if err := g.SetDesired(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		req    Request
		target int
		err    error
	}{
		{Request{Kind: Up}, 5, nil},
		{Request{Kind: Down}, 2, nil},
		{Request{Kind: Plan, Plan: "smallest"}, 2, nil},
		{Request{Kind: Size, Size: 6}, 6, nil},
		{Request{Kind: Up, Plan: "smallest"}, 3, nil}, // would not move: stays
		{Request{Kind: Plan, Plan: "huge"}, 0, ErrUnknownPlan},
		{Request{Kind: Size, Size: 7}, 0, ErrInvalid},
	} {
		got, err := Target(g, tc.req)
		if got != tc.target || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("Target(%+v) = %d, %v; want %d, %v", tc.req, got, err, tc.target, tc.err)
		}
		var inErr *InputError
		if err != nil && !errors.As(err, &inErr) {
			t.Errorf("Target(%+v): %T is not an *InputError", tc.req, err)
		}
	}
}
