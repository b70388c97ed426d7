// Package connlimit bounds the connections a TCP listener serves, so that
// peers that never authenticate cannot take them all: the admin API (and
// its dashboard and webhooks), /metrics and the sacloud/autoscaler gRPC
// listener.
//
// A listener serves at most Max connections, at most PerSource of them
// from one address. A connection is idle while it has no request in
// progress (it sent nothing yet, or sits between requests), and
// authenticated once a request on it carried the token (Authorized). When
// a new connection finds its source or the listener full, the listener
// closes an idle unauthenticated connection to make room: from the
// address holding the most, oldest first (an authenticated one is never
// closed for a newcomer). So a flood of idle or slow connections, renewed
// as fast as they are cut, only ever displaces itself, and the operator's
// fresh connection, which sends its request at once, is served.
//
// Of Max, Reserve are kept for clients that authenticate: unauthenticated
// connections may hold Max-Reserve. Past that (when what they hold is busy
// and cannot be closed) a new connection is let in on probation: it must
// send its first request within Probation and that request must carry
// the token, or it is closed.
package connlimit

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// Limits bound a listener's connections.
type Limits struct {
	// Max is how many connections are served at once.
	Max int
	// PerSource is how many of them one remote address (an IPv6 /64) may
	// hold.
	PerSource int
	// Reserve is how many of Max only authenticated clients may take.
	Reserve int
	// Probation is how long a connection let into the reserve has to send
	// its first request.
	Probation time.Duration
}

// warnEvery bounds how often a listener under pressure says so.
const warnEvery = time.Minute

// Listener is a net.Listener that enforces Limits. Idle connections can be
// told apart (and closed to make room) only on an http.Server that Track
// was given; elsewhere every connection counts as busy, and the limits
// simply refuse what is over them.
type Listener struct {
	net.Listener
	name string
	lim  Limits
	log  *slog.Logger

	mu      sync.Mutex
	tracked bool
	conns   map[*Conn]struct{}
	bySrc   map[string]int
	unauth  int
	seq     uint64
	// Since the last warning: connections refused and idle ones closed.
	refused, evicted int
	warned           time.Time
}

// Conn is a connection the Listener accepted.
type Conn struct {
	net.Conn
	l   *Listener
	src string
	seq uint64

	// Guarded by l.mu.
	idle, authed, probation, gone bool
	timer                         *time.Timer
}

// New returns l bounded by lim; name names it in logs ("admin.listen").
func New(l net.Listener, name string, lim Limits, log *slog.Logger) *Listener {
	return &Listener{Listener: l, name: name, lim: lim, log: log, conns: map[*Conn]struct{}{}, bySrc: map[string]int{}}
}

// Track has srv report its connections' states to l (and carry them in
// its requests' contexts, for Authorized). Call it before srv serves l.
func (l *Listener) Track(srv *http.Server) {
	l.mu.Lock()
	l.tracked = true
	l.mu.Unlock()
	srv.ConnState = l.connState
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if gc := unwrap(c); gc != nil {
			return context.WithValue(ctx, connKey{}, gc)
		}
		return ctx
	}
}

type connKey struct{}

// Authorized records that the request of ctx carried the token: its
// connection is an authenticated client's from now on.
func Authorized(ctx context.Context) {
	c, _ := ctx.Value(connKey{}).(*Conn)
	if c == nil {
		return
	}
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.authed {
		return
	}
	c.authed, c.probation = true, false
	if c.timer != nil {
		c.timer.Stop()
	}
	if !c.gone {
		l.unauth--
	}
}

// Accept returns the next connection the limits let in; those over them
// are closed at once, which tells the peer sooner than a full backlog.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		gc, victims := l.admit(c, source(c.RemoteAddr()))
		for _, v := range victims {
			// The server's goroutine for v sees its connection fail and
			// closes it; v is already out of the counts.
			_ = v.Conn.Close()
		}
		if gc != nil {
			return gc, nil
		}
		_ = c.Close()
	}
}

// source is what PerSource counts by: the peer's IPv4 address, or the /64
// of its IPv6 address (one host or site usually has a whole /64).
func source(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	if ip4 := ta.IP.To4(); ip4 != nil {
		return ip4.String()
	}
	return ta.IP.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// admit counts c in, closing idle connections to make room, or reports
// nil when c must be refused.
func (l *Listener) admit(c net.Conn, src string) (*Conn, []*Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var victims []*Conn
	evict := func(ok func(*Conn) bool) {
		if v := l.victim(ok); v != nil {
			l.remove(v)
			victims = append(victims, v)
			l.evicted++
		}
	}
	if l.bySrc[src] >= l.lim.PerSource {
		evict(func(v *Conn) bool { return v.src == src })
	}
	if l.unauth >= l.lim.Max-l.lim.Reserve || len(l.conns) >= l.lim.Max {
		evict(func(*Conn) bool { return true })
	}
	if l.bySrc[src] >= l.lim.PerSource || len(l.conns) >= l.lim.Max {
		l.refused++
		l.warn()
		return nil, victims
	}
	l.seq++
	gc := &Conn{Conn: c, l: l, src: src, seq: l.seq, idle: l.tracked}
	if l.unauth >= l.lim.Max-l.lim.Reserve {
		gc.probation = true
		gc.timer = time.AfterFunc(l.lim.Probation, gc.expire)
	}
	l.conns[gc] = struct{}{}
	l.bySrc[src]++
	l.unauth++
	if len(victims) > 0 {
		l.warn()
	}
	return gc, victims
}

// victim picks the idle unauthenticated connection ok accepts that is
// best closed to make room: one of the address holding the most, then the
// oldest. Connections on probation have their own deadline and are left
// alone.
func (l *Listener) victim(ok func(*Conn) bool) *Conn {
	var best *Conn
	for c := range l.conns {
		if !c.idle || c.authed || c.probation || !ok(c) || pending(c.Conn) {
			continue
		}
		if best == nil || l.bySrc[c.src] > l.bySrc[best.src] || l.bySrc[c.src] == l.bySrc[best.src] && c.seq < best.seq {
			best = c
		}
	}
	return best
}

// pending reports whether c's peer sent bytes the server has yet to read:
// a request on its way in is not idle, even while a loaded machine has not
// yet run the server's read of it (an operator's connection was closed
// so, as a flood's renewals took its place). It peeks without the read
// lock a blocked server read holds.
func pending(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var n int
	var buf [1]byte
	_ = rc.Control(func(fd uintptr) {
		n, _, _ = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	})
	return n > 0
}

// remove takes c out of the counts; l.mu is held.
func (l *Listener) remove(c *Conn) {
	if c.gone {
		return
	}
	c.gone = true
	if c.timer != nil {
		c.timer.Stop()
	}
	delete(l.conns, c)
	if l.bySrc[c.src]--; l.bySrc[c.src] <= 0 {
		delete(l.bySrc, c.src)
	}
	if !c.authed {
		l.unauth--
	}
}

// warn logs, at most once per warnEvery, that the listener is under
// pressure; l.mu is held.
func (l *Listener) warn() {
	now := time.Now()
	if now.Sub(l.warned) < warnEvery {
		return
	}
	l.log.Warn("listener full: closing idle unauthenticated connections and refusing what is over the limits",
		"listener", l.name, "refused", l.refused, "closed_idle", l.evicted,
		"max", l.lim.Max, "per_source", l.lim.PerSource, "reserve", l.lim.Reserve)
	l.warned, l.refused, l.evicted = now, 0, 0
}

// Close takes the connection out of the counts and closes it. In that
// order: closing waits for the server's pending read to give up, and a
// client that sees the close may at once dial again.
func (c *Conn) Close() error {
	c.l.mu.Lock()
	c.l.remove(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// expire closes c if, on probation, it sent no request in time.
func (c *Conn) expire() {
	c.l.mu.Lock()
	late := c.probation && c.idle && !c.gone
	c.l.mu.Unlock()
	if late {
		_ = c.Close()
	}
}

func (l *Listener) connState(nc net.Conn, s http.ConnState) {
	c := unwrap(nc)
	if c == nil {
		return
	}
	l.mu.Lock()
	var cut bool
	switch s {
	case http.StateActive:
		c.idle = false
		if c.timer != nil {
			c.timer.Stop()
		}
	case http.StateIdle:
		c.idle = true
		// On probation, its one request did not carry the token.
		cut = c.probation && !c.gone
	case http.StateHijacked, http.StateClosed:
		l.remove(c)
	}
	l.mu.Unlock()
	if cut {
		_ = c.Close()
	}
}

// unwrap finds the Conn under a TLS connection.
func unwrap(c net.Conn) *Conn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	gc, _ := c.(*Conn)
	return gc
}
