// Package metrics samples every instance's CPU and memory and HAProxy's
// per-server counters once per interval, aggregates them per group, keeps
// their history (an in-memory ring and SQLite roll-ups), and renders the
// metrics document that `shoal metrics`, the policies and the sacloud
// cpu-usage format read.
//
// Series are named by path: "GROUP/METRIC" for a group ("web/cpu.p90") and
// "GROUP/INSTANCE/METRIC" for an instance ("web/web-001/cpu"); see
// GroupMetrics and InstanceMetrics.
package metrics

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/provider"
)

// GroupMetrics are the per-group series, one value per interval. cpu.* are
// across the group's ready instances (in service and past warmup), and so is
// requests_per_second_per_instance: what they served, divided by how many
// they are; requests, errors, queue and sessions count the whole backend.
// concurrency is the requests in flight or queued (the servers' scur plus
// the queue) per ready instance: what an I/O-bound app's load is, where its
// CPU says nothing. queue_max (qmax, since HAProxy's last reload) and
// queue_time_ms (qtime, the last 1024 requests' average wait) are the
// backend's.
var GroupMetrics = []string{
	"cpu.avg", "cpu.min", "cpu.max", "cpu.p75", "cpu.p90", "cpu.p95", "cpu.p99",
	"latency_ms.p50", "latency_ms.p90", "latency_ms.p99",
	"requests_per_second", "requests_per_second_per_instance", "errors_per_second",
	"connection_errors_per_second", "retries_per_second", "queue", "sessions", "ready", "size",
	"concurrency", "queue_max", "queue_time_ms",
}

// InstanceMetrics are the per-instance series. cpu is a percentage of the
// instance's allotted cores.
var InstanceMetrics = []string{"cpu", "rss_bytes", "requests_per_second", "errors_per_second", "sessions"}

// Path names a group series.
func Path(group, metric string) string { return group + "/" + metric }

// InstancePath names an instance series.
func InstancePath(group, instance, metric string) string {
	return group + "/" + instance + "/" + metric
}

// Target is one instance to sample, as the group that runs it describes it.
type Target struct {
	Group string
	Name  string
	// PGID is the instance's process group (its leader's pid): every process
	// in it counts. 0 when no process runs.
	PGID int
	// Cgroup is a cgroup v2 directory holding the instance; when set, CPU
	// and memory come from its cpu.stat and memory.current instead.
	Cgroup string
	// Sampler, when set, is the instance's provider's sample of its use
	// (an instance on another host, whose pid means nothing here): CPU
	// and memory come from it, and PGID is not read.
	Sampler provider.Sampler
	// Cores is what the instance is allotted (template.cpus).
	Cores float64
	// State is reported as is ("starting", "in-service", "draining", ...).
	State string
	// InService is true while the instance takes new requests; ReadySince is
	// when it entered service. Until Warmup has passed since, the instance is
	// left out of its group's aggregates.
	InService  bool
	ReadySince time.Time
	// Backend and Server are its names in HAProxy; Server is "" if it is not
	// registered there.
	Backend, Server string
}

// Source says what to sample: core's registry of groups implements it, and
// a reload of the config changes what it says.
type Source interface {
	// Names are the groups; each group's HAProxy backend has its name.
	Names() []string
	// Targets are their instances.
	Targets() []Target
}

// DBName is the history's file name in the state directory.
const DBName = "metrics.db"

// Options configure a Collector.
type Options struct {
	config.Metrics
	Source Source
	// HAProxy is asked for "show stat" once per interval; nil skips it.
	HAProxy *haproxy.Client
	// DB is the SQLite file for the history, normally STATE_DIR/DBName.
	DB  string
	Log *slog.Logger
	// AfterSample, if set, is called by Run after each sample, which Points
	// then holds (core wakes groups that scale to zero from it).
	AfterSample func(now time.Time)
}

// ErrUnknownGroup reports a group that is not configured.
var ErrUnknownGroup = errors.New("unknown group")

// pruneEvery is how often old buckets are deleted; statWait bounds one
// "show stat".
const (
	pruneEvery = 10 * time.Minute
	statWait   = 2 * time.Second
	// maxRateGap is how many intervals apart two reads of HAProxy's
	// counters may be for a rate between them.
	maxRateGap = 10
)

// Collector samples targets and keeps their history. Sample (or Run) must be
// called from one goroutine; every other method is safe for concurrent use.
type Collector struct {
	opts  Options
	log   *slog.Logger
	db    *db
	procs *procScanner

	// Sampling state, owned by the goroutine that calls Sample.
	prevCPU    map[string]cpuPrev
	prevStat   map[statKey]haproxy.ServerStat
	prevStatAt time.Time
	rollups    []*rollup
	pending    []row
	lastPrune  time.Time

	mu    sync.RWMutex
	ring  *ring
	views map[string]*groupView
	usage []InstanceUsage

	latMu sync.Mutex
	lat   map[string]*latencySamples
}

type cpuPrev struct {
	pgid   int
	cgroup string
	cpu    time.Duration
	at     time.Time
	// pct is what that sample gave: a provider's sample read again before
	// its next one gives it again.
	pct float64
}

// groupView is a group as the latest sample saw it.
type groupView struct {
	at        time.Time
	instances []instanceView
}

type instanceView struct {
	Target
	ready bool
}

// Open opens (or creates) the history database and returns a Collector that
// has not sampled yet.
func Open(opts Options) (*Collector, error) {
	if opts.Source == nil {
		return nil, errors.New("metrics: no source of targets")
	}
	def := config.DefaultMetrics
	if opts.Interval <= 0 {
		opts.Interval = def.Interval
	}
	if opts.Ring <= 0 {
		opts.Ring = def.Ring
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	d, err := openDB(opts.DB)
	if err != nil {
		return nil, err
	}
	n := max(int(opts.Ring/opts.Interval), 1)
	c := &Collector{
		opts:     opts,
		log:      opts.Log,
		db:       d,
		procs:    newProcScanner("/proc"),
		prevCPU:  make(map[string]cpuPrev),
		prevStat: make(map[statKey]haproxy.ServerStat),
		ring:     newRing(n),
		views:    make(map[string]*groupView),
		lat:      make(map[string]*latencySamples),
	}
	for _, g := range opts.Source.Names() {
		c.views[g] = &groupView{}
	}
	if opts.Ten > 0 {
		c.rollups = append(c.rollups, &rollup{lv: &level10s, accs: make(map[string]*bucketAcc)})
	}
	if opts.Minute > 0 {
		c.rollups = append(c.rollups, &rollup{lv: &level1m, accs: make(map[string]*bucketAcc)})
	}
	if opts.Hour > 0 {
		c.rollups = append(c.rollups, &rollup{lv: &level1h, accs: make(map[string]*bucketAcc)})
	}
	return c, nil
}

// Run samples every interval until ctx ends, then writes what it has not
// written yet. The caller still calls Close.
func (c *Collector) Run(ctx context.Context) {
	t := time.NewTicker(c.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			c.flush(context.Background(), true)
			return
		case now := <-t.C:
			c.Sample(ctx, now)
			if c.opts.AfterSample != nil {
				c.opts.AfterSample(now)
			}
		}
	}
}

// Close writes the unfinished buckets and closes the database; call it after
// Run has returned.
func (c *Collector) Close() error {
	c.flush(context.Background(), true)
	return c.db.close()
}

// known reports whether group is one the source names now.
func (c *Collector) known(group string) bool { return slices.Contains(c.opts.Source.Names(), group) }

// Sample takes one sample of every target at now.
func (c *Collector) Sample(ctx context.Context, now time.Time) {
	targets := c.opts.Source.Targets()

	// CPU and memory: one /proc scan for every process group.
	byPGID := make(map[int]*usage)
	for _, t := range targets {
		if t.Sampler == nil && t.Cgroup == "" && t.PGID > 0 {
			byPGID[t.PGID] = &usage{}
		}
	}
	procErr := c.procs.scan(byPGID)
	// CPU is divided by the time between the reads, not between the ticks,
	// which may fire late on a busy machine.
	scanAt := time.Now()
	if procErr != nil {
		c.log.Warn("metrics: scan processes", "err", procErr)
	}

	stats, statAt, statErr := c.haproxyStats(ctx)
	// Rates need two recent reads: after HAProxy was unreachable for a
	// while, the first read only sets a new baseline.
	var statDT float64
	if statErr == nil && !c.prevStatAt.IsZero() && statAt.Sub(c.prevStatAt) <= maxRateGap*c.opts.Interval {
		statDT = statAt.Sub(c.prevStatAt).Seconds()
	}

	vals := make(map[string]float64)
	groups := c.opts.Source.Names()
	views := make(map[string]*groupView, len(groups))
	for _, g := range groups {
		views[g] = &groupView{at: now}
	}
	seen := make(map[string]bool, len(targets))
	var usages []InstanceUsage
	cpuByGroup := make(map[string][]float64)
	// What the ready instances served, and how many of them were read: a
	// warming instance's requests over the ready count would inflate the
	// per-instance rate right after a scale-out, and a rule on it would fire
	// again.
	readyRPS := make(map[string]float64)
	readyRPSN := make(map[string]int)
	for _, t := range targets {
		gv := views[t.Group]
		if gv == nil || seen[t.Name] {
			continue // not a configured group, or listed twice
		}
		seen[t.Name] = true
		if !(t.Cores > 0) {
			t.Cores = config.DefaultCPUs
		}
		iv := instanceView{Target: t, ready: t.InService && !t.ReadySince.IsZero() && now.Sub(t.ReadySince) >= c.opts.Warmup}
		gv.instances = append(gv.instances, iv)
		ip := func(m string) string { return InstancePath(t.Group, t.Name, m) }

		if cpu, rss, ok := c.cpu(t, byPGID, procErr, scanAt); ok {
			usages = append(usages, InstanceUsage{Group: t.Group, Instance: t.Name, CPUSeconds: c.prevCPU[t.Name].cpu.Seconds(), RSSBytes: rss})
			vals[ip("rss_bytes")] = float64(rss)
			if !math.IsNaN(cpu) {
				vals[ip("cpu")] = cpu
				if iv.ready {
					cpuByGroup[t.Group] = append(cpuByGroup[t.Group], cpu)
				}
			}
		}
		if statErr == nil && t.Server != "" {
			k := statKey{t.Backend, t.Server}
			if cur, ok := stats[k]; ok {
				vals[ip("sessions")] = float64(cur.Sessions)
				if prev, ok := c.prevStat[k]; ok && statDT > 0 {
					rps := float64(delta(prev.Requests, cur.Requests)) / statDT
					vals[ip("requests_per_second")] = rps
					vals[ip("errors_per_second")] = float64(delta(prev.Responses[5], cur.Responses[5])) / statDT
					if iv.ready {
						readyRPS[t.Group] += rps
						readyRPSN[t.Group]++
					}
				}
			}
		}
	}
	for name := range c.prevCPU {
		if !seen[name] {
			delete(c.prevCPU, name)
		}
	}

	for g, gv := range views {
		gp := func(m string) string { return Path(g, m) }
		ready := 0
		for _, iv := range gv.instances {
			if iv.ready {
				ready++
			}
		}
		vals[gp("size")] = float64(len(gv.instances))
		vals[gp("ready")] = float64(ready)
		if s, ok := summarize(cpuByGroup[g]); ok {
			vals[gp("cpu.avg")], vals[gp("cpu.min")], vals[gp("cpu.max")] = s.avg, s.min, s.max
			vals[gp("cpu.p75")], vals[gp("cpu.p90")], vals[gp("cpu.p95")], vals[gp("cpu.p99")] = s.p75, s.p90, s.p95, s.p99
		}
		if statErr == nil {
			k := statKey{g, ""}
			if cur, ok := stats[k]; ok {
				queue := cur.Queue
				for sk, sc := range stats {
					if sk.backend == g && sk.server != "" {
						queue += sc.Queue
					}
				}
				vals[gp("queue")] = float64(queue)
				vals[gp("sessions")] = float64(cur.Sessions)
				vals[gp("queue_max")] = float64(cur.MaxQueue)
				vals[gp("queue_time_ms")] = float64(cur.QueueTime.Milliseconds())
				if ready > 0 {
					inFlight := queue
					for sk, sc := range stats {
						if sk.backend == g && sk.server != "" {
							inFlight += sc.Sessions
						}
					}
					vals[gp("concurrency")] = float64(inFlight) / float64(ready)
				}
				if prev, ok := c.prevStat[k]; ok && statDT > 0 {
					vals[gp("requests_per_second")] = float64(delta(prev.Requests, cur.Requests)) / statDT
					vals[gp("errors_per_second")] = float64(delta(prev.Responses[5], cur.Responses[5])) / statDT
					vals[gp("connection_errors_per_second")] = float64(delta(prev.ConnErrors, cur.ConnErrors)) / statDT
					// Attempts HAProxy retried or sent to another server, after a
					// failed connection (an instance refusing them) or a
					// retryable response.
					vals[gp("retries_per_second")] = float64(delta(prev.Retries+prev.Redispatches, cur.Retries+cur.Redispatches)) / statDT
				}
			}
		}
		if n := readyRPSN[g]; n > 0 {
			vals[gp("requests_per_second_per_instance")] = readyRPS[g] / float64(n)
		}
		if ls, ok := c.latency(g, now.Add(-max(latencyTrail, c.opts.Interval))); ok {
			vals[gp("latency_ms.p50")], vals[gp("latency_ms.p90")], vals[gp("latency_ms.p99")] = ls.ta50, ls.ta90, ls.ta99
		}
	}
	if statErr == nil {
		c.prevStat, c.prevStatAt = stats, statAt
	} else if c.opts.HAProxy != nil {
		c.log.Debug("metrics: haproxy stats", "err", statErr)
	}

	c.record(ctx, now, vals, views, usages)
}

// InstanceUsage is an instance's cumulative CPU time and its resident memory
// as the latest sample read them.
type InstanceUsage struct {
	Group, Instance string
	CPUSeconds      float64
	RSSBytes        int64
}

// Usage returns every instance's usage as of the latest sample, for
// exposition as counters.
func (c *Collector) Usage() []InstanceUsage {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return slices.Clone(c.usage)
}

// record stores one tick's values and the groups as sampled.
func (c *Collector) record(ctx context.Context, now time.Time, vals map[string]float64, views map[string]*groupView, usages []InstanceUsage) {
	c.mu.Lock()
	c.ring.append(now, vals)
	c.views = views
	c.usage = usages
	c.mu.Unlock()

	flush := false
	for _, r := range c.rollups {
		rows := r.add(now, vals)
		if len(rows) > 0 {
			c.pending = append(c.pending, rows...)
			flush = true
		}
	}
	if flush {
		c.flush(ctx, false)
	}
	if now.Sub(c.lastPrune) >= pruneEvery {
		c.lastPrune = now
		keep := map[string]time.Duration{level10s.table: c.opts.Ten, level1m.table: c.opts.Minute, level1h.table: c.opts.Hour}
		if err := c.db.prune(ctx, now, keep, c.opts.Instances); err != nil {
			c.log.Warn("metrics: prune history", "err", err)
		}
	}
}

// cpu returns t's CPU as a percentage of its cores since the previous sample
// (NaN on the first) and its resident memory; ok is false when nothing of the
// instance could be read.
func (c *Collector) cpu(t Target, byPGID map[int]*usage, procErr error, now time.Time) (pct float64, rss int64, ok bool) {
	var u usage
	switch {
	case t.Sampler != nil:
		s, ok := t.Sampler.Usage()
		if !ok {
			return 0, 0, false
		}
		// The provider's read, at its time: CPU is divided by the time
		// between its reads.
		u = usage{cpu: time.Duration(s.CPUSeconds * float64(time.Second)), rss: s.RSS, procs: 1}
		now = s.At
		if prev, had := c.prevCPU[t.Name]; had && prev.at.Equal(now) {
			return prev.pct, u.rss, true
		}
	case t.Cgroup != "":
		var err error
		if u, err = readCgroup(t.Cgroup); err != nil {
			c.log.Debug("metrics: cgroup", "instance", t.Name, "err", err)
			return 0, 0, false
		}
	case t.PGID > 0 && procErr == nil:
		u = *byPGID[t.PGID]
		if u.procs == 0 {
			delete(c.prevCPU, t.Name)
			return 0, 0, false
		}
	default:
		return 0, 0, false
	}
	prev, had := c.prevCPU[t.Name]
	pct = math.NaN()
	// A member reaped by a process outside the group takes its CPU time
	// with it; such an interval is unknown rather than negative.
	if had && prev.pgid == t.PGID && prev.cgroup == t.Cgroup && u.cpu >= prev.cpu && now.After(prev.at) {
		pct = float64(u.cpu-prev.cpu) / float64(now.Sub(prev.at)) / t.Cores * 100
	}
	c.prevCPU[t.Name] = cpuPrev{pgid: t.PGID, cgroup: t.Cgroup, cpu: u.cpu, at: now, pct: pct}
	return pct, u.rss, true
}

func (c *Collector) haproxyStats(ctx context.Context) (map[statKey]haproxy.ServerStat, time.Time, error) {
	if c.opts.HAProxy == nil {
		return nil, time.Time{}, errors.New("no haproxy")
	}
	ctx, cancel := context.WithTimeout(ctx, min(c.opts.Interval, statWait))
	defer cancel()
	stats, err := c.opts.HAProxy.BackendStats(ctx)
	at := time.Now()
	if err != nil {
		return nil, at, err
	}
	return keyStats(stats), at, nil
}

// flush writes the pending buckets in one transaction; with partial, the
// unfinished buckets too (at shutdown: the next start merges into them).
func (c *Collector) flush(ctx context.Context, partial bool) {
	rows := c.pending
	if partial {
		for _, r := range c.rollups {
			rows = append(rows, r.drain()...)
		}
	}
	c.pending = nil
	if err := c.db.write(ctx, rows); err != nil {
		c.log.Warn("metrics: write history", "rows", len(rows), "err", err)
	}
}

// bucketAcc accumulates one series in one bucket.
type bucketAcc struct {
	n   int64
	sum float64
	max float64
}

// rollup accumulates the current bucket of one level for every series.
type rollup struct {
	lv    *level
	start time.Time
	accs  map[string]*bucketAcc
}

// add adds one tick and returns the rows of the bucket it finished, if any.
func (r *rollup) add(t time.Time, vals map[string]float64) []row {
	var done []row
	b := t.Truncate(r.lv.step)
	if !b.Equal(r.start) {
		done = r.drain()
		r.start = b
	}
	for p, v := range vals {
		if math.IsNaN(v) || (!r.lv.instances && isInstancePath(p)) {
			continue
		}
		a := r.accs[p]
		if a == nil {
			a = &bucketAcc{max: math.Inf(-1)}
			r.accs[p] = a
		}
		a.n++
		a.sum += v
		a.max = max(a.max, v)
	}
	return done
}

// drain returns the current bucket's rows and empties it.
func (r *rollup) drain() []row {
	var rows []row
	for p, a := range r.accs {
		rows = append(rows, row{level: r.lv, path: p, t: r.start, acc: *a})
	}
	clear(r.accs)
	return rows
}

// ObserveLatency records one sampled request of group: its total time %Ta,
// its response time %Tr (negative when there was no response) and the rate
// it was sampled at (one request in sampleRate was logged). Requests of
// other backends and without a total time are ignored.
func (c *Collector) ObserveLatency(group string, ta, tr time.Duration, sampleRate int) {
	if !c.known(group) || ta < 0 {
		return
	}
	c.latMu.Lock()
	defer c.latMu.Unlock()
	l := c.lat[group]
	if l == nil {
		l = &latencySamples{}
		c.lat[group] = l
	}
	l.add(time.Now(), ta, tr, max(sampleRate, 1))
}

func (c *Collector) latency(group string, from time.Time) (latencyStats, bool) {
	c.latMu.Lock()
	defer c.latMu.Unlock()
	l := c.lat[group]
	if l == nil {
		return latencyStats{}, false
	}
	return l.since(from)
}

// Point is one value of a series at time T: a sample, or the average of a
// roll-up bucket that starts at T.
type Point struct {
	T time.Time
	V float64
}

// point is a Point that keeps the bucket's maximum and sample count too.
type point struct {
	T        time.Time
	Avg, Max float64
	N        int64 // samples in the bucket; 1 for the ring's
}

// weight is how many samples p stands for: what its average weighs in a mean
// over a window that mixes the ring with roll-ups. Samples come once per
// interval, so this is its duration in intervals.
func (p point) weight() int64 { return max(p.N, 1) }

// Points returns the series at path (see Path and InstancePath) with
// from <= T <= to, oldest first, at the finest resolution held for each part
// of the range: the ring, then 10-second, 1-minute, then 1-hour buckets. A path ending
// in ":max" returns the buckets' maxima instead of their averages. An error
// reading the database is logged and yields what the ring holds.
func (c *Collector) Points(path string, from, to time.Time) []Point {
	key, useMax := strings.CutSuffix(path, ":max")
	pts, err := c.points(context.Background(), key, from, to)
	if err != nil {
		c.log.Warn("metrics: read history", "path", key, "err", err)
	}
	out := make([]Point, len(pts))
	for i, p := range pts {
		out[i] = Point{T: p.T, V: p.Avg}
		if useMax {
			out[i].V = p.Max
		}
	}
	return out
}

func (c *Collector) points(ctx context.Context, key string, from, to time.Time) ([]point, error) {
	c.mu.RLock()
	recent := c.ring.read(key, from, to)
	ringStart, ok := c.ring.oldest()
	edge := ringStart.Truncate(level10s.step) // the 10 s bucket the ring starts in
	inRing := len(c.ring.read(key, edge, edge.Add(level10s.step-time.Nanosecond)))
	c.mu.RUnlock()
	if !ok {
		ringStart = to.Add(time.Nanosecond)
	}
	if !from.Before(ringStart) {
		return recent, nil
	}
	end := minTime(to.Add(time.Nanosecond), ringStart)
	var older []point
	var errs []error
	if c.opts.Ten > 0 {
		p10, err := c.db.read(ctx, &level10s, key, from, end)
		errs = append(errs, err)
		// When the ring holds every sample of that bucket's row (a kill -9
		// lost the rest before it was written), the row, stamped at the
		// bucket's start, would claim the lost seconds: read the ring there.
		if n := len(p10); ok && n > 0 && p10[n-1].T.Equal(edge) && p10[n-1].N <= int64(inRing) {
			p10 = p10[:n-1]
		}
		if len(p10) > 0 {
			end = p10[0].T
		}
		older = p10
	}
	// Then each coarser level, for what the finer ones do not hold.
	for _, lv := range []struct {
		lv   *level
		keep time.Duration
	}{{&level1m, c.opts.Minute}, {&level1h, c.opts.Hour}} {
		if !from.Before(end) || lv.keep <= 0 {
			continue
		}
		pc, err := c.db.read(ctx, lv.lv, key, from, end)
		errs = append(errs, err)
		// The coarse row that end falls in overlaps the finer data after
		// it (a fresh core's first minute is in the ring and in its
		// still-filling row): when that data holds at least as many of the
		// row's samples, the row would only repeat them, stamped up to a
		// step early.
		if n := len(pc); n > 0 {
			last := pc[n-1]
			if next := last.T.Add(lv.lv.step); next.After(end) && last.N <= samplesIn(older, last.T, next)+samplesIn(recent, last.T, next) {
				pc = pc[:n-1]
			}
		}
		if len(pc) > 0 {
			end = pc[0].T
		}
		older = append(pc, older...)
	}
	return append(older, recent...), errors.Join(errs...)
}

// samplesIn is how many samples the points of pts in [from, to) stand for.
func samplesIn(pts []point, from, to time.Time) int64 {
	var n int64
	for _, p := range pts {
		if !p.T.Before(from) && p.T.Before(to) {
			n += p.weight()
		}
	}
	return n
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// GroupHistory is one group's series addressed by metric alone ("cpu.p90"),
// as the policies read them.
type GroupHistory struct {
	c     *Collector
	group string
}

// ForGroup returns group's history.
func (c *Collector) ForGroup(group string) GroupHistory { return GroupHistory{c, group} }

// Points returns the group series metric, as Collector.Points does for
// Path(group, metric).
func (h GroupHistory) Points(metric string, from, to time.Time) []Point {
	return h.c.Points(Path(h.group, metric), from, to)
}
