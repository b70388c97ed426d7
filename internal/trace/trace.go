// Package trace reads recorded traffic traces (requests counted per minute,
// such as the World Cup 1998 trace in ../shared/traces) and turns a window of
// one into a rate schedule that a load generator or a simulator can follow.
//
// A trace file is CSV with a header line and two columns: timestamp_utc, an
// RFC 3339 instant (the World Cup file writes UTC with a trailing Z), and
// requests, the count for the minute that starts there. Rows must be one
// minute apart with no gap, as in the World Cup file, where the few minutes
// missing from the source are already filled with 0.
package trace

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Step is the spacing of a trace's rows.
const Step = time.Minute

// Series is a trace: Counts[i] requests in the minute starting at
// Start + i minutes.
type Series struct {
	Start  time.Time
	Counts []float64
}

// End returns the instant just after the last minute of s.
func (s Series) End() time.Time { return s.Start.Add(time.Duration(len(s.Counts)) * Step) }

// ReadFile reads the trace file at path.
func ReadFile(path string) (Series, error) {
	f, err := os.Open(path)
	if err != nil {
		return Series{}, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	s, err := Read(f)
	if err != nil {
		return Series{}, fmt.Errorf("trace %s: %w", path, err)
	}
	return s, nil
}

// Read reads a trace in the CSV format described in the package comment.
// Errors name the line that is wrong.
func Read(r io.Reader) (Series, error) {
	cr := csv.NewReader(bufio.NewReader(r))
	cr.FieldsPerRecord = 2
	cr.ReuseRecord = true
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return Series{}, errors.New("empty file: want a header line timestamp_utc,requests")
	}
	if err != nil {
		return Series{}, err
	}
	if strings.TrimSpace(header[0]) != "timestamp_utc" || strings.TrimSpace(header[1]) != "requests" {
		return Series{}, fmt.Errorf("line 1: header %q, want timestamp_utc,requests", strings.Join(header, ","))
	}
	var s Series
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Series{}, err
		}
		line, _ := cr.FieldPos(0)
		t, err := time.Parse(time.RFC3339, strings.TrimSpace(rec[0]))
		if err != nil {
			return Series{}, fmt.Errorf("line %d: timestamp_utc %q: want RFC 3339 such as 1998-06-30T08:00:00Z", line, rec[0])
		}
		n, err := strconv.ParseFloat(strings.TrimSpace(rec[1]), 64)
		if err != nil || !(n >= 0) || math.IsInf(n, 1) {
			return Series{}, fmt.Errorf("line %d: requests %q: want a count >= 0", line, rec[1])
		}
		if len(s.Counts) == 0 {
			s.Start = t.UTC()
		} else if want := s.End(); !t.Equal(want) {
			return Series{}, fmt.Errorf("line %d: timestamp %s, want %s: rows must be one minute apart with no gap",
				line, t.UTC().Format(time.RFC3339), want.Format(time.RFC3339))
		}
		s.Counts = append(s.Counts, n)
	}
	if len(s.Counts) == 0 {
		return Series{}, errors.New("no rows after the header")
	}
	return s, nil
}

// ParseTime parses a window bound as given on a command line: RFC 3339, or
// "2006-01-02T15:04", "2006-01-02 15:04" or "2006-01-02", all read as UTC
// (the trace's time zone) unless they carry an offset.
func ParseTime(v string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t.UTC(), nil
	}
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02 15:04", "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, v, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("time %q: want UTC as 1998-06-30T08:00 or RFC 3339", v)
}

// Window returns the minutes of s in [from, to). Both bounds must be whole
// minutes inside s.
func (s Series) Window(from, to time.Time) (Series, error) {
	if !to.After(from) {
		return Series{}, fmt.Errorf("window %s to %s: the end must be after the start", fmtT(from), fmtT(to))
	}
	if from.Truncate(Step) != from || to.Truncate(Step) != to {
		return Series{}, fmt.Errorf("window %s to %s: bounds must be whole minutes", fmtT(from), fmtT(to))
	}
	if from.Before(s.Start) || to.After(s.End()) {
		return Series{}, fmt.Errorf("window %s to %s is not inside the trace (%s to %s)",
			fmtT(from), fmtT(to), fmtT(s.Start), fmtT(s.End()))
	}
	i := int(from.Sub(s.Start) / Step)
	j := int(to.Sub(s.Start) / Step)
	return Series{Start: from.UTC(), Counts: s.Counts[i:j:j]}, nil
}

// Peak returns the largest count of s and the minute it starts.
func (s Series) Peak() (count float64, at time.Time) {
	best := -1
	for i, n := range s.Counts {
		if best < 0 || n > s.Counts[best] {
			best = i
		}
	}
	if best < 0 {
		return 0, time.Time{}
	}
	return s.Counts[best], s.Start.Add(time.Duration(best) * Step)
}

func fmtT(t time.Time) string { return t.UTC().Format("2006-01-02T15:04Z") }

// Segment is a stretch of a schedule at a constant rate.
type Segment struct {
	Rate     float64 // requests per second
	Duration time.Duration
}

// Schedule compresses s in time by speedup and scales its load by scale:
// each trace minute becomes a segment of one minute / speedup at
// count × scale / 60 requests per second. The rate is the trace's own
// per-second rate times scale, so a replay's shape and intensity do not
// depend on speedup; only the total number of requests does
// (Σ counts × scale / speedup).
func (s Series) Schedule(speedup, scale float64) ([]Segment, error) {
	if !(speedup > 0) || !(scale > 0) {
		return nil, fmt.Errorf("speedup %v and scale %v: both must be > 0", speedup, scale)
	}
	d := time.Duration(float64(Step) / speedup)
	if d < time.Millisecond {
		return nil, fmt.Errorf("speedup %v makes a trace minute shorter than 1ms", speedup)
	}
	segs := make([]Segment, len(s.Counts))
	for i, n := range s.Counts {
		segs[i] = Segment{Rate: n * scale / Step.Seconds(), Duration: d}
	}
	return segs, nil
}

// WorldCup98Path returns where the World Cup 1998 trace is: $SHOAL_TRACE if
// set, else the first of ../shared/traces/worldcup98_requests_per_minute.csv
// next to the working directory or one of its parents that exists, or "" if
// none does. Tests and benchmarks use it to find the shared file.
func WorldCup98Path() string {
	if p := os.Getenv("SHOAL_TRACE"); p != "" {
		return p
	}
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		p := filepath.Join(dir, "..", "shared", "traces", "worldcup98_requests_per_minute.csv")
		if _, err := os.Stat(p); err == nil {
			return filepath.Clean(p)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// Rates returns s as requests per second, each minute's count × scale / 60:
// the rates a replay at that scale sends, whatever its speedup.
func (s Series) Rates(scale float64) []float64 {
	r := make([]float64, len(s.Counts))
	for i, n := range s.Counts {
		r[i] = n * scale / Step.Seconds()
	}
	return r
}

// ScaleFor returns the scale at which the peak minute of s becomes peakRate
// requests per second, e.g. the rate that N instances saturate.
func (s Series) ScaleFor(peakRate float64) (float64, error) {
	peak, _ := s.Peak()
	if peak <= 0 || !(peakRate > 0) {
		return 0, fmt.Errorf("scale for a peak of %v req/s: the trace's peak is %v/min; both must be > 0", peakRate, peak)
	}
	return peakRate * Step.Seconds() / peak, nil
}
