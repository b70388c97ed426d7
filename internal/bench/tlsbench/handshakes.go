package tlsbench

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/bench"
)

// handshakeLoad is a client that opens a TLS connection per request and
// controls session resumption itself. wrk cannot: with "Connection: close"
// it resumes some sessions and not others depending on how the server
// issues tickets (against HAProxy 2.6 with a tls-ticket-keys file, about
// half; with HAProxy's per-process key, all), so its handshakes/s compared
// servers' ticket handling with wrk's, not their TLS cost.
//
// Full: every handshake is a full one (no session cache), the CPU-heavy
// case (certificate signature, key exchange). Resumed: each worker keeps
// the newest ticket it was given and offers it on its next connection, as
// browsers and Go's client do.
type handshakeLoad struct {
	roots *x509.CertPool
}

func newHandshakeLoad(certFile string) (*handshakeLoad, error) {
	pem, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate", certFile)
	}
	return &handshakeLoad{roots: roots}, nil
}

// HandshakeSample is one run of handshakeLoad.
type HandshakeSample struct {
	bench.Sample
	// FirstError is the first failure seen, if any.
	FirstError string `json:"first_error,omitempty"`
	// Resumed is the share of handshakes that resumed a session, as the
	// client saw it (tls.ConnectionState.DidResume).
	Resumed float64 `json:"resumed_share"`
}

// run drives addr (host:port) with conns workers for d: each connects,
// handshakes (TLS 1.3, ALPN http/1.1), sends one GET with Connection:
// close and reads the response to its end.
func (h *handshakeLoad) run(ctx context.Context, addr string, conns int, d time.Duration, resume bool) (HandshakeSample, error) {
	end := time.Now().Add(d)
	ctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	// The dialer times out from the deadline itself, a moment before ctx
	// reports it: a failure at or after the end is the run's cut.
	over := func() bool { return ctx.Err() != nil || !time.Now().Before(end) }
	var (
		mu              sync.Mutex
		ok, failed, res int64
		firstErr        error
		lat             []float64
		wg              sync.WaitGroup
	)
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := &tls.Config{RootCAs: h.roots, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS13}
			if resume {
				cfg.ClientSessionCache = tls.NewLRUClientSessionCache(1)
			}
			var n, bad, r int64
			var mine []float64
			for !over() {
				start := time.Now()
				resumed, err := h.one(ctx, addr, cfg)
				if over() {
					break // cut by the end of the run, not a failure
				}
				if err != nil {
					bad++
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					continue
				}
				n++
				if resumed {
					r++
				}
				mine = append(mine, float64(time.Since(start))/float64(time.Millisecond))
			}
			mu.Lock()
			ok, failed, res = ok+n, failed+bad, res+r
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	s := HandshakeSample{Sample: bench.Sample{RPS: float64(ok) / d.Seconds(), Errors: failed}}
	if firstErr != nil {
		s.FirstError = firstErr.Error()
	}
	if ok > 0 {
		s.Resumed = float64(res) / float64(ok)
	}
	s.P50ms, s.P99ms = bench.Quantile(lat, 0.50), bench.Quantile(lat, 0.99)
	return s, nil
}

// one makes one connection and one request; it reports whether the
// handshake resumed a session.
func (h *handshakeLoad) one(ctx context.Context, addr string, cfg *tls.Config) (bool, error) {
	d := tls.Dialer{Config: cfg}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"); err != nil {
		return false, err
	}
	// Reading to the end also reads the tickets TLS 1.3 sends after the
	// handshake, so the cache holds one for the next connection.
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return false, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return c.(*tls.Conn).ConnectionState().DidResume, err
}

// hostPort is the host:port of an https URL made by the bench.
func hostPort(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", err
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		return "", fmt.Errorf("%s: %w", rawURL, err)
	}
	return u.Host, nil
}
