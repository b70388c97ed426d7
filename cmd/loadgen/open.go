package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/loadgen"
	"github.com/shoal-lb/shoal/internal/trace"
)

// openFlags are the flags of the open-loop modes.
type openFlags struct {
	trace, from, to         string
	speedup, scale          float64
	rate                    float64
	steps                   string
	maxInFlight, maxConns   int
	timelineCSV, timelineJS string
}

func (f *openFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.trace, "trace", "", "open loop: follow the per-minute trace in this CSV file (needs -from and -to)")
	fs.StringVar(&f.from, "from", "", "start of the trace window, UTC (e.g. 1998-06-30T08:00)")
	fs.StringVar(&f.to, "to", "", "end of the trace window, UTC, exclusive")
	fs.Float64Var(&f.speedup, "speedup", 1, "compress the trace's time K×: a trace minute lasts 1m/K")
	fs.Float64Var(&f.scale, "scale", 1, "multiply the trace's rate (requests per minute / 60) by S")
	fs.Float64Var(&f.rate, "rate", 0, "open loop: constant rate in requests/s for -d")
	fs.StringVar(&f.steps, "steps", "", "open loop: stepped rates, e.g. 100:30s,300:30s,100:30s")
	fs.IntVar(&f.maxInFlight, "max-inflight", loadgen.DefaultMaxInFlight, "open loop: most requests in flight; a request due beyond it is late (not sent, counted)")
	fs.IntVar(&f.maxConns, "max-conns", loadgen.DefaultMaxConns, "open loop: most connections, opened as needed")
	fs.StringVar(&f.timelineCSV, "timeline-csv", "", "open loop: write the per-second timeline as CSV to this file")
	fs.StringVar(&f.timelineJS, "timeline-json", "", "open loop: write the per-second timeline as JSON to this file")
}

// open reports whether an open-loop mode was asked for.
func (f *openFlags) open() bool { return f.trace != "" || f.rate != 0 || f.steps != "" }

// schedule builds the rate schedule and describes it in one line.
func (f *openFlags) schedule(set map[string]bool, dur time.Duration) ([]loadgen.Segment, string, error) {
	modes := 0
	for _, on := range []bool{f.trace != "", set["rate"], f.steps != ""} {
		if on {
			modes++
		}
	}
	if modes != 1 {
		return nil, "", errors.New("use one of -trace, -rate and -steps")
	}
	for _, name := range []string{"c", "n"} {
		if set[name] {
			return nil, "", fmt.Errorf("-%s is for the closed loop; the open loop sends at the schedule's instants (see -max-inflight)", name)
		}
	}
	if f.trace == "" {
		for _, name := range []string{"from", "to", "speedup", "scale"} {
			if set[name] {
				return nil, "", fmt.Errorf("-%s needs -trace", name)
			}
		}
	}
	switch {
	case f.steps != "":
		if set["d"] || set["duration"] {
			return nil, "", errors.New("-steps sets its own duration; drop -d")
		}
		segs, err := loadgen.ParseSteps(f.steps)
		return segs, "steps " + f.steps, err
	case f.trace == "":
		if !(f.rate > 0) || dur <= 0 {
			return nil, "", fmt.Errorf("-rate %v for -d %v: want a rate > 0 and a duration > 0", f.rate, dur)
		}
		return []loadgen.Segment{{Rate: f.rate, Duration: dur}}, fmt.Sprintf("%.6g req/s for %v", f.rate, dur), nil
	}
	if set["d"] || set["duration"] {
		return nil, "", errors.New("-trace takes its duration from -from, -to and -speedup; drop -d")
	}
	if f.from == "" || f.to == "" {
		return nil, "", errors.New("-trace needs -from and -to")
	}
	from, err := trace.ParseTime(f.from)
	if err != nil {
		return nil, "", fmt.Errorf("-from: %w", err)
	}
	to, err := trace.ParseTime(f.to)
	if err != nil {
		return nil, "", fmt.Errorf("-to: %w", err)
	}
	s, err := trace.ReadFile(f.trace)
	if err != nil {
		return nil, "", err
	}
	w, err := s.Window(from, to)
	if err != nil {
		return nil, "", err
	}
	ts, err := w.Schedule(f.speedup, f.scale)
	if err != nil {
		return nil, "", err
	}
	segs := make([]loadgen.Segment, len(ts))
	for i, t := range ts {
		segs[i] = loadgen.Segment{Rate: t.Rate, Duration: t.Duration}
	}
	peak, at := w.Peak()
	desc := fmt.Sprintf("trace %s %s to %s, speedup K=%.6g, scale S=%.6g (peak %.0f/min at %s → %.1f req/s)",
		f.trace, from.Format("2006-01-02T15:04Z"), to.Format("2006-01-02T15:04Z"), f.speedup, f.scale,
		peak, at.Format("2006-01-02T15:04Z"), peak*f.scale/60)
	return segs, desc, nil
}

// runOpen runs an open-loop mode and writes its summary and timelines.
func runOpen(ctx context.Context, f *openFlags, set map[string]bool, url string, header http.Header,
	dur, timeout time.Duration, progress, asJSON bool, stdout, stderr io.Writer) error {
	segs, desc, err := f.schedule(set, dur)
	if err != nil {
		return err
	}
	if f.maxInFlight < 1 || f.maxConns < 1 {
		return errors.New("-max-inflight and -max-conns must be >= 1")
	}
	fmt.Fprintf(stderr, "loadgen: open loop, %s\n", desc)
	o := loadgen.OpenOptions{
		URL: url, Header: header, Timeout: timeout, Schedule: segs,
		MaxInFlight: f.maxInFlight, MaxConns: f.maxConns,
	}
	if progress {
		o.Progress = func(s loadgen.Second) {
			fmt.Fprintf(stderr, "%6ds  scheduled %d  sent %d  completed %d  errors %d  late %d  p50 %v  p99 %v (so far)\n",
				s.Second, s.Scheduled, s.Sent, s.Completed, s.Errors, s.Late, round(s.P50), round(s.P99))
		}
	}
	res, err := loadgen.RunOpen(ctx, o)
	if err != nil {
		return err
	}
	if f.timelineCSV != "" {
		if err := writeFile(f.timelineCSV, res.WriteCSV); err != nil {
			return err
		}
	}
	if f.timelineJS != "" {
		if err := writeFile(f.timelineJS, res.WriteJSON); err != nil {
			return err
		}
	}
	if asJSON {
		err = writeOpenJSON(stdout, url, desc, res)
	} else {
		err = writeOpenSummary(stdout, url, desc, res)
	}
	if err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	if res.Errors > 0 || res.Late > 0 {
		return errFailures
	}
	return nil
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("timeline: %w", err)
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("timeline %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("timeline %s: %w", path, err)
	}
	return nil
}

// openJSON is the -json output of the open loop.
type openJSON struct {
	URL            string                `json:"url"`
	Schedule       string                `json:"schedule"`
	Scheduled      int64                 `json:"scheduled"`
	Sent           int64                 `json:"sent"`
	Completed      int64                 `json:"completed"`
	Errors         int64                 `json:"errors"`
	Late           int64                 `json:"late"`
	FailureSamples []string              `json:"failure_samples"`
	DurationS      float64               `json:"duration_s"`
	SentRPS        float64               `json:"sent_rps"`
	P50ms          float64               `json:"p50_ms"`
	P90ms          float64               `json:"p90_ms"`
	P99ms          float64               `json:"p99_ms"`
	MaxMs          float64               `json:"max_ms"`
	PeakInFlight   int                   `json:"peak_in_flight"`
	ByInstance     map[string]int64      `json:"by_instance"`
	Timeline       []loadgen.TimelineRow `json:"timeline"`
}

func writeOpenJSON(w io.Writer, url, desc string, r loadgen.OpenResult) error {
	samples := r.FailureSamples
	if samples == nil {
		samples = []string{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(openJSON{
		URL: url, Schedule: desc,
		Scheduled: r.Scheduled, Sent: r.Sent, Completed: r.Completed, Errors: r.Errors, Late: r.Late,
		FailureSamples: samples, DurationS: r.Duration.Seconds(), SentRPS: float64(r.Sent) / r.Duration.Seconds(),
		P50ms: ms(r.P50), P90ms: ms(r.P90), P99ms: ms(r.P99), MaxMs: ms(r.Max),
		PeakInFlight: r.PeakInFlight, ByInstance: r.ByInstance, Timeline: r.Timeline(),
	})
}

func writeOpenSummary(w io.Writer, url, desc string, r loadgen.OpenResult) error {
	var b strings.Builder
	fmt.Fprintf(&b, "url          %s\n", url)
	fmt.Fprintf(&b, "schedule     %s\n", desc)
	fmt.Fprintf(&b, "requests     %d scheduled in %.2fs, %d sent (%.1f/s), %d completed, %d late\n",
		r.Scheduled, r.Duration.Seconds(), r.Sent, float64(r.Sent)/r.Duration.Seconds(), r.Completed, r.Late)
	fmt.Fprintf(&b, "failures     %d\n", r.Errors)
	for _, s := range r.FailureSamples {
		fmt.Fprintf(&b, "  sample     %s\n", s)
	}
	fmt.Fprintf(&b, "latency      p50 %v  p90 %v  p99 %v  max %v (from the scheduled instants)\n",
		round(r.P50), round(r.P90), round(r.P99), round(r.Max))
	fmt.Fprintf(&b, "in flight    peak %d\n", r.PeakInFlight)
	if len(r.ByInstance) > 0 {
		b.WriteString("by instance\n")
		for _, inst := range slices.Sorted(maps.Keys(r.ByInstance)) {
			fmt.Fprintf(&b, "  %-24s %8d\n", inst, r.ByInstance[inst])
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
