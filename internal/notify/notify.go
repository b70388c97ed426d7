// Package notify tells operators about events: it routes each event the
// store records to the targets whose filters select it (the store queues it
// in the same transaction), and delivers the queue in the background with
// retries, so that a slow or dead receiver never blocks the core.
//
// A queued notification:
//
//	queued ──deliver──► delivered (deleted, counted)
//	  ▲   └─fails──► waiting retry_min·2ⁿ (≤ retry_max) ──┐
//	  └───────────────────────────────────────────────────┘
//	older than ttl, its target gone, or the oldest of a full queue
//	  ──► dropped (deleted, counted, logged)
//
// Each target's queue is a FIFO: one waiting to be retried holds back the
// target's later ones (never another target's), so a receiver gets events
// in the order they happened.
package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/event"
	"github.com/shoal-lb/shoal/internal/store"
)

// batch bounds how many due notifications one pass reads.
const batch = 100

// maxQueued bounds a target's queue: past it the oldest are dropped, so a
// receiver down for long cannot grow shoal.db without bound before the ttl.
const maxQueued = 10000

// sender delivers one event to one target.
type sender interface {
	send(ctx context.Context, ev event.Event) error
}

type target struct {
	cfg config.NotifyTarget
	sender
}

// Targets are a config's targets, ready to deliver to.
type Targets struct {
	cfg    config.Notify
	byName map[string]target
}

// NewTargets prepares cfg's targets; it fails when one cannot be used (its
// ca_file unreadable), so that a reload can refuse before it changes
// anything.
func NewTargets(cfg config.Notify) (*Targets, error) {
	ts := &Targets{cfg: cfg, byName: map[string]target{}}
	for _, t := range cfg.Targets {
		s, err := newSender(t)
		if err != nil {
			return nil, fmt.Errorf("notify target %s: %w", t.Name, err)
		}
		ts.byName[t.Name] = target{cfg: t, sender: s}
	}
	return ts, nil
}

// Notifier routes events to targets and delivers the store's queue.
type Notifier struct {
	st      *store.Store
	log     *slog.Logger
	targets atomic.Pointer[Targets]

	delivered, failed, dropped *prometheus.CounterVec
	// maxQueued bounds each target's queue (the constant; tests set less).
	maxQueued int
}

// New returns the notifier of cfg's targets, delivering st's queue.
func New(cfg config.Notify, st *store.Store, log *slog.Logger) (*Notifier, error) {
	ts, err := NewTargets(cfg)
	if err != nil {
		return nil, err
	}
	n := &Notifier{st: st, log: log, maxQueued: maxQueued}
	n.newCounters()
	n.Use(ts)
	return n, nil
}

// Use makes ts the targets of events recorded from now on (a reloaded
// config); what is queued for a target ts lacks is dropped and counted.
func (n *Notifier) Use(ts *Targets) {
	for name := range ts.byName {
		// Every target's series exist from the start, at 0.
		n.delivered.WithLabelValues(name)
		n.failed.WithLabelValues(name)
		n.dropped.WithLabelValues(name, "expired")
		n.dropped.WithLabelValues(name, "overflow")
	}
	n.targets.Store(ts)
	n.st.Poke()
}

func newSender(t config.NotifyTarget) (sender, error) {
	switch t.Type {
	case config.NotifyWebhook:
		return newWebhook(t), nil
	case config.NotifySlack:
		return newSlack(t), nil
	case config.NotifyEmail:
		return newEmail(t)
	case config.NotifyCommand:
		return &command{argv: t.Argv}, nil
	}
	return nil, fmt.Errorf("unknown type %q", t.Type)
}

// Collectors are the notifier's metrics, for the /metrics registry.
func (n *Notifier) Collectors() []prometheus.Collector {
	return []prometheus.Collector{n.delivered, n.failed, n.dropped}
}

// newCounters makes n's counters; each notifier has its own.
func (n *Notifier) newCounters() {
	n.delivered = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shoal_notifications_delivered_total",
		Help: "Notifications delivered, by target.",
	}, []string{"target"})
	n.failed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shoal_notification_failures_total",
		Help: "Failed notification delivery attempts (each is retried until the ttl), by target.",
	}, []string{"target"})
	n.dropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shoal_notifications_dropped_total",
		Help: "Notifications dropped undelivered, by target and reason (expired: older than notify.ttl; overflow: the oldest of a queue full at 10000; no_target: the target is no longer configured).",
	}, []string{"target", "reason"})
}

// MetricCollectors are a notifier's collectors with no notifier behind
// them: what they describe, for the metrics reference.
func MetricCollectors() []prometheus.Collector {
	n := &Notifier{}
	n.newCounters()
	return n.Collectors()
}

// Route names the targets whose filters select ev, in config order.
func (n *Notifier) Route(ev event.Event) []string {
	var out []string
	for _, t := range n.targets.Load().cfg.Targets {
		if Selects(t, ev) {
			out = append(out, t.Name)
		}
	}
	return out
}

// Selects reports whether t's filters select ev.
func Selects(t config.NotifyTarget, ev event.Event) bool {
	if len(t.Events) > 0 && !slices.ContainsFunc(t.Events, func(s string) bool {
		fam, ok := strings.CutSuffix(s, ".*")
		if ok {
			return strings.HasPrefix(string(ev.Type), fam+".")
		}
		return s == string(ev.Type)
	}) {
		return false
	}
	// An event of no group (HAProxy restarted) concerns every group.
	return len(t.Groups) == 0 || ev.Group == "" || slices.Contains(t.Groups, ev.Group)
}

// Run delivers the queue until ctx ends. Each target has its own worker,
// started when something of the target's is due, that delivers its
// notifications one at a time, oldest first: a slow or dead receiver
// delays only its own, and a failed one is retried before any later one.
func (n *Notifier) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	busy := map[string]bool{}    // targets whose worker runs
	done := make(chan string, 1) // a worker's target, when it ends
	for {
		n.expire(ctx)
		n.trim(ctx)
		wait := n.targets.Load().cfg.RetryMax
		next, err := n.st.NextNotifications(ctx)
		if err != nil {
			n.log.Error("reading the notification queue failed", "err", err)
		}
		now := time.Now()
		for target, at := range next {
			switch {
			case busy[target]:
			case !at.After(now):
				busy[target] = true
				wg.Go(func() {
					n.drain(ctx, target)
					select {
					case done <- target:
					case <-ctx.Done():
					}
				})
			default:
				// A floor: a store that keeps failing must not spin the loop.
				wait = min(wait, max(10*time.Millisecond, at.Sub(now)))
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case target := <-done:
			delete(busy, target)
		case <-n.st.Queued():
		case <-t.C:
		}
		t.Stop()
	}
}

// expire drops what is older than the ttl.
func (n *Notifier) expire(ctx context.Context) {
	ttl := n.targets.Load().cfg.TTL
	gone, err := n.st.ExpireNotifications(ctx, time.Now().Add(-ttl))
	if err != nil {
		n.log.Error("expiring notifications failed", "err", err)
	}
	for name, c := range gone {
		n.dropped.WithLabelValues(name, "expired").Add(float64(c))
		n.log.Warn("notifications dropped undelivered: older than notify.ttl", "target", name, "count", c, "ttl", ttl)
	}
}

// trim drops the oldest of each queue longer than n.maxQueued.
func (n *Notifier) trim(ctx context.Context) {
	gone, err := n.st.TrimNotifications(ctx, n.maxQueued)
	if err != nil {
		n.log.Error("trimming the notification queue failed", "err", err)
	}
	for name, c := range gone {
		n.dropped.WithLabelValues(name, "overflow").Add(float64(c))
		n.log.Warn("notifications dropped undelivered: the target's queue is full; the oldest go first", "target", name, "count", c, "max", n.maxQueued)
	}
}

// drain delivers target's due notifications, a batch at a time, until none
// is due (each is delivered, or rescheduled for later) or ctx ends.
func (n *Notifier) drain(ctx context.Context, target string) {
	for ctx.Err() == nil {
		due, err := n.st.DueNotifications(ctx, target, time.Now(), batch)
		if err != nil {
			n.log.Error("reading the notification queue failed", "target", target, "err", err)
			// Run starts the worker again: not at once.
			sleep(ctx, n.targets.Load().cfg.RetryMin)
			return
		}
		if len(due) == 0 {
			return
		}
		ts := n.targets.Load()
		for _, q := range due {
			if ctx.Err() != nil {
				return
			}
			switch n.deliver(ctx, ts, q) {
			case sent:
			case stuck:
				sleep(ctx, ts.cfg.RetryMin)
				return
			default:
				// The head waits for its retry; the ones behind it wait for it.
				return
			}
		}
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// outcome is what became of a delivery attempt.
type outcome int

const (
	sent    outcome = iota // delivered or dropped: it left the queue
	waiting                // rescheduled, or left as it was at shutdown
	stuck                  // the queue could not be updated: q is still due
)

// deliver tries q once and deletes or reschedules it.
func (n *Notifier) deliver(ctx context.Context, ts *Targets, q store.Notification) outcome {
	t, ok := ts.byName[q.Target]
	if !ok {
		n.dropped.WithLabelValues(q.Target, "no_target").Inc()
		n.log.Warn("notification dropped: its target is no longer configured", "target", q.Target, "event", q.Event.Type)
		return n.forget(ctx, q)
	}
	sctx, cancel := context.WithTimeout(ctx, t.cfg.Timeout)
	err := t.send(sctx, q.Event)
	cancel()
	if err == nil {
		n.delivered.WithLabelValues(q.Target).Inc()
		return n.forget(ctx, q)
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return waiting // shutting down: it stays queued as it was
	}
	n.failed.WithLabelValues(q.Target).Inc()
	wait := backoff(ts.cfg, q.Attempts)
	n.log.Warn("notification delivery failed; retrying", "target", q.Target, "event", q.Event.Type,
		"attempt", q.Attempts+1, "retry_in", wait, "err", err)
	if err := n.st.RetryNotification(context.WithoutCancel(ctx), q.ID, time.Now().Add(wait), err.Error()); err != nil {
		n.log.Error("rescheduling a notification failed", "target", q.Target, "err", err)
		return stuck
	}
	return waiting
}

func (n *Notifier) forget(ctx context.Context, q store.Notification) outcome {
	if err := n.st.DeleteNotification(context.WithoutCancel(ctx), q.ID); err != nil {
		n.log.Error("removing a notification from the queue failed", "target", q.Target, "err", err)
		return stuck
	}
	return sent
}

// backoff is how long to wait after the (attempts+1)th failure.
func backoff(cfg config.Notify, attempts int) time.Duration {
	d := cfg.RetryMin
	for range min(attempts, 62) {
		if d >= cfg.RetryMax {
			break
		}
		d *= 2
	}
	return min(d, cfg.RetryMax)
}
