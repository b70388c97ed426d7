package metrics

import (
	"testing"
	"time"
)

func TestResample(t *testing.T) {
	from := time.Unix(1000, 0)
	pts := []Point{
		{T: from.Add(-time.Second), V: 99}, // before the window
		{T: from, V: 1},
		{T: from.Add(4 * time.Second), V: 3},
		{T: from.Add(25 * time.Second), V: 7},
		{T: from.Add(30 * time.Second), V: 99}, // past the last step
	}
	got := resample(pts, from, 10*time.Second, 3)
	want := []*float64{num(2), nil, num(7)}
	if len(got) != len(want) {
		t.Fatalf("got %d steps, want %d", len(got), len(want))
	}
	for i := range want {
		switch {
		case (got[i] == nil) != (want[i] == nil):
			t.Errorf("step %d: got %v, want %v", i, got[i], want[i])
		case got[i] != nil && *got[i] != *want[i]:
			t.Errorf("step %d: got %v, want %v", i, *got[i], *want[i])
		}
	}
}
