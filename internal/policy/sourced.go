package policy

import (
	"fmt"
	"slices"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

// Sourced is a history some of whose metrics are read from outside shoal
// (metrics.sources; package source's History): a metric that reads a source
// is fresh while every source it reads has a value within the source's
// max_age, and a missing source's on_missing says what the policy does.
type Sourced interface {
	// Missing reports whether path reads a source with no value at now
	// newer than its max_age: the first such source, and why.
	Missing(path string, now time.Time) (src config.Source, why string, missing bool)
	// Inputs are the metrics path reads, and whether any source among them
	// gives per-instance values.
	Inputs(path string) (inputs []string, perInstance bool)
}

// sourced returns e's history as a Sourced when it is one.
func (e *evaluation) sourced() (Sourced, bool) {
	s, ok := e.h.(Sourced)
	return s, ok
}

// missingSource reports the source path reads that is missing at t.
func (e *evaluation) missingSource(path string, t time.Time) (config.Source, string, bool) {
	if s, ok := e.sourced(); ok {
		return s.Missing(path, t)
	}
	return config.Source{}, "", false
}

// readsSource reports whether path reads a source.
func (e *evaluation) readsSource(path string) bool {
	s, ok := e.sourced()
	if !ok || slices.Contains(config.MetricPaths, path) {
		return false
	}
	ins, _ := s.Inputs(path)
	return slices.ContainsFunc(ins, func(in string) bool { return !slices.Contains(config.MetricPaths, in) })
}

// total reports whether the target divides metric by its value directly (a
// group total) rather than per ready instance. A source giving one value is
// a total; a formula is per-instance when it reads a per-instance metric
// (cpu.avg, a per-instance source) or the group's size or ready count (as
// queue_depth / max(size, 1) does), a total otherwise.
func (e *evaluation) total(metric string) bool {
	if slices.Contains(totals, metric) {
		return true
	}
	s, ok := e.sourced()
	if !ok || slices.Contains(config.MetricPaths, metric) {
		return false
	}
	ins, perInstance := s.Inputs(metric)
	if perInstance {
		return false
	}
	for _, in := range ins {
		if slices.Contains(config.MetricPaths, in) && !slices.Contains(totals, in) {
			return false
		}
	}
	return true
}

// onMissingSource is the opinion of a rule or the target whose metric reads
// a missing source with on_missing up or down: one step that way, now, so
// that an outage the operator chose to treat as load is not waited out.
func (e *evaluation) onMissingSource(name string, src config.Source, why string) (opinion, bool) {
	op := opinion{name: name}
	switch src.OnMissing {
	case config.SourceUp:
		op.action = config.Action{Kind: config.ActionUp}
	case config.SourceDown:
		op.action = config.Action{Kind: config.ActionDown}
	default:
		return op, false
	}
	op.reason = fmt.Sprintf("%s; a policy never acts on a stale value: on_missing: %s", why, src.OnMissing)
	return e.moves(op), true
}
