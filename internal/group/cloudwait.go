package group

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/event"
	"github.com/shoal-lb/shoal/internal/provider"
)

const (
	// maxDeleteRetry caps the back-off between a retiring cloud instance's
	// drain-and-delete attempts while its cloud refuses the deletion.
	maxDeleteRetry = 30 * time.Second
	// reachableWait bounds the wait for a cloud's API to answer before a
	// retry drains its instance again.
	reachableWait = 2 * time.Minute
)

// cloudWait owns one retiring cloud instance's wait for its cloud to
// delete its server (see deleteDrained). While the cloud's API refuses (an
// outage), the server still runs and costs, so it serves; a scale-up
// meanwhile takes it back (keepWaitingLocked) rather than launch a new
// server:
//
//	+----------+ sessions 0, or  +-------------+ accepted  +----------+
//	| draining |---------------->| delete call |---------->| stopping |--> gone
//	+----------+ drain_timeout   +-------------+           +----------+
//	   ^    |                           | refused
//	   |    | taken back (a retry's)    v
//	   |    |                 +-----------------------+
//	   |    |                 | in-service, retiring: |<--+ after 1 s doubling
//	   |    |                 | "waiting for the      |   | to 30 s, the API
//	   |    |                 |  cloud API: ..."      |---+ does not answer
//	   |    |                 +-----------------------+
//	   |    |                   |               | taken back (a scale-up
//	   +----|-------------------+               | wants one more)
//	 after  |                                   v
//	 1 s doubling to 30 s       +------------------------------------+
//	 if the +------------------>| in-service: serves on, not retiring |
//	 API answers                +------------------------------------+
//
// In the box "in-service, retiring", why is set and keep takes it back; in
// "delete call" after a refusal, why stays set and keep is nil: a scale-up
// then awaits the call's answer instead of taking it back (callOut). The
// retries' timing is deleteRetry's.
//
// It is part of its instance, so the group's mu guards it.
type cloudWait struct {
	// why says why the retiring instance is still in service ("" when it
	// is not waiting): what status and a job that timed out show.
	why string
	// keep, set while it waits (nil while its Delete call is out),
	// cancels the retirement.
	keep context.CancelFunc
}

// set records why the instance waits ("": it does not) and what takes it
// back meanwhile; it reports whether why changed, which waiters are told.
func (w *cloudWait) set(why string, keep context.CancelFunc) (changed bool) {
	w.keep = keep
	changed = w.why != why
	w.why = why
	return changed
}

// waiting reports whether the instance serves only because its cloud
// refuses to delete it.
func (w *cloudWait) waiting() bool { return w.why != "" }

// callOut reports whether a retry's Delete call is out for a waiting
// instance: it cannot be taken back until the cloud answers.
func (w *cloudWait) callOut() bool { return w.why != "" && w.keep == nil }

// call marks a Delete call out: from now the instance cannot be taken back
// until the call is answered (see set).
func (w *cloudWait) call() { w.keep = nil }

// takeBack ends the retirement: its deleteDrained sees keep's context end
// and puts the instance back into rotation. The instance is waiting and
// no call is out (not callOut).
func (w *cloudWait) takeBack() {
	w.keep()
	*w = cloudWait{}
}

// deleteRetry is the timing of a retirement's deletion retries while the
// cloud refuses: 1 s doubling to maxDeleteRetry, except that the wait that
// reaches delete_timeout after the first attempt is cut short there, so
// that its job fails (once) on time.
type deleteRetry struct {
	first    time.Time
	wait     time.Duration
	reported bool
}

// newDeleteRetry starts the timing of a retirement's first attempt at now.
func newDeleteRetry(now time.Time) deleteRetry {
	return deleteRetry{first: now, wait: time.Second}
}

// next returns how long to wait before the next retry, given the
// provider's delete_timeout, and report, true once: delete_timeout has
// passed, and the job is to fail now.
func (r *deleteRetry) next(now time.Time, timeout time.Duration) (d time.Duration, report bool) {
	bound := timeout - now.Sub(r.first)
	if !r.reported && bound <= 0 {
		r.reported, report = true, true
	}
	d = r.wait
	if !r.reported {
		d = min(r.wait, bound)
	}
	return d, report
}

// waited is called once a wait that next returned has passed: a whole
// one doubles the next.
func (r *deleteRetry) waited(d time.Duration) {
	if d == r.wait {
		r.wait = min(2*r.wait, maxDeleteRetry)
	}
}

// deletion is how deleteDrained ended.
type deletion int

const (
	// deleted: the cloud accepted; the caller takes it out of HAProxy.
	deleted deletion = iota
	// kept: a scale-up took it back while it waited; it serves on.
	kept
	// ended: it ended otherwise (its server gone meanwhile, shoal
	// stopping), cleaned up already; or the fence refused its deletion,
	// and it is left to the new leader.
	ended
)

// deleteDrained retires a cloud's instance: drain, then ask the cloud to
// delete the server, waiting while it refuses (see cloudWait).
//
// Whether the API answers is the provider's next listing (Reachable): during
// an outage the instance stays in rotation until a retry can succeed,
// rather than leave it for a drain at every retry. A cloud that answers
// listings but refuses deletions has it drained at each retry.
// A scale-up while a retry's Delete call is out waits for its answer.
// Refused for delete_timeout, the instance's job fails with the API's
// answer (see stuck), and the retirement goes on until the cloud accepts
// or a scale-up takes the instance back.
func (g *Group) deleteDrained(ctx context.Context, in *instance, d provider.Deleter, timeout time.Duration) deletion {
	retry := newDeleteRetry(g.clk.Now())
	// kctx ends when a scale-up takes the instance back: it stops a retry's
	// drain at once.
	kctx, keep := context.WithCancel(ctx)
	defer keep()
	for {
		err := g.lb.Drain(kctx, g.cfg.Name, in.name, timeout)
		if ctx.Err() != nil {
			// Recorded as draining (or in service): the next run of shoal
			// retires it again; without KeepInstances it is stopped.
			g.shutdown(in)
			return ended
		}
		if !g.deleting(in, kctx) {
			return g.keepServing(ctx, in)
		}
		if err != nil {
			g.log.Warn("drain failed; deleting anyway", "instance", in.name, "err", err)
		}
		if err := g.mayAct(ctx, "deletion of "+in.name); err != nil {
			// Drained, recorded draining: the new leader (or the next run
			// of shoal) finishes the retirement.
			g.setWaiting(in, "", nil)
			if ctx.Err() != nil {
				g.shutdown(in)
			} else {
				g.stuck(in, err.Error())
			}
			return ended
		}
		dctx := ctx
		g.mu.Lock()
		if in.scaleIn {
			dctx = provider.ForScaleIn(ctx)
		}
		g.mu.Unlock()
		err = d.Delete(dctx, in.inst)
		if ctx.Err() != nil {
			g.shutdown(in)
			return ended
		}
		if err == nil {
			g.setWaiting(in, "", nil)
			return deleted
		}
		why := "waiting for the cloud API: " + err.Error()
		if uerr := g.lb.Undrain(ctx, g.cfg.Name, in.name); uerr != nil {
			g.log.Warn("putting a retiring instance back into rotation failed", "instance", in.name, "err", uerr)
		}
		g.setWaiting(in, why, keep)
		g.setState(ctx, in, InService)
		g.poke() // a scale-up that awaited this answer takes it back
		g.log.Warn("cloud refused to delete a retiring instance; it stays in service and is retried", "instance", in.name,
			"retry_in", retry.wait, "err", err)
		for {
			next, report := retry.next(g.clk.Now(), d.DeleteTimeout())
			if report {
				g.stuck(in, fmt.Sprintf("not deleted within delete_timeout %s: %s; it stays in service and its deletion is retried", d.DeleteTimeout(), why))
			}
			t, stop := g.clk.NewTimer(next)
			select {
			case <-ctx.Done():
				stop()
				g.shutdown(in)
				return ended
			case <-kctx.Done():
				stop()
				return g.keepServing(ctx, in)
			case <-in.inst.Done():
				stop()
				// Deleted after all (a call that timed out but went through),
				// or outside shoal: gone, so out of HAProxy.
				g.setWaiting(in, "", nil)
				g.drop(in, "", removeThenStop)
				return ended
			case <-t:
			}
			retry.waited(next)
			// Drained again only once the API answers: while it does not,
			// the instance stays in rotation.
			rctx, cancel := context.WithTimeout(kctx, reachableWait)
			rerr := d.Reachable(rctx)
			cancel()
			if ctx.Err() != nil {
				g.shutdown(in)
				return ended
			}
			if kctx.Err() != nil {
				return g.keepServing(ctx, in)
			}
			if rerr == nil {
				break
			}
			why = "waiting for the cloud API: " + rerr.Error()
			g.setWaiting(in, why, keep)
			g.log.Info("cloud API still not answering; the retiring instance stays in rotation", "instance", in.name, "retry_in", retry.wait, "err", rerr)
		}
		// Back in rotation meanwhile: a whole drain again, unless a
		// scale-up took it back just now.
		timeout = g.conf().DrainTimeout
		if !g.setStateIf(ctx, in, Draining, func() bool { return kctx.Err() == nil }) {
			return g.keepServing(ctx, in)
		}
	}
}

// deleting reports whether a retiring instance is still to be deleted,
// and if so stops a scale-up from taking it back while its Delete call is
// out; false: one took it back (kctx ended).
func (g *Group) deleting(in *instance, kctx context.Context) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if kctx.Err() != nil {
		return false
	}
	in.wait.call()
	return true
}

// keepServing puts an instance a scale-up took back into rotation again
// (a retry's drain may have begun) and records it in service.
func (g *Group) keepServing(ctx context.Context, in *instance) deletion {
	if err := g.lb.Undrain(ctx, g.cfg.Name, in.name); err != nil {
		g.log.Warn("putting a kept instance back into rotation failed", "instance", in.name, "err", err)
	}
	g.setState(ctx, in, InService)
	return kept
}

// keepWaitingLocked takes back up to n retiring instances that still serve
// because their cloud refuses to delete them (oldest name first): each
// cancels its retirement and counts as active again, in place of a new
// server. One whose Delete call is out after an earlier refusal is
// awaited rather than replaced: refused again, it is taken back at the
// next pass (deleteDrained pokes); accepted, it goes and a launch follows.
// It returns how many it took or awaits. Only instances of the serving
// version are taken, as Reclaim does. g.mu must be held.
func (g *Group) keepWaitingLocked(n int) int {
	var waiting []*instance
	deciding := 0
	for _, in := range g.insts {
		switch {
		case !in.retiring || !in.wait.waiting() || !g.dep.takesBack(in.version):
		case in.wait.callOut():
			deciding++
		default:
			waiting = append(waiting, in)
		}
	}
	slices.SortFunc(waiting, func(a, b *instance) int { return strings.Compare(a.name, b.name) })
	waiting = waiting[:min(n, len(waiting))]
	for _, in := range waiting {
		in.wait.takeBack()
		in.retiring = false
		in.retire = make(chan struct{})
		// Active again now: the lifecycle puts it back into rotation.
		in.state, in.since = InService, g.clk.Now()
		in.job = 0
		if g.owedLaunch > 0 {
			in.job = g.jobSeq
			g.owedLaunch--
		}
		g.churn++
		g.log.Info("retiring instance taken back: it still serves while its cloud refuses to delete it, so no new server is launched", "instance", in.name, "desired", g.desired)
	}
	if len(waiting) > 0 {
		g.notifyLocked()
	}
	return len(waiting) + min(deciding, n-len(waiting))
}

// setWaiting records why a retiring instance is still in service, and
// keep, what takes it back meanwhile (see cloudWait.set).
func (g *Group) setWaiting(in *instance, why string, keep context.CancelFunc) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if in.wait.set(why, keep) {
		g.notifyLocked()
	}
}

// waitingNote names the instances still in service because their cloud
// refuses to delete them, and why ("" when none): what held a job up.
func (g *Group) waitingNote() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var notes []string
	for _, in := range g.insts {
		if in.wait.waiting() {
			notes = append(notes, in.name+": "+in.wait.why)
		}
	}
	if len(notes) == 0 {
		return ""
	}
	slices.Sort(notes)
	return " (" + strings.Join(notes, "; ") + ")"
}

// stuck fails the job of an instance that cannot be retired for now,
// leaving the instance as it is: it serves, and is retired later.
func (g *Group) stuck(in *instance, reason string) {
	g.mu.Lock()
	g.failures = append(g.failures, Failure{Instance: in.name, Reason: reason, At: g.clk.Now(), job: in.job, version: in.version, serving: true})
	if len(g.failures) > maxFailures {
		g.failures = g.failures[len(g.failures)-maxFailures:]
	}
	g.notifyLocked()
	g.mu.Unlock()
	g.log.Warn("retiring instance stuck", "instance", in.name, "reason", reason)
	g.record(context.Background(), event.InstanceTerminateFailed, in.name, in.name+": "+reason)
}
