package cloud

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider"
)

// NewDriverFunc builds the driver of a provider entry of its type; it may
// read files (credentials) but calls no API.
type NewDriverFunc func(ctx context.Context, pc config.Provider, log *slog.Logger) (Driver, error)

// RegisterDriver makes newDriver the builder of the drivers of entries of
// type typ (a config.ProviderType with Cloud set): it registers with
// provider.Register the builder of a cloud Provider over such a driver.
// Each driver package registers itself in init; a type registered twice
// panics, a programming error found at start.
func RegisterDriver(typ string, newDriver NewDriverFunc) {
	provider.Register(typ, func(ctx context.Context, pc config.Provider, opts provider.Options) (provider.Running, error) {
		if pc.Cloud == nil {
			return nil, fmt.Errorf("type %q has no cloud driver", pc.Type)
		}
		d, err := newDriver(ctx, pc, opts.Log)
		if err != nil {
			return nil, err
		}
		p, err := New(pc.Name, d, *pc.Cloud, Options{Owner: opts.Owner, Driver: pc.Type, StateDir: opts.StateDir, Log: opts.Log, Guard: opts.Guard})
		if err != nil {
			return nil, err
		}
		return p, nil
	})
}
