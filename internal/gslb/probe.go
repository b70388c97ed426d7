package gslb

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// maxBody bounds what a probe reads of an answer's body.
const maxBody = 1 << 20

// Probe is one health check: an HTTP(S) GET of URL, or a TCP connect to
// Addr when URL is empty. Both `shoal check` and the sites' monitors run it.
type Probe struct {
	URL string
	// Host, when set, is the request's Host header.
	Host string
	Addr string
	// Timeout bounds the whole check, the body included.
	Timeout time.Duration
}

// Result is what a probe saw.
type Result struct {
	// Elapsed is the time from the start of the check until the body was
	// read (or the connection made).
	Elapsed time.Duration
	// Proto, Status and Body are the HTTP answer's; Body is at most maxBody.
	Proto  string
	Status string
	Code   int
	Body   []byte
}

// Do runs the check once. It fails when no connection is made, no answer
// comes in Timeout or the answer is cut short; judging the answer is the
// caller's.
func (p Probe) Do(ctx context.Context) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	start := time.Now()
	if p.URL == "" {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", p.Addr)
		if err != nil {
			return Result{Elapsed: time.Since(start)}, fmt.Errorf("connect to %s: %w", p.Addr, err)
		}
		c.Close()
		return Result{Elapsed: time.Since(start)}, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL, nil)
	if err != nil {
		return Result{}, fmt.Errorf("check request: %w", err)
	}
	if p.Host != "" {
		req.Host = p.Host
	}
	req.Header.Set("User-Agent", "shoal-check")
	// A fresh connection each time, as gdnsd's checks: a reused one would
	// not notice a site that stopped accepting connections.
	client := &http.Client{
		Transport: &http.Transport{
			DisableKeepAlives: true,
			Proxy:             nil, // the site itself, whatever HTTP_PROXY says
			TLSClientConfig:   &tls.Config{MinVersion: tls.VersionTLS12},
		},
		// The answer checked is the site's own, not where it redirects.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		return Result{Elapsed: time.Since(start)}, err // a *url.Error: method, URL and cause
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	res := Result{Elapsed: time.Since(start), Proto: resp.Proto, Status: resp.Status, Code: resp.StatusCode, Body: body}
	if err != nil && !errors.Is(err, io.EOF) {
		return res, fmt.Errorf("GET %s: read the body: %w", p.URL, err)
	}
	return res, nil
}
