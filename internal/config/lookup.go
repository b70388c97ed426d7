package config

// Group returns the group called name.
func (c *Config) Group(name string) (*Group, bool) {
	for i := range c.Groups {
		if c.Groups[i].Name == name {
			return &c.Groups[i], true
		}
	}
	return nil, false
}

// GroupNames returns the group names in config order.
func (c *Config) GroupNames() []string {
	names := make([]string, len(c.Groups))
	for i, g := range c.Groups {
		names[i] = g.Name
	}
	return names
}

// PlanBySize returns the plan whose size is exactly n.
func (g *Group) PlanBySize(n int) (Plan, bool) {
	for _, p := range g.Plans {
		if p.Size == n {
			return p, true
		}
	}
	return Plan{}, false
}

// PlanByName returns the plan called name.
func (g *Group) PlanByName(name string) (Plan, bool) {
	for _, p := range g.Plans {
		if p.Name == name {
			return p, true
		}
	}
	return Plan{}, false
}

// PlanNames returns the plan names in ladder order, smallest first.
func (g *Group) PlanNames() []string {
	names := make([]string, len(g.Plans))
	for i, p := range g.Plans {
		names[i] = p.Name
	}
	return names
}
