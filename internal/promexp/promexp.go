// Package promexp exposes shoal in the Prometheus text format: group sizes
// and instance states read at scrape time, counters and histograms fed by job
// transitions, webhooks and the policy runner, and Go/process metrics.
package promexp

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/jobrun"
	"github.com/shoal-lb/shoal/internal/metrics"
)

// scrapeTimeout bounds what one scrape may spend reading HAProxy and
// instance usage, so a stuck socket cannot pile up scrapes.
const scrapeTimeout = 5 * time.Second

// maxSources bounds the distinct job sources kept as label values: a source is
// free text from clients, and each value is a time series.
const maxSources = 64

// otherSource replaces job sources beyond maxSources.
const otherSource = "other"

// InstanceSource reports the usage of running instances at scrape time:
// *metrics.Collector is one.
type InstanceSource interface {
	Usage() []metrics.InstanceUsage
}

// Metrics is shoal's Prometheus registry and the instruments fed into it.
// All methods are safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	jobs          *prometheus.CounterVec
	scaleLatency  *prometheus.HistogramVec
	decisions     *prometheus.CounterVec
	evalDuration  *prometheus.HistogramVec
	webhookAlerts *prometheus.CounterVec
	// own are the collectors of shoal's metrics New registered.
	own []prometheus.Collector

	mu        sync.Mutex
	sources   map[string]bool
	instances InstanceSource
}

// Groups are the running groups a scrape reads: core's registry, which a
// config reload changes.
type Groups interface {
	// All returns them, sorted by name.
	All() []*group.Group
}

// New returns shoal's metrics for groups. haproxyRestarts reports how often
// HAProxy was restarted after it died.
func New(groups Groups, haproxyRestarts func() int64) *Metrics {
	m := &Metrics{
		reg:     prometheus.NewRegistry(),
		sources: map[string]bool{},
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_jobs_total",
			Help: "Scaling jobs that entered each state (accepted, running, done, failed, ignored), by group and source.",
		}, []string{"group", "source", "state"}),
		scaleLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "shoal_scale_latency_seconds",
			Help:    "Time from a scale-out job's acceptance until its new instances were in service.",
			Buckets: []float64{0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300},
		}, []string{"group"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_policy_decisions_total",
			Help: "Policy decisions by group and outcome.",
		}, []string{"group", "outcome"}),
		evalDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "shoal_policy_evaluation_duration_seconds",
			Help:    "Time one policy evaluation took.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1},
		}, []string{"group"}),
		webhookAlerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_webhook_alerts_total",
			Help: "Alerts received on the webhooks, by webhook and what became of them (job, superseded, resolved, unlabelled).",
		}, []string{"webhook", "result"}),
	}
	m.own = []prometheus.Collector{
		m.jobs, m.scaleLatency, m.decisions, m.evalDuration, m.webhookAlerts,
		&groupCollector{groups: groups, m: m},
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "shoal_haproxy_restarts_total",
			Help: "Times HAProxy was restarted after it exited unexpectedly.",
		}, func() float64 { return float64(haproxyRestarts()) }),
	}
	m.reg.MustRegister(m.own...)
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Collectors are shoal's own collectors New registers, without the Go
// runtime's and the process's standard ones: what the metrics reference
// (docs/metrics.md) lists.
func (m *Metrics) Collectors() []prometheus.Collector { return m.own }

// Handler serves the metrics in the Prometheus text (or OpenMetrics) format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Timeout: 2 * scrapeTimeout})
}

// Registry returns the registry, for tests and for gathering in-process.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// SetInstanceSource makes scrapes report per-instance CPU and memory from src.
func (m *Metrics) SetInstanceSource(src InstanceSource) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.instances = src
}

// ObserveJob records a job entering the state it is in; jobrun.Manager calls
// it on every transition.
func (m *Metrics) ObserveJob(j jobrun.Job) {
	m.jobs.WithLabelValues(j.Group, m.source(j.Source), string(j.State)).Inc()
	if j.State == jobrun.Done && j.Target > j.From && j.FinishedAt != nil {
		m.scaleLatency.WithLabelValues(j.Group).Observe(j.FinishedAt.Sub(j.CreatedAt).Seconds())
	}
}

// ObserveDecision counts one policy decision for a group.
func (m *Metrics) ObserveDecision(groupName string, outcome decision.Outcome) {
	m.decisions.WithLabelValues(groupName, string(outcome)).Inc()
}

// ObserveEvaluation records how long one policy evaluation for a group took.
func (m *Metrics) ObserveEvaluation(groupName string, d time.Duration) {
	m.evalDuration.WithLabelValues(groupName).Observe(d.Seconds())
}

// ObserveWebhookAlert counts one alert received on a webhook.
func (m *Metrics) ObserveWebhookAlert(webhook, result string) {
	m.webhookAlerts.WithLabelValues(webhook, result).Inc()
}

func (m *Metrics) source(s string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sources[s] {
		return s
	}
	if len(m.sources) >= maxSources {
		return otherSource
	}
	m.sources[s] = true
	return s
}

func (m *Metrics) instanceSource() InstanceSource {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.instances
}

// instanceStates are reported for every group, zero included, so that a
// state's series exists before the first instance enters it.
var instanceStates = []group.State{group.Starting, group.InService, group.Drained, group.Standby, group.Draining, group.Stopping, group.Failed}

var (
	descDesired = prometheus.NewDesc("shoal_group_desired_size",
		"Instances the group is reconciling towards.", []string{"group"}, nil)
	descActual = prometheus.NewDesc("shoal_group_size",
		"Instances of the group in service.", []string{"group"}, nil)
	descMin = prometheus.NewDesc("shoal_group_min_size",
		"The group's configured min_size.", []string{"group"}, nil)
	descMax = prometheus.NewDesc("shoal_group_max_size",
		"The group's configured max_size.", []string{"group"}, nil)
	descInstances = prometheus.NewDesc("shoal_group_instances",
		"Instances of the group by state.", []string{"group", "state"}, nil)
	descProtected = prometheus.NewDesc("shoal_group_instances_protected",
		"Instances of the group protected from scale-in (shoal instances protect).", []string{"group"}, nil)
	descCooldown = prometheus.NewDesc("shoal_group_cooldown_until_timestamp_seconds",
		"Until when the group's next scale-up or scale-down is held back (Unix time; 0 when not).", []string{"group", "direction"}, nil)
	descQueue = prometheus.NewDesc("shoal_group_queue",
		"Requests waiting in HAProxy's queue for an instance of the group under its limits.max_conn (qcur).", []string{"group"}, nil)
	descQueueMax = prometheus.NewDesc("shoal_group_queue_max",
		"The longest the group's queue was since HAProxy's last reload (qmax).", []string{"group"}, nil)
	descQueueTime = prometheus.NewDesc("shoal_group_queue_time_seconds",
		"The average time the group's last 1024 requests waited in its queue (qtime).", []string{"group"}, nil)
	descCPU = prometheus.NewDesc("shoal_instance_cpu_seconds_total",
		"CPU time (user+system) an instance has used.", []string{"group", "instance"}, nil)
	descRSS = prometheus.NewDesc("shoal_instance_resident_memory_bytes",
		"An instance's resident memory.", []string{"group", "instance"}, nil)
)

// groupCollector reads the groups' state at scrape time, so sizes and states
// are never stale and nothing else has to be instrumented for them.
type groupCollector struct {
	groups Groups
	m      *Metrics
}

func (c *groupCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDesired, descActual, descMin, descMax, descInstances, descProtected, descCooldown, descQueue, descQueueMax, descQueueTime, descCPU, descRSS} {
		ch <- d
	}
}

func (c *groupCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, g := range c.groups.All() {
		name := g.Name()
		s := g.Status(ctx)
		gauge(descDesired, float64(s.Desired), name)
		gauge(descActual, float64(s.InService), name)
		gauge(descMin, float64(s.MinSize), name)
		gauge(descMax, float64(s.MaxSize), name)
		counts := map[group.State]int{}
		protected := 0
		for _, in := range s.Instances {
			counts[in.State]++
			if in.Protected {
				protected++
			}
		}
		gauge(descProtected, float64(protected), name)
		for _, st := range instanceStates {
			gauge(descInstances, float64(counts[st]), name, string(st))
		}
		if q := s.Queue; q != nil {
			gauge(descQueue, float64(q.Current), name)
			gauge(descQueueMax, float64(q.Max), name)
			gauge(descQueueTime, float64(q.TimeMS)/1000, name)
		}
		up, down := g.Cooldowns()
		gauge(descCooldown, unixSeconds(up), name, "up")
		gauge(descCooldown, unixSeconds(down), name, "down")
	}
	src := c.m.instanceSource()
	if src == nil {
		return
	}
	// A repeated series would fail the whole scrape; the first one counts.
	seen := map[[2]string]bool{}
	for _, u := range src.Usage() {
		key := [2]string{u.Group, u.Instance}
		if seen[key] {
			continue
		}
		seen[key] = true
		ch <- prometheus.MustNewConstMetric(descCPU, prometheus.CounterValue, u.CPUSeconds, u.Group, u.Instance)
		gauge(descRSS, float64(u.RSSBytes), u.Group, u.Instance)
	}
}

func unixSeconds(t time.Time) float64 {
	if t.IsZero() || t.Before(time.Now()) {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}
