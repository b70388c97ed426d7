package config

import (
	"slices"
	"testing"
)

var (
	rangePlain  = Range{Min: 2, Max: 5}
	rangeLadder = Range{Min: 0, Max: 8, Plans: []Plan{{"off", 0}, {"small", 2}, {"large", 6}}}
)

func TestRangeStep(t *testing.T) {
	for _, c := range []struct {
		name    string
		r       Range
		from    int
		dir     Direction
		to      int
		refusal string
	}{
		{"up by one", rangePlain, 2, Up, 3, ""},
		{"up to max", rangePlain, 4, Up, 5, ""},
		{"up at max", rangePlain, 5, Up, 5, "already at max_size 5"},
		{"up above max", rangePlain, 7, Up, 7, "already at max_size 5"},
		{"down by one", rangePlain, 5, Down, 4, ""},
		{"down at min", rangePlain, 2, Down, 2, "already at min_size 2"},
		{"down below min", rangePlain, 1, Down, 1, "already at min_size 2"},
		{"up to the next plan", rangeLadder, 0, Up, 2, ""},
		{"up from between plans", rangeLadder, 3, Up, 6, ""},
		{"up at the largest plan", rangeLadder, 6, Up, 6, "already at the largest plan (large: 6)"},
		{"up above the largest plan, within max", rangeLadder, 7, Up, 7, "already at the largest plan (large: 6)"},
		{"down to the previous plan", rangeLadder, 6, Down, 2, ""},
		{"down from between plans", rangeLadder, 4, Down, 2, ""},
		{"down at the smallest plan", rangeLadder, 0, Down, 0, "already at the smallest plan (off: 0)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			to, refusal := c.r.Step(c.from, c.dir)
			if to != c.to || refusal != c.refusal {
				t.Errorf("Step(%d, %d) = %d, %q; want %d, %q", c.from, c.dir, to, refusal, c.to, c.refusal)
			}
		})
	}
}

func TestRangeBounds(t *testing.T) {
	for _, c := range []struct {
		n        int
		contains bool
		clamp    int
		refusal  string
	}{
		{1, false, 2, "size 1 is outside group web's range [2, 5]"},
		{2, true, 2, ""},
		{4, true, 4, ""},
		{5, true, 5, ""},
		{6, false, 5, "size 6 is outside group web's range [2, 5]"},
		{-1, false, 2, "size -1 is outside group web's range [2, 5]"},
	} {
		if got := rangePlain.Contains(c.n); got != c.contains {
			t.Errorf("Contains(%d) = %v, want %v", c.n, got, c.contains)
		}
		if got := rangePlain.Clamp(c.n); got != c.clamp {
			t.Errorf("Clamp(%d) = %d, want %d", c.n, got, c.clamp)
		}
		if got := rangePlain.Refusal("web", c.n); got != c.refusal {
			t.Errorf("Refusal(%d) = %q, want %q", c.n, got, c.refusal)
		}
	}
	if got, want := rangePlain.String(), "min_size..max_size (2..5)"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}

func TestRangePlans(t *testing.T) {
	for _, c := range []struct {
		name  string
		r     Range
		wake  int
		names []string
		valid string
	}{
		{"no plans, min 0", Range{Min: 0, Max: 3}, 1, []string{}, "the group has no plans"},
		{"no plans, min 2", rangePlain, 2, []string{}, "the group has no plans"},
		{"rangeLadder from 0", rangeLadder, 2, []string{"off", "small", "large"}, "plans: off, small, large"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.r.WakeSize(); got != c.wake {
				t.Errorf("WakeSize = %d, want %d", got, c.wake)
			}
			if got := c.r.PlanNames(); !slices.Equal(got, c.names) {
				t.Errorf("PlanNames = %q, want %q", got, c.names)
			}
			if got := c.r.ValidPlans(); got != c.valid {
				t.Errorf("ValidPlans = %q, want %q", got, c.valid)
			}
		})
	}
	for _, c := range []struct {
		name string
		size int
		ok   bool
	}{{"off", 0, true}, {"large", 6, true}, {"medium", 0, false}} {
		p, ok := rangeLadder.PlanByName(c.name)
		if ok != c.ok || ok && p != (Plan{c.name, c.size}) {
			t.Errorf("PlanByName(%s) = %v, %v", c.name, p, ok)
		}
		if ok {
			if q, ok := rangeLadder.PlanBySize(c.size); !ok || q != p {
				t.Errorf("PlanBySize(%d) = %v, %v; want %v", c.size, q, ok, p)
			}
		}
	}
	if _, ok := rangeLadder.PlanBySize(3); ok {
		t.Errorf("PlanBySize(3) found a plan between two")
	}
}

func TestGroupRange(t *testing.T) {
	g := Group{MinSize: 1, MaxSize: 4, Plans: []Plan{{"a", 1}, {"b", 4}}}
	r := g.Range()
	if r.Min != 1 || r.Max != 4 || !slices.Equal(r.Plans, g.Plans) {
		t.Errorf("Range = %+v, want the group's min_size, max_size and plans", r)
	}
}
