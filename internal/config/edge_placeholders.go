package config

import (
	"gopkg.in/yaml.v3"
)

// Placeholders until the rate-limit decoder is merged.

func (d *decoder) rateLimit(n *yaml.Node, path string) *RateLimit {
	section[RateLimit](d, n, path)
	r := defaultRateLimit
	return &r
}
