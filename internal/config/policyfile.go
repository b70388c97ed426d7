package config

import (
	"time"

	"gopkg.in/yaml.v3"
)

// ParseAutoscale validates data as a candidate autoscale policy for group g
// (as `shoal policy test --policy FILE` sends it): the mapping that goes under
// the group's `autoscale:`, or a mapping whose only key is `autoscale`.
// metricsInterval is the running config's metrics.interval and metricsKept
// its Retention.Kept (0: unchecked). Problems are an ErrorList naming path,
// like Load's. Empty data yields nil: no candidate.
func ParseAutoscale(path string, data []byte, g Group, metricsInterval, metricsKept time.Duration, sources ...Source) (*Autoscale, error) {
	d := &decoder{file: path, budget: 1000 + 2*len(data), sourceList: sources}
	root, ok := d.top(data, "a policy file")
	if !ok {
		return nil, d.errs
	}
	if root == nil {
		return nil, nil
	}
	if root.Kind != yaml.MappingNode {
		d.errorf(root, "", "a policy must be a mapping with rules, a target or a schedule, got %s", describe(root))
		return nil, d.errs
	}
	if len(root.Content) == 2 && root.Content[0].Value == "autoscale" {
		root = root.Content[1]
	}
	a := d.autoscale(root, "autoscale", &g, true)
	d.checkWindows(metricsInterval, metricsKept)
	if len(d.errs) > 0 {
		return nil, d.sorted()
	}
	return a, nil
}
