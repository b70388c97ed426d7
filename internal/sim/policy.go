package sim

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

// Policy is a group and its policy, as loaded from a shoal config.
type Policy struct {
	Name  string
	Group config.Group
	// Interval and Warmup are the config's metrics.interval and metrics.warmup.
	Interval, Warmup time.Duration
}

// LoadPolicy loads the shoal config at path and returns its group named
// group, or with group "" its first group that has an autoscale section.
// Config errors are config.ErrorList, FILE:LINE:COL each.
func LoadPolicy(path, group string) (Policy, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return Policy{}, err
	}
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	for _, g := range cfg.Groups {
		if group == "" && g.Autoscale != nil || group != "" && g.Name == group {
			if err := simulable(g); err != nil {
				return Policy{}, fmt.Errorf("%s: %w", path, err)
			}
			return Policy{Name: name, Group: g, Interval: cfg.Metrics.Interval, Warmup: cfg.Metrics.Warmup}, nil
		}
	}
	if group != "" {
		return Policy{}, fmt.Errorf("%s: no group %q (groups: %s)", path, group, strings.Join(cfg.GroupNames(), ", "))
	}
	return Policy{}, fmt.Errorf("%s: no group has an autoscale section", path)
}

// Static is the group of p without its policy, fixed at size.
func Static(p Policy, size int) Policy {
	g := p.Group
	g.Autoscale = nil
	g.MinSize, g.MaxSize = size, max(size, g.MaxSize)
	return Policy{Name: fmt.Sprintf("static-%d", size), Group: g, Interval: p.Interval, Warmup: p.Warmup}
}

// simulable refuses a policy reading metrics.sources or a formula: the
// simulator models shoal's own metrics from the load, and has no model of
// a queue or a business metric outside it.
func simulable(g config.Group) error {
	a := g.Autoscale
	if a == nil {
		return nil
	}
	var metrics []string
	for _, r := range a.Rules {
		metrics = append(metrics, r.Metric)
	}
	if a.Target != nil {
		metrics = append(metrics, a.Target.Metric)
	}
	for _, m := range metrics {
		if !slices.Contains(config.MetricPaths, m) {
			return fmt.Errorf("group %s: metric %q reads outside shoal (metrics.sources or a formula), which the simulator cannot model; replay it with shoal policy test", g.Name, m)
		}
	}
	return nil
}
