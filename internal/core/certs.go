package core

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-lb/shoal/internal/certstore"
)

var descCertExpiry = prometheus.NewDesc("shoal_tls_certificate_expiry_seconds",
	"Seconds until each certificate a TLS frontend serves expires (negative once it has); alert below 14 days.",
	[]string{"frontend", "site", "name"}, nil)

// certExpiry exposes the time left on every served certificate.
type certExpiry struct{ s *certstore.Store }

func (c certExpiry) Describe(ch chan<- *prometheus.Desc) { ch <- descCertExpiry }

func (c certExpiry) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	for _, cert := range c.s.Certs() {
		if cert.NotServed {
			continue
		}
		name := ""
		if len(cert.Names) > 0 {
			name = cert.Names[0]
		}
		ch <- prometheus.MustNewConstMetric(descCertExpiry, prometheus.GaugeValue, cert.NotAfter.Sub(now).Seconds(), cert.Frontend, cert.Site, name)
	}
}
