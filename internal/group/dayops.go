package group

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/event"
	"github.com/shoal-lb/shoal/internal/job"
	"github.com/shoal-lb/shoal/internal/provider"
)

// Day-two acts on named instances (drain, standby, replace, protect) add
// two states to lifecycle's, both reached only from in-service and left
// only back to it (or out, as any instance leaves):
//
//	                 drain: a replacement is launched first and in service
//	                 (launch before terminate), unless --no-replace
//	+------------+ ---------------------------------------> +---------+
//	| in-service |                                          | drained |
//	|            | <--------------------------------------- +---------+
//	|            |   undrain: back in rotation; the surplus
//	|            |   (if it was replaced) goes by scale-in
//	|            |
//	|            | standby: as drain; --decrement lowers     +---------+
//	|            | ----------------------------------------> | standby |
//	|            | <---------------------------------------- +---------+
//	+------------+   resume: back in rotation; desired + 1
//	     |           if it was decremented, else the surplus
//	     |           goes by scale-in
//	     | replace: a replacement is launched and in service, then this one
//	     v          retires (draining, stopping, gone); terminate first with
//	  draining      --terminate-first, or at max_size with no room
//
// Drained and standby instances are out of HAProxy's rotation (its drain
// state: the requests they hold finish, no new ones come), kept running,
// not replaced for failing checks, and not counted towards the desired
// size, except a drain --no-replace, which keeps its place (the group
// serves one fewer). One that exits is let go, not replaced again (a
// drain --no-replace is replaced: it held a place). A scale-in takes a
// drain --no-replace first (it serves nobody), a deploy rolls it like any
// instance; others a deploy leaves as they are. A group a reload removes
// retires them all, protected or not. Protection is a mark, not a state: a protected instance is never chosen for
// scale-in (a scale-in that could take only protected ones stops at them
// and fails its job saying so); it is still replaced when it fails. The
// states and marks are in the instance's record, so a restart of shoal
// (or an HA failover) finds them.
const (
	Drained State = "drained"
	Standby State = "standby"
)

// marks are what an operator set on an instance, kept in its record
// (store.Instance.Marks, beside an outlier's ejection: see outliers.go).
type marks struct {
	// protected: never chosen for scale-in.
	protected bool
	// noReplace: a drained instance that keeps its place in the group.
	noReplace bool
	// decrement: a standby instance whose entry lowered the desired size,
	// which its resume raises again.
	decrement bool
}

const (
	markProtected = "protected"
	markNoReplace = "no-replace"
	markDecrement = "decrement"
)

func (mk marks) words() []string {
	var w []string
	if mk.decrement {
		w = append(w, markDecrement)
	}
	if mk.noReplace {
		w = append(w, markNoReplace)
	}
	if mk.protected {
		w = append(w, markProtected)
	}
	return w
}

func marksOf(words []string) marks {
	return marks{
		protected: slices.Contains(words, markProtected),
		noReplace: slices.Contains(words, markNoReplace),
		decrement: slices.Contains(words, markDecrement),
	}
}

// held reports an instance an operator took out of rotation (drained or
// on standby) that is not on its way out.
func (in *instance) held() bool {
	return (in.state == Drained || in.state == Standby) && !in.retiring
}

// isHeld is held under g.mu.
func (g *Group) isHeld(in *instance) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return in.held()
}

// retireHeldLocked retires the held instances too: the group is being
// removed, and none of its instances may outlive it. g.mu must be held.
func (g *Group) retireHeldLocked() {
	for _, in := range g.insts {
		if in.held() {
			g.retireLocked(in, "group removed")
		}
	}
}

// heldExited ends a held instance that exited by itself and reports
// whether it was one. One replaced already (not keeping its place) is not
// replaced again: its end is logged, not counted as a failure.
func (g *Group) heldExited(in *instance) bool {
	g.mu.Lock()
	out := in.held() && !in.keepsPlace()
	state := in.state
	g.mu.Unlock()
	if !out {
		return false
	}
	g.log.Warn("held instance exited; it was replaced already", "instance", in.name, "state", state, "reason", in.inst.ExitReason())
	g.drop(in, "", removeThenStop)
	return true
}

// keepsPlace reports a held instance that counts towards the desired size.
func (in *instance) keepsPlace() bool {
	return in.state == Drained && in.marks.noReplace && !in.retiring
}

// ActOptions are a day-two act's flags.
type ActOptions struct {
	// NoReplace: a drain starts no replacement.
	NoReplace bool
	// TerminateFirst: a replace (or the replacement of a drain or
	// standby) takes the old instance out before its replacement serves.
	TerminateFirst bool
	// Decrement: a standby lowers the desired size instead of being replaced.
	Decrement bool
}

// HasInstance reports whether the group has an instance of that name.
func (g *Group) HasInstance(name string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.insts[name]
	return ok
}

// InstanceNames returns the group's instances' names, sorted.
func (g *Group) InstanceNames() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	names := make([]string, 0, len(g.insts))
	for n := range g.insts {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// ActRefusal says why act cannot be done on the named instances now, ""
// when it can. The act re-checks when it runs.
func (g *Group) ActRefusal(act job.Kind, names []string, o ActOptions) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.refusalLocked(act, names, o)
}

func (g *Group) refusalLocked(act job.Kind, names []string, o ActOptions) string {
	if len(names) == 0 {
		return "no instance named"
	}
	if len(names) > 1 && act != job.Replace && act != job.Protect && act != job.Unprotect {
		return fmt.Sprintf("%s takes one instance, got %d", act, len(names))
	}
	if g.removed {
		return "the group is being removed by a config reload"
	}
	c := g.conf()
	seen := map[string]bool{}
	for _, name := range names {
		in := g.insts[name]
		if in == nil {
			return fmt.Sprintf("%s is not an instance of group %s (any more)", name, g.cfg.Name)
		}
		if seen[name] {
			return fmt.Sprintf("%s is named twice", name)
		}
		seen[name] = true
		if in.retiring || in.state == Draining || in.state == Stopping || in.state == Failed {
			return fmt.Sprintf("%s is already on its way out (%s)", name, in.state)
		}
		switch act {
		case job.Drain, job.Standby:
			switch in.state {
			case Drained:
				return fmt.Sprintf("%s is already drained", name)
			case Standby:
				return fmt.Sprintf("%s is on standby: resume it first", name)
			case InService:
			default:
				return fmt.Sprintf("%s is %s, not in service", name, in.state)
			}
		case job.Undrain:
			if in.state != Drained {
				return fmt.Sprintf("%s is %s, not drained", name, in.state)
			}
		case job.Resume:
			if in.state != Standby {
				return fmt.Sprintf("%s is %s, not on standby", name, in.state)
			}
			if in.marks.decrement && g.desired+1 > c.MaxSize {
				return fmt.Sprintf("resuming %s would raise the desired size to %d, above max_size %d", name, g.desired+1, c.MaxSize)
			}
		case job.Replace:
			if in.held() {
				return fmt.Sprintf("%s is %s: undrain or resume it first, or let it go by scale-in", name, in.state)
			}
			if in.state != InService && in.state != Unhealthy {
				return fmt.Sprintf("%s is %s: only an instance in service or unhealthy is replaced", name, in.state)
			}
		case job.Protect:
			if in.marks.protected {
				return fmt.Sprintf("%s is already protected", name)
			}
		case job.Unprotect:
			if !in.marks.protected {
				return fmt.Sprintf("%s is not protected", name)
			}
		default:
			return fmt.Sprintf("%s is not an act on instances", act)
		}
	}
	serving := 0
	for _, in := range g.insts {
		if in.state == InService && !in.retiring {
			serving++
		}
	}
	switch {
	case act == job.Drain && o.NoReplace && serving-1 < max(c.MinSize, 1):
		return fmt.Sprintf("draining %s without a replacement would leave %d in service, below min_size %d (and never none)",
			names[0], serving-1, c.MinSize)
	case act == job.Standby && o.Decrement && g.desired-1 < c.MinSize:
		return fmt.Sprintf("standby of %s with --decrement would lower the desired size to %d, below min_size %d", names[0], g.desired-1, c.MinSize)
	case act == job.Standby && o.Decrement && serving-1 < 1:
		return fmt.Sprintf("standby of %s with --decrement would leave none in service", names[0])
	}
	return ""
}

// Act does a day-two act on the named instances for m's job (Mark before
// it, as for SetDesired) and waits until it is done: the instance drained
// or on standby (the requests it held finished or drain_timeout passed),
// the replacements in service and the replaced instances gone, and the
// group at its desired size. progress is told each step; note says how
// the act went about it (a replace's order). A refused act changes
// nothing and returns an error saying why.
func (g *Group) Act(ctx context.Context, m Mark, act job.Kind, names []string, o ActOptions, progress func(string)) (note string, err error) {
	g.mu.Lock()
	refusal := g.refusalLocked(act, names, o)
	g.mu.Unlock()
	if refusal != "" {
		return "", errors.New(refusal)
	}
	switch act {
	case job.Protect, job.Unprotect:
		return "", g.protect(ctx, names, act == job.Protect)
	case job.Undrain, job.Resume:
		return "", g.unhold(ctx, m, names[0])
	case job.Standby:
		if o.Decrement {
			return "desired size lowered by one (--decrement)", g.holdDecrement(ctx, m, names[0])
		}
	case job.Drain:
		if o.NoReplace {
			return "no replacement (--no-replace)", g.holdInPlace(ctx, m, names[0])
		}
	}
	firstOut, note := g.replaceOrder(o.TerminateFirst)
	progress(note)
	out := func(in *instance) { g.retireLocked(in, "replace") }
	switch act {
	case job.Drain:
		out = func(in *instance) { g.holdLocked(in, Drained, marks{}) }
	case job.Standby:
		out = func(in *instance) { g.holdLocked(in, Standby, marks{}) }
	}
	if err := g.swap(ctx, m, names, firstOut, out, progress); err != nil {
		return note, err
	}
	if act == job.Replace {
		if _, err := g.WaitConverged(ctx, m); err != nil {
			return note, err
		}
		g.mu.Lock()
		var by []string
		for _, in := range g.insts {
			if in.job == m.job && m.job != 0 {
				by = append(by, in.name)
			}
		}
		g.mu.Unlock()
		slices.Sort(by)
		for _, name := range names {
			g.record(ctx, event.InstanceReplaced, name, fmt.Sprintf("%s replaced by %s: %s", name, strings.Join(by, ", "), note))
		}
		return note, nil
	}
	return note, g.finishHold(ctx, m, names[0])
}

// replaceOrder chooses a replacement's order: launch before terminate within
// max_size plus a surge of one, or terminate first when asked to, or when
// the group is at max_size and its provider has no room for one more.
func (g *Group) replaceOrder(terminateFirst bool) (firstOut bool, note string) {
	if terminateFirst {
		return true, "terminate first (--terminate-first)"
	}
	c := g.conf()
	g.mu.Lock()
	desired := g.desired
	g.mu.Unlock()
	if desired >= c.MaxSize && !g.hasRoom() {
		return true, fmt.Sprintf("terminate first: the group is at max_size %d and its provider has no room for one more", c.MaxSize)
	}
	return false, fmt.Sprintf("launch before terminate (a surge of one over desired %d)", desired)
}

// hasRoom reports whether the provider can place one more instance: a
// provider with one host (local, a cloud) always can; one with several
// needs an up host below its capacity.
func (g *Group) hasRoom() bool {
	if len(g.conf().ProviderList()) > 1 {
		return g.NextProvider() != ""
	}
	hosts := g.hostLoads()
	if hosts == nil {
		return true
	}
	cpus := g.conf().Template.CPUs
	for _, h := range hosts {
		s := h.status
		if s.State != provider.HostUp {
			continue
		}
		if (s.CapacityInstances == 0 || s.Instances < s.CapacityInstances) && (s.CapacityCores == 0 || s.Cores+cpus <= s.CapacityCores) {
			return true
		}
	}
	return false
}

// swap takes the named instances out of the group's count, each with out
// (under g.mu), one at a time and each only once an instance launched for
// it is in service, or, firstOut, before. It paces them with the deploy's
// planner (planDeploy), a surge of one or one unavailable. A launch of
// m's job that fails ends it with the reason: what it has not taken out
// yet serves on.
func (g *Group) swap(ctx context.Context, m Mark, names []string, firstOut bool, out func(*instance), progress func(string)) error {
	surge, unavailable := 1, 0
	if firstOut {
		surge, unavailable = 0, 1
	}
	g.mu.Lock()
	// Pointers, not names: a launch may reuse a name once its instance is gone.
	pending := map[*instance]bool{}
	for _, n := range names {
		pending[g.insts[n]] = true
	}
	g.owedLaunch = len(names)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.dep.surge = 0
		g.owedLaunch = 0
		g.notifyLocked()
		g.mu.Unlock()
		g.poke()
	}()
	tick, stop := g.clk.NewTicker(deployPoll)
	defer stop()
	lastNote := ""
	for {
		g.mu.Lock()
		if g.removed {
			g.mu.Unlock()
			return fmt.Errorf("group %s: %w", g.cfg.Name, ErrRemoved)
		}
		var fails []string
		for _, f := range g.failures {
			if f.job == m.job {
				fails = append(fails, f.Instance+" "+f.Reason)
			}
		}
		if len(fails) > 0 {
			var left []string
			for in := range pending {
				left = append(left, in.name)
			}
			slices.Sort(left)
			g.mu.Unlock()
			msg := "the replacement failed: " + strings.Join(fails, "; ")
			if len(left) > 0 {
				msg += "; " + strings.Join(left, ", ") + " serves on"
			}
			return errors.New(msg)
		}
		view := deployView{MaxSurge: surge, MaxUnavailable: unavailable}
		byName := map[string]*instance{}
		kept := 0
		for _, in := range g.activeLocked() {
			switch {
			case pending[in]:
				byName[in.name] = in
				view.Old = append(view.Old, oldInstance{Name: in.name, Serving: in.state == InService})
			case in.keepsPlace():
				kept++
			default:
				view.NewActive++
				if in.state == InService {
					view.NewReady++
				}
			}
		}
		for in := range pending {
			if byName[in.name] != in {
				delete(pending, in) // gone or out by other means
			}
		}
		view.Desired = g.desired - kept
		step := planDeploy(view)
		g.dep.surge = step.Surge
		for _, name := range step.Retire {
			out(byName[name])
			delete(pending, byName[name])
		}
		if len(step.Retire) > 0 {
			g.notifyLocked()
		}
		ch := g.changed
		g.mu.Unlock()
		g.poke()
		note := fmt.Sprintf("%d/%d in service, %d to replace", view.NewReady, view.Desired, len(view.Old)-len(step.Retire))
		if len(step.Retire) > 0 {
			note += "; taking out " + strings.Join(step.Retire, ", ")
		}
		if note != lastNote {
			progress(note)
			lastNote = note
		}
		if step.Done {
			return nil
		}
		if len(step.Retire) > 0 {
			continue // what it took out may have been the last step: plan again now
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-ch:
		case <-tick:
		}
	}
}

// holdLocked takes an instance in service out of rotation into state s
// (Drained or Standby) with mk; the caller drains it in HAProxy (see
// finishHold). g.mu must be held.
func (g *Group) holdLocked(in *instance, s State, mk marks) {
	in.state, in.since = s, g.clk.Now()
	in.marks.noReplace, in.marks.decrement = mk.noReplace, mk.decrement
	in.ejected = time.Time{} // the operator's now: the ejector returns it no more
	g.churn++
	g.log.Info("instance "+string(s), "instance", in.name, "desired", g.desired)
}

// holdInPlace drains an instance that keeps its place: nothing is launched.
func (g *Group) holdInPlace(ctx context.Context, m Mark, name string) error {
	g.mu.Lock()
	if refusal := g.refusalLocked(job.Drain, []string{name}, ActOptions{NoReplace: true}); refusal != "" {
		g.mu.Unlock()
		return errors.New(refusal)
	}
	in := g.insts[name]
	g.holdLocked(in, Drained, marks{noReplace: true})
	g.notifyLocked()
	g.mu.Unlock()
	return g.finishHold(ctx, m, name)
}

// holdDecrement puts an instance on standby and lowers the desired size by
// one, recorded before it takes effect (as SetDesired does).
func (g *Group) holdDecrement(ctx context.Context, m Mark, name string) error {
	if err := g.shiftDesired(ctx, -1, func() {
		// Gone since the act's check (it exited): the size is one less.
		if in := g.insts[name]; in != nil && in.state == InService && !in.retiring {
			g.holdLocked(in, Standby, marks{decrement: true})
		}
	}); err != nil {
		return err
	}
	return g.finishHold(ctx, m, name)
}

// shiftDesired moves the desired size by delta and, under the same hold
// of g.mu, does apply, so that the reconciler never sees one without the
// other. The size is recorded first; if that fails nothing changes.
func (g *Group) shiftDesired(ctx context.Context, delta int, apply func()) error {
	g.stateMu.Lock()
	defer g.stateMu.Unlock()
	g.mu.Lock()
	gs := g.stateLocked()
	g.mu.Unlock()
	gs.Desired += delta
	c := g.conf()
	if refusal := c.Range().Refusal(g.cfg.Name, gs.Desired); refusal != "" {
		return errors.New(refusal)
	}
	if err := g.putState(ctx, gs); err != nil {
		return err
	}
	g.mu.Lock()
	g.desired = gs.Desired
	apply()
	g.notifyLocked()
	g.mu.Unlock()
	g.poke()
	return nil
}

// finishHold records the held instance, drains it in HAProxy (waiting for
// the requests it holds, up to drain_timeout), says so, and waits for the
// group to be whole.
func (g *Group) finishHold(ctx context.Context, m Mark, name string) error {
	g.mu.Lock()
	in := g.insts[name]
	g.mu.Unlock()
	if in == nil {
		return fmt.Errorf("%s is gone", name)
	}
	g.persist(ctx, in)
	g.mu.Lock()
	state, mk := in.state, in.marks
	g.mu.Unlock()
	err := g.lb.Drain(ctx, g.cfg.Name, name, g.conf().DrainTimeout)
	if err != nil {
		return fmt.Errorf("taking %s out of rotation: %w", name, err)
	}
	switch {
	case state == Drained && mk.noReplace:
		g.record(ctx, event.InstanceDrained, name, name+" drained: out of rotation, kept running in its place (not replaced)")
	case state == Drained:
		g.record(ctx, event.InstanceDrained, name, name+" drained: out of rotation, kept running; a replacement serves in its place")
	case mk.decrement:
		g.record(ctx, event.InstanceStandby, name, name+" on standby: out of rotation, kept running; desired size lowered by one")
	default:
		g.record(ctx, event.InstanceStandby, name, name+" on standby: out of rotation, kept running; a replacement serves in its place")
	}
	_, err = g.WaitConverged(ctx, m)
	return err
}

// unhold puts a drained or standby instance back in rotation. One that was
// replaced is then surplus: the scale-in (the group's scale_in order,
// protection respected) retires one for m's job. One whose standby
// lowered the desired size raises it again.
func (g *Group) unhold(ctx context.Context, m Mark, name string) error {
	back := func() {
		in := g.insts[name]
		if in == nil || !in.held() {
			return // it exited since: the reconciler replaces it if it counted
		}
		in.state, in.since = InService, g.clk.Now()
		in.marks.noReplace, in.marks.decrement = false, false
		if len(g.activeLocked()) > g.desired {
			g.owedRetire = len(g.activeLocked()) - g.desired
		}
		g.churn++
	}
	g.mu.Lock()
	in := g.insts[name]
	if in == nil || !in.held() {
		g.mu.Unlock()
		return fmt.Errorf("%s is no longer held out of rotation", name)
	}
	was, decrement := in.state, in.marks.decrement
	g.mu.Unlock()
	// Back in HAProxy's rotation first: the scale-in that follows may
	// retire another instance, and this one must serve by then.
	if err := g.lb.Undrain(ctx, g.cfg.Name, name); err != nil {
		return fmt.Errorf("putting %s back in rotation: %w", name, err)
	}
	if decrement {
		if err := g.shiftDesired(ctx, 1, back); err != nil {
			_ = g.lb.Drain(ctx, g.cfg.Name, name, 0)
			return err
		}
	} else {
		g.mu.Lock()
		back()
		g.notifyLocked()
		g.mu.Unlock()
		g.poke()
	}
	g.persist(ctx, in)
	t, what := event.InstanceUndrained, " undrained"
	if was == Standby {
		t, what = event.InstanceResumed, " resumed from standby"
	}
	g.record(ctx, t, name, name+what+": back in rotation")
	_, err := g.WaitConverged(ctx, m)
	return err
}

// protect sets or clears the named instances' protection from scale-in.
func (g *Group) protect(ctx context.Context, names []string, on bool) error {
	for _, name := range names {
		g.mu.Lock()
		in := g.insts[name]
		if in != nil {
			in.marks.protected = on
			g.notifyLocked()
		}
		g.mu.Unlock()
		if in == nil {
			return fmt.Errorf("%s is gone", name)
		}
		g.persist(ctx, in)
		if on {
			g.record(ctx, event.InstanceProtected, name, name+" protected: never chosen for scale-in")
		} else {
			g.record(ctx, event.InstanceUnprotected, name, name+" no longer protected from scale-in")
		}
	}
	g.poke() // a scale-in stopped at it may go on now
	return nil
}

// unprotected splits a scale-in order: the first n instances that are not
// protected, in order, and the protected ones it passed on the way (all of
// them when fewer than n were found: the scale-in stops at those).
func unprotected(order []pick, n int) (take []pick, passed []string) {
	for _, p := range order {
		if len(take) == n {
			break
		}
		if p.in.marks.protected {
			passed = append(passed, p.in.name)
			continue
		}
		take = append(take, p)
	}
	return take, passed
}

// settledLocked reports whether every wanted instance is in service and
// nothing else is left but held ones; blocked are the protected instances
// beyond the desired size that a scale-in could not take (then the group
// has settled above its desired size). g.mu must be held.
func (g *Group) settledLocked() (settled bool, blocked []string) {
	n, protected, still := g.placesLocked()
	if !still {
		return false, nil
	}
	// A canary's instances run beside the desired size (a scaling job
	// may run beside a canary).
	want := g.desired + g.dep.canary
	switch {
	case n == want:
		return true, nil
	case n > want && n-len(protected) <= want && g.protectedNote != "":
		// The scale-in ran and found only protected ones left (see
		// retireSurplusLocked): not merely a surplus it has yet to see.
		slices.Sort(protected)
		return true, protected
	}
	return false, nil
}

// shortLocked reports a group still below its desired size: every
// instance in service (or held), none starting or retiring, fewer than
// wanted, as while its providers are skipped after refusals or its
// instances back off. g.mu must be held.
func (g *Group) shortLocked() bool {
	n, _, still := g.placesLocked()
	return still && n < g.desired+g.dep.canary
}

// placesLocked counts the places the group's instances take (in service,
// or held in place), the protected among them, and says whether none is
// starting or retiring. g.mu must be held.
func (g *Group) placesLocked() (n int, protected []string, still bool) {
	for _, in := range g.insts {
		if in.held() {
			if in.keepsPlace() {
				n++
			}
			continue
		}
		if in.state != InService || in.retiring {
			return 0, nil, false
		}
		n++
		if in.marks.protected {
			protected = append(protected, in.name)
		}
	}
	return n, protected, true
}

// protectedStopLocked is the error of a scale-in that stopped short of
// the desired size (nil when none did): only protected instances were left
// to take. g.mu must be held.
func (g *Group) protectedStopLocked() error {
	settled, blocked := g.settledLocked()
	if !settled || len(blocked) == 0 {
		return nil
	}
	return fmt.Errorf("%w (%s): %d in service for desired size %d; unprotect one to let it go",
		ErrProtected, strings.Join(blocked, ", "), len(g.activeLocked()), g.desired)
}
