package sim

// This file runs a group's autoscale policy over a recorded request rate: the
// same policy.Evaluate the live loop runs, through an injected clock, against
// a simulated metric history and a simulated group.

import (
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/policy"
)

// LocalStartDelay is how long a new local instance takes to enter service
// with the default health check (rise 2 × interval 2 s; the process itself
// starts in milliseconds): the default start delay. Measured: `shoal scale
// web --size N --sync` from 1 to 5, one at a time, took 4.20 s per job on the
// 2-core bench machine (demo-backend, health path /healthz).
const LocalStartDelay = 4200 * time.Millisecond

// CloudStartDelay is the seeds' cloud server creation time.
const CloudStartDelay = 210 * time.Second

// Run is one simulation.
type Run struct {
	// Group is the group and its policy; a nil Autoscale keeps the size.
	Group config.Group
	Model Model
	SLO   time.Duration
	// StartDelay is how long a new instance takes to enter service.
	StartDelay time.Duration
	// Providers, when set, are a group across providers in its order
	// (instead of StartDelay): new instances fill each up to its capacity,
	// taking its start delay, and a scale-in empties the last first; the
	// policy's look-ahead takes the delay of the provider the next
	// instance comes from, as a live shoal's does.
	Providers []Provider
	// Interval and Warmup are metrics.interval and metrics.warmup: the
	// collector samples every Interval, and keeps an instance out of the
	// group's aggregates for Warmup after it enters service.
	Interval, Warmup time.Duration
	// Resolution, when longer than Interval, makes the load metrics (cpu.*,
	// requests, latency) coarse as a cloud monitoring API's: each is the
	// mean of the last Resolution, published at its end. Size and ready
	// stay per interval.
	Resolution time.Duration
	// Initial is the size at Start (0: min_size).
	Initial int
	// Start and Rates are the window: Rates[i] requests per second during
	// [Start + i·Step, Start + (i+1)·Step).
	Start time.Time
	Rates []float64
	// Step is how long each rate lasts: a trace minute (the default), or a
	// minute / K for a replay compressed K times.
	Step time.Duration
	// History is the per-minute request rate of the minutes just before
	// Start, oldest first, as the 1-minute roll-ups a live shoal keeps
	// (what predictive pre-scaling reads).
	History []float64
	// Sources, for a policy reading metrics.sources or a formula, is the
	// history the policy reads over the simulated one: the sources'
	// recorded values beside it (source.Recorded). The load does not
	// drive them; they are replayed as they were read.
	Sources func(*History) policy.Metrics
}

// Provider is one provider of a simulated group across providers.
type Provider struct {
	Name string
	// Capacity is how many of the group's instances it takes (0: no
	// bound; the last one takes what the others cannot).
	Capacity   int
	StartDelay time.Duration
}

// Result is what a simulation measured.
type Result struct {
	InstanceSeconds float64
	// ProviderSeconds is InstanceSeconds by provider (with Providers).
	ProviderSeconds  map[string]float64
	ViolationSeconds float64
	// ScaleEvents counts accepted jobs (Ups and Downs by direction).
	ScaleEvents, Ups, Downs int
	MaxSize                 int
	Decisions               []decision.Record
	// Minutes is the timeline, one per rate step, for plots.
	Minutes []Minute
	// History is the simulated metric history, as policy.Replay reads it.
	History *History
}

// Minute summarises one simulated rate step (a minute unless compressed).
type Minute struct {
	T time.Time `json:"t"`
	// Rate is the offered load, requests/s.
	Rate float64 `json:"rate"`
	// Instances is the mean size, Serving the mean in service, Capacity
	// Serving × capacity (requests/s).
	Instances        float64 `json:"instances"`
	Serving          float64 `json:"serving"`
	Capacity         float64 `json:"capacity"`
	ViolationSeconds float64 `json:"violation_seconds"`
	// P99ms is the worst modelled p99 of the minute; -1 for unbounded.
	P99ms float64 `json:"p99_ms"`
}

// instance is a simulated instance: in service from ready on.
type instance struct {
	ready time.Time
	prov  int // its index in Run.Providers
}

// nextProvider is the provider a new instance comes from beside insts:
// the first below its capacity, else the last.
func nextProvider(ps []Provider, insts []instance) int {
	counts := make([]int, len(ps))
	for _, in := range insts {
		counts[in.prov]++
	}
	for i, p := range ps {
		if p.Capacity == 0 || counts[i] < p.Capacity {
			return i
		}
	}
	return len(ps) - 1
}

// startDelay is how long the next instance beside insts takes: its
// provider's, or the run's.
func (r *Run) startDelay(insts []instance) (time.Duration, int) {
	if len(r.Providers) == 0 {
		return r.StartDelay, 0
	}
	i := nextProvider(r.Providers, insts)
	return r.Providers[i].StartDelay, i
}

// job is the group's running job.
type job struct {
	id   string
	done time.Time
}

// Simulate runs r. It returns an error for a run that cannot be simulated.
func Simulate(r Run) (*Result, error) {
	if err := r.Model.Validate(); err != nil {
		return nil, err
	}
	if r.Step == 0 {
		r.Step = time.Minute
	}
	switch {
	case r.Interval <= 0 || r.Step < r.Interval || r.Step%r.Interval != 0:
		return nil, fmt.Errorf("sim: interval %v: want a divisor of the rate step %v", r.Interval, r.Step)
	case len(r.Rates) == 0:
		return nil, fmt.Errorf("sim: no rates to simulate")
	case r.StartDelay < 0 || r.Warmup < 0 || r.SLO <= 0:
		return nil, fmt.Errorf("sim: start delay %v, warmup %v, SLO %v: want >= 0, >= 0, > 0", r.StartDelay, r.Warmup, r.SLO)
	case r.Resolution != 0 && (r.Resolution < r.Interval || r.Resolution%r.Interval != 0):
		return nil, fmt.Errorf("sim: resolution %v: want a multiple of the interval %v", r.Resolution, r.Interval)
	}
	for _, p := range r.Providers {
		if p.StartDelay < 0 || p.Capacity < 0 {
			return nil, fmt.Errorf("sim: provider %s: start delay %v, capacity %d: want >= 0", p.Name, p.StartDelay, p.Capacity)
		}
	}
	g := r.Group
	pol := g.Autoscale
	size := r.Initial
	if size == 0 {
		size = g.MinSize
	}
	h := newHistory()
	for i, v := range r.History {
		h.add("requests_per_second", r.Start.Add(-time.Duration(len(r.History)-i)*time.Minute), v)
	}

	var hm policy.Metrics = h
	if r.Sources != nil {
		hm = r.Sources(h)
	}
	res := &Result{History: h, MaxSize: size}
	if len(r.Providers) > 0 {
		res.ProviderSeconds = map[string]float64{}
	}
	var insts []instance
	for range size {
		_, p := r.startDelay(insts)
		insts = append(insts, instance{ready: r.Start.Add(-time.Hour), prov: p}) // in service and warm
	}
	delay, _ := r.startDelay(insts)
	var (
		// The start delay the simulation models is the one a live shoal
		// would have measured.
		state     = policy.State{Desired: size, RuleJobs: map[string]time.Time{}, StartDelay: delay}
		running   *job
		jobs      int
		dedup     policy.Dedup
		predictor policy.Predictor
		backlog   Backlog
		coarse    = map[string]float64{} // sums over the current resolution bucket
		coarseN   int
		iv        = r.Interval
		end       = r.Start.Add(time.Duration(len(r.Rates)) * r.Step)
		minute    *Minute
	)
	for t := r.Start; t.Before(end); t = t.Add(iv) {
		i := int(t.Sub(r.Start) / r.Step)
		if minute == nil || !minute.T.Equal(r.Start.Add(time.Duration(i)*r.Step)) {
			res.Minutes = append(res.Minutes, Minute{T: r.Start.Add(time.Duration(i) * r.Step), Rate: r.Rates[i]})
			minute = &res.Minutes[len(res.Minutes)-1]
		}
		// A job that is done frees the group and starts its cooldowns, as
		// the job manager does when a job finishes.
		if running != nil && !t.Before(running.done) {
			state.RunningJob = ""
			state.UpCooldownUntil, state.DownCooldownUntil = running.done.Add(g.Cooldown.Up), running.done.Add(g.Cooldown.Down)
			running = nil
		}

		serving, ready := 0, 0
		for _, in := range insts {
			if !t.Before(in.ready) {
				serving++
				if !t.Before(in.ready.Add(r.Warmup)) {
					ready++
				}
			}
		}
		rate := r.Rates[i]
		l := backlog.Step(r.Model, r.Model.Eval(rate, serving), iv)
		secs := iv.Seconds()
		res.InstanceSeconds += float64(len(insts)) * secs
		if res.ProviderSeconds != nil {
			for _, in := range insts {
				res.ProviderSeconds[r.Providers[in.prov].Name] += secs
			}
		}
		// Instance-seconds now; means over the step at the end.
		minute.Instances += float64(len(insts)) * secs
		minute.Serving += float64(serving) * secs
		if l.Violates(r.SLO) {
			res.ViolationSeconds += secs
			minute.ViolationSeconds += secs
		}
		switch {
		case l.Overloaded || minute.P99ms < 0:
			minute.P99ms = -1
		default:
			minute.P99ms = max(minute.P99ms, float64(l.P99)/float64(time.Millisecond))
		}

		// The collector's sample at t: the aggregates count ready instances
		// only; requests are what HAProxy saw, and a ready instance serves
		// its share of them, as every serving one does.
		h.add("size", t, float64(len(insts)))
		h.add("ready", t, float64(ready))
		load := map[string]float64{"requests_per_second": rate}
		if ready > 0 {
			for _, p := range []string{"cpu.avg", "cpu.min", "cpu.max", "cpu.p75", "cpu.p90", "cpu.p95", "cpu.p99"} {
				load[p] = l.CPU
			}
			load["requests_per_second_per_instance"] = rate / float64(serving)
			// What HAProxy holds for the group (its servers' scur and the
			// queue) over the ready instances, as the collector divides it.
			load["concurrency"] = (l.InFlight + backlog.Requests) / float64(ready)
		}
		if serving > 0 {
			// An overloaded queue grows without bound; the access log sees
			// the timeouts, a minute at most.
			load["latency_ms.p99"] = min(float64(l.P99), float64(time.Minute)) / float64(time.Millisecond)
		}
		if r.Resolution <= iv {
			for p, v := range load {
				h.add(p, t, v)
			}
		} else {
			for p, v := range load {
				coarse[p] += v
			}
			coarseN++
			if (t.Sub(r.Start)+iv)%r.Resolution == 0 {
				// Published at the bucket's end: the next tick sees it.
				for p, v := range coarse {
					h.add(p, t.Add(iv), v/float64(coarseN))
				}
				clear(coarse)
				coarseN = 0
			}
		}

		if pol == nil || t.Sub(r.Start)%pol.Interval != 0 {
			continue
		}
		state.Prediction = predictor.At(g, hm, t)
		state.StartDelay, _ = r.startDelay(insts)
		d, record := policy.Evaluate(g, hm, state, t)
		if d.Request != nil {
			jobs++
			d.Outcome, d.JobID = decision.Accepted, "sim-"+strconv.Itoa(jobs)
			state.RuleJobs[d.Rule] = t
			n := d.Recommendation
			done := t.Add(iv)
			if n > len(insts) {
				res.Ups++
				longest := time.Duration(0)
				for range n - len(insts) {
					d, p := r.startDelay(insts)
					insts = append(insts, instance{ready: t.Add(d), prov: p})
					longest = max(longest, d)
				}
				done = t.Add(max(longest, iv))
			} else {
				res.Downs++
				// The last provider's go first; then instances not yet in
				// service, then the newest.
				sort.SliceStable(insts, func(a, b int) bool {
					if insts[a].prov != insts[b].prov {
						return insts[a].prov < insts[b].prov
					}
					return insts[a].ready.Before(insts[b].ready)
				})
				insts = insts[:n]
			}
			state.Desired = n
			res.MaxSize = max(res.MaxSize, n)
			running = &job{id: d.JobID, done: done}
			state.RunningJob = d.JobID
		}
		if record && !dedup.Repeat(d) {
			res.Decisions = append(res.Decisions, d)
		}
	}
	res.ScaleEvents = res.Ups + res.Downs
	for i := range res.Minutes {
		m := &res.Minutes[i]
		m.Instances /= r.Step.Seconds()
		m.Serving /= r.Step.Seconds()
		m.Capacity = m.Serving * r.Model.Capacity
	}
	return res, nil
}

// History is a simulated metric history: policy.Metrics over the series a
// simulation wrote, each in time order.
type History struct {
	series map[string][]policy.Point
}

func newHistory() *History { return &History{series: map[string][]policy.Point{}} }

func (h *History) add(path string, t time.Time, v float64) {
	h.series[path] = append(h.series[path], policy.Point{T: t, V: v})
}

// Points implements policy.Metrics. The slice is shared: callers must not
// change it.
func (h *History) Points(path string, from, to time.Time) []policy.Point {
	pts := h.series[path]
	i := sort.Search(len(pts), func(i int) bool { return !pts[i].T.Before(from) })
	j := sort.Search(len(pts), func(i int) bool { return pts[i].T.After(to) })
	if i >= j {
		return nil
	}
	return pts[i:j:j]
}

// StaticFor returns the fewest instances that serve the peak of rates within
// slo: the static group sized for the peak.
func (m Model) StaticFor(rates []float64, slo time.Duration) (int, error) {
	peak := 0.0
	for _, r := range rates {
		peak = max(peak, r)
	}
	return m.InstancesFor(peak, slo)
}
