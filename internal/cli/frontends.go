package cli

import (
	"log/slog"

	"github.com/shoal-lb/shoal/internal/compat/sacloud"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/core"
)

// frontends returns the protocol servers the config turns on beside the API.
func frontends(cfg *config.Config, log *slog.Logger) []core.Frontend {
	var fs []core.Frontend
	if c := cfg.Compat.SacloudAutoscaler; c != nil {
		fs = append(fs, sacloud.New(*c, log))
	}
	return fs
}
