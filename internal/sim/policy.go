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
	// Sources are the config's metrics.sources, which the policy may read.
	Sources []config.Source
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
			return Policy{Name: name, Group: g, Interval: cfg.Metrics.Interval, Warmup: cfg.Metrics.Warmup, Sources: cfg.Metrics.Sources}, nil
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

// ReadsSources reports whether p's policy reads a metric from outside
// shoal (metrics.sources, or a formula): the simulator then needs the
// sources' recorded values (Run.Sources), as the load does not model them.
func (p Policy) ReadsSources() bool {
	if p.Group.Autoscale == nil {
		return false
	}
	return slices.ContainsFunc(p.Group.Autoscale.MetricsRead(), func(m string) bool { return !slices.Contains(config.MetricPaths, m) })
}
