// Package cloud is the one provider of every cloud: it runs a group's
// instances as servers that a cloud's API creates, lists and deletes. What
// differs between clouds is a Driver (sacloud, ec2, exec — the last drives any
// cloud's CLI); the lifecycle is here, once: create with retries, wait for an
// address, one batched listing per interval for exit detection and adoption
// (never one call per server), tag-based markers, stray sweeping, deletion
// with retries, and stand-ins for emulators whose servers cannot serve.
package cloud

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

// Tags shoal puts on every server it creates, the marker that adoption and
// stray sweeping list by. Drivers store them as their cloud's tags (sacloud
// tags are plain strings: "shoal-owner=ID").
const (
	TagOwner    = "shoal-owner"
	TagGroup    = "shoal-group"
	TagInstance = "shoal-instance"
	// TagPool names the group whose warm pool a server may wait in; every
	// server of a group with a warm pool carries it, so that one created
	// by a shoal killed before it recorded it is adopted into the pool
	// rather than swept.
	TagPool = "shoal-pool"
	// TagTemplate is the hash of the template (config.Template.Hash) a
	// pool group's server was created from: a pool member of another is
	// drifted, and replaced.
	TagTemplate = "shoal-template"
)

// Phase is where a server is in its cloud's lifecycle, mapped from the
// cloud's own state words.
type Phase string

// Phases.
const (
	// Pending: created, not running yet (booting, provisioning).
	Pending Phase = "pending"
	// Running: up; with an address it can be health-checked.
	Running Phase = "running"
	// Stopping: shutting down or being deleted.
	Stopping Phase = "stopping"
	// Stopped: shut down but not deleted (a warm pool's server waiting);
	// only a PowerDriver's servers are listed so.
	Stopped Phase = "stopped"
	// Gone: deleted or terminated (some clouds list them for a while).
	Gone Phase = "gone"
)

// Server is one server as a cloud's API lists it.
type Server struct {
	// ID is the cloud's identifier (sacloud server ID, EC2 instance ID,
	// what an exec driver's start printed).
	ID string
	// Name is the server's name in the cloud.
	Name string
	// IP is the address the cloud gives it ("" while it has none, or
	// always for emulators that assign none). Port is filled in by the
	// provider from the group's config, not by the driver.
	IP string
	// Port is where the server serves when the cloud says (an exec
	// driver's "address": "host:port"); 0: the provider's configured port.
	Port  int
	Phase Phase
	// State is the cloud's own word for it ("up", "running", "stopped"),
	// for messages.
	State string
	Tags  map[string]string
	// Created is when the cloud created it (zero if it does not say).
	Created time.Time
	// Zone is where the cloud placed it (EC2's availability zone; "" for
	// clouds whose provider entry has one zone).
	Zone string
	// Interrupted is the cloud's notice that it takes the server back
	// soon (a spot interruption), in words; "" for none.
	Interrupted string
}

// CreateRequest is what the provider asks a driver to create.
type CreateRequest struct {
	// Name is the instance's name (GROUP-NNN), which drivers use for, or
	// in, the server's name.
	Name  string
	Group string
	Index int
	// Plan is the group's current plan name ("" when it has none): drivers
	// with plan ladders (sacloud's core/memory plans) pick the server size
	// from it.
	Plan string
	// Tags are the marker tags (TagOwner, TagGroup, TagInstance) the server
	// must carry.
	Tags map[string]string
	// Template is the group's template: drivers that pass user data or an
	// argv (exec) expand it.
	Template config.Template
	// Token is the same for every attempt of one Start and differs
	// between Starts: drivers whose API takes an idempotency token (EC2's
	// ClientToken) pass it, so that a create retried after a lost answer
	// does not make a second server.
	Token string
	// Attempt counts the attempts of this Start's create, from 1: a driver
	// may look for the server an earlier attempt made before creating.
	Attempt int
}

// Driver is one cloud's API, as the provider uses it. Every call is bounded
// by ctx. Implementations are safe for concurrent use.
type Driver interface {
	// Create asks for one server carrying req.Tags and returns as soon as
	// the cloud has accepted it (its ID known; it may still be Pending).
	Create(ctx context.Context, req CreateRequest) (Server, error)
	// Delete shuts the server down (forcibly if the driver's config says
	// so) and deletes or terminates it. Deleting a server that is already
	// gone is not an error. A Delete that waits for the server to power
	// off first calls Accepted(ctx) as soon as the cloud has accepted the
	// shutdown: from then on the server is on its way out, however long
	// the rest takes (see Provider.Delete).
	Delete(ctx context.Context, id string) error
	// List returns every server carrying TagOwner=owner, in as few calls
	// as the API allows (paged, never one per server).
	List(ctx context.Context, owner string) ([]Server, error)
}

// Sweeper is a Driver that creates things of its own besides servers
// (sacloud's startup-script notes) which a shoal killed mid-create leaves
// behind. The provider has it sweep them wherever it sweeps stray servers:
// at start (StopStrays), or at the first listing that works.
type Sweeper interface {
	// SweepStrays deletes what the driver created for owner that no
	// create in flight in this process uses, and returns what it deleted,
	// each described for the log ("note web-003-startup-1 (ID)").
	SweepStrays(ctx context.Context, owner string) ([]string, error)
}

// PowerDriver is a Driver that can shut a server down and boot it again
// without deleting it: what a warm pool whose servers wait stopped needs
// (warm_pool.state: stopped). The pool's lifecycle is the provider's; a
// driver only gains these two calls.
type PowerDriver interface {
	// PowerOff asks for server id's shutdown and returns once the cloud
	// accepted it; listings then show it Stopping, then Stopped.
	PowerOff(ctx context.Context, id string) error
	// PowerOn asks for a Stopped server's boot and returns once the
	// cloud accepted it; listings then show it Pending, then Running.
	PowerOn(ctx context.Context, id string) error
}

// Preflighter is a Driver that can check its config against the cloud's
// API before anything runs (`shoal providers check`): zones and plans
// against the API's lists. Problems and notes are in words an operator can
// act on; where says what was checked (the API's root, the zone).
type Preflighter interface {
	Preflight(ctx context.Context) (where string, problems, notes []string)
}

// ShutdownModer is a Driver whose Delete shuts a server down one of
// several ways; ShutdownMode names the configured one ("graceful",
// "forced").
type ShutdownModer interface {
	ShutdownMode() string
}

// ErrRetryable marks a driver error worth retrying with back-off: the API
// throttled, was briefly unavailable, or lacked capacity right now.
// Anything else fails the instance at once with the driver's message.
var ErrRetryable = errors.New("retryable cloud API error")

// acceptKey is the context key of the function Accepted calls.
type acceptKey struct{}

// Accepted tells the provider, from inside a Driver's Delete, that the
// cloud has accepted the deletion or the shutdown before it: the server
// will not serve again, so a group retiring it never puts it back into
// rotation, even if the rest of the call fails or times out. A Delete that
// never calls it is accepted when it returns nil.
func Accepted(ctx context.Context) {
	if f, ok := ctx.Value(acceptKey{}).(func()); ok {
		f()
	}
}

// acceptance is a Delete call's answer as Provider.Delete decides it:
// accepted (the driver said so, or returned nil) or refused (an error or
// no answer first), whichever comes first, once.
type acceptance struct {
	mu    sync.Mutex
	state int           // 0 undecided, 1 accepted, 2 refused
	ch    chan struct{} // closed when accepted
}

// withAccepted returns ctx for a Delete call, with what Accepted reports
// to.
func withAccepted(ctx context.Context) (context.Context, *acceptance) {
	a := &acceptance{ch: make(chan struct{})}
	return context.WithValue(ctx, acceptKey{}, a.accept), a
}

func (a *acceptance) accept() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.state == 0 {
		a.state = 1
		close(a.ch)
	}
}

// refuse decides "refused" unless accepted already; it reports whether the
// answer is refused.
func (a *acceptance) refuse() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.state == 0 {
		a.state = 2
	}
	return a.state == 2
}

func (a *acceptance) accepted() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state == 1
}
