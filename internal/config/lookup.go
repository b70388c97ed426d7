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

// PlanBySize returns the plan whose size is exactly n (see Range).
func (g *Group) PlanBySize(n int) (Plan, bool) { return g.Range().PlanBySize(n) }

// PlanByName returns the plan called name (see Range).
func (g *Group) PlanByName(name string) (Plan, bool) { return g.Range().PlanByName(name) }

// PlanNames returns the plan names in ladder order, smallest first.
func (g *Group) PlanNames() []string { return g.Range().PlanNames() }
