package core

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/connlimit"
)

// adminLimits bound what clients of the TCP admin listener can hold.
type adminLimits struct {
	// readHeader cuts connections that send no complete request header
	// (including ones that never finish a TLS handshake); idle cuts
	// keep-alive connections between requests.
	readHeader, read, write, idle time.Duration
	// conns bound the connections served at once (see connlimit): in
	// all, per address, and kept for clients with the token.
	conns connlimit.Limits
}

// defaultAdminLimits leave write room for the longest job long-poll.
var defaultAdminLimits = adminLimits{
	readHeader: 5 * time.Second,
	read:       10 * time.Second,
	write:      api.MaxWait + 30*time.Second,
	idle:       60 * time.Second,
	conns:      connlimit.Limits{Max: 64, PerSource: 16, Reserve: 16, Probation: 2 * time.Second},
}

// listenAdmin opens the TCP admin listener for h: bounded in time and in
// connections (so that peers without the token cannot take them all), and
// speaking TLS when the config gives a certificate.
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
	cl := connlimit.New(l, "admin.listen", lim.conns, log)
	cl.Track(srv)
	l = cl
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
