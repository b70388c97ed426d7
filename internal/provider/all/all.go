// Package all links in every provider type: importing it registers each
// one's config entry type (in this order in errors and the reference) and
// its builder (provider.Register, from the type's package). Adding a
// provider is its package plus its line here.
package all

import (
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider/cloud/ec2"
	"github.com/shoal-lb/shoal/internal/provider/cloud/exec"
	"github.com/shoal-lb/shoal/internal/provider/cloud/sacloud"
	"github.com/shoal-lb/shoal/internal/provider/ssh"
)

func init() {
	config.RegisterProvider(ssh.ProviderType)
	config.RegisterProvider(exec.ProviderType)
	config.RegisterProvider(ec2.ProviderType)
	config.RegisterProvider(sacloud.ProviderType)
}
