package api

import (
	"net/http"

	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/promexp"
)

// Option configures the API handler.
type Option func(*Handler)

// WithMetrics serves GET /metrics from met and counts webhook alerts in it.
func WithMetrics(met *promexp.Metrics) Option {
	return func(h *Handler) { h.metrics = met }
}

// registerMonitoring adds what monitoring systems call: the alerting
// webhooks, Prometheus service discovery and, with WithMetrics, /metrics.
func (h *Handler) registerMonitoring() {
	h.mux.HandleFunc("/v1/webhooks/alertmanager", func(w http.ResponseWriter, r *http.Request) {
		h.webhook(w, r, alertmanagerHook)
	})
	h.mux.HandleFunc("/v1/webhooks/grafana", func(w http.ResponseWriter, r *http.Request) {
		h.webhook(w, r, grafanaHook)
	})
	h.mux.HandleFunc("GET /v1/sd/prometheus", h.prometheusSD)
	if h.metrics != nil {
		h.mux.Handle("GET /metrics", h.metrics.Handler())
	}
}

// SDTarget is one entry of Prometheus' http_sd_config format.
type SDTarget struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// prometheusSD lists the instances in service for Prometheus' http_sd_configs.
func (h *Handler) prometheusSD(w http.ResponseWriter, r *http.Request) {
	out := []SDTarget{}
	for _, g := range h.groups.All() {
		for _, in := range g.Status(r.Context()).Instances {
			if in.State != group.InService || in.Addr == "" {
				continue
			}
			out = append(out, SDTarget{Targets: []string{in.Addr}, Labels: map[string]string{"group": g.Name(), "instance": in.Name}})
		}
	}
	writeJSON(w, http.StatusOK, out)
}
