package config

import (
	"testing"
)

const monitoringBase = `listen: :8080
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
`

func TestMonitoringListeners(t *testing.T) {
	cfg, err := Parse("shoal.yaml", []byte(monitoringBase+`metrics:
  listen: 127.0.0.1:9101
haproxy:
  prometheus: "[::1]:8405"
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Metrics.Listen != "127.0.0.1:9101" || cfg.HAProxy.Prometheus != "[::1]:8405" {
		t.Fatalf("metrics.listen %q, haproxy.prometheus %q", cfg.Metrics.Listen, cfg.HAProxy.Prometheus)
	}
	cfg, err = Parse("shoal.yaml", []byte(monitoringBase))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Metrics.Listen != "" || cfg.HAProxy.Prometheus != "" {
		t.Fatalf("both are off by default, got %q and %q", cfg.Metrics.Listen, cfg.HAProxy.Prometheus)
	}
}

func TestMonitoringListenerErrors(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"metrics:\n  listen: 0.0.0.0:9101\n",
			`shoal.yaml:4:11: metrics.listen: must be a loopback address such as 127.0.0.1:9101 (it serves metrics without authentication), got "0.0.0.0:9101"`},
		{"metrics:\n  listen: :9101\n",
			`shoal.yaml:4:11: metrics.listen: must be a loopback address such as 127.0.0.1:9101 (it serves metrics without authentication), got ":9101"`},
		{"metrics:\n  listen: 127.0.0.1:http\n",
			`shoal.yaml:4:11: metrics.listen: port must be a number from 1 to 65535, got "http"`},
		{"metrics:\n  port: 9101\n",
			`shoal.yaml:4:3: metrics.port: unknown field; allowed: interval, warmup, retention, listen, sources`},
		{"haproxy:\n  prometheus: 192.168.1.5:8405\n",
			`shoal.yaml:4:15: haproxy.prometheus: must be a loopback address such as 127.0.0.1:9101 (it serves metrics without authentication), got "192.168.1.5:8405"`},
		{"haproxy:\n  prometheus: 8405\n",
			`shoal.yaml:4:15: haproxy.prometheus: must be host:port, got "8405"`},
	} {
		_, err := Parse("shoal.yaml", []byte(monitoringBase+tc.doc))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q:\n got: %v\nwant: %s", tc.doc, err, tc.want)
		}
	}
}
