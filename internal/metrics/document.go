package metrics

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Document is a group's metrics over a window, as `shoal metrics` prints it
// and as policy paths ("cpu.p90", "latency_ms.p99") address it. A value that
// could not be measured in the window is null.
type Document struct {
	Group  string `json:"group"`
	Window string `json:"window"`
	// Time is the end of the window.
	Time time.Time `json:"time"`
	// Size counts the instances listed; Ready those in the aggregates (in
	// service and past warmup).
	Size      int           `json:"size"`
	Ready     int           `json:"ready"`
	CPU       CPUSummary    `json:"cpu"`
	Instances []InstanceDoc `json:"instances"`

	RequestsPerSecond            *float64 `json:"requests_per_second"`
	RequestsPerSecondPerInstance *float64 `json:"requests_per_second_per_instance"`
	ErrorsPerSecond              *float64 `json:"errors_per_second"`
	ConnectionErrorsPerSecond    *float64 `json:"connection_errors_per_second"`
	RetriesPerSecond             *float64 `json:"retries_per_second"`
	Queue                        *float64 `json:"queue"`
	Sessions                     *float64 `json:"sessions"`
	// Concurrency is the requests in flight or queued per ready instance;
	// QueueMax and QueueTimeMS the backend's qmax and qtime (see
	// GroupMetrics).
	Concurrency *float64   `json:"concurrency"`
	QueueMax    *float64   `json:"queue_max"`
	QueueTimeMS *float64   `json:"queue_time_ms"`
	Latency     LatencyDoc `json:"latency_ms"`
}

// CPUSummary is across the ready instances, each one's average over the
// window (counted from the end of its warmup), in percent of its cores.
type CPUSummary struct {
	Avg *float64 `json:"avg"`
	Min *float64 `json:"min"`
	Max *float64 `json:"max"`
	P75 *float64 `json:"p75"`
	P90 *float64 `json:"p90"`
	P95 *float64 `json:"p95"`
	P99 *float64 `json:"p99"`
}

// InstanceDoc is one instance over the window.
type InstanceDoc struct {
	Name  string  `json:"name"`
	State string  `json:"state"`
	Ready bool    `json:"ready"`
	Cores float64 `json:"cores"`
	CPU   struct {
		Avg *float64 `json:"avg"`
		Max *float64 `json:"max"`
	} `json:"cpu"`
	RSSBytes          *float64 `json:"rss_bytes"`
	RequestsPerSecond *float64 `json:"requests_per_second"`
	ErrorsPerSecond   *float64 `json:"errors_per_second"`
	Sessions          *float64 `json:"sessions"`
}

// LatencyDoc holds percentiles of HAProxy's %Ta (total time) and %Tr
// (response time) over the window's requests, each logged line weighing the
// sample rate it was logged at; SampleRate is the latest rate (one request
// in SampleRate logged), Samples how many lines were seen.
type LatencyDoc struct {
	P50        *float64 `json:"p50"`
	P90        *float64 `json:"p90"`
	P99        *float64 `json:"p99"`
	TrP50      *float64 `json:"tr_p50"`
	TrP90      *float64 `json:"tr_p90"`
	TrP99      *float64 `json:"tr_p99"`
	SampleRate int      `json:"sample_rate"`
	Samples    int      `json:"samples"`
}

func num(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// Document returns group's metrics over the window ending now, for the
// instances whose names start with prefix.
func (c *Collector) Document(ctx context.Context, group string, window time.Duration, prefix string) (*Document, error) {
	if !c.known(group) {
		return nil, fmt.Errorf("metrics of %q: %w", group, ErrUnknownGroup)
	}
	if window <= 0 {
		return nil, fmt.Errorf("metrics of %q: window must be positive, got %s", group, window)
	}
	var at time.Time
	var instances []instanceView
	c.mu.RLock()
	// A group a reload has just added has no view until the next sample.
	if gv := c.views[group]; gv != nil {
		at, instances = gv.at, slices.Clone(gv.instances)
	}
	c.mu.RUnlock()
	if at.IsZero() {
		at = time.Now()
	}
	from := at.Add(-window)
	doc := &Document{Group: group, Window: window.String(), Time: at, Instances: []InstanceDoc{}}

	var errs []error
	read := func(path string, from time.Time) []point {
		pts, err := c.points(ctx, path, from, at)
		errs = append(errs, err)
		return pts
	}
	mean := func(path string) *float64 {
		m, _, ok := meanMax(read(path, from))
		if !ok {
			return nil
		}
		return num(m)
	}

	slices.SortFunc(instances, func(a, b instanceView) int { return strings.Compare(a.Name, b.Name) })
	var readyCPU []float64
	for _, iv := range instances {
		if !strings.HasPrefix(iv.Name, prefix) {
			continue
		}
		ip := func(m string) string { return InstancePath(group, iv.Name, m) }
		d := InstanceDoc{Name: iv.Name, State: iv.State, Ready: iv.ready, Cores: iv.Cores}
		cpu := read(ip("cpu"), from)
		if m, peak, ok := meanMax(cpu); ok {
			d.CPU.Avg, d.CPU.Max = num(m), num(peak)
		}
		if rss := read(ip("rss_bytes"), from); len(rss) > 0 {
			d.RSSBytes = num(rss[len(rss)-1].Avg)
		}
		d.RequestsPerSecond = mean(ip("requests_per_second"))
		d.ErrorsPerSecond = mean(ip("errors_per_second"))
		d.Sessions = mean(ip("sessions"))
		doc.Size++
		if iv.ready {
			doc.Ready++
			// Only the samples since warmup ended count: the cold start's
			// spike is what the exclusion is for.
			warm := iv.ReadySince.Add(c.opts.Warmup)
			var since []point
			for _, p := range cpu {
				if !p.T.Before(warm) {
					since = append(since, p)
				}
			}
			if m, _, ok := meanMax(since); ok {
				readyCPU = append(readyCPU, m)
			}
		}
		doc.Instances = append(doc.Instances, d)
	}
	if s, ok := summarize(readyCPU); ok {
		doc.CPU = CPUSummary{Avg: num(s.avg), Min: num(s.min), Max: num(s.max), P75: num(s.p75), P90: num(s.p90), P95: num(s.p95), P99: num(s.p99)}
	}
	gp := func(m string) string { return Path(group, m) }
	doc.RequestsPerSecond = mean(gp("requests_per_second"))
	doc.RequestsPerSecondPerInstance = mean(gp("requests_per_second_per_instance"))
	doc.ErrorsPerSecond = mean(gp("errors_per_second"))
	doc.ConnectionErrorsPerSecond = mean(gp("connection_errors_per_second"))
	doc.RetriesPerSecond = mean(gp("retries_per_second"))
	doc.Queue = mean(gp("queue"))
	doc.Sessions = mean(gp("sessions"))
	doc.Concurrency = mean(gp("concurrency"))
	doc.QueueMax = mean(gp("queue_max"))
	doc.QueueTimeMS = mean(gp("queue_time_ms"))
	if ls, ok := c.latency(group, from); ok {
		doc.Latency = LatencyDoc{
			P50: num(ls.ta50), P90: num(ls.ta90), P99: num(ls.ta99),
			TrP50: num(ls.tr50), TrP90: num(ls.tr90), TrP99: num(ls.tr99),
			SampleRate: ls.rate, Samples: ls.samples,
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("metrics of %q: %w", group, err)
	}
	return doc, nil
}
