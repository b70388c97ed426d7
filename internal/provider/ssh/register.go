package ssh

import (
	"context"
	"fmt"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider"
)

func init() {
	// New does no network I/O; Run connects.
	provider.Register(Type, func(_ context.Context, pc config.Provider, opts provider.Options) (provider.Running, error) {
		c := Of(pc)
		if c == nil {
			return nil, fmt.Errorf("type %q has no ssh keys", pc.Type)
		}
		p, err := New(pc.Name, *c, opts)
		if err != nil {
			return nil, err
		}
		return p, nil
	})
}
