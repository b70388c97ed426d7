package core

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-lb/shoal/internal/accesslog"
)

const accessLogLinesHelp = "Lines HAProxy sent to the access log, by kind: request; notice, one of HAProxy's own messages " +
	"(a connection that failed before its first request, such as an abandoned TLS handshake); malformed."

var descAccessLogLines = prometheus.NewDesc("shoal_access_log_lines_total", accessLogLinesHelp, []string{"kind"}, nil)

// accessLogLines exposes the access-log reader's counts. A rising notice
// count is clients failing their TLS handshakes, which no request line shows.
type accessLogLines struct{ r *accesslog.Reader }

func (a accessLogLines) Describe(ch chan<- *prometheus.Desc) { ch <- descAccessLogLines }

func (a accessLogLines) Collect(ch chan<- prometheus.Metric) {
	s := a.r.Stats()
	for kind, n := range map[string]uint64{"request": s.Requests, "notice": s.Notices, "malformed": s.Malformed} {
		ch <- prometheus.MustNewConstMetric(descAccessLogLines, prometheus.CounterValue, float64(n), kind)
	}
}
