package loadgen

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// newServer answers every request, alternating X-Instance between a and b, and
// counts the connections it accepted.
func newServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func TestRunRequestsKeepAlive(t *testing.T) {
	var n atomic.Int64
	srv, conns := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Test") != "yes" || r.Host != "example.test" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("X-Instance", fmt.Sprintf("web-%d", n.Add(1)%2))
		w.Write([]byte(strings.Repeat("x", 9000)))
	})

	res, err := Run(context.Background(), Options{
		URL:         srv.URL + "/",
		Concurrency: 4,
		Requests:    400,
		Header:      http.Header{"X-Test": {"yes"}, "Host": {"example.test"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 400 || res.Failures != 0 {
		t.Fatalf("requests %d failures %d (%v), want 400 and 0", res.Requests, res.Failures, res.FailureSamples)
	}
	if got := conns.Load(); got != 4 {
		t.Errorf("server saw %d connections, want 4 (one per worker, kept alive)", got)
	}
	if res.ByProto["HTTP/1.1"] != 400 {
		t.Errorf("ByProto = %v, want 400 HTTP/1.1", res.ByProto)
	}
	if res.ByInstance["web-0"] != 200 || res.ByInstance["web-1"] != 200 {
		t.Errorf("ByInstance = %v, want 200 each", res.ByInstance)
	}
	if res.P50 <= 0 || res.P50 > res.P90 || res.P90 > res.P99 || res.P99 > res.Max {
		t.Errorf("percentiles out of order: p50 %v p90 %v p99 %v max %v", res.P50, res.P90, res.P99, res.Max)
	}
	if res.RPS <= 0 || res.Duration <= 0 {
		t.Errorf("RPS %v Duration %v, want both > 0", res.RPS, res.Duration)
	}
}

func TestRunFailures(t *testing.T) {
	var n atomic.Int64
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) % 4 {
		case 0:
			w.WriteHeader(http.StatusServiceUnavailable)
		case 1:
			w.WriteHeader(http.StatusNotFound)
		case 2:
			w.WriteHeader(http.StatusNoContent) // 2xx: a success
		}
	})
	res, err := Run(context.Background(), Options{URL: srv.URL, Concurrency: 2, Requests: 100})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 100 || res.Failures != 50 {
		t.Errorf("requests %d failures %d, want 100 and 50", res.Requests, res.Failures)
	}
	if len(res.FailureSamples) != 2 {
		t.Errorf("FailureSamples = %q, want HTTP 503 and HTTP 404", res.FailureSamples)
	}
}

func TestRunTransportError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now

	res, err := Run(context.Background(), Options{URL: "http://" + addr + "/", Requests: 5})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failures != 5 || len(res.FailureSamples) != 1 || !strings.Contains(res.FailureSamples[0], "refused") {
		t.Errorf("failures %d samples %q, want 5 and one 'connection refused'", res.Failures, res.FailureSamples)
	}
}

func TestRunDurationTimeoutProgress(t *testing.T) {
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("slow") {
			time.Sleep(200 * time.Millisecond)
		}
	})

	var calls atomic.Int64
	start := time.Now()
	res, err := Run(context.Background(), Options{
		URL:              srv.URL,
		Concurrency:      2,
		Duration:         300 * time.Millisecond,
		Progress:         func(int64, int64) { calls.Add(1) },
		ProgressInterval: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 2*time.Second {
		t.Errorf("run took %v, want about 300ms", d)
	}
	if res.Requests == 0 || res.Failures != 0 {
		t.Errorf("requests %d failures %d, want some and 0", res.Requests, res.Failures)
	}
	if calls.Load() < 2 {
		t.Errorf("Progress called %d times, want several", calls.Load())
	}

	res, err = Run(context.Background(), Options{URL: srv.URL + "/?slow", Requests: 2, Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failures != 2 || len(res.FailureSamples) != 1 || !strings.HasPrefix(res.FailureSamples[0], "timeout") {
		t.Errorf("failures %d samples %q, want 2 timeouts", res.Failures, res.FailureSamples)
	}
}

func TestRunCanceled(t *testing.T) {
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	res, err := Run(ctx, Options{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests == 0 || res.Failures != 0 {
		t.Errorf("requests %d failures %d, want some and 0: cut-short requests are not failures", res.Requests, res.Failures)
	}
}

func TestRunBadOptions(t *testing.T) {
	for _, o := range []Options{
		{URL: "ftp://x/"},
		{URL: "127.0.0.1:80"},
		{URL: "http://x/", Requests: -1},
	} {
		if _, err := Run(context.Background(), o); err == nil {
			t.Errorf("Run(%+v) succeeded, want an error", o)
		}
	}
}

func TestHistogram(t *testing.T) {
	var h histogram
	for i := 1; i <= 10000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, tt := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5 * time.Millisecond}, {0.9, 9 * time.Millisecond}, {0.99, 9900 * time.Microsecond}, {1, 10 * time.Millisecond}} {
		got := h.quantile(tt.q)
		if diff := float64(got-tt.want) / float64(tt.want); diff < -0.016 || diff > 0.016 {
			t.Errorf("quantile(%v) = %v, want %v within 1.6%%", tt.q, got, tt.want)
		}
	}
	if h.max != 10*time.Millisecond {
		t.Errorf("max = %v, want 10ms", h.max)
	}

	// Every bucket's range maps back to the bucket, and ranges tile the line.
	var next uint64
	for i := range numBuckets {
		lo, hi := bucketRange(i)
		if lo != next || bucketOf(lo) != i || bucketOf(hi) != i {
			t.Fatalf("bucket %d = [%d, %d], next expected %d", i, lo, hi, next)
		}
		next = hi + 1
	}
	if next != 1<<63 {
		t.Errorf("buckets end at %d, want 2^63", next)
	}
}

func TestStartRunsUntilStopped(t *testing.T) {
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	if _, err := Start(context.Background(), Options{URL: "::bad"}); err == nil {
		t.Fatal("Start accepted an invalid URL")
	}
	stop, err := Start(context.Background(), Options{URL: srv.URL, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	res := stop()
	if res.Requests == 0 || res.Failures != 0 {
		t.Fatalf("result %+v, want requests and no failures", res)
	}
	if again := stop(); again.Requests != res.Requests {
		t.Fatalf("second stop returned %d requests, first %d", again.Requests, res.Requests)
	}
}

// TestRunLongestGap: a server that fails every request for 400 ms in the
// middle of a run shows as a gap of about that length, whatever the
// failures meanwhile; a steady server shows none to speak of.
func TestRunLongestGap(t *testing.T) {
	var downFrom, downTo atomic.Int64
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if now := time.Now().UnixNano(); now >= downFrom.Load() && now < downTo.Load() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		time.Sleep(time.Millisecond)
	})
	from := time.Now().Add(300 * time.Millisecond)
	downFrom.Store(from.UnixNano())
	downTo.Store(from.Add(400 * time.Millisecond).UnixNano())
	res, err := Run(context.Background(), Options{URL: srv.URL, Concurrency: 2, Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// The gap runs from the client's receipt of the last answer before the
	// window, which a busy machine delays by tens of ms, to the first after:
	// a little under 400ms at times, never near a steady server's few ms.
	if res.Failures == 0 || res.LongestGap < 300*time.Millisecond || res.LongestGap > 600*time.Millisecond {
		t.Errorf("%d failures, longest gap %v; want failures and a gap of about 400ms", res.Failures, res.LongestGap)
	}

	downTo.Store(0)
	res, err = Run(context.Background(), Options{URL: srv.URL, Concurrency: 2, Duration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failures != 0 || res.LongestGap <= 0 || res.LongestGap > 250*time.Millisecond {
		t.Errorf("steady server: %d failures, longest gap %v; want none and a gap of a few ms", res.Failures, res.LongestGap)
	}
}

// TestRunNoRetries: a server that closes a kept-alive connection as its
// second request arrives, without answering. Go's transport sends that GET
// again on a new connection, so by default nothing fails; with NoRetries
// every such request fails, counted as "eof", as wrk would count it.
func TestRunNoRetries(t *testing.T) {
	var seen sync.Map // the connections, by client address, that were answered once
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
			w.WriteHeader(http.StatusBadRequest) // a GET carries no body
			return
		}
		if _, again := seen.LoadOrStore(r.RemoteAddr, true); again {
			if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
				c.Close()
			}
		}
	})
	for _, tc := range []struct {
		noRetries bool
		failures  int64
	}{{false, 0}, {true, 5}} {
		res, err := Run(context.Background(), Options{URL: srv.URL, Requests: 10, NoRetries: tc.noRetries})
		if err != nil {
			t.Fatal(err)
		}
		if res.Requests != 10 || res.Failures != tc.failures || res.FailureKinds["eof"] != tc.failures {
			t.Errorf("NoRetries %v: %d requests, %d failures %v %v; want 10 and %d, all eof",
				tc.noRetries, res.Requests, res.Failures, res.FailureKinds, res.FailureSamples, tc.failures)
		}
	}
}

// TestRunHTTP2: with TLS set (the server's CA), HTTP2 speaks HTTP/2 to a
// server that offers it, and without HTTP2 a run on the same config speaks
// HTTP/1.1.
func TestRunHTTP2(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	// One config for both runs: the first must not change what the second offers.
	config := &tls.Config{RootCAs: pool}
	for _, tc := range []struct {
		http2 bool
		proto string
	}{{true, "HTTP/2.0"}, {false, "HTTP/1.1"}} {
		res, err := Run(context.Background(), Options{URL: srv.URL, Concurrency: 2, Requests: 20, TLS: config, HTTP2: tc.http2})
		if err != nil {
			t.Fatal(err)
		}
		if res.Failures != 0 || res.ByProto[tc.proto] != 20 {
			t.Errorf("HTTP2 %v: %d failures %v, by protocol %v; want 20 %s", tc.http2, res.Failures, res.FailureSamples, res.ByProto, tc.proto)
		}
		if config.NextProtos != nil {
			t.Fatalf("HTTP2 %v: the run set the caller's config to offer %q", tc.http2, config.NextProtos)
		}
	}
}

// TestRunPace: with Pace, each worker starts a request at most once per
// Pace, on its one kept-alive connection.
func TestRunPace(t *testing.T) {
	srv, conns := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	const pace, workers, took = 20 * time.Millisecond, 2, 400 * time.Millisecond
	res, err := Run(context.Background(), Options{URL: srv.URL + "/", Concurrency: workers, Duration: took, Pace: pace})
	if err != nil {
		t.Fatal(err)
	}
	// A request at the start and one per Pace after: at most took/pace+1
	// per worker. Unpaced, this server answers thousands in that time.
	if most := int64(workers * (took/pace + 1)); res.Requests > most || res.Requests < 4 || res.Failures != 0 {
		t.Fatalf("%d requests (%d failed) in %s, want 4 to %d", res.Requests, res.Failures, took, most)
	}
	if got := conns.Load(); got != workers {
		t.Errorf("server saw %d connections, want %d", got, workers)
	}
}
