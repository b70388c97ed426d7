// Command demo-backend is the instance shoal's demo and benchmarks scale: a small
// HTTP server with a realistic page, a health check and a CPU-burning endpoint.
//
// Usage:
//
//	demo-backend --listen 127.0.0.1:PORT [--name NAME] [--health-status CODE]
//
// Endpoints:
//
//	/            a ~9 KB HTML page naming the instance
//	/healthz     200 "ok" (or CODE: a broken release for deploy tests)
//	/work?ms=N   burns N ms of CPU (at most 10000), then names the instance
//
// Every response carries the header X-Instance: NAME, and X-Proto: the
// request's protocol; HTTP/2 without TLS (h2c) is served beside HTTP/1.1.
// SIGTERM or SIGINT stops the server gracefully, waiting at most 10s for
// requests in flight.
//
// POST /echo with X-Request-Id: ID writes "seen ID" to standard error (the
// instance's log under shoal) before answering, so that the chaos benchmark
// can count how many times each POST reached an instance.
//
// GET /ws is a WebSocket that answers each message with "NAME: message".
//
// SIGUSR1 makes the instance hang for good, as a deadlocked process does:
// from then on no request gets an answer, health checks included, and SIGCONT
// changes nothing (shoal's tests and benchmarks of hung instances use it).
//
// /work?ms=N&wait=M waits M ms more (I/O) after the CPU. With --workers N at
// most N /work requests run at once and the rest queue: an instance with a
// fixed capacity, as the policy lab's replay needs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// shutdownTimeout bounds how long a stopping server waits for requests in flight.
const shutdownTimeout = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "demo-backend:", err)
		os.Exit(1)
	}
}

// run serves until ctx is done, then shuts down gracefully.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo-backend", flag.ContinueOnError)
	fs.SetOutput(stderr)
	workers := fs.Int("workers", 0, "serve at most N /work requests at once, queueing the rest (0: no limit)")
	listen := fs.String("listen", "", "address to listen on, host:port (required)")
	name := fs.String("name", "", "instance name for the page and the X-Instance header (default: the listen address)")
	healthStatus := fs.Int("health-status", http.StatusOK, "HTTP status /healthz answers (200-599)")
	failShare := fs.Float64("fail-share", 0, "answer this share of requests (0 to 1; not /healthz) with 500; POST /fail?share=S changes it")
	delay := fs.Duration("delay", 0, "answer every request (not /healthz) this much later; POST /slow?ms=N changes it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *healthStatus < 200 || *healthStatus > 599 {
		return fmt.Errorf("--health-status must be from 200 to 599, got %d", *healthStatus)
	}
	if !validShare(*failShare) {
		return fmt.Errorf("--fail-share must be from 0 to 1, got %g", *failShare)
	}
	if *delay < 0 || *delay > maxWork {
		return fmt.Errorf("--delay must be from 0 to %s, got %s", maxWork, *delay)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if *workers < 0 {
		return errors.New("--workers must be >= 0")
	}
	if *listen == "" {
		return errors.New("--listen is required")
	}
	if *name == "" {
		*name = *listen
	}

	log := slog.New(slog.NewTextHandler(stderr, nil)).With("instance", *name)

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{
		Handler:           newHandler(*name, *healthStatus),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		Protocols:         new(http.Protocols),
	}
	// HTTP/2 without TLS (h2c, with prior knowledge) beside HTTP/1.1, for
	// groups with proto: h2.
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	if *workers > 0 {
		srv.Handler = withWorkers(*workers, srv.Handler)
	}

	fails := &failures{}
	fails.set(*failShare)
	fails.delay = *delay
	srv.Handler = withFailures(fails, srv.Handler)
	srv.Handler = withEcho(srv.Handler, *name, stderr)
	srv.Handler = withWebSocket(srv.Handler, *name)
	srv.Handler = withHang(ctx, srv.Handler, log)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("serving", "addr", ln.Addr().String())

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}

	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}
