// Package all links in every provider type: importing it registers each
// one's config type (config.RegisterProvider) and builder. Adding a
// provider is its package plus one import line here.
package all

import (
	// Each registers itself in init.
	_ "github.com/shoal-lb/shoal/internal/provider/cloud/ec2"
	_ "github.com/shoal-lb/shoal/internal/provider/cloud/exec"
	_ "github.com/shoal-lb/shoal/internal/provider/cloud/sacloud"
)
