package config

import (
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/shoal-lb/shoal/internal/haproxy/hapword"
)

// Values of RateLimit.By; RateLimitByHeader is a prefix, followed by the
// header's name.
const (
	RateLimitByIP     = "ip"
	RateLimitByHeader = "header:"
)

// maxRatePeriod bounds rate_limit.per: HAProxy counts a rate over a period
// in milliseconds held in 31 bits (about 24 days); a day is plenty.
const maxRatePeriod = 24 * time.Hour

// rateLimit decodes a frontend's rate_limit; nil when n is absent or wrong.
func (d *decoder) rateLimit(n *yaml.Node, path string) *RateLimit {
	if n == nil {
		return nil
	}
	f := section[RateLimit](d, n, path)
	if f.node == nil {
		return nil
	}
	rl := defaultRateLimit
	ok := true
	if v, n := f.integer("requests", 0); n != nil {
		if v < 1 {
			d.errorf(n, f.field("requests"), "must be at least 1, got %d", v)
			ok = false
		}
		rl.Requests = v
	} else {
		ok = false // reported by section (required) or integer
	}
	if v, n := f.duration("per", 0); n != nil {
		if v < time.Millisecond || v > maxRatePeriod {
			d.errorf(n, f.field("per"), "must be from 1ms to %s, got %s", maxRatePeriod, v)
			ok = false
		}
		rl.Per = v
	} else {
		ok = false
	}
	if by, n := f.str("by", rl.By); n != nil {
		if err := CheckRateLimitBy(by); err != nil {
			d.errorf(n, f.field("by"), "%v", err)
			ok = false
		}
		rl.By = by
	}
	if !ok {
		return nil
	}
	return &rl
}

// CheckRateLimitBy accepts what clients are told apart by: "ip" or
// "header:NAME".
func CheckRateLimitBy(by string) error {
	if by == RateLimitByIP {
		return nil
	}
	name, ok := strings.CutPrefix(by, RateLimitByHeader)
	if !ok {
		return fmt.Errorf("must be %s or %sNAME (a request header, such as header:X-Api-Key), got %q", RateLimitByIP, RateLimitByHeader, by)
	}
	if err := hapword.HTTPToken(name); err != nil {
		return fmt.Errorf("header in %q: %w", by, err)
	}
	return nil
}
