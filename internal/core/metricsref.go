package core

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/gslb"
	"github.com/shoal-lb/shoal/internal/notify"
	"github.com/shoal-lb/shoal/internal/promexp"
)

// MetricCollectors are the collectors serve registers on /metrics (in
// setupMetrics and setupGSLB) besides the Go runtime's and the process's,
// with no groups, providers, certificates or listeners behind them: what
// they describe, for the metrics reference (docgen). Keep the two lists
// together.
func MetricCollectors() []prometheus.Collector {
	cs := promexp.New(noGroups{}, func() int64 { return 0 }).Collectors()
	cs = append(cs, cloudCalls{}, certExpiry{}, accessLogLines{}, routeDenials{}, sourceReads{})
	cs = append(cs, notify.MetricCollectors()...)
	return append(cs, gslb.MetricCollectors()...)
}

// noGroups is a registry of no groups.
type noGroups struct{}

func (noGroups) All() []*group.Group { return nil }
