package core

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-lb/shoal/internal/provider/cloud"
	// Every provider type registers itself.
	_ "github.com/shoal-lb/shoal/internal/provider/all"
)

// descCloudCalls is the API calls of each cloud provider, by kind: what a
// scale event costs (one listing per interval, never one per server).
var descCloudCalls = prometheus.NewDesc("shoal_cloud_api_calls_total",
	"API calls a cloud provider made, by kind (create, delete, list).", []string{"provider", "call"}, nil)

// cloudCalls exposes every cloud provider's API call counts.
type cloudCalls struct{ p *providers }

func (c cloudCalls) Describe(ch chan<- *prometheus.Desc) { ch <- descCloudCalls }

func (c cloudCalls) Collect(ch chan<- prometheus.Metric) {
	c.p.mu.RLock()
	defer c.p.mu.RUnlock()
	for name, bp := range c.p.built {
		cp, ok := bp.(*cloud.Provider)
		if !ok {
			continue
		}
		n := cp.Calls()
		for _, kv := range []struct {
			call string
			v    int64
		}{{"create", n.Create}, {"delete", n.Delete}, {"list", n.List}} {
			ch <- prometheus.MustNewConstMetric(descCloudCalls, prometheus.CounterValue, float64(kv.v), name, kv.call)
		}
	}
}
