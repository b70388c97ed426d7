package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// maxWork caps /work so that one request cannot pin a core for long.
const maxWork = 10 * time.Second

// newHandler serves the demo endpoints for the instance called name;
// /healthz answers healthStatus.
func newHandler(name string, healthStatus int) http.Handler {
	page := renderPage(name)
	pageLen := strconv.Itoa(len(page))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["Content-Type"] = []string{"text/html; charset=utf-8"}
		h["Content-Length"] = []string{pageLen}
		w.Write(page)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if healthStatus != http.StatusOK {
			w.WriteHeader(healthStatus)
			fmt.Fprintln(w, "unhealthy (--health-status)")
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /work", func(w http.ResponseWriter, r *http.Request) {
		ms, err := strconv.Atoi(r.URL.Query().Get("ms"))
		if err != nil || ms < 0 {
			http.Error(w, "ms: want a non-negative integer number of milliseconds", http.StatusBadRequest)
			return
		}
		wait := 0
		if v := r.URL.Query().Get("wait"); v != "" {
			if wait, err = strconv.Atoi(v); err != nil || wait < 0 {
				http.Error(w, "wait: want a non-negative integer number of milliseconds", http.StatusBadRequest)
				return
			}
		}
		d := min(time.Duration(ms)*time.Millisecond, maxWork)
		used, err := burnCPU(r, d)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		// wait stands for I/O the request does while it holds its worker.
		select {
		case <-time.After(min(time.Duration(wait)*time.Millisecond, maxWork)):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "%s worked %dms\n", name, used.Milliseconds())
	})
	return withInstance(name, mux)
}

// withWorkers serves at most n /work requests at once; the rest wait their
// turn, as in a server with a fixed worker pool, so that its capacity is
// n / service time however many cores the machine has.
func withWorkers(n int, next http.Handler) http.Handler {
	pool := make(chan struct{}, n)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/work" {
			next.ServeHTTP(w, r)
			return
		}
		select {
		case pool <- struct{}{}:
			defer func() { <-pool }()
		case <-r.Context().Done():
			return
		}
		next.ServeHTTP(w, r)
	})
}

// withHang serves next until the process gets SIGUSR1 (until ctx ends), then
// holds every request that reaches it from then on without an answer (and
// reads nothing more on its connection): a deadlock.
func withHang(ctx context.Context, next http.Handler, log *slog.Logger) http.Handler {
	hung := make(chan struct{})
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		select {
		case <-usr1:
			log.Warn("hanging (SIGUSR1): no request is answered from now on")
			close(hung)
		case <-ctx.Done():
		}
		signal.Stop(usr1)
	}()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hung:
			<-make(chan struct{}) // never answers, never reads on
		default:
		}
		next.ServeHTTP(w, r)
	})
}

// withInstance sets X-Instance on every response, including errors and 404s,
// and X-Proto to the protocol the request came in (HTTP/1.1 or HTTP/2.0).
func withInstance(name string, next http.Handler) http.Handler {
	v := []string{name}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["X-Instance"] = v
		w.Header().Set("X-Proto", r.Proto)
		next.ServeHTTP(w, r)
	})
}

// burnCPU spins until the calling thread has used d of CPU time, or the request
// is canceled. It counts CPU time rather than wall time so that a request costs
// the same CPU however busy the machine is: under overload, latency grows as it
// would for a real CPU-bound handler instead of the work silently shrinking.
func burnCPU(r *http.Request, d time.Duration) (time.Duration, error) {
	// The thread CPU clock is only meaningful while the goroutine stays on one thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	start, err := threadCPU()
	if err != nil {
		return 0, err
	}
	x := uint64(1)
	for {
		// About 10-20µs of arithmetic between clock reads keeps the overhead small.
		for range 10_000 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
		}
		now, err := threadCPU()
		if err != nil {
			return 0, err
		}
		used := now - start
		if used >= d || r.Context().Err() != nil {
			sink.Store(x)
			return used, nil
		}
	}
}

// sink keeps the compiler from discarding burnCPU's arithmetic.
var sink atomic.Uint64

func threadCPU() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, fmt.Errorf("thread CPU clock: %w", err)
	}
	return time.Duration(ts.Nano()), nil
}
