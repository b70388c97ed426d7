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
	m := Model{Capacity: 100, BaseP99: time.Millisecond}
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

func TestOverload(t *testing.T) {
	m := Model{Capacity: 100, BaseP99: time.Millisecond}
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
	m := Model{Capacity: 1000, BaseP99: 2 * time.Millisecond}
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
