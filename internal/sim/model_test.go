package sim

import (
	"math"
	"testing"
	"time"
)

func TestErlangCKnownValues(t *testing.T) {
	for _, tt := range []struct {
		c    int
		a    float64
		want float64
	}{
		{1, 0.5, 0.5},         // M/M/1: C = ρ
		{2, 1, 1.0 / 3},       // closed form
		{3, 2, 4.0 / 9},       // closed form
		{10, 8, 0.4091801508}, // the classic call-centre table entry, 0.409
		{100, 90, 0.2169404809},
		{5, 0, 0},
		{5, 5, 1}, // saturated
	} {
		if got := ErlangC(tt.c, tt.a); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("ErlangC(%d, %v) = %.10f, want %.10f", tt.c, tt.a, got, tt.want)
		}
	}
}

func TestEvalMM1(t *testing.T) {
	m := Model{Capacity: 100, BaseP99: time.Millisecond, ServiceCV: 1}
	l := m.Eval(50, 1)
	// M/M/1 at ρ = 0.5: half the requests wait, waits are exponential with
	// rate μ − λ = 50/s, so the p99 wait is ln(0.5/0.01)/50 s = 78.24 ms.
	want := time.Millisecond + time.Duration(math.Log(50)/50*float64(time.Second))
	if l.Utilisation != 0.5 || l.CPU != 50 || l.PWait != 0.5 || l.Overloaded {
		t.Errorf("Eval(50, 1) = %+v, want ρ 0.5, CPU 50, PWait 0.5", l)
	}
	if d := l.P99 - want; d < -time.Microsecond || d > time.Microsecond {
		t.Errorf("p99 %v, want %v", l.P99, want)
	}
	if !l.Violates(50*time.Millisecond) || l.Violates(100*time.Millisecond) {
		t.Errorf("p99 %v: want it to violate a 50ms SLO and not a 100ms one", l.P99)
	}

	// Light load: the chance of waiting is under 1 %, so p99 is the base.
	if l := m.Eval(0.5, 1); l.P99 != time.Millisecond {
		t.Errorf("p99 at ρ = 0.005 is %v, want the base 1ms", l.P99)
	}
	// More instances at the same load: less waiting.
	if a, b := m.Eval(150, 2), m.Eval(150, 3); !(b.P99 < a.P99 && b.CPU < a.CPU) {
		t.Errorf("3 instances (%v, %.0f%%) not better than 2 (%v, %.0f%%)", b.P99, b.CPU, a.P99, a.CPU)
	}
}

// TestServiceCV: constant service times (CV 0) halve M/M/c's queueing wait,
// by Allen and Cunneen's approximation.
func TestServiceCV(t *testing.T) {
	mm := Model{Capacity: 100, BaseP99: time.Millisecond, ServiceCV: 1}
	md := Model{Capacity: 100, BaseP99: time.Millisecond, ServiceCV: 0}
	a, b := mm.Eval(150, 2), md.Eval(150, 2)
	if a.CPU != b.CPU || a.PWait != b.PWait {
		t.Errorf("CV changes utilisation or the chance to wait: %+v vs %+v", a, b)
	}
	if d := 2*(b.P99-time.Millisecond) - (a.P99 - time.Millisecond); d < -time.Microsecond || d > time.Microsecond {
		t.Errorf("wait with CV 0 %v, with CV 1 %v: want half", b.P99-time.Millisecond, a.P99-time.Millisecond)
	}
	if err := (Model{Capacity: 1, ServiceCV: -1}).Validate(); err == nil {
		t.Error("a negative CV was accepted")
	}
}

// TestSaturatedCPU: CPU follows utilisation up to the level a queued-for
// instance shows, and stays there in overload.
func TestSaturatedCPU(t *testing.T) {
	m := Model{Capacity: 100, BaseP99: time.Millisecond, ServiceCV: 1, SaturatedCPU: 85}
	for _, tt := range []struct{ rate, cpu float64 }{{50, 50}, {84, 84}, {95, 85}, {300, 85}} {
		if l := m.Eval(tt.rate, 1); l.CPU != tt.cpu {
			t.Errorf("%v req/s on one instance: CPU %v, want %v", tt.rate, l.CPU, tt.cpu)
		}
	}
	if l := (Model{Capacity: 100}).Eval(300, 1); l.CPU != 100 {
		t.Errorf("unset SaturatedCPU: overloaded CPU %v, want 100", l.CPU)
	}
	if err := (Model{Capacity: 1, SaturatedCPU: 120}).Validate(); err == nil {
		t.Error("a saturated CPU over 100 % was accepted")
	}
}

// TestBacklog: an overload's queue outlives it, growing by the excess,
// draining at the spare capacity, and at most a minute's worth of service.
func TestBacklog(t *testing.T) {
	m := Model{Capacity: 100, BaseP99: 10 * time.Millisecond, ServiceCV: 1}
	var b Backlog
	if l := b.Step(m, m.Eval(150, 1), 2*time.Second); !l.Overloaded || b.Requests != 100 {
		t.Fatalf("after 2 s of 150 req/s on 100: %+v, backlog %v; want overloaded, 100 queued", l, b.Requests)
	}
	// Two instances now: 200 req/s of service for 100 req/s of load drain
	// 100 a second; the second's worst arrival waits for all 100: 500 ms.
	l := b.Step(m, m.Eval(100, 2), time.Second)
	if b.Requests != 0 || l.Overloaded || l.P99 != 510*time.Millisecond {
		t.Errorf("draining second: %+v, backlog %v; want p99 510ms, drained", l, b.Requests)
	}
	if l := b.Step(m, m.Eval(100, 2), time.Second); l.P99 != m.Eval(100, 2).P99 {
		t.Errorf("after the drain the p99 is %v, want the steady state's %v", l.P99, m.Eval(100, 2).P99)
	}
	b.Step(m, m.Eval(1000, 1), time.Hour)
	if b.Requests != 100*60 {
		t.Errorf("an hour of overload queued %v, want a minute of service (6000): the rest time out", b.Requests)
	}
}

func TestOverload(t *testing.T) {
	m := Model{Capacity: 100, BaseP99: time.Millisecond, ServiceCV: 1}
	for _, tt := range []struct {
		rate float64
		n    int
	}{{200, 2}, {250, 2}, {1, 0}} {
		l := m.Eval(tt.rate, tt.n)
		if !l.Overloaded || !l.Violates(time.Hour) || l.CPU != 100 {
			t.Errorf("Eval(%v, %d) = %+v, want overloaded at 100%% CPU", tt.rate, tt.n, l)
		}
	}
	if l := m.Eval(0, 0); l.Overloaded {
		t.Errorf("no traffic on no instances is %+v, want idle", l)
	}
}

func TestInstancesFor(t *testing.T) {
	m := Model{Capacity: 1000, BaseP99: 2 * time.Millisecond, ServiceCV: 1}
	n, err := m.InstancesFor(4500, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if n != 5 || m.Eval(4500, n).Violates(50*time.Millisecond) || !m.Eval(4500, n-1).Violates(50*time.Millisecond) {
		t.Errorf("InstancesFor(4500) = %d, want 5: the fewest within the SLO", n)
	}
	if _, err := m.InstancesFor(1, time.Millisecond); err == nil {
		t.Error("an SLO below the base p99 was accepted")
	}
	// A mistaken scale or capacity is refused, not counted up to forever.
	for _, rate := range []float64{math.Inf(1), 1e308, math.NaN()} {
		if n, err := m.InstancesFor(rate, time.Second); err == nil {
			t.Errorf("InstancesFor(%v) = %d, want an error", rate, n)
		}
	}
}

func TestCalibrate(t *testing.T) {
	c, err := Calibrate(3000, 75, 2)
	if err != nil || c != 2000 {
		t.Errorf("Calibrate(3000 req/s, 75%%, 2) = %v, %v; want 2000", c, err)
	}
	if _, err := Calibrate(0, 50, 1); err == nil {
		t.Error("zero throughput accepted")
	}
	if _, err := Calibrate(10, 0, 1); err == nil {
		t.Error("zero CPU accepted")
	}
	if err := (Model{Capacity: 0}).Validate(); err == nil {
		t.Error("zero capacity accepted")
	}
}

// TestInFlight: Little's law on M/M/1 at ρ = 0.5 gives L = ρ/(1−ρ) = 1;
// constant service halves the queue's part; overload keeps every instance busy.
func TestInFlight(t *testing.T) {
	m := Model{Capacity: 100, ServiceCV: 1}
	if got := m.Eval(50, 1).InFlight; math.Abs(got-1) > 1e-9 {
		t.Errorf("M/M/1 at rho 0.5: in flight %v, want 1", got)
	}
	m.ServiceCV = 0
	if got := m.Eval(50, 1).InFlight; math.Abs(got-0.75) > 1e-9 {
		t.Errorf("M/D/1 at rho 0.5: in flight %v, want 0.75", got)
	}
	if got := m.Eval(500, 3).InFlight; got != 3 {
		t.Errorf("overloaded 3 instances: in flight %v, want 3", got)
	}
	if got := m.Eval(0, 3).InFlight; got != 0 {
		t.Errorf("no traffic: in flight %v, want 0", got)
	}
}
