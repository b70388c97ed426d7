package cloud

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/provider"
)

// instance is one server serving as an instance. Its life, and what moves
// it (every arrow into "exited" closes Done with the reason shown):
//
//	Start: Create (ErrRetryable retried    Adopt: recorded server
//	1 s doubling to 30 s, create_timeout)    |            |
//	     |                          in the listing   listing fails
//	     v                                   |            v
//	+---------+ listed running  +---------+  |      +------------+
//	| booting |---------------->| running |<-+------| unverified |
//	+---------+ with an address +---------+ listed  +------------+
//	     | boot_timeout, gone,   |   |   |                | absent from a
//	     | stand-in fails:       |   |   | stand-in       | listing: "deleted
//	     | deleted, Start fails  |   |   | exits          | while shoal was down"
//	     v                       |   |   v                v
//	 (no instance)               |   |  exited: "emulator stand-in exited";
//	                             |   |  the group then Stops it (deleted)
//	     absent from, or gone in |   | Stop: Delete (retried until
//	     a successful listing    |   v delete_timeout, then by the poller),
//	                             |   | or Provider.Delete accepted (one call;
//	                             |   | accepted at the shutdown, for a slow one)
//	                             |  +----------+ absent from the listing
//	                             |  | stopping |----------------------> exited: "stopped"
//	                             v  +----------+
//	exited: "server X deleted outside shoal (state S)"
//
// A Provider.Delete of a server its group's warm pool takes back
// (reuse_on_scale_in, pool.go) exits it at once, "returned to the warm
// pool", and Stop does nothing more; a Start may begin by taking a pool
// server instead of a Create (pool.go draws that life).
//
// A failing listing moves nothing: no instance is taken for gone because
// the cloud's API could not be asked. A Provider.Delete the cloud refuses
// moves nothing either: the server runs on, and the group serves with it;
// an accepted one is never taken back.
type instance struct {
	p       *Provider
	rec     provider.Record
	id      string
	standIn provider.Instance // emulators only
	done    chan struct{}

	// verified is false for an instance adopted while listing failed;
	// guarded by p.mu.
	verified bool

	mu       sync.Mutex
	reason   string
	exited   bool
	stopping bool
	// deleted: the cloud accepted Provider.Delete's call; Stop does not
	// ask again.
	deleted bool
	// returned: Provider.Delete returned the server to its group's warm
	// pool; Stop has nothing to do.
	returned bool
	standOff sync.Once // the stand-in is stopped once

	// hash is the template's (config.Template.Hash) the server runs;
	// tagged its TagInstance when it may wait in a warm pool ("" when
	// its group had none at its create).
	hash, tagged string
}

var _ provider.CloudServer = (*instance)(nil)

func (in *instance) Record() provider.Record { return in.rec }

// CloudID is the server's ID in its cloud (see provider.CloudServer).
func (in *instance) CloudID() string { return in.id }

// ShutdownMode is how the driver shuts the server down ("" when it has one
// way only).
func (in *instance) ShutdownMode() string {
	if m, ok := in.p.d.(ShutdownModer); ok {
		return m.ShutdownMode()
	}
	return ""
}

// PID is the emulator stand-in's (a process on this machine), else 0: a
// server's processes are not shoal's to see.
func (in *instance) PID() int {
	if in.standIn != nil {
		return in.standIn.PID()
	}
	return 0
}

func (in *instance) Done() <-chan struct{} { return in.done }

func (in *instance) ExitReason() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.reason
}

// PreStop runs nothing: hooks are not run for cloud servers (the config
// refuses them); the server's own shutdown is its pre_stop.
func (in *instance) PreStop(context.Context) error { return nil }

// markDeleted records that the cloud accepted Provider.Delete's call:
// Stop only waits for the server to go.
func (in *instance) markDeleted() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.deleted, in.stopping = true, true
}

// seen marks the instance present in a listing; p.mu is held.
func (in *instance) seen() { in.verified = true }

// exit closes Done with reason, once.
func (in *instance) exit(reason string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.exited {
		return
	}
	in.exited, in.reason = true, reason
	close(in.done)
}

// gone is the poller's news that the server is no longer listed (state:
// the cloud's word, or "absent from the listing").
func (in *instance) gone(state string) {
	in.p.mu.Lock()
	verified := in.verified
	in.p.mu.Unlock()
	in.mu.Lock()
	stopping := in.stopping
	in.mu.Unlock()
	switch {
	case stopping:
		in.exit("stopped")
	case !verified:
		in.exit(fmt.Sprintf("server %s deleted while shoal was down (%s)", in.rec.Host, state))
	default:
		in.exit(fmt.Sprintf("server %s deleted outside shoal (state %s)", in.rec.Host, state))
	}
	in.stopStandIn()
}

// watchStandIn makes the stand-in's exit the instance's.
func (in *instance) watchStandIn() {
	in.p.wg.Go(func() {
		select {
		case <-in.standIn.Done():
			in.exit("emulator stand-in exited: " + in.standIn.ExitReason())
		case <-in.done:
		case <-in.p.stopped:
		}
	})
}

func (in *instance) stopStandIn() {
	if in.standIn == nil {
		return
	}
	in.standOff.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := in.standIn.Stop(ctx); err != nil {
			in.p.log.Warn("stopping an emulator stand-in failed", "instance", in.rec.Name, "err", err)
		}
	})
}

// Stop deletes the server (retrying until ctx ends or delete_timeout;
// not again after Provider.Delete) and returns once a listing no longer
// has it. If it returns an error, the
// poller keeps asking for the deletion until the server is gone.
func (in *instance) Stop(ctx context.Context) error {
	p := in.p
	in.mu.Lock()
	in.stopping = true
	deleted, returned := in.deleted, in.returned
	in.mu.Unlock()
	if returned {
		return nil // the warm pool's now
	}
	p.setBusy(1)
	defer p.setBusy(-1)
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DeleteTimeout)
	defer cancel()
	if !deleted {
		if err := p.destroy(ctx, in.id); err != nil {
			return fmt.Errorf("stop instance %s: %w", in.rec.Name, err)
		}
	}
	// The server is on its way out: so is its stand-in.
	in.stopStandIn()
	for {
		p.mu.Lock()
		s, listed := p.listing[in.id]
		wait := p.listed
		p.mu.Unlock()
		if !listed || s.Phase == Gone {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stop instance %s: server %s still listed (state %s); its deletion is retried: %w", in.rec.Name, in.id, s.State, context.Cause(ctx))
		case <-wait:
		}
	}
	p.mu.Lock()
	if p.insts[in.id] == in {
		delete(p.insts, in.id)
	}
	p.mu.Unlock()
	in.exit("stopped")
	return nil
}
