package exec

import (
	"context"
	"log/slog"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider/cloud"
)

func init() {
	cloud.RegisterDriver(Type, func(_ context.Context, pc config.Provider, _ *slog.Logger) (cloud.Driver, error) {
		d, err := New(*Of(pc), pc.Cloud.Port)
		if err != nil {
			return nil, err
		}
		return d.Cloud(), nil
	})
}
