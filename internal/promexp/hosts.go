package promexp

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-lb/shoal/internal/provider"
)

var descHostCordoned = prometheus.NewDesc("shoal_host_cordoned",
	"1 for a provider's host an operator cordoned (no new instances are placed there), else 0; sum() counts the cordoned hosts.",
	[]string{"provider", "host"}, nil)

// hostCollector reports the providers' hosts as a scrape finds them.
type hostCollector struct{ hosts func() []provider.HostStatus }

func (c hostCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descHostCordoned }

func (c hostCollector) Collect(ch chan<- prometheus.Metric) {
	for _, h := range c.hosts() {
		v := 0.0
		if h.Cordoned {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descHostCordoned, prometheus.GaugeValue, v, h.Provider, h.Name)
	}
}

// SetHostSource makes scrapes report the hosts hosts lists (the ssh
// providers'); call it once, before the first scrape.
func (m *Metrics) SetHostSource(hosts func() []provider.HostStatus) {
	m.reg.MustRegister(hostCollector{hosts: hosts})
}
