package core

import (
	"context"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-lb/shoal/internal/haproxy"
)

var descRouteDenied = prometheus.NewDesc("shoal_route_denied_requests_total",
	"Requests a route's access control refused before they reached an instance, by frontend, route (its number in the frontend, from 1) "+
		"and status: 403 (allow, deny) or 401 (basic_auth). Counted by HAProxy; a reload starts the count again.",
	[]string{"frontend", "route", "status"}, nil)

// routeDenials exposes HAProxy's count of each route's refusals.
type routeDenials struct{ lb *haproxy.Manager }

func (r routeDenials) Describe(ch chan<- *prometheus.Desc) { ch <- descRouteDenied }

// Collect reads the counts at each scrape; when HAProxy does not answer,
// the series are missing from that scrape rather than wrong.
func (r routeDenials) Collect(ch chan<- prometheus.Metric) {
	ds, err := r.lb.Denials(context.Background())
	if err != nil {
		return
	}
	for _, d := range ds {
		route := strconv.Itoa(d.Route)
		ch <- prometheus.MustNewConstMetric(descRouteDenied, prometheus.CounterValue, float64(d.Forbidden), d.Frontend, route, "403")
		ch <- prometheus.MustNewConstMetric(descRouteDenied, prometheus.CounterValue, float64(d.Unauthorized), d.Frontend, route, "401")
	}
}
