// Command loadgen sends keep-alive HTTP load and reports throughput, latency
// percentiles and how responses spread over instances (the X-Instance header).
//
// Usage:
//
//	loadgen -url http://127.0.0.1:8080/ [-c 16] [-d 10s] [-n 0] [-timeout 10s]
//	        [-H 'Name: value']... [-progress 1s] [-json]
//
// The run stops after -d or -n requests, whichever comes first (-d 0 and -n 0:
// until interrupted). Ctrl-C ends it early and still prints the summary. A
// failure is a transport error, a timeout or a non-2xx status; loadgen exits 1
// if there was any.
//
// Open loop: instead of -c workers, requests are sent at the instants a
// schedule sets, whatever the responses do, and timed from those instants:
//
//	loadgen -url URL -rate 500 -d 30s
//	loadgen -url URL -steps 100:30s,300:30s,100:30s
//	loadgen -url URL -trace worldcup98.csv -from 1998-06-30T08:00 -to 1998-07-01T08:00 -speedup 60 -scale 0.5
//
// with -timeline-csv FILE and -timeline-json FILE for the per-second
// timeline (scheduled rate, sent, completed, errors, late, p50, p99). A request
// that falls due while -max-inflight are in flight is late: not sent, and
// counted as a failure. Flags may be written with one dash or two.
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
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/shoal-lb/shoal/internal/loadgen"
)

// errFailures makes the exit status 1 after a run that saw failures.
var errFailures = errors.New("some requests failed")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	switch err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errFailures):
		os.Exit(1)
	default:
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
}

// headerFlag collects repeated -H 'Name: value' flags.
type headerFlag http.Header

func (h headerFlag) String() string { return "" }

func (h headerFlag) Set(s string) error {
	name, value, ok := strings.Cut(s, ":")
	if !ok || strings.TrimSpace(name) == "" {
		return fmt.Errorf("want 'Name: value', got %q", s)
	}
	http.Header(h).Add(strings.TrimSpace(name), strings.TrimSpace(value))
	return nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	header := http.Header{}
	o := loadgen.Options{Header: header}
	fs.StringVar(&o.URL, "url", "", "URL to GET (required)")
	fs.IntVar(&o.Concurrency, "c", 16, "concurrent connections")
	fs.DurationVar(&o.Duration, "d", 10*time.Second, "run duration (0: no limit)")
	fs.DurationVar(&o.Duration, "duration", 10*time.Second, "the same as -d")
	fs.Int64Var(&o.Requests, "n", 0, "number of requests (0: no limit)")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Second, "per-request timeout (0: none)")
	fs.Var(headerFlag(header), "H", "request header 'Name: value' (repeatable)")
	progress := fs.Duration("progress", 0, "print a running count to stderr at this interval (0: off; open loop: any value > 0 prints each second)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	var of openFlags
	of.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if o.URL == "" {
		return errors.New("-url is required")
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if of.open() || set["rate"] {
		return runOpen(ctx, &of, set, o.URL, header, o.Duration, o.Timeout, *progress > 0, *asJSON, stdout, stderr)
	}
	for _, name := range []string{"from", "to", "speedup", "scale", "max-inflight", "max-conns", "timeline-csv", "timeline-json"} {
		if set[name] {
			return fmt.Errorf("-%s is for the open loop (-trace, -rate or -steps)", name)
		}
	}
	if *progress > 0 {
		start := time.Now()
		o.ProgressInterval = *progress
		o.Progress = func(requests, failures int64) {
			fmt.Fprintf(stderr, "%6.1fs  %d requests  %d failures\n", time.Since(start).Seconds(), requests, failures)
		}
	}

	res, err := loadgen.Run(ctx, o)
	if err != nil {
		return err
	}
	if *asJSON {
		err = writeJSON(stdout, o.URL, res)
	} else {
		err = writeSummary(stdout, o.URL, res)
	}
	if err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	if res.Failures > 0 {
		return errFailures
	}
	return nil
}

// jsonResult is the -json output: durations in seconds and milliseconds so that
// scripts need no unit handling.
type jsonResult struct {
	URL            string           `json:"url"`
	Requests       int64            `json:"requests"`
	Failures       int64            `json:"failures"`
	FailureSamples []string         `json:"failure_samples"`
	DurationS      float64          `json:"duration_s"`
	RPS            float64          `json:"rps"`
	P50ms          float64          `json:"p50_ms"`
	P90ms          float64          `json:"p90_ms"`
	P99ms          float64          `json:"p99_ms"`
	MaxMs          float64          `json:"max_ms"`
	ByInstance     map[string]int64 `json:"by_instance"`
	LongestGapMs   float64          `json:"longest_gap_ms"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func writeJSON(w io.Writer, url string, r loadgen.Result) error {
	samples := r.FailureSamples
	if samples == nil {
		samples = []string{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(jsonResult{
		URL:            url,
		Requests:       r.Requests,
		Failures:       r.Failures,
		FailureSamples: samples,
		DurationS:      r.Duration.Seconds(),
		RPS:            r.RPS,
		P50ms:          ms(r.P50),
		P90ms:          ms(r.P90),
		P99ms:          ms(r.P99),
		MaxMs:          ms(r.Max),
		ByInstance:     r.ByInstance,
		LongestGapMs:   ms(r.LongestGap),
	})
}

func writeSummary(w io.Writer, url string, r loadgen.Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "url          %s\n", url)
	fmt.Fprintf(&b, "requests     %d in %.2fs, %.1f/s\n", r.Requests, r.Duration.Seconds(), r.RPS)
	fmt.Fprintf(&b, "failures     %d\n", r.Failures)
	for _, s := range r.FailureSamples {
		fmt.Fprintf(&b, "  sample     %s\n", s)
	}
	fmt.Fprintf(&b, "latency      p50 %v  p90 %v  p99 %v  max %v\n",
		round(r.P50), round(r.P90), round(r.P99), round(r.Max))
	fmt.Fprintf(&b, "longest gap  %v without a successful response\n", round(r.LongestGap))
	if len(r.ByInstance) > 0 {
		var total int64
		for _, n := range r.ByInstance {
			total += n
		}
		b.WriteString("by instance\n")
		for _, inst := range slices.Sorted(maps.Keys(r.ByInstance)) {
			n := r.ByInstance[inst]
			fmt.Fprintf(&b, "  %-24s %8d  %5.1f%%\n", inst, n, 100*float64(n)/float64(total))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// round keeps about three significant digits for the human summary.
func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}
