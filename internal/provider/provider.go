// Package provider defines how shoal creates and stops instances. Implementations
// live in sub-packages (local today; SSH hosts and clouds later).
package provider

import (
	"context"
	"errors"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/instance"
)

// ErrGone reports that a recorded instance no longer exists, or is no longer ours
// (its pid was reused by another process).
var ErrGone = errors.New("instance is gone")

// Spec is what a group asks a provider to create.
type Spec struct {
	Group    string
	Name     string
	Index    int
	Template config.Template
}

// Record is an instance's provider-neutral record (see package instance),
// re-exported for the users of providers, as package jobs does job's names.
type Record = instance.Record

// Instance is a running instance.
type Instance interface {
	Record() Record
	// PID is the instance's process (the leader of its process group) on
	// its host, 0 if it has none; shoal shows it and samples its CPU.
	PID() int
	// Done is closed when the instance has exited for any reason.
	Done() <-chan struct{}
	// ExitReason describes how it exited ("exit status 1", "signal: killed"); valid after Done.
	ExitReason() string
	// Stop asks the instance to exit (SIGTERM), kills it after the template's
	// StopTimeout, and returns once it is gone or ctx ends.
	Stop(ctx context.Context) error
	// PreStop runs the template's pre_stop hook (nothing without one) and
	// returns once it has ended; its output goes to the instance's log.
	PreStop(ctx context.Context) error
}

// Provider creates instances and re-attaches to them after a restart.
type Provider interface {
	// Start creates an instance and returns once its process runs (not yet
	// healthy). The template's pre_start hook runs first; its failure fails
	// the start.
	Start(ctx context.Context, spec Spec) (Instance, error)
	// Adopt re-attaches to a recorded instance, or returns ErrGone.
	Adopt(ctx context.Context, rec Record, tmpl config.Template) (Instance, error)
	// StopStrays stops instances that this provider started for this state
	// directory but that are not in keep, and returns what it stopped.
	StopStrays(ctx context.Context, keep []Record) ([]Record, error)
}
