// Package loadgen is an HTTP load generator. Run is closed-loop: a fixed
// number of workers, each sending GET requests one after another over a
// keep-alive connection, like wrk. shoal's demo uses it for steady load and
// the integration tests use it as the client that must see no errors.
// RunOpen is open-loop: requests go out at the instants a rate schedule sets
// (constant, stepped, or a recorded trace), whatever the responses do, and
// are timed from those instants, like wrk2; the benchmarks use it to put a
// known load on shoal.
package loadgen

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// maxFailureSamples bounds Result.FailureSamples.
const maxFailureSamples = 10

// Options configures a run. The run ends when Duration has passed, Requests
// requests have completed, or the context is done, whichever comes first; with
// neither Duration nor Requests set it runs until the context is done.
type Options struct {
	// URL is the http or https URL every request GETs.
	URL string
	// Concurrency is the number of workers, hence of connections (default 1).
	Concurrency int
	Duration    time.Duration
	// Requests is the number of requests to send; 0 means no limit.
	Requests int64
	// Timeout bounds each request, body included; 0 means no limit.
	Timeout time.Duration
	// Pace is the least time between the starts of one worker's requests;
	// 0 sends them back to back. A paced load keeps requests in flight on
	// every connection without taking every core (a test that shares the
	// machine with others).
	Pace time.Duration
	// Header is added to every request. A "Host" entry sets the request's Host.
	Header http.Header
	// TLS, when set, configures https connections (RootCAs, ServerName).
	TLS *tls.Config
	// HTTP2 makes https connections speak HTTP/2 when the server offers it
	// also with TLS set (without TLS, Go's transport offers it anyway).
	HTTP2 bool
	// NoRetries counts every request that fails as failed, as wrk does. By
	// default Go's transport sends a GET again, on a new connection, when
	// the kept-alive connection it used closes before answering: that hides
	// a server closing connections in use, which clients that do not retry
	// (wrk, most other languages' clients, any POST) see as errors. It is
	// for HTTP/1.1: over HTTP/2 it would also stop the resends the protocol
	// makes safe (streams a GOAWAY or REFUSED_STREAM says were not
	// processed), which every HTTP/2 client makes.
	NoRetries bool

	// Progress, when set, is called every ProgressInterval (default 1s) with the
	// requests and failures counted so far. Calls come from one goroutine.
	Progress         func(requests, failures int64)
	ProgressInterval time.Duration
}

// Result summarizes a run.
type Result struct {
	// Requests counts the requests that completed, failed or not. Requests cut
	// short by the end of the run are not counted.
	Requests int64
	// Failures counts transport errors (timeouts included) and responses
	// whose status is not 2xx.
	Failures int64
	// FailureSamples holds up to 10 distinct failures: an error's text, or
	// "HTTP 503" and the like for a status.
	FailureSamples []string
	// FailureKinds counts the failures by kind: "timeout", "reset" (or a
	// broken pipe), "eof" (the connection closed before an answer),
	// "refused", "other", or the status ("HTTP 503").
	FailureKinds map[string]int64
	Duration     time.Duration
	RPS          float64
	// Latency percentiles cover every request that got a response, whatever
	// its status, to within 1.6%; Max is exact.
	P50, P90, P99, Max time.Duration
	// ByInstance counts responses by their X-Instance header; responses
	// without one are not counted.
	ByInstance map[string]int64
	// ByProto counts responses by protocol ("HTTP/1.1", "HTTP/2.0").
	ByProto map[string]int64
	// LongestGap is the longest the run went without a successful (2xx)
	// response, from its start to the first, between two, or from the last
	// to its end: the outage a client saw, whatever its requests did
	// meanwhile (failed or hung).
	LongestGap time.Duration
}

// Run sends load as o describes and returns what it measured. It returns an
// error only for invalid options; a canceled ctx ends the run early and yields
// the result so far.
func Run(ctx context.Context, o Options) (Result, error) {
	if o.Requests < 0 || o.Duration < 0 || o.Timeout < 0 || o.Concurrency < 0 {
		return Result{}, errors.New("loadgen: negative Requests, Duration, Timeout or Concurrency")
	}
	base, err := newRequest(o)
	if err != nil {
		return Result{}, err
	}
	workers := max(o.Concurrency, 1)

	tr := &http.Transport{
		Proxy:               nil, // load goes straight to the target, whatever the environment says
		MaxIdleConns:        workers,
		MaxIdleConnsPerHost: workers,
		MaxConnsPerHost:     workers,
		IdleConnTimeout:     90 * time.Second,
		// Without this Go would ask for gzip and inflate every body, so the
		// generator would load itself and measure something other than wrk.
		// A caller that wants gzip sets Accept-Encoding in Header.
		DisableCompression: true,
		// A copy: HTTP/2's set-up adds "h2" to the config's protocols, and
		// a caller's other runs on it would then offer what they do not speak.
		TLSClientConfig:   o.TLS.Clone(),
		ForceAttemptHTTP2: o.HTTP2,
	}
	defer tr.CloseIdleConnections()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if o.Duration > 0 {
		runCtx, cancel = context.WithTimeout(runCtx, o.Duration)
		defer cancel()
	}

	start := time.Now()
	r := &run{opts: o, tr: tr, base: base, ctx: runCtx, lastOK: start}
	stats := make([]*workerStats, workers)
	var wg sync.WaitGroup
	for i := range stats {
		stats[i] = newWorkerStats()
		wg.Go(func() { r.work(stats[i]) })
	}
	if o.Progress != nil {
		progressDone := make(chan struct{})
		defer func() { <-progressDone }()
		go func() {
			defer close(progressDone)
			r.report(runCtx)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cancel() // ends the progress reporter when the run stopped on Requests

	res := summarize(stats, elapsed)
	r.succeeded(start.Add(elapsed)) // the time since the last success counts too
	res.LongestGap = r.gap
	return res, nil
}

// Start runs load in the background, for tests that act while traffic flows.
// The returned stop ends the run and returns its result; it may be called more
// than once. Invalid options are reported at once.
func Start(ctx context.Context, o Options) (stop func() Result, err error) {
	if _, err := newRequest(o); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan Result, 1)
	go func() {
		// Options were checked above; an error here is impossible.
		res, _ := Run(ctx, o)
		done <- res
	}()
	var once sync.Once
	var res Result
	return func() Result {
		once.Do(func() { cancel(); res = <-done })
		return res
	}, nil
}

// newRequest validates o and builds the request every worker copies.
func newRequest(o Options) (*http.Request, error) {
	u, err := url.Parse(o.URL)
	if err != nil {
		return nil, fmt.Errorf("loadgen: URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("loadgen: URL %q: want http://host[:port]/path or https://...", o.URL)
	}
	req, err := http.NewRequest(http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	for k, vs := range o.Header {
		if http.CanonicalHeaderKey(k) == "Host" {
			req.Host = vs[0]
			continue
		}
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	return req, nil
}

type run struct {
	opts Options
	tr   *http.Transport
	base *http.Request
	ctx  context.Context

	issued             atomic.Int64 // requests started, to honor Options.Requests
	requests, failures atomic.Int64 // live counts for Progress

	// gapMu guards the successes' timeline across workers.
	gapMu  sync.Mutex
	lastOK time.Time // the run's start until the first success
	gap    time.Duration
}

// succeeded records a successful response at now on the run's timeline.
func (r *run) succeeded(now time.Time) {
	r.gapMu.Lock()
	defer r.gapMu.Unlock()
	r.gap = max(r.gap, now.Sub(r.lastOK))
	r.lastOK = now
}

type workerStats struct {
	lat        histogram
	requests   int64
	failures   int64
	samples    []string
	kinds      map[string]int64
	byInstance map[string]int64
	byProto    map[string]int64
}

func newWorkerStats() *workerStats {
	return &workerStats{byInstance: make(map[string]int64), byProto: make(map[string]int64), kinds: make(map[string]int64)}
}

// emptyBody is a request body that reads nothing (see Options.NoRetries).
type emptyBody struct{}

func (emptyBody) Read([]byte) (int, error) { return 0, io.EOF }
func (emptyBody) Close() error             { return nil }

// failureKind sorts a failure for Result.FailureKinds: err is the
// transport's error, nil for a status, whose failure text is the kind.
func failureKind(err error, failure string) string {
	switch {
	case err == nil:
		return failure
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		// Go's transport saw the kept-alive connection's EOF first.
		strings.Contains(err.Error(), "server closed idle connection"):
		return "eof"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	}
	return "other"
}

// work sends requests one after another until the run ends.
func (r *run) work(s *workerStats) {
	var pace *time.Timer
	if r.opts.Pace > 0 {
		pace = time.NewTimer(0)
		defer pace.Stop()
	}
	for r.ctx.Err() == nil {
		// Running out of requests ends only this worker: the others finish
		// the requests they have in flight, so exactly Requests complete.
		if r.opts.Requests > 0 && r.issued.Add(1) > r.opts.Requests {
			return
		}
		if pace != nil {
			select {
			case <-r.ctx.Done():
				return
			case <-pace.C:
			}
			pace.Reset(r.opts.Pace)
		}
		r.do(s)
	}
}

// do sends one request and records its outcome in s.
func (r *run) do(s *workerStats) {
	ctx := r.ctx
	if r.opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.opts.Timeout)
		defer cancel()
	}

	req := r.base.WithContext(ctx)
	if r.opts.NoRetries {
		// Go's transport resends only a request it can replay: one whose
		// body is nil or http.NoBody. An empty body of another type makes
		// it final, and is still sent as a GET without a body.
		req.Body = emptyBody{}
	}
	start := time.Now()
	resp, err := r.tr.RoundTrip(req)
	if err == nil {
		// Reading the whole body lets the connection be reused.
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	elapsed := time.Since(start)

	if r.ctx.Err() != nil {
		return // cut short by the end of the run: neither a success nor a failure
	}
	s.requests++
	r.requests.Add(1)
	var failure string
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		failure = "timeout after " + r.opts.Timeout.String()
	case err != nil:
		failure = err.Error()
	default:
		s.lat.record(elapsed)
		if inst := resp.Header.Get("X-Instance"); inst != "" {
			s.byInstance[inst]++
		}
		s.byProto[resp.Proto]++
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			failure = "HTTP " + strconv.Itoa(resp.StatusCode)
		} else {
			r.succeeded(start.Add(elapsed))
		}
	}
	if failure != "" {
		s.failures++
		s.kinds[failureKind(err, failure)]++
		r.failures.Add(1)
		if len(s.samples) < maxFailureSamples && !slices.Contains(s.samples, failure) {
			s.samples = append(s.samples, failure)
		}
	}
}

// report calls Options.Progress periodically until ctx is done.
func (r *run) report(ctx context.Context) {
	interval := r.opts.ProgressInterval
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.opts.Progress(r.requests.Load(), r.failures.Load())
		}
	}
}

func summarize(stats []*workerStats, elapsed time.Duration) Result {
	var lat histogram
	res := Result{Duration: elapsed, ByInstance: make(map[string]int64), ByProto: make(map[string]int64), FailureKinds: make(map[string]int64)}
	for _, s := range stats {
		lat.merge(&s.lat)
		res.Requests += s.requests
		res.Failures += s.failures
		for k, n := range s.kinds {
			res.FailureKinds[k] += n
		}
		for _, f := range s.samples {
			if len(res.FailureSamples) < maxFailureSamples && !slices.Contains(res.FailureSamples, f) {
				res.FailureSamples = append(res.FailureSamples, f)
			}
		}
		for inst, n := range s.byInstance {
			res.ByInstance[inst] += n
		}
		for proto, n := range s.byProto {
			res.ByProto[proto] += n
		}
	}
	if elapsed > 0 {
		res.RPS = float64(res.Requests) / elapsed.Seconds()
	}
	res.P50, res.P90, res.P99 = lat.quantile(0.50), lat.quantile(0.90), lat.quantile(0.99)
	res.Max = lat.max
	return res
}
