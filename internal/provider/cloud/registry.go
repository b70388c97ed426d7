package cloud

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/shoal-lb/shoal/internal/config"
)

// NewDriverFunc builds the driver of a provider entry of its type; it may
// read files (credentials) but calls no API.
type NewDriverFunc func(ctx context.Context, pc config.Provider, log *slog.Logger) (Driver, error)

var (
	driversMu sync.RWMutex
	drivers   = map[string]NewDriverFunc{}
)

// RegisterDriver makes newDriver the builder of the drivers of entries of
// type typ (a config.ProviderType with Cloud set). Each driver package
// registers itself in init; it panics on a type registered twice, a
// programming error found at start.
func RegisterDriver(typ string, newDriver NewDriverFunc) {
	driversMu.Lock()
	defer driversMu.Unlock()
	if _, dup := drivers[typ]; dup {
		panic("cloud: RegisterDriver: type " + typ + " registered twice")
	}
	drivers[typ] = newDriver
}

// NewFromConfig builds the provider of cloud entry pc over its type's
// registered driver.
func NewFromConfig(ctx context.Context, pc config.Provider, opts Options) (*Provider, error) {
	driversMu.RLock()
	newDriver, ok := drivers[pc.Type]
	driversMu.RUnlock()
	if !ok || pc.Cloud == nil {
		return nil, fmt.Errorf("type %q has no cloud driver", pc.Type)
	}
	d, err := newDriver(ctx, pc, opts.Log)
	if err != nil {
		return nil, err
	}
	opts.Driver = pc.Type
	return New(pc.Name, d, *pc.Cloud, opts)
}
