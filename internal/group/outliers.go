package group

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/event"
	"github.com/shoal-lb/shoal/internal/outlier"
)

// outlierPoll is how often the ejector reads HAProxy's counters: a fraction
// of any window it judges (over is at least a second), so an outlier is out
// within over and one poll.
const outlierPoll = time.Second

// ejector runs the group's outlier detector (internal/outlier) when its
// config has outliers, and applies its decisions. Taking an instance out
// of rotation is the day-two drain's HAProxy state (drain: the requests it
// holds finish, no new ones come), but not its instance state: an ejected
// instance stays in service and keeps its place, marked ejected. An
// operator's act wins: one drained or put on standby while ejected is
// theirs, and never returned by the ejector (holdLocked clears the mark).
type ejector struct {
	// mu guards det: the poll and the access log's feed share it.
	mu  sync.Mutex
	det *outlier.Detector // nil while the config has no outliers
	// running is set while runOutliers runs (under g.mu, not mu).
	running bool
}

// ObserveLatency takes one sampled request of an instance from the access
// log: its time to the response.
func (g *Group) ObserveLatency(server string, at time.Time, took time.Duration) {
	if w := g.canLat.Load(); w != nil {
		w.observe(server, took) // a canary's analysis (canary.go)
	}
	g.ej.mu.Lock()
	defer g.ej.mu.Unlock()
	if g.ej.det != nil {
		g.ej.det.Observe(server, at, took)
	}
}

// startOutliersLocked starts the ejector's poll on Run's context when the
// config has outliers and it is not running: at Run, and at a reload that
// adds them. g.mu must be held.
func (g *Group) startOutliersLocked() {
	if g.ej.running || g.runCtx == nil || g.conf().Outliers == nil {
		return
	}
	g.ej.running = true
	ctx := g.runCtx
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		g.runOutliers(ctx)
	}()
}

// runOutliers polls until ctx ends or the config has no outliers (after
// it put back what it ejected); the group's Run owns it (g.wg).
func (g *Group) runOutliers(ctx context.Context) {
	tick, stop := g.clk.NewTicker(outlierPoll)
	defer stop()
	for {
		select {
		case <-ctx.Done():
			g.mu.Lock()
			g.ej.running = false
			g.mu.Unlock()
			return
		case <-tick:
			if !g.judgeOutliers(ctx) {
				return
			}
		}
	}
}

// judgeOutliers reads every instance's counters once and applies what the
// detector decides. Without outliers in the config (a reload took them
// out) the instances it ejected go back into rotation and it reports false:
// the poll ends.
func (g *Group) judgeOutliers(ctx context.Context) bool {
	g.mu.Lock()
	cfg := g.conf().Outliers
	if cfg == nil {
		g.ej.running = false
	}
	g.mu.Unlock()
	g.ej.mu.Lock()
	if cfg == nil {
		g.ej.det = nil
		g.ej.mu.Unlock()
		g.returnAllEjected(ctx)
		return false
	}
	fresh := g.ej.det == nil
	if fresh {
		g.ej.det = outlier.New(*cfg)
	} else {
		g.ej.det.SetConfig(*cfg)
	}
	g.ej.mu.Unlock()
	if fresh {
		g.seedOutliers()
	}
	stats, err := g.lb.Stats(ctx, g.cfg.Name)
	if err != nil {
		return true // HAProxy restarting or unreachable: no news
	}
	byName := map[string]int{}
	for i, st := range stats {
		byName[st.Name] = i
	}
	var samples []outlier.Sample
	g.mu.Lock()
	for _, in := range g.insts {
		i, ok := byName[in.name]
		if !ok {
			continue
		}
		st := stats[i]
		samples = append(samples, outlier.Sample{Name: in.name, Requests: st.Requests, Errors: st.Responses[5],
			Serving: in.inRotation()})
	}
	g.mu.Unlock()
	g.ej.mu.Lock()
	decisions := g.ej.det.Step(g.clk.Now(), samples)
	g.ej.mu.Unlock()
	for _, d := range decisions {
		g.applyOutlier(ctx, d)
	}
	return true
}

// applyOutlier does one decision; one the instance no longer fits (gone,
// retiring, held by an operator) is dropped from the detector.
func (g *Group) applyOutlier(ctx context.Context, d outlier.Decision) {
	switch d.Kind {
	case outlier.GroupFailing:
		g.log.Warn("outliers: the group as a whole is failing", "reason", d.Reason)
		g.record(ctx, event.GroupFailing, g.cfg.Name, d.Reason)
		return
	}
	hist := g.outlierHistory(d.Instance) // before g.mu: the ejector's lock comes first
	g.mu.Lock()
	in := g.insts[d.Instance]
	fits := in != nil && in.inRotation()
	if d.Kind == outlier.Eject {
		fits = fits && in.state == InService // a DOWN one gets nothing anyway
	}
	switch {
	case !fits:
		if in != nil {
			in.ejected = time.Time{}
		}
	case d.Kind == outlier.Eject:
		in.ejected = g.clk.Now().Add(d.For)
		in.ejections = hist
	case d.Kind == outlier.Return:
		fits = !in.ejected.IsZero()
		in.ejected = time.Time{}
	case d.Kind == outlier.Replace:
		in.ejected, in.ejections = time.Time{}, nil
		g.retireLocked(in, "outlier")
	}
	g.notifyLocked()
	g.mu.Unlock()
	if !fits {
		g.forgetOutlier(d.Instance)
		if in != nil {
			g.mu.Lock()
			in.ejections = nil
			keep := !in.retiring
			g.mu.Unlock()
			if keep {
				g.persist(ctx, in)
			}
		}
		return
	}
	if d.Kind != outlier.Replace {
		// The ejection and its count outlive a restart of shoal.
		g.persist(ctx, in)
	}
	switch d.Kind {
	case outlier.Eject:
		if err := g.lb.Drain(ctx, g.cfg.Name, d.Instance, 0); err != nil {
			g.log.Warn("ejecting an outlier failed", "instance", d.Instance, "err", err)
		}
		g.log.Warn("outlier ejected", "instance", d.Instance, "for", d.For, "reason", d.Reason)
		g.record(ctx, event.InstanceEjected, d.Instance, d.Reason)
	case outlier.Return:
		// Re-checked under g.mu: an operator's drain since the decision wins.
		if g.isEjectable(d.Instance) {
			if err := g.lb.Undrain(ctx, g.cfg.Name, d.Instance); err != nil {
				g.log.Warn("returning an outlier failed", "instance", d.Instance, "err", err)
			}
			// An operator's drain that came in while HAProxy was asked:
			// theirs wins.
			if !g.isEjectable(d.Instance) {
				_ = g.lb.Drain(ctx, g.cfg.Name, d.Instance, 0)
			}
		}
		g.log.Info("outlier returned", "instance", d.Instance)
		g.record(ctx, event.InstanceReturned, d.Instance, d.Reason)
	case outlier.Replace:
		g.log.Warn("outlier replaced", "instance", d.Instance, "reason", d.Reason)
		g.record(ctx, event.InstanceReplaced, d.Instance, d.Reason)
		g.poke()
	}
}

// seedOutliers gives a new detector the ejections the instances' records
// hold (an earlier run of shoal ejected them): they stay out until their
// time and count toward replacement.
func (g *Group) seedOutliers() {
	type seed struct {
		name  string
		until time.Time
		at    []time.Time
	}
	var seeds []seed
	g.mu.Lock()
	for _, in := range g.insts {
		if in.inRotation() && (!in.ejected.IsZero() || len(in.ejections) > 0) {
			seeds = append(seeds, seed{in.name, in.ejected, slices.Clone(in.ejections)})
		}
	}
	g.mu.Unlock()
	now := g.clk.Now()
	g.ej.mu.Lock()
	defer g.ej.mu.Unlock()
	for _, s := range seeds {
		g.ej.det.Restore(now, s.name, s.until, s.at)
	}
}

// outlierHistory is the detector's ejections of an instance, to record.
func (g *Group) outlierHistory(name string) []time.Time {
	g.ej.mu.Lock()
	defer g.ej.mu.Unlock()
	if g.ej.det == nil {
		return nil
	}
	_, at := g.ej.det.History(name)
	return at
}

// Ejection marks: an outlier's ejection in its record (store.Instance.Marks),
// as words "ejected-until=MS" and "ejected-at=MS" (Unix milliseconds).
const (
	markEjectedUntil = "ejected-until="
	markEjectedAt    = "ejected-at="
)

// ejectionWords are the marks of an ejection ending at until (zero: none)
// and of the ejections at.
func ejectionWords(until time.Time, at []time.Time) []string {
	var w []string
	if !until.IsZero() {
		w = append(w, markEjectedUntil+strconv.FormatInt(until.UnixMilli(), 10))
	}
	for _, t := range at {
		w = append(w, markEjectedAt+strconv.FormatInt(t.UnixMilli(), 10))
	}
	return w
}

// ejectionOf reads what ejectionWords wrote; a word it cannot read is
// skipped (an ejection forgotten is an instance back in rotation).
func ejectionOf(words []string) (until time.Time, at []time.Time) {
	for _, w := range words {
		if v, ok := strings.CutPrefix(w, markEjectedUntil); ok {
			if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
				until = time.UnixMilli(ms)
			}
		} else if v, ok := strings.CutPrefix(w, markEjectedAt); ok {
			if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
				at = append(at, time.UnixMilli(ms))
			}
		}
	}
	return until, at
}

// inRotation reports an instance the ejector may have out of rotation or
// put back: in service, or unhealthy since (HAProxy's checks have it DOWN
// for now; it must not stay drained once they pass again). Not one held by
// an operator or retiring.
func (in *instance) inRotation() bool {
	return (in.state == InService || in.state == Unhealthy) && !in.retiring
}

func (g *Group) isEjectable(name string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	in := g.insts[name]
	return in != nil && in.inRotation()
}

func (g *Group) forgetOutlier(name string) {
	g.ej.mu.Lock()
	defer g.ej.mu.Unlock()
	if g.ej.det != nil {
		g.ej.det.Forget(name)
	}
}

// returnAllEjected puts back what was ejected once outliers are off.
func (g *Group) returnAllEjected(ctx context.Context) {
	g.mu.Lock()
	var back []string
	var cleared []*instance
	for _, in := range g.insts {
		if !in.ejected.IsZero() || len(in.ejections) > 0 {
			cleared = append(cleared, in)
		}
		if !in.ejected.IsZero() && in.inRotation() {
			back = append(back, in.name)
		}
		in.ejected, in.ejections = time.Time{}, nil
	}
	if len(back) > 0 {
		g.notifyLocked()
	}
	g.mu.Unlock()
	for _, in := range cleared {
		g.persist(ctx, in) // the records forget the ejections too
	}
	for _, name := range back {
		if err := g.lb.Undrain(ctx, g.cfg.Name, name); err != nil {
			g.log.Warn("returning an outlier failed", "instance", name, "err", err)
		}
		g.record(ctx, event.InstanceReturned, name, name+" back in rotation: outliers are no longer configured")
	}
}
