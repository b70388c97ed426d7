// Package ssh runs instances as processes on servers reached over SSH.
//
// One multiplexed SSH connection per host carries everything: starting and
// stopping instances, one batched /proc read per host per interval (exit
// detection and usage), log reads and rotation. Every process it starts
// carries three environment variables, SHOAL_OWNER (this shoal: see
// OwnerID), SHOAL_HOST (the host it was placed on) and SHOAL_INSTANCE: the
// marker that lets Adopt prove a recorded pid is still ours and lets
// StopStrays and the reconciliation of a returning host find what nobody
// tracks. The host is part of the marker because hosts may share a PID space
// (network namespaces on one machine in tests).
package ssh

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider"
)

// Options are what an ssh Provider takes from the rest of shoal.
type Options struct {
	// StateDir identifies this shoal: the owner marker is derived from it (and the hostname),
	// so two shoals (two tests) never adopt or sweep each other's instances.
	StateDir string
	Log      *slog.Logger
	// Checks reports whether HAProxy's checks of an instance pass; known is false when there is no
	// answer. Nil: checks count as failing (a host is down on its connection alone).
	Checks func(rec provider.Record) (passing, known bool)
	// Reclaim is asked, when a host that was down comes back, about each marked instance still
	// running there that the provider no longer tracks: true if a group took it back (it calls
	// Adopt itself); false, or nil Reclaim, and the provider stops it.
	Reclaim func(ctx context.Context, rec provider.Record) bool
	// Interval is how often each host is polled (liveness + one batched /proc read); default 1s.
	Interval time.Duration
	// Logs bounds the instances' logs on the hosts (rotation and expiry);
	// zero: config.DefaultInstanceLogs.
	Logs config.InstanceLogs
}

var (
	_ provider.Provider   = (*Provider)(nil)
	_ provider.HostLister = (*Provider)(nil)
	_ provider.Checker    = (*Provider)(nil)
	_ provider.LogReader  = (*Provider)(nil)
)

// OwnerID is the value of SHOAL_OWNER for the shoal whose state directory
// is stateDir on this machine: a hash of the hostname and the absolute
// directory, so that shoals on two machines with the same path, or two on
// one machine, never take each other's instances for theirs.
func OwnerID(stateDir string) string {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		abs = stateDir
	}
	hn, _ := os.Hostname()
	sum := sha256.Sum256([]byte(hn + "\x00" + abs))
	return "shoal-" + hex.EncodeToString(sum[:8])
}

var errNotImplemented = errors.New("ssh provider: not implemented")

// Provider starts instances on the hosts of one ssh provider entry. It is
// safe for concurrent use.
type Provider struct {
	name string
}

// New checks cfg (key files readable and parsed, known_hosts files
// readable) and returns a Provider; it does no network I/O. Run connects.
func New(name string, cfg config.SSHProvider, opts Options) (*Provider, error) {
	return &Provider{name: name}, nil
}

// Run keeps a connection to every host and polls it each Interval until ctx
// ends; it returns once every goroutine it started has stopped and every
// connection is closed.
func (p *Provider) Run(ctx context.Context) { <-ctx.Done() }

// Update applies a reloaded config: new hosts are added, capacity, labels
// and ports of the others applied. A removed host takes no new instances and
// is dropped once nothing of ours runs there.
func (p *Provider) Update(cfg config.SSHProvider) error { return errNotImplemented }

// Name is the provider entry's name.
func (p *Provider) Name() string { return p.name }

// Start places the instance on a host, reserves a port there, runs the
// pre_start hook and starts the process, returning once it runs.
func (p *Provider) Start(ctx context.Context, spec provider.Spec) (provider.Instance, error) {
	return nil, errNotImplemented
}

// Adopt re-attaches to a recorded instance after a restart of shoal.
func (p *Provider) Adopt(ctx context.Context, rec provider.Record, tmpl config.Template) (provider.Instance, error) {
	return nil, errNotImplemented
}

// StopStrays stops, on every reachable host, marked processes of this owner
// that are neither in keep nor tracked, and returns what it stopped.
func (p *Provider) StopStrays(ctx context.Context, keep []provider.Record) ([]provider.Record, error) {
	return nil, errNotImplemented
}

// Hosts reports every host's state.
func (p *Provider) Hosts() []provider.HostStatus { return nil }

// Check connects to every host in parallel and checks what the templates
// need there.
func (p *Provider) Check(ctx context.Context, tmpls map[string]config.Template) []provider.CheckResult {
	return nil
}

// Logs writes an instance's log from its host.
func (p *Provider) Logs(ctx context.Context, rec provider.Record, opts provider.LogOptions, w io.Writer) error {
	return errNotImplemented
}
