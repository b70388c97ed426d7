package gslb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/shoal-lb/shoal/internal/connlimit"
)

// backoff bounds how fast a failed listener is bound again: the wait
// doubles from min to max with each failure and falls back to min once the
// listener has served for healthy.
type backoff struct{ min, max, healthy time.Duration }

var defaultBackoff = backoff{min: 100 * time.Millisecond, max: 10 * time.Second, healthy: time.Minute}

// listener is one socket of a listen address (UDP or TCP) and the state
// its supervisor reports.
type listener struct {
	proto string // "udp" or "tcp"
	addr  string // host:port as bound, so that a restart takes the same port

	mu sync.Mutex
	pc net.PacketConn
	ln net.Listener

	up       atomic.Bool
	restarts atomic.Uint64
}

// bind opens the listener's socket again after a failure.
func (l *listener) bind() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var err error
	if l.proto == "udp" {
		l.pc, err = net.ListenPacket("udp", l.addr)
	} else {
		l.ln, err = net.Listen("tcp", l.addr)
	}
	if err != nil {
		return fmt.Errorf("gslb listen %s %s: %w", l.proto, l.addr, err)
	}
	return nil
}

// close closes the current socket; a server on it returns.
func (l *listener) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pc != nil {
		l.pc.Close()
	}
	if l.ln != nil {
		l.ln.Close()
	}
}

// tcpConns bound DNS over TCP: it needs no token, so one address must
// not be able to hold every connection (resolvers fall back to TCP for
// truncated answers, and a full listener would refuse them).
var tcpConns = connlimit.Limits{Max: 256, PerSource: 16}

func (l *listener) server(h dns.Handler, log *slog.Logger) *dns.Server {
	l.mu.Lock()
	defer l.mu.Unlock()
	srv := &dns.Server{PacketConn: l.pc, Handler: h}
	if l.ln != nil {
		srv.Listener = connlimit.New(l.ln, "gslb.listen tcp "+l.addr, tcpConns, log)
	}
	return srv
}

// supervise serves DNS on l until ctx ends, and binds and serves it again
// whenever its server returns, so that a dead socket costs the zone one
// listener for a back-off, not the rest of the process's life.
//
//	serving ──server returns──▶ down ──wait back-off──▶ binding
//	   ▲                                                  │  │
//	   └───────────────bound (event, restarts+1)──────────┘  │
//	                      down ◀──bind fails (back-off ×2)───┘
//
// Any state ──ctx ends──▶ stopped: the server is shut down and the socket
// closed.
func (s *Server) supervise(ctx context.Context, l *listener) {
	defer l.close()
	wait := s.backoff.min
	var failed error // why the listener went down, until it serves again
	var downSince time.Time
	for {
		srv := l.server(s, s.log)
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		done := make(chan error, 1)
		go func() { done <- srv.ActivateAndServe() }()
		select {
		case <-started:
			l.up.Store(true)
			if failed != nil {
				l.restarts.Add(1)
				reason := fmt.Sprintf("%s %s failed (%v) and serves again after %s", l.proto, l.addr, failed, time.Since(downSince).Round(time.Millisecond))
				s.log.Warn("gslb listener restarted", "proto", l.proto, "listen", l.addr, "down", time.Since(downSince).Round(time.Millisecond), "err", failed)
				if s.onRestart != nil {
					s.onRestart(l.proto+" "+l.addr, reason)
				}
				failed = nil
			}
		case err := <-done:
			done <- err
		}
		since := time.Now()
		var err error
		select {
		case <-ctx.Done():
			stop, stopped := context.WithTimeout(context.Background(), 5*time.Second)
			if e := srv.ShutdownContext(stop); e != nil && l.up.Load() {
				s.log.Warn("gslb dns server shutdown", "proto", l.proto, "listen", l.addr, "err", e)
			}
			stopped()
			l.close() // a server that never started holds the socket still
			<-done
			l.up.Store(false)
			return
		case err = <-done:
		}
		l.up.Store(false)
		l.close()
		if err == nil {
			err = errors.New("server returned")
		}
		if failed == nil {
			failed, downSince = err, time.Now()
		}
		s.log.Error("gslb listener down, binding it again", "proto", l.proto, "listen", l.addr, "err", err, "in", wait)
		if time.Since(since) >= s.backoff.healthy {
			wait = s.backoff.min
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(wait*2, s.backoff.max)
			if err := l.bind(); err != nil {
				s.log.Error("gslb listener not bound", "err", err, "retry_in", wait)
				continue
			}
			break
		}
	}
}
