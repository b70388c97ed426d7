package config

import "gopkg.in/yaml.v3"

// Load decodes in two passes. The first decodes each section by itself;
// link, the second, checks what a section names or is bounded by in
// another, from what the first left of each: a group's provider (whose
// type decides the group's template keys and may lend it health.grace),
// the policies' windows against the metrics history, scale_to_zero's hold
// against haproxy's queue timeout and metrics.interval, the providers' plan
// maps against the groups' plans. Its errors point at the nodes the first
// pass kept. (A section that reads another whole, as frontends the groups,
// is given it as an argument.)

// groupRef is what the first pass keeps of a group for link.
type groupRef struct {
	keys     *fields    // the group's
	provider *yaml.Node // its provider key; nil: the default
	// providers are the name nodes of its providers' entries (nil with
	// provider), in order.
	providers []*yaml.Node
	template  *fields // its template's keys
	// zeroNode and zero are its scale_to_zero and that section's keys;
	// nil when it has none.
	zeroNode *yaml.Node
	zero     *fields
}

// link is the second pass over cfg, whose groups are refs' (in order) and
// whose providers are provs by name.
func (d *decoder) link(cfg *Config, provs map[string]providerLabels, refs []groupRef) {
	for i := range cfg.Groups {
		g, r := &cfg.Groups[i], refs[i]
		// First: the provider may set health.grace, which scale_to_zero is
		// checked against.
		d.groupProvider(g, r, provs)
		if !allCloud(provs, g) && !g.Template.IsContainer() {
			r.template.require("command") // a process needs its command
		}
		for _, p := range g.ProviderList() {
			d.checkContainer(r.template, g.Template, p.Name, isCloud(provs, p.Name))
		}
		if g.ScaleToZero != nil {
			d.checkScaleToZero(g, r.zeroNode, r.zero, cfg.HAProxy.Timeouts.Queue, cfg.Metrics.Interval)
		}
	}
	d.checkWindows(cfg.Metrics.Interval, cfg.Metrics.Retention.Kept())
	d.checkPlanMaps(cfg.Providers, cfg.Groups, provs)
}
