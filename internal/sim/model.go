// Package sim simulates a server group under a request rate, so that a
// scaling policy can be tried on a day of traffic in seconds.
//
// This file holds the capacity and queueing model: how busy instances are,
// and how slow, for a given arrival rate and instance count.
//
// Each instance serves up to Capacity requests per second (measured on the
// real backend at 100 % CPU). The group is modelled as an M/M/c queue: Poisson
// arrivals at rate λ, c instances each serving μ = Capacity requests/s. Its
// utilisation is ρ = λ / (c·μ), which is also each instance's CPU (HAProxy
// balances evenly). A request's latency is the backend's own latency at low
// load (BaseP99, measured) plus its wait in the queue. The probability of
// waiting at all is Erlang's C formula C(c, a) with a = λ/μ, and the wait of
// those who wait is exponential with rate c·μ − λ, so
//
//	P(wait > t) = C(c, a) · e^(−(cμ − λ)·t)
//
// and the p-th percentile of the wait is 0 if C ≤ 1 − p, else
// ln(C / (1 − p)) / (cμ − λ). The model's p99 is BaseP99 plus the 99th
// percentile of the wait: an upper bound (the two percentiles rarely meet in
// one request) that is tight where it matters, near saturation. With ρ ≥ 1
// the queue grows without bound: the p99 is +Inf and the SLO is violated.
//
// Service times are exponential in M/M/c (a coefficient of variation, CV, of
// 1). A backend whose requests all cost about the same queues less: by
// Allen and Cunneen's approximation for Poisson arrivals the wait scales by
// (1 + CV²) / 2, half of M/M/c's for constant service. ServiceCV sets it;
// the replay measures it on the real backend.
//
// The queueing formulas hold in steady state; they forget an overload the
// moment it ends. A real queue drains only at the spare capacity, and every
// request that arrives meanwhile waits for it: Backlog carries that queue
// from one step of a simulation to the next.
package sim

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Model describes one instance of the backend.
type Model struct {
	// Capacity is the requests per second one instance serves at 100 % CPU.
	Capacity float64
	// BaseP99 is the backend's p99 latency with no queueing (measured at low load).
	BaseP99 time.Duration
	// ServiceCV is the coefficient of variation of a request's service
	// time: 1 (exponential) is M/M/c, 0 a backend whose every request costs
	// the same.
	ServiceCV float64
	// SaturatedCPU is the CPU % an instance shows when requests queue for
	// it; 0 means 100. Servers spend less CPU per request when they always
	// have the next one waiting (fewer wake-ups, batched reads): the demo
	// backend's CPU levels off at about 85 %, and a policy reading it scales
	// less than one reading 100 % would.
	SaturatedCPU float64
}

// Load is the model's verdict for one arrival rate on some instances.
type Load struct {
	Rate        float64 // arrival rate λ, requests/s
	Instances   int     // c
	Utilisation float64 // ρ = λ / (c·Capacity); ≥ 1 is overload
	CPU         float64 // per-instance CPU %, min(SaturatedCPU, 100·ρ)
	PWait       float64 // probability a request queues (Erlang C); 1 in overload
	P99         time.Duration
	Overloaded  bool // ρ ≥ 1: P99 is unbounded
	// InFlight is the requests being served or waiting, on average
	// (Little's law: λ/μ in service plus Erlang C's queue, shrunk by
	// (1 + CV²) / 2 as the waits are); in overload every instance is busy
	// and what waits beyond is Backlog's. The policy metric concurrency is
	// this (plus the backlog) per ready instance.
	InFlight float64
}

// Violates reports whether the load breaks a p99 latency SLO.
func (l Load) Violates(slo time.Duration) bool { return l.Overloaded || l.P99 > slo }

// Validate checks m.
func (m Model) Validate() error {
	if !(m.Capacity > 0) || math.IsInf(m.Capacity, 0) {
		return fmt.Errorf("sim: capacity %v req/s: want > 0", m.Capacity)
	}
	if m.BaseP99 < 0 {
		return fmt.Errorf("sim: base p99 %v: want >= 0", m.BaseP99)
	}
	if !(m.ServiceCV >= 0) || math.IsInf(m.ServiceCV, 0) {
		return fmt.Errorf("sim: service time CV %v: want >= 0", m.ServiceCV)
	}
	if !(m.SaturatedCPU >= 0 && m.SaturatedCPU <= 100) {
		return fmt.Errorf("sim: saturated CPU %v %%: want 0 to 100", m.SaturatedCPU)
	}
	return nil
}

func (m Model) saturatedCPU() float64 {
	if m.SaturatedCPU == 0 {
		return 100
	}
	return m.SaturatedCPU
}

// maxP99 stands for "unbounded" in a time.Duration.
const maxP99 = time.Duration(math.MaxInt64)

// Eval returns the model's view of rate requests/s on instances instances.
// No instances with traffic is an overload; none without traffic is idle.
func (m Model) Eval(rate float64, instances int) Load {
	l := Load{Rate: rate, Instances: instances}
	if rate <= 0 {
		l.P99 = m.BaseP99
		return l
	}
	if instances <= 0 {
		l.Utilisation, l.CPU, l.PWait, l.P99, l.Overloaded = math.Inf(1), m.saturatedCPU(), 1, maxP99, true
		return l
	}
	c := float64(instances)
	l.Utilisation = rate / (c * m.Capacity)
	l.CPU = min(m.saturatedCPU(), 100*l.Utilisation)
	if l.Utilisation >= 1 {
		l.PWait, l.P99, l.Overloaded, l.InFlight = 1, maxP99, true, c
		return l
	}
	l.PWait = ErlangC(instances, rate/m.Capacity)
	l.InFlight = rate/m.Capacity + l.PWait*l.Utilisation/(1-l.Utilisation)*(1+m.ServiceCV*m.ServiceCV)/2
	// Allen–Cunneen: waits shrink by (1 + CV²) / 2, so they drain that much faster.
	wait := WaitQuantile(l.PWait, 0.99, (c*m.Capacity-rate)*2/(1+m.ServiceCV*m.ServiceCV))
	l.P99 = m.BaseP99 + time.Duration(wait*float64(time.Second))
	return l
}

// MaxInstances bounds the sizes the model answers for: far beyond any group
// (config allows 100), and a rate that needs more is a mistaken scale or
// capacity, not a plan.
const MaxInstances = 10000

// InstancesFor returns the fewest instances that serve rate within the p99
// SLO, or an error if even without queueing BaseP99 exceeds it or it takes
// more than MaxInstances.
func (m Model) InstancesFor(rate float64, slo time.Duration) (int, error) {
	if m.BaseP99 > slo {
		return 0, fmt.Errorf("sim: base p99 %v exceeds the SLO %v at any size", m.BaseP99, slo)
	}
	if math.IsNaN(rate) {
		return 0, fmt.Errorf("sim: NaN rate")
	}
	if rate <= 0 {
		return 0, nil
	}
	if rate/m.Capacity >= MaxInstances {
		return 0, fmt.Errorf("sim: %.4g req/s at %.4g req/s per instance needs more than %d instances", rate, m.Capacity, MaxInstances)
	}
	c := max(1, int(math.Floor(rate/m.Capacity))+1) // the fewest with ρ < 1
	for m.Eval(rate, c).Violates(slo) {
		c++
	}
	return c, nil
}

// maxBacklogWait bounds a backlog: requests that would wait longer than
// this time out (HAProxy's, or their clients') instead of queueing on.
const maxBacklogWait = time.Minute

// Backlog is the queue an overload leaves behind, carried from one step of a
// simulation to the next.
type Backlog struct {
	// Requests waiting beyond what the steady-state model accounts for.
	Requests float64
}

// Step advances the backlog over d at load l and returns l with the wait it
// adds: the queue grows by what arrives beyond the instances' capacity and
// drains at the spare capacity, and a request arriving when it is longest
// waits for all of it, so the p99 is at least BaseP99 plus that wait.
func (b *Backlog) Step(m Model, l Load, d time.Duration) Load {
	service := float64(l.Instances) * m.Capacity
	longest := b.Requests
	b.Requests = max(0, b.Requests+(l.Rate-service)*d.Seconds())
	if service > 0 {
		b.Requests = min(b.Requests, service*maxBacklogWait.Seconds())
	}
	longest = max(longest, b.Requests)
	if longest == 0 || l.Overloaded {
		return l
	}
	if service <= 0 {
		l.P99, l.Overloaded = maxP99, true
		return l
	}
	if p99 := m.BaseP99 + time.Duration(longest/service*float64(time.Second)); p99 > l.P99 {
		l.P99 = p99
	}
	return l
}

// ErlangC returns the probability that an arrival waits in an M/M/c queue
// with c servers and offered load a = λ/μ Erlangs (a < c). It computes
// Erlang B by its stable recursion B(k) = a·B(k−1) / (k + a·B(k−1)) and
// converts: C = c·B / (c − a·(1 − B)).
func ErlangC(c int, a float64) float64 {
	if a <= 0 {
		return 0
	}
	if c <= 0 || a >= float64(c) {
		return 1
	}
	b := 1.0
	for k := 1; k <= c; k++ {
		b = a * b / (float64(k) + a*b)
	}
	return float64(c) * b / (float64(c) - a*(1-b))
}

// WaitQuantile returns the q-quantile of the queueing wait, in seconds, when
// a fraction pWait of requests wait and the waits are exponential with rate
// drain (c·μ − λ, per second).
func WaitQuantile(pWait, q, drain float64) float64 {
	if pWait <= 1-q {
		return 0
	}
	if drain <= 0 {
		return math.Inf(1)
	}
	return math.Log(pWait/(1-q)) / drain
}

// ErrNoCapacity is returned by Calibrate when the measurement shows no throughput.
var ErrNoCapacity = errors.New("sim: measured throughput is zero")

// Calibrate derives an instance's capacity from a measured run: throughput
// req/s achieved while the instances' CPU averaged cpuPercent on instances
// instances. It assumes CPU grows in proportion to load, as the model does.
func Calibrate(throughput, cpuPercent float64, instances int) (float64, error) {
	if throughput <= 0 {
		return 0, ErrNoCapacity
	}
	if !(cpuPercent > 0 && cpuPercent <= 100) || instances < 1 {
		return 0, fmt.Errorf("sim: calibrate with CPU %v%% on %d instances: want 0 < CPU <= 100 and >= 1 instance", cpuPercent, instances)
	}
	return throughput / float64(instances) / (cpuPercent / 100), nil
}
