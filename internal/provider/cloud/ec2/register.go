package ec2

import (
	"context"
	"log/slog"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider/cloud"
)

func init() {
	// New calls no API; the context reads the credentials file only.
	cloud.RegisterDriver(Type, func(ctx context.Context, pc config.Provider, _ *slog.Logger) (cloud.Driver, error) {
		return New(ctx, *Of(pc), pc.Cloud.Port)
	})
}
