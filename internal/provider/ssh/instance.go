package ssh

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider"
)

// instance is a process on a host serving as an instance.
type instance struct {
	p    *Provider
	h    *host
	rec  provider.Record
	d    data
	tmpl config.Template
	// placement says why it is on h (for events).
	placement string
	done      chan struct{}

	mu      sync.Mutex
	reason  string
	usage   provider.Usage
	usageOK bool

	// Guarded by the Provider's mu: verified is false for an adoption
	// that could not be checked yet (host unreachable), verifiedAt when it
	// became true; failingSince is when its checks started failing (zero
	// while they pass).
	verified     bool
	verifiedAt   time.Time
	failingSince time.Time
	// pool is the group whose warm pool the process waits in ("" once
	// an instance: see pool.go); poolPassing whether its last checks
	// passed.
	pool        string
	poolPassing bool
	// prechecked: taken from a running pool, it passed the group's
	// check out of rotation (provider.Prechecked).
	prechecked bool
}

var (
	_ provider.Instance   = (*instance)(nil)
	_ provider.Placed     = (*instance)(nil)
	_ provider.Sampler    = (*instance)(nil)
	_ provider.Prechecked = (*instance)(nil)
)

// Prechecked reports whether the instance was taken from a running pool,
// its checks passed out of rotation.
func (in *instance) Prechecked() bool { return in.prechecked }

func (p *Provider) newInstance(h *host, rec provider.Record, d data, tmpl config.Template, verified bool) *instance {
	placement := "adopted on " + h.name
	in := &instance{p: p, h: h, rec: rec, d: d, tmpl: tmpl, placement: placement, done: make(chan struct{})}
	if verified {
		in.verify()
	}
	return in
}

// verify marks the instance's process checked on its host (the Provider's
// mu held, or the instance not yet shared).
func (in *instance) verify() {
	in.verified, in.verifiedAt = true, time.Now()
}

func (in *instance) key() procKey { return procKey{in.d.PID, in.d.PIDStart} }

func (in *instance) Record() provider.Record { return in.rec }

// PID is the instance's process on its host (not on this machine).
func (in *instance) PID() int { return in.d.PID }

func (in *instance) Done() <-chan struct{} { return in.done }

func (in *instance) ExitReason() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.reason
}

func (in *instance) Placement() string { return in.placement }

// Usage is the instance's process group's CPU time and memory as the last
// poll of its host read them.
func (in *instance) Usage() (provider.Usage, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.usage, in.usageOK
}

func (in *instance) setUsage(u provider.Usage) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.usage, in.usageOK = u, true
}

// finish closes Done with reason, once.
func (in *instance) finish(reason string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	select {
	case <-in.done:
		return
	default:
	}
	in.reason = reason
	close(in.done)
}

// Stop sends SIGTERM to the instance's process group on its host, SIGKILL
// after the template's StopTimeout, and returns once the group is gone. If
// the host is unreachable it returns at once with an error wrapping
// ErrHostDown, and the instance is stopped when the host is back.
func (in *instance) Stop(ctx context.Context) error {
	select {
	case <-in.done:
		return nil
	default:
	}
	if provider.IsScaleIn(ctx) && in.p.returnToPool(in) {
		return nil
	}
	var err error
	if in.d.Container != "" {
		// The runtime's stop; its process is then gone (or the host did
		// not answer, as for a process).
		if err = in.stopContainer(ctx); err == nil {
			// Nothing of its process group outlives the stop.
			if err = in.p.stopProcess(ctx, in.h, in.key(), in.tmpl.StopTimeout); errors.Is(err, errAlreadyGone) {
				err = nil
			}
		}
	} else {
		err = in.p.stopProcess(ctx, in.h, in.key(), in.tmpl.StopTimeout)
	}
	switch {
	case err == nil:
		in.p.finish(in, "stopped (on host "+in.h.name+")")
		return nil
	case errors.Is(err, errAlreadyGone):
		in.p.finish(in, "exited (on host "+in.h.name+")")
		return nil
	case errors.Is(err, provider.ErrHostDown):
		in.p.mu.Lock()
		in.h.stopOnReturn[in.key()] = in.rec.Name
		in.p.finishLocked(in, "stopped while host "+in.h.name+" was unreachable; stopped there when it is back")
		in.p.mu.Unlock()
	}
	return fmt.Errorf("stop instance %s: %w", in.rec.Name, err)
}

// PreStop runs the template's pre_stop hook on the instance's host, if it
// has one.
func (in *instance) PreStop(ctx context.Context) error {
	if in.tmpl.PreStop == nil {
		return nil
	}
	td := config.TemplateData{Name: in.rec.Name, Host: in.h.name, Port: in.d.Port, Index: in.rec.Index, Group: in.rec.Group}
	if err := in.p.runHook(ctx, in.h, "pre_stop", in.tmpl.PreStop, in.tmpl, td); err != nil {
		return fmt.Errorf("instance %s: %w", in.rec.Name, err)
	}
	return nil
}
