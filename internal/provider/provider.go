// Package provider defines how shoal creates and stops instances. Implementations
// live in sub-packages: local (this machine), ssh (servers reached over
// SSH) and cloud (with its drivers), behind the same interface. Each type
// of config entry registers its builder (Register); the core builds every
// entry through New.
//
// Every provider implements Provider. What only some can do is an optional
// interface, asserted where it is used: HostLister (providers that place
// instances on several hosts), Preflighter (`shoal providers check`) and
// LogReader (`shoal logs`); an Instance may be Placed and a Sampler.
package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/instance"
)

// ErrGone reports that a recorded instance no longer exists, or is no longer ours
// (its pid was reused by another process).
var ErrGone = errors.New("instance is gone")

// CheckName rejects instance names that cannot serve as a log file name, an
// environment value and a line of a listing.
func CheckName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00\n") {
		return fmt.Errorf("invalid instance name %q", name)
	}
	return nil
}

// Spec is what a group asks a provider to create.
type Spec struct {
	Group    string
	Name     string
	Index    int
	Template config.Template
	// Placement is the group's: how a provider with several hosts picks
	// one, and the labels that host must carry.
	Placement config.Placement
	// Plan is the name of the group's plan at its desired size ("" when
	// it has no plans): cloud drivers with plan ladders size the server
	// by it.
	Plan string
}

// Record is an instance's provider-neutral record (see package instance),
// re-exported for the users of providers, as package jobrun does job's names.
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

// CreatedError is a Start that failed after its cloud had created a
// server, which the cloud bills from Created until its deletion: the
// group counts it as usage (instance-hours, max_hourly_instances) like an
// instance that ran.
type CreatedError struct {
	Created time.Time
	Err     error
}

func (e *CreatedError) Error() string { return e.Err.Error() }
func (e *CreatedError) Unwrap() error { return e.Err }

// Deleter is a Provider whose instances end by a deletion that an API may
// refuse for a while (a cloud's, during an outage). A group retires such an
// instance by draining it, asking Delete, and taking it out of HAProxy only
// once Delete succeeded: while the API refuses, the server still runs, so
// it goes back into service rather than running unused out of rotation.
type Deleter interface {
	// Delete asks once for in's deletion and returns nil once the API
	// accepted it, or the shutdown before it (a server that takes minutes
	// to shut down is on its way out from the accepted request: it never
	// serves again); in's Stop then waits until it is gone without asking
	// again, up to DeleteTimeout.
	Delete(ctx context.Context, in Instance) error
	// Reachable waits for the API's next answer to a call the provider
	// makes anyway (a listing shared by every caller, not a call each) and
	// returns nil if it answered, else why not. A retirement the API
	// refused is drained again only once it answers: during an outage the
	// instance stays in rotation rather than leave it at every retry.
	Reachable(ctx context.Context) error
	// DeleteTimeout is how long a retirement waits for the API to accept
	// a deletion before the job that asked for it fails; the retirement
	// itself goes on.
	DeleteTimeout() time.Duration
}

// scaleInKey is the context key ForScaleIn sets.
type scaleInKey struct{}

// ForScaleIn marks ctx of a Deleter.Delete retiring an instance that a
// scale-in chose: a provider with a warm pool may keep its server
// (warm_pool.reuse_on_scale_in). A replacement's (drift, max_lifetime, a
// deploy's roll) is never kept: it is retired to be renewed.
func ForScaleIn(ctx context.Context) context.Context {
	return context.WithValue(ctx, scaleInKey{}, true)
}

// IsScaleIn reports whether ctx is ForScaleIn's.
func IsScaleIn(ctx context.Context) bool {
	v, _ := ctx.Value(scaleInKey{}).(bool)
	return v
}

// ErrHostDown reports that an instance's host is unreachable: what was
// asked of it (a stop, a log read) could not be done now. A provider stops
// what still runs there once the host is back.
var ErrHostDown = errors.New("host is down")

// Placed is an Instance that its provider placed on one of several hosts;
// Placement says which and why ("spread: 2 of web's instances on
// 10.0.0.2, fewest; 3/10 instances"), for `shoal events`.
type Placed interface {
	Placement() string
}

// CloudServer is an Instance that is a cloud's server: CloudID is the
// cloud's own ID of it (a Sakura Cloud server ID, an EC2 instance ID), what
// an operator looks it up by in the cloud's console; ShutdownMode says how
// stopping it shuts it down ("graceful", "forced"; "" when the cloud has
// one way only), for `shoal events`.
type CloudServer interface {
	CloudID() string
	ShutdownMode() string
}

// Usage is a sample of an instance's resource use.
type Usage struct {
	// CPUSeconds is the CPU time its processes have used (user + system),
	// a counter; RSS their resident memory in bytes.
	CPUSeconds float64
	RSS        int64
	// At is when it was read.
	At time.Time
}

// Sampler is an Instance whose provider samples its resource use (a
// remote one, whose PID means nothing here): the metrics collector reads
// Usage instead of this machine's /proc. ok is false until a sample is in.
type Sampler interface {
	Usage() (u Usage, ok bool)
}

// Host states, as HostStatus.State shows them.
const (
	// HostUp: connected; instances are placed there.
	HostUp = "up"
	// HostUnreachable: the connection fails but the host is not down yet
	// (its instances still pass their checks, or not for long enough).
	HostUnreachable = "unreachable"
	// HostDown: connection and checks failed for host_down_after; its
	// instances were replaced elsewhere.
	HostDown = "down"
	// HostHeldOff: back, but placement avoids it for a while because it
	// went down recently (flapping).
	HostHeldOff = "held-off"
)

// HostStatus is one host of a provider that places instances on several.
type HostStatus struct {
	Provider string            `json:"provider"`
	Name     string            `json:"name"`
	State    string            `json:"state"`
	Since    time.Time         `json:"since"`
	Labels   map[string]string `json:"labels,omitempty"`
	// Instances counts shoal's instances there; Cores adds up their
	// template.cpus. The capacity fields are 0 where unbounded.
	Instances         int     `json:"instances"`
	Cores             float64 `json:"cores"`
	CapacityInstances int     `json:"capacity_instances"`
	CapacityCores     float64 `json:"capacity_cores"`
	// LastError is the newest connection or command error ("" when none).
	LastError string `json:"last_error,omitempty"`
	// HeldOffUntil is when a flapping host takes instances again.
	HeldOffUntil time.Time `json:"held_off_until,omitzero"`
	// Cordoned: an operator cordoned the host; no new instance is placed
	// there (its own are left running).
	Cordoned bool `json:"cordoned,omitempty"`
}

// Zoner is a provider that places instances in several zones (EC2's
// availability zones, by subnet): a group's scale-in takes from the zone
// with the most of its instances first, so that the group stays spread.
type Zoner interface {
	// Zone is where the instance runs ("" when the provider does not
	// know, e.g. before its first listing shows it).
	Zone(rec Record) string
}

// Interrupter is a provider whose cloud may take an instance back with
// notice (EC2's spot interruption, two minutes): the group replaces such
// an instance at once, its replacement started before it is drained.
type Interrupter interface {
	// Interrupted is the notice rec's instance got ("": none).
	Interrupted(rec Record) string
}

// HostLister is a provider that places instances on several hosts.
type HostLister interface {
	Hosts() []HostStatus
}

// PreflightResult is what `shoal providers check` found on one host: OK, or
// each Problem in words an operator can act on.
type PreflightResult struct {
	Provider string   `json:"provider"`
	Host     string   `json:"host"`
	OK       bool     `json:"ok"`
	Problems []string `json:"problems,omitempty"`
	// Notes are what was checked and passed, for the operator's trust.
	Notes []string `json:"notes,omitempty"`
}

// Preflighter is a provider that can check its hosts for the templates of the
// groups that use it: reachable, host key known, a free port, each
// template's program present.
type Preflighter interface {
	Preflight(ctx context.Context, tmpls map[string]config.Template) []PreflightResult
}

// Preparer is a provider that readies its hosts for a template before an
// instance of it is needed: a container image pulled on every host. A
// deploy prepares its target first and fails, touching no instance, when
// a host cannot be readied.
type Preparer interface {
	Prepare(ctx context.Context, t config.Template) error
}

// LogOptions select what LogReader writes.
type LogOptions struct {
	// Lines is how many of the newest lines to write first (0: all kept).
	Lines int
	// Follow keeps writing what is appended until ctx ends.
	Follow bool
}

// LogReader is a provider that can read an instance's output log, where it
// lives (on the instance's host for ssh).
type LogReader interface {
	Logs(ctx context.Context, rec Record, opts LogOptions, w io.Writer) error
}

// WarmServer is one server of a group's warm pool, as `shoal status` and
// the API show it.
type WarmServer struct {
	Name string `json:"name"`
	// ID is the cloud's ID of the server.
	ID string `json:"id"`
	// State is where it is in the pool: "creating", "booting",
	// "stopping" (being shut down to wait), "warm" (waiting: stopped or
	// running, as the pool's state says), "taking" (a scale-out is
	// booting it into service), "deleting" (drifted or surplus).
	State string `json:"state"`
	// Template is the hash of the template it was created from.
	Template string `json:"template"`
	// Since is when it entered its State; Joined when it became the
	// pool's (created, adopted, or returned by a scale-in): the cloud
	// bills it from then as the pool's, toward the group's cost.
	Since  time.Time `json:"since"`
	Joined time.Time `json:"joined"`
	// Left is when it left the pool (deleted, gone, or taken by a
	// scale-out), for WarmPoolLeft.
	Left time.Time `json:"left,omitzero"`
}

// WarmChecker is a WarmPooler whose pool instances run out of rotation
// on its hosts and are health-checked by it (ssh's running pool): the
// group gives it its health check and placement, before SetWarmPool.
type WarmChecker interface {
	SetWarmCheck(group string, h config.Health, pl config.Placement)
}

// Prechecked is an instance that passed its group's health check before
// Start returned it (taken from a running pool on hosts): the group puts
// it into HAProxy in service, without the health gate's wait.
type Prechecked interface {
	Prechecked() bool
}

// WarmPooler is a provider that keeps groups' warm pools: servers created
// ahead of need, out of rotation, that its Start takes before creating
// one, and to which a retirement may return a server
// (warm_pool.reuse_on_scale_in).
type WarmPooler interface {
	// SetWarmPool sets group's pool (nil: none, its servers are deleted)
	// and the template its servers start from; members created from
	// another are replaced. A group sets it before the provider sweeps
	// strays, so that the servers of its pool are adopted, not swept.
	SetWarmPool(group string, wp *config.WarmPool, tmpl config.Template)
	// WarmPool lists group's pool servers.
	WarmPool(group string) []WarmServer
	// EmptyWarmPool deletes group's pool servers (a group stopping with
	// its instances) and returns once they are gone or ctx ends.
	EmptyWarmPool(ctx context.Context, group string) error
	// WarmPoolLeft returns the servers that left group's pool since it
	// last asked (deleted, gone, or taken as an instance), each once,
	// with Joined and Left: the group records their time in the pool as
	// billed (store.Usage.Pool).
	WarmPoolLeft(group string) []WarmServer
}
