package trace

import (
	"strings"
	"testing"
	"time"
)

const small = `timestamp_utc,requests
1998-06-30T07:58:00Z,60
1998-06-30T07:59:00Z,120
1998-06-30T08:00:00Z,600
1998-06-30T08:01:00Z,0
1998-06-30T08:02:00Z,1200
`

func mustTime(t *testing.T, v string) time.Time {
	t.Helper()
	tm, err := ParseTime(v)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

func TestReadWindowSchedule(t *testing.T) {
	s, err := Read(strings.NewReader(small))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Start.Equal(mustTime(t, "1998-06-30T07:58")) || len(s.Counts) != 5 {
		t.Fatalf("series starts %v with %d rows, want 07:58 and 5", s.Start, len(s.Counts))
	}
	w, err := s.Window(mustTime(t, "1998-06-30 07:59"), mustTime(t, "1998-06-30T10:02:00+02:00"))
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Counts; len(got) != 3 || got[0] != 120 || got[2] != 0 {
		t.Fatalf("window counts %v, want [120 600 0]", got)
	}
	if n, at := s.Peak(); n != 1200 || !at.Equal(mustTime(t, "1998-06-30T08:02")) {
		t.Errorf("peak %v at %v, want 1200 at 08:02", n, at)
	}

	segs, err := w.Schedule(60, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	if r := w.Rates(0.5); len(r) != 3 || r[0] != 1 || r[1] != 5 {
		t.Errorf("Rates(0.5) = %v, want [1 5 0]", r)
	}
	if k, err := s.ScaleFor(100); err != nil || k != 5 {
		t.Errorf("ScaleFor(100 req/s) = %v, %v; want 5 (peak 1200/min = 20 req/s)", k, err)
	}
	if _, err := s.ScaleFor(0); err == nil {
		t.Error("ScaleFor(0) succeeded")
	}
	want := []Segment{{1, time.Second}, {5, time.Second}, {0, time.Second}}
	if len(segs) != len(want) {
		t.Fatalf("schedule %v, want %v", segs, want)
	}
	for i := range want {
		if segs[i] != want[i] {
			t.Errorf("segment %d = %+v, want %+v", i, segs[i], want[i])
		}
	}
}

func TestReadErrors(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", "empty file"},
		{"time,count\n", "line 1: header"},
		{"timestamp_utc,requests\n", "no rows"},
		{"timestamp_utc,requests\n1998-06-30 08:00,5\n", "line 2: timestamp_utc"},
		{"timestamp_utc,requests\n1998-06-30T08:00:00Z,-1\n", "line 2: requests"},
		{"timestamp_utc,requests\n1998-06-30T08:00:00Z,Inf\n", "line 2: requests"},
		{"timestamp_utc,requests\n1998-06-30T08:00:00Z,1\n1998-06-30T08:02:00Z,1\n", "line 3: timestamp 1998-06-30T08:02:00Z, want 1998-06-30T08:01:00Z"},
		{"timestamp_utc,requests\n1998-06-30T08:00:00Z,1,2\n", "wrong number of fields"},
	} {
		_, err := Read(strings.NewReader(tt.in))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Read(%q) = %v, want an error containing %q", tt.in, err, tt.want)
		}
	}

	s, _ := Read(strings.NewReader(small))
	for _, w := range [][2]string{
		{"1998-06-30T08:00", "1998-06-30T08:00"},     // empty
		{"1998-06-30T07:00", "1998-06-30T08:00"},     // before the trace
		{"1998-06-30T08:00", "1998-06-30T08:04"},     // after it
		{"1998-06-30T08:00:30Z", "1998-06-30T08:02"}, // not a whole minute
	} {
		if _, err := s.Window(mustTime(t, w[0]), mustTime(t, w[1])); err == nil {
			t.Errorf("Window(%s, %s) succeeded, want an error", w[0], w[1])
		}
	}
	if _, err := s.Schedule(0, 1); err == nil {
		t.Error("Schedule with speedup 0 succeeded")
	}
	if _, err := ParseTime("30/06/1998"); err == nil {
		t.Error("ParseTime accepted 30/06/1998")
	}
}

// TestWorldCup98 checks the shared trace against the figures its README states.
func TestWorldCup98(t *testing.T) {
	path := WorldCup98Path()
	if path == "" {
		t.Skip("trace not found: set SHOAL_TRACE or put ../shared/traces next to the repository")
	}
	s, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, n := range s.Counts {
		sum += n
	}
	if len(s.Counts) != 125310 || sum != 1352804107 {
		t.Errorf("%d rows summing to %.0f, want 125310 and 1352804107", len(s.Counts), sum)
	}
	if n, at := s.Peak(); n != 229426 || !at.Equal(mustTime(t, "1998-07-07T21:41")) {
		t.Errorf("peak %v at %v, want 229426 at 1998-07-07 21:41 UTC", n, at)
	}
	w, err := s.Window(mustTime(t, "1998-06-30T08:00"), mustTime(t, "1998-07-01T08:00"))
	if err != nil {
		t.Fatal(err)
	}
	lo := w.Counts[0]
	for _, n := range w.Counts {
		lo = min(lo, n)
	}
	if hi, _ := w.Peak(); len(w.Counts) != 1440 || lo != 13002 || hi != 215241 {
		t.Errorf("window: %d minutes from %v to %v, want 1440 from 13002 to 215241", len(w.Counts), lo, hi)
	}
}
