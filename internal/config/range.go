package config

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// Range is a group's size range: min_size..max_size and the plan ladder
// inside it. It is the one place that knows what sizes a group may have and
// what "one step up or down" means, so that config, group, jobs and policy
// agree (and say so in the same words).
type Range struct {
	Min, Max int
	// Plans is the ladder, sizes strictly increasing, all within Min..Max.
	Plans []Plan
}

// Range returns g's size range.
func (g *Group) Range() Range {
	return Range{Min: g.MinSize, Max: g.MaxSize, Plans: g.Plans}
}

// Direction is the way a step goes on a range.
type Direction int

// The two directions of Range.Step.
const (
	Down Direction = -1
	Up   Direction = 1
)

// Contains reports whether n is within Min..Max.
func (r Range) Contains(n int) bool {
	return n >= r.Min && n <= r.Max
}

// Clamp returns n moved into Min..Max.
func (r Range) Clamp(n int) int {
	return min(max(n, r.Min), r.Max)
}

// String is the range as the config's errors show it.
func (r Range) String() string {
	return fmt.Sprintf("min_size..max_size (%d..%d)", r.Min, r.Max)
}

// Refusal says why size n is refused for group, or "" when r contains it.
func (r Range) Refusal(group string, n int) string {
	if r.Contains(n) {
		return ""
	}
	return fmt.Sprintf("size %d is outside group %s's range [%d, %d]", n, group, r.Min, r.Max)
}

// Step returns the size one step from from in dir: the next plan on the
// ladder, or one instance when the group has no plans. At the end of the
// range it returns from and why it cannot move (see AtEnd).
func (r Range) Step(from int, dir Direction) (to int, refusal string) {
	if len(r.Plans) == 0 {
		switch {
		case dir == Up && from < r.Max:
			return from + 1, ""
		case dir == Down && from > r.Min:
			return from - 1, ""
		}
		return from, r.AtEnd(dir)
	}
	if dir == Up {
		for _, p := range r.Plans {
			if p.Size > from {
				return p.Size, ""
			}
		}
	} else {
		for i := len(r.Plans) - 1; i >= 0; i-- {
			if r.Plans[i].Size < from {
				return r.Plans[i].Size, ""
			}
		}
	}
	return from, r.AtEnd(dir)
}

// AtEnd says why a step in dir cannot move the group: it is at the largest
// (smallest) plan, or at max_size (min_size) without plans.
func (r Range) AtEnd(dir Direction) string {
	switch {
	case dir == Up && len(r.Plans) > 0:
		p := r.Plans[len(r.Plans)-1]
		return fmt.Sprintf("already at the largest plan (%s: %d)", p.Name, p.Size)
	case dir == Up:
		return fmt.Sprintf("already at max_size %d", r.Max)
	case len(r.Plans) > 0:
		return fmt.Sprintf("already at the smallest plan (%s: %d)", r.Plans[0].Name, r.Plans[0].Size)
	}
	return fmt.Sprintf("already at min_size %d", r.Min)
}

// WakeSize is the size a sleeping group wakes to: the first plan with an
// instance, else max(1, Min).
func (r Range) WakeSize() int {
	for _, p := range r.Plans {
		if p.Size >= 1 {
			return p.Size
		}
	}
	return max(1, r.Min)
}

// PlanBySize returns the plan whose size is exactly n.
func (r Range) PlanBySize(n int) (Plan, bool) {
	for _, p := range r.Plans {
		if p.Size == n {
			return p, true
		}
	}
	return Plan{}, false
}

// PlanByName returns the plan called name.
func (r Range) PlanByName(name string) (Plan, bool) {
	for _, p := range r.Plans {
		if p.Name == name {
			return p, true
		}
	}
	return Plan{}, false
}

// PlanNames returns the plan names in ladder order, smallest first.
func (r Range) PlanNames() []string {
	names := make([]string, len(r.Plans))
	for i, p := range r.Plans {
		names[i] = p.Name
	}
	return names
}

// ValidPlans lists the plans for an "unknown plan" error.
func (r Range) ValidPlans() string {
	if len(r.Plans) == 0 {
		return "the group has no plans"
	}
	return "plans: " + strings.Join(r.PlanNames(), ", ")
}

// sizeRange decodes a group's min_size and max_size into g; minOK and maxOK
// say which of them are valid.
func (d *decoder) sizeRange(f *fields, g *Group) (minOK, maxOK bool) {
	if v, n := f.integer("min_size", 0); n != nil {
		if v < 0 {
			d.errorf(n, f.field("min_size"), "must be >= 0, got %d", v)
		} else {
			g.MinSize, minOK = v, true
		}
	}
	if v, n := f.integer("max_size", 0); n != nil {
		switch {
		case v < 1 || v > maxGroupSize:
			d.errorf(n, f.field("max_size"), "must be from 1 to %d, got %d", maxGroupSize, v)
		case minOK && v < g.MinSize:
			d.errorf(n, f.field("max_size"), "must be >= min_size (%d), got %d", g.MinSize, v)
		default:
			g.MaxSize, maxOK = v, true
		}
	}
	return minOK, maxOK
}

// planEntry is a plan with the nodes and field paths to report it by.
type planEntry struct {
	Plan
	nameField, sizeField string
	nameNode, sizeNode   *yaml.Node
}

// plans decodes the ladder in either form: a mapping of name to size, whose
// order is the ladder's, or the seed's list of {name, size}. Sizes are checked
// against [min, max] only when both are valid.
func (d *decoder) plans(n *yaml.Node, path string, r Range, checkRange bool) []Plan {
	if n == nil {
		return nil
	}
	var list []planEntry
	switch n.Kind {
	case yaml.SequenceNode:
		items, _ := d.sequence(n, path, "a list")
		for i, item := range items {
			field := fmt.Sprintf("%s[%d]", path, i)
			f := section[Plan](d, item, field)
			name, nn := f.str("name", "")
			size, sn := f.integer("size", 0)
			if nn != nil && sn != nil {
				list = append(list, planEntry{Plan{name, size}, field + ".name", field + ".size", nn, sn})
			}
		}
	case yaml.MappingNode:
		entries, _ := d.entries(n, path)
		for _, e := range entries {
			field := join(path, e.key)
			if size, ok := d.integer(e.v, field); ok {
				list = append(list, planEntry{Plan{e.key, size}, field, field, e.k, e.v})
			}
		}
	default:
		d.errorf(n, path, "must be a mapping of name to size or a list of {name, size}, got %s", describe(n))
	}

	var (
		plans []Plan
		seen  = make(map[string]*yaml.Node)
		prev  *planEntry
	)
	for i := range list {
		p := &list[i]
		switch first, dup := seen[p.Name]; {
		case !nameRE.MatchString(p.Name):
			d.errorf(p.nameNode, p.nameField, "must match %s, got %q", namePattern, p.Name)
		case dup:
			d.errorf(p.nameNode, p.nameField, "duplicate plan name %q (first at line %d)", p.Name, first.Line)
		default:
			seen[p.Name] = p.nameNode
		}
		switch {
		case checkRange && !r.Contains(p.Size):
			d.errorf(p.sizeNode, p.sizeField, "must be within %s, got %d", r, p.Size)
		case prev != nil && p.Size <= prev.Size:
			d.errorf(p.sizeNode, p.sizeField, "must be greater than the previous plan's size (%s: %d), got %d", prev.Name, prev.Size, p.Size)
		}
		prev = p
		plans = append(plans, p.Plan)
	}
	return plans
}
