package loadgen

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Segment is a stretch of an open-loop schedule at a constant rate.
type Segment struct {
	Rate     float64 // requests per second; 0 is a pause
	Duration time.Duration
}

// ParseSteps parses a stepped schedule such as "100:30s,300:30s,100:30s":
// comma-separated RATE:DURATION pairs, rates in requests per second.
func ParseSteps(s string) ([]Segment, error) {
	var segs []Segment
	for part := range strings.SplitSeq(s, ",") {
		rate, dur, ok := strings.Cut(strings.TrimSpace(part), ":")
		r, err1 := strconv.ParseFloat(rate, 64)
		d, err2 := time.ParseDuration(dur)
		if !ok || err1 != nil || err2 != nil || !validRate(r) || d <= 0 {
			return nil, fmt.Errorf("step %q: want RATE:DURATION such as 300:30s (rate >= 0 req/s, duration > 0)", part)
		}
		segs = append(segs, Segment{Rate: r, Duration: d})
	}
	return segs, nil
}

// validRate reports whether r is a usable rate: finite and >= 0.
func validRate(r float64) bool { return r >= 0 && !math.IsInf(r, 1) }

// Defaults for OpenOptions.MaxInFlight and MaxConns.
const (
	DefaultMaxInFlight = 2000
	DefaultMaxConns    = 128
)

// OpenOptions configures an open-loop run: requests are sent at the instants
// the schedule sets, whatever the responses do.
type OpenOptions struct {
	URL      string
	Header   http.Header
	Timeout  time.Duration // per request, from its scheduled instant; 0: none
	Schedule []Segment
	// MaxInFlight caps the requests in flight. A request due while the cap
	// is reached is not sent and counts as late.
	MaxInFlight int
	// Progress, when set, is called once a second, just after each second of
	// the schedule, with what is known of that second so far (requests still
	// in flight complete later). Calls come from one goroutine.
	Progress func(Second)
	// MaxConns caps the connections, opened as needed; requests beyond it
	// wait for one (and that wait counts in their latency). Without this cap
	// a burst opens a connection per request, and on a small machine the
	// dialing alone slows everything down: measured at 5,000 req/s on 2
	// loaded cores, 2,000 requests in flight and a p99 near a second without
	// a cap, against at most 66 in flight and a p99 under 10 ms with 64.
	MaxConns int
}

// Second is what happened to the requests scheduled in one second of the run.
// Requests belong to the second they were scheduled in, however late they
// completed, so a slow second shows its latency rather than spilling it over.
type Second struct {
	Second    int   // seconds since the start of the schedule
	Scheduled int64 // due in this second: the scheduled rate
	// Sent counts requests handed to the HTTP client at their instant (or
	// as soon after as the generator ran: see MaxLag); with MaxConns
	// connections busy a request waits there for one, inside its latency.
	Sent      int64
	Late      int64 // due but not sent: MaxInFlight requests were in flight
	Completed int64 // got a 2xx response
	Errors    int64 // transport errors, timeouts and non-2xx responses
	// P50 and P99 cover every response, whatever its status, timed from the
	// scheduled instant (to 2 significant digits).
	P50, P99 time.Duration
	// MaxLag is the longest a request of this second was sent after its
	// instant: the generator's own tardiness, already inside the latencies.
	MaxLag time.Duration

	finished int64                   // sent requests that are over, cut short included
	closed   bool                    // all its requests are over; hist is gone
	hist     *hdrhistogram.Histogram // allocated on the first response
}

// quantiles sets P50 and P99 from the histogram.
func (s *Second) quantiles() {
	if s.hist != nil && s.hist.TotalCount() > 0 {
		s.P50, s.P99 = us(s.hist.ValueAtQuantile(50)), us(s.hist.ValueAtQuantile(99))
	}
}

// OpenResult summarizes an open-loop run.
type OpenResult struct {
	Scheduled, Sent, Late, Completed, Errors int64
	// Duration is the schedule's length; Elapsed includes waiting for the
	// last responses.
	Duration, Elapsed time.Duration
	// Latency over the whole run, from the scheduled instants (3 significant digits).
	P50, P90, P99, Max time.Duration
	// PeakInFlight is the most requests in flight at once.
	PeakInFlight   int
	FailureSamples []string
	ByInstance     map[string]int64
	Seconds        []Second
}

// latency histograms count microseconds from 1µs to an hour.
const (
	histMin = 1
	histMax = int64(time.Hour / time.Microsecond)
)

// RunOpen sends load on o's schedule and returns what it measured. A request
// is timed from its scheduled instant, not from when it was actually sent, so
// a stall of the server (or of the generator) shows in the latencies instead
// of being hidden by sending less (no coordinated omission). It returns an
// error only for invalid options; a canceled ctx ends the run early, and
// requests cut short are neither completions nor errors.
func RunOpen(ctx context.Context, o OpenOptions) (OpenResult, error) {
	if o.Timeout < 0 || o.MaxInFlight < 0 || o.MaxConns < 0 {
		return OpenResult{}, errors.New("loadgen: negative Timeout, MaxInFlight or MaxConns")
	}
	var total time.Duration
	for _, s := range o.Schedule {
		if !validRate(s.Rate) || s.Duration <= 0 {
			return OpenResult{}, fmt.Errorf("loadgen: schedule segment %+v: want rate >= 0 and duration > 0", s)
		}
		total += s.Duration
	}
	if total <= 0 {
		return OpenResult{}, errors.New("loadgen: empty schedule")
	}
	base, err := newRequest(Options{URL: o.URL, Header: o.Header})
	if err != nil {
		return OpenResult{}, err
	}
	limit := o.MaxInFlight
	if limit == 0 {
		limit = DefaultMaxInFlight
	}
	conns := o.MaxConns
	if conns == 0 {
		conns = DefaultMaxConns
	}

	tr := &http.Transport{
		Proxy:               nil,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		MaxConnsPerHost:     conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // as in Run: measure the server, not gzip in the client
	}
	defer tr.CloseIdleConnections()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &openRun{
		o:       o,
		tr:      tr,
		base:    base,
		ctx:     runCtx,
		sem:     make(chan struct{}, limit),
		seconds: make([]Second, int((total+time.Second-1)/time.Second)),
		all:     hdrhistogram.New(histMin, histMax, 3),
		byInst:  make(map[string]int64),
	}
	for i := range r.seconds {
		r.seconds[i].Second = i
	}

	start := time.Now()
	if o.Progress != nil {
		progressDone := make(chan struct{})
		defer func() { <-progressDone }()
		go func() {
			defer close(progressDone)
			// The caller's ctx, not runCtx: the report of the last second
			// comes at its end even if the last response came before.
			r.report(ctx, start)
		}()
	}
	r.schedule(start)
	r.wg.Wait()
	return r.result(total, time.Since(start)), nil
}

type openRun struct {
	o    OpenOptions
	tr   *http.Transport
	base *http.Request
	ctx  context.Context
	sem  chan struct{} // one token per request in flight
	wg   sync.WaitGroup

	mu       sync.Mutex // guards everything below
	seconds  []Second
	all      *hdrhistogram.Histogram
	byInst   map[string]int64
	samples  []string
	peak     int
	inFlight int
	// schedSec is the second the scheduler is in: earlier seconds get no
	// more requests, and are closed once their last one is over.
	schedSec int
}

// advance records that the scheduler reached second sec, closing the
// finished seconds before it. Called with r.mu held.
func (r *openRun) advance(sec int) {
	for r.schedSec < sec {
		r.schedSec++
		r.maybeClose(r.schedSec - 1)
	}
}

// maybeClose turns second i's histogram into its quantiles once no request
// of it can still complete, so a long replay holds histograms only for the
// seconds with requests in flight (about 27 KB each). Called with r.mu held.
func (r *openRun) maybeClose(i int) {
	s := &r.seconds[i]
	if s.closed || i >= r.schedSec || s.finished < s.Sent {
		return
	}
	s.quantiles()
	s.hist, s.closed = nil, true
}

// report calls Options.Progress just after each second of the schedule.
func (r *openRun) report(ctx context.Context, start time.Time) {
	for i := range r.seconds {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(start.Add(time.Duration(i+1) * time.Second))):
		}
		r.mu.Lock()
		s := r.seconds[i]
		if !s.closed {
			s.quantiles()
		}
		s.hist = nil
		r.mu.Unlock()
		r.o.Progress(s)
	}
}

// schedule dispatches every request of the schedule at its instant. Instants
// are computed from start, never from the previous send, so a late wake-up
// sends the overdue requests at once rather than shifting the rest.
func (r *openRun) schedule(start time.Time) {
	var segStart time.Duration // offset of the current segment
	// pending is the fraction of a request accumulated before the current
	// segment, so a segment boundary neither adds nor drops one. It starts at
	// ½ so requests fall mid-gap: at a constant rate R the k-th is due at
	// (k+½)/R, and every second holds exactly R.
	pending := 0.5
	for _, seg := range r.o.Schedule {
		if seg.Rate > 0 {
			acc := pending + seg.Rate*seg.Duration.Seconds()
			n := int64(acc) // requests due in this segment
			for k := range n {
				off := segStart + time.Duration((float64(k)+1-pending)/seg.Rate*float64(time.Second))
				if !r.dispatch(start, off) {
					return
				}
			}
			pending = acc - float64(n)
		}
		segStart += seg.Duration
	}
}

// earlyBy is how early a request may be sent rather than sleeping for it:
// short sleeps overshoot, and a burst of a few requests within half a
// millisecond is still on schedule at the rates this generator is for.
const earlyBy = 500 * time.Microsecond

// dispatch sends the request due at start+off, or counts it late. It returns
// false once the run is canceled.
func (r *openRun) dispatch(start time.Time, off time.Duration) bool {
	at := start.Add(off)
	if wait := time.Until(at); wait > earlyBy {
		t := time.NewTimer(wait)
		select {
		case <-r.ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	} else if r.ctx.Err() != nil {
		return false
	}
	sec := min(int(off/time.Second), len(r.seconds)-1)
	select {
	case r.sem <- struct{}{}:
		lag := max(time.Since(at), 0)
		r.mu.Lock()
		r.advance(sec)
		s := &r.seconds[sec]
		s.Scheduled++
		s.Sent++
		s.MaxLag = max(s.MaxLag, lag)
		r.inFlight++
		r.peak = max(r.peak, r.inFlight)
		r.mu.Unlock()
		r.wg.Go(func() {
			defer func() { <-r.sem }()
			r.do(at, sec)
		})
	default:
		r.mu.Lock()
		r.advance(sec)
		r.seconds[sec].Scheduled++
		r.seconds[sec].Late++
		r.mu.Unlock()
	}
	return true
}

// do sends one request due at at and records its outcome under second sec.
func (r *openRun) do(at time.Time, sec int) {
	ctx := r.ctx
	if r.o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, at.Add(r.o.Timeout))
		defer cancel()
	}
	resp, err := r.tr.RoundTrip(r.base.WithContext(ctx))
	var inst string
	status := 0
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		inst, status = resp.Header.Get("X-Instance"), resp.StatusCode
	}
	lat := time.Since(at)

	r.mu.Lock()
	defer r.mu.Unlock()
	r.inFlight--
	s := &r.seconds[sec]
	s.finished++
	defer r.maybeClose(sec)
	if r.ctx.Err() != nil {
		return // cut short by the end of the run
	}
	var failure string
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		failure = "timeout after " + r.o.Timeout.String()
	case err != nil:
		failure = err.Error()
	default:
		v := min(max(lat.Microseconds(), histMin), histMax)
		if s.hist == nil {
			s.hist = hdrhistogram.New(histMin, histMax, 2)
		}
		_ = s.hist.RecordValue(v) // in range by construction
		_ = r.all.RecordValue(v)
		if inst != "" {
			r.byInst[inst]++
		}
		if status < 200 || status > 299 {
			failure = "HTTP " + strconv.Itoa(status)
		}
	}
	if failure == "" {
		s.Completed++
		return
	}
	s.Errors++
	if len(r.samples) < maxFailureSamples && !slices.Contains(r.samples, failure) {
		r.samples = append(r.samples, failure)
	}
}

func us(v int64) time.Duration { return time.Duration(v) * time.Microsecond }

func (r *openRun) result(total, elapsed time.Duration) OpenResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.advance(len(r.seconds))
	res := OpenResult{
		Duration:       total,
		Elapsed:        elapsed,
		PeakInFlight:   r.peak,
		FailureSamples: r.samples,
		ByInstance:     r.byInst,
		Seconds:        r.seconds,
		P50:            us(r.all.ValueAtQuantile(50)),
		P90:            us(r.all.ValueAtQuantile(90)),
		P99:            us(r.all.ValueAtQuantile(99)),
		Max:            us(r.all.Max()),
	}
	for i := range res.Seconds {
		s := &res.Seconds[i]
		res.Scheduled += s.Scheduled
		res.Sent += s.Sent
		res.Late += s.Late
		res.Completed += s.Completed
		res.Errors += s.Errors
		if !s.closed { // a canceled run: some requests were cut short
			s.quantiles()
			s.hist, s.closed = nil, true
		}
	}
	return res
}

// timelineHeader names the columns of WriteCSV, and the JSON fields.
var timelineHeader = []string{"second", "scheduled_rate", "sent", "completed", "errors", "late", "p50_ms", "p99_ms", "max_lag_ms"}

func msStr(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)
}

// WriteCSV writes the per-second timeline as CSV with a header line.
func (r OpenResult) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write(timelineHeader)
	for _, s := range r.Seconds {
		cw.Write([]string{
			strconv.Itoa(s.Second), strconv.FormatInt(s.Scheduled, 10), strconv.FormatInt(s.Sent, 10),
			strconv.FormatInt(s.Completed, 10), strconv.FormatInt(s.Errors, 10), strconv.FormatInt(s.Late, 10),
			msStr(s.P50), msStr(s.P99), msStr(s.MaxLag),
		})
	}
	cw.Flush()
	return cw.Error()
}

// TimelineRow is one second of WriteJSON's output.
type TimelineRow struct {
	Second        int     `json:"second"`
	ScheduledRate int64   `json:"scheduled_rate"`
	Sent          int64   `json:"sent"`
	Completed     int64   `json:"completed"`
	Errors        int64   `json:"errors"`
	Late          int64   `json:"late"`
	P50ms         float64 `json:"p50_ms"`
	P99ms         float64 `json:"p99_ms"`
	MaxLagMs      float64 `json:"max_lag_ms"`
}

// Timeline returns the per-second rows in the form WriteJSON writes.
func (r OpenResult) Timeline() []TimelineRow {
	rows := make([]TimelineRow, len(r.Seconds))
	for i, s := range r.Seconds {
		rows[i] = TimelineRow{
			Second: s.Second, ScheduledRate: s.Scheduled, Sent: s.Sent, Completed: s.Completed,
			Errors: s.Errors, Late: s.Late, P50ms: ms(s.P50), P99ms: ms(s.P99), MaxLagMs: ms(s.MaxLag),
		}
	}
	return rows
}

// WriteJSON writes the per-second timeline as a JSON array, one object a second.
func (r OpenResult) WriteJSON(w io.Writer) error {
	return json.NewEncoder(w).Encode(r.Timeline())
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
