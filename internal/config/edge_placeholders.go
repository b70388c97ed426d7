package config

import (
	"slices"

	"gopkg.in/yaml.v3"
)

// Placeholders until the tls and rate-limit decoders are merged.

func (d *decoder) tls(n *yaml.Node, path string) *TLS {
	section[TLS](d, n, path)
	t := defaultTLS
	t.ALPN = slices.Clone(t.ALPN)
	return &t
}

func (d *decoder) rateLimit(n *yaml.Node, path string) *RateLimit {
	section[RateLimit](d, n, path)
	r := defaultRateLimit
	return &r
}
