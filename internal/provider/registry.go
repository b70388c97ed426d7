package provider

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

// Options are what a provider built from a config entry takes from the
// rest of shoal. A type uses what it needs of them.
type Options struct {
	// StateDir identifies this shoal: the owner marker is derived from it (and the hostname),
	// so two shoals (two tests) never adopt or sweep each other's instances.
	StateDir string
	// Owner, when set, is the owner marker instead: the nodes of an HA pair
	// share theirs, so that each adopts what the other started.
	Owner string
	Log   *slog.Logger
	// Checks reports whether HAProxy's checks of an instance pass; known is false when there is no
	// answer. Nil: checks count as failing (a host is down on its connection alone).
	Checks func(rec Record) (passing, known bool)
	// Reclaim is asked, when a host that was down comes back, about each marked instance still
	// running there that the provider no longer tracks: true if a group took it back (it calls
	// Adopt itself); false, or nil Reclaim, and the provider stops it.
	Reclaim func(ctx context.Context, rec Record) bool
	// Guard, if set, is asked before a sweep stops, deletes (or offers
	// to Reclaim) what the provider does not track: an error, and it
	// leaves them for later (an HA node that does not lead).
	Guard func(ctx context.Context) error
	// HostState, if set, is told when a host goes down (with why) and when
	// it is back; it is called without the provider's lock.
	HostState func(host string, down bool, reason string)
	// Cordoned, if set, reports whether an operator cordoned the host
	// (`shoal hosts cordon`): placement puts no new instance there. It is
	// called under the provider's lock and must not call back into it.
	Cordoned func(host string) bool
	// Vacating, if set, reports whether a host consolidation is emptying
	// the host: placement puts no new instance there either. Called as
	// Cordoned is.
	Vacating func(host string) bool
	// Interval is how often each host is polled (liveness + one batched /proc read); default 1s.
	Interval time.Duration
	// Logs bounds the instances' logs on the hosts (rotation and expiry);
	// zero: config.DefaultInstanceLogs.
	Logs config.InstanceLogs
}

// Running is a provider built from a config entry: Run keeps its
// connections or listings from start until ctx ends.
type Running interface {
	Provider
	Run(ctx context.Context)
}

// Reloader is a built provider that takes a reloaded entry of its type in
// place; one that is not keeps its entry until shoal restarts.
type Reloader interface {
	Reload(pc config.Provider) error
}

// NewFunc builds the provider of a config entry of its type; it may read
// files (keys, credentials) but does no network I/O.
type NewFunc func(ctx context.Context, pc config.Provider, opts Options) (Running, error)

var (
	buildersMu sync.RWMutex
	builders   = map[string]NewFunc{}
)

// Register makes newFunc the builder of the providers of entries of type
// typ (a config.ProviderType's Name). Each provider package registers
// itself; it panics on a type registered twice, a programming error found
// at start.
func Register(typ string, newFunc NewFunc) {
	buildersMu.Lock()
	defer buildersMu.Unlock()
	if _, dup := builders[typ]; dup {
		panic("provider: Register: type " + typ + " registered twice")
	}
	builders[typ] = newFunc
}

// New builds the provider of entry pc over its type's registered builder.
func New(ctx context.Context, pc config.Provider, opts Options) (Running, error) {
	buildersMu.RLock()
	newFunc, ok := builders[pc.Type]
	buildersMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("type %q is not supported", pc.Type)
	}
	return newFunc(ctx, pc, opts)
}
