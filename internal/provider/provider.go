// Package provider defines how shoal creates and stops instances. Implementations
// live in sub-packages (local today; SSH hosts and clouds later).
package provider

import (
	"context"
	"errors"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
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

// Record is the persistable identity of an instance: enough to adopt it after a
// restart of shoal and to prove it is still the same process.
type Record struct {
	Group string
	Name  string
	Index int
	// Host and Port are where the instance serves; HAProxy connects there.
	Host string
	Port int
	// PID and PIDStart (the start time in clock ticks since boot, from
	// /proc/PID/stat) identify the process; a reused pid has another start time.
	PID       int
	PIDStart  uint64
	StartedAt time.Time
}

// Instance is a running instance.
type Instance interface {
	Record() Record
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
