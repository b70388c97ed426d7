package core

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/config"
)

// adminLimits bound what clients of the TCP admin listener can hold.
type adminLimits struct {
	// readHeader cuts connections that send no complete request header
	// (including ones that never finish a TLS handshake); idle cuts
	// keep-alive connections between requests.
	readHeader, read, write, idle time.Duration
	// maxConns is how many connections are served at once; more are closed
	// as soon as they are accepted.
	maxConns int
}

// defaultAdminLimits leave write room for the longest job long-poll.
var defaultAdminLimits = adminLimits{
	readHeader: 5 * time.Second,
	read:       10 * time.Second,
	write:      api.MaxWait + 30*time.Second,
	idle:       60 * time.Second,
	maxConns:   64,
}

// listenAdmin opens the TCP admin listener for h: bounded in time and in
// connections, and speaking TLS when the config gives a certificate.
func listenAdmin(a config.Admin, h http.Handler, log *slog.Logger, lim adminLimits) (*http.Server, net.Listener, error) {
	srv := &http.Server{
		// Failed handshakes and cut connections are routine on a network
		// port; they are worth a debug line, not a warning.
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		Handler:           h,
		ReadHeaderTimeout: lim.readHeader,
		ReadTimeout:       lim.read,
		WriteTimeout:      lim.write,
		IdleTimeout:       lim.idle,
		MaxHeaderBytes:    16 << 10,
	}
	l, err := net.Listen("tcp", a.Listen)
	if err != nil {
		return nil, nil, fmt.Errorf("admin.listen: %w", err)
	}
	l = &limitListener{Listener: l, max: lim.maxConns}
	if a.TLS != nil {
		cert, err := tls.LoadX509KeyPair(a.TLS.Cert, a.TLS.Key)
		if err != nil {
			l.Close()
			return nil, nil, fmt.Errorf("admin.tls: %w", err)
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		l = tls.NewListener(l, srv.TLSConfig)
	}
	return srv, l, nil
}

// limitListener closes connections accepted beyond max at once. Closing
// rather than leaving them in the backlog tells a client at once, and keeps
// a flood of idle connections from starving everyone else for good.
type limitListener struct {
	net.Listener
	max int

	mu sync.Mutex
	n  int
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		ok := l.n < l.max
		if ok {
			l.n++
		}
		l.mu.Unlock()
		if ok {
			return &countedConn{Conn: c, l: l}, nil
		}
		c.Close()
	}
}

type countedConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.n--
		c.l.mu.Unlock()
	})
	return err
}
