package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// idleFlood holds n connections from src to addr that never send a byte,
// each replaced by a new one every renew (so that none lives long enough for
// a header timeout), until ctx ends.
func idleFlood(ctx context.Context, wg *sync.WaitGroup, src, addr string, n int, renew time.Duration) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: time.Second}
	for i := range n {
		wg.Go(func() {
			// Spread the renewals over the period, as a steady flood does.
			start := time.NewTimer(renew * time.Duration(i) / time.Duration(n))
			defer start.Stop()
			select {
			case <-ctx.Done():
				return
			case <-start.C:
			}
			for ctx.Err() == nil {
				c, err := d.DialContext(ctx, "tcp", addr)
				t := time.NewTimer(renew)
				if err != nil {
					t.Reset(50 * time.Millisecond)
				}
				select {
				case <-ctx.Done():
				case <-t.C:
				}
				t.Stop()
				if c != nil {
					c.Close()
				}
			}
		})
	}
}

// openOf dials n connections from src to addr, holds them silent for
// settle, and returns how many the server has not closed.
func openOf(t *testing.T, src, addr string, n int, settle time.Duration) int {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			continue // refused: not open
		}
		conns = append(conns, c)
	}
	time.Sleep(settle)
	open := 0
	for _, c := range conns {
		// Open: what the server sent (a gRPC server's settings) is read,
		// then the read times out rather than ending.
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, err := io.Copy(io.Discard, c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			open++
		}
	}
	return open
}

// TestIdleConnectionsCannotLockOutTheOperator: 70 idle connections from
// 127.0.0.1 to the admin listener and 20 from each of four other loopback
// addresses, each renewed every 4 s, and as many to /metrics: the operator's
// requests with the token (GET /v1/status, the dashboard's login and page)
// are answered at once throughout, and so is a scrape; one address holds at
// most 16 connections.
func TestIdleConnectionsCannotLockOutTheOperator(t *testing.T) {
	parallel(t)
	const token = "flood-s3cret"
	port, mport := freePort(t), freePort(t)
	admin := fmt.Sprintf("127.0.0.1:%d", port)
	metrics := fmt.Sprintf("127.0.0.1:%d", mport)
	e := newEnv(t, fmt.Sprintf("admin:\n  listen: %s\n  token: %s\nmetrics:\n  listen: %s\n", admin, token, metrics), groupSpec{Name: "web", Min: 1, Max: 1})
	e.start()
	e.waitInService("web", 1)

	ctx, cancel := context.WithCancel(context.Background())
	var flood sync.WaitGroup
	defer func() {
		cancel()
		flood.Wait()
	}()
	for _, addr := range []string{admin, metrics} {
		idleFlood(ctx, &flood, "127.0.0.1", addr, 70, 4*time.Second)
		for _, src := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"} {
			idleFlood(ctx, &flood, src, addr, 20, 4*time.Second)
		}
	}
	time.Sleep(5 * time.Second) // every flood connection has been renewed once

	// Like the CLI, a new connection per request.
	operator := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(c *http.Client, rawURL, auth string) (int, string, time.Duration, error) {
		req, _ := http.NewRequest("GET", rawURL, nil)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		began := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			return 0, "", time.Since(began), err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(body), time.Since(began), err
	}
	var slowest time.Duration
	for i := range 16 { // 8 s: two renewals of the whole flood
		code, body, took, err := get(operator, "http://"+admin+"/v1/status", token)
		if err != nil || code != http.StatusOK || !strings.Contains(body, `"web"`) {
			t.Fatalf("operator's GET /v1/status %d during the flood: %d %v (after %s)\n%.200s", i+1, code, err, took, body)
		}
		code, body, took2, err := get(operator, "http://"+metrics+"/metrics", "")
		if err != nil || code != http.StatusOK || !strings.Contains(body, "shoal_") {
			t.Fatalf("scrape %d during the flood: %d %v (after %s)", i+1, code, err, took2)
		}
		slowest = max(slowest, took, took2)
		time.Sleep(500 * time.Millisecond)
	}
	if slowest > 2*time.Second {
		t.Errorf("the slowest answer during the flood took %s, want at once", slowest)
	}
	t.Logf("slowest GET /v1/status or /metrics during the flood: %s", slowest)

	// The dashboard: its login and its page, on new connections too.
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	browser := &http.Client{Timeout: 5 * time.Second, Jar: jar, Transport: &http.Transport{DisableKeepAlives: true}}
	base := "http://" + admin
	req, _ := http.NewRequest("POST", base+"/ui/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	resp, err := browser.Do(req)
	if err != nil {
		t.Fatalf("dashboard login during the flood: %v", err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "/ui/assets/") {
		t.Fatalf("dashboard page during the flood: %d\n%.300s", resp.StatusCode, page)
	}
	for _, asset := range []string{"/ui/assets/app.js"} {
		if code, _, _, err := get(browser, base+asset, ""); err != nil || code != http.StatusOK {
			t.Fatalf("dashboard %s during the flood: %d %v", asset, code, err)
		}
	}

	// One address cannot take more than its share, flood or not.
	check := func(when string, want func(int) bool) {
		t.Helper()
		for _, l := range []struct{ name, addr string }{{"the admin listener", admin}, {"/metrics", metrics}} {
			n := openOf(t, "127.0.0.9", l.addr, 40, 500*time.Millisecond)
			t.Logf("%s, 127.0.0.9 holds %d of 40 idle connections to %s", when, n, l.name)
			if !want(n) {
				t.Errorf("%s, 127.0.0.9 holds %d idle connections to %s, want at most 16 (16 when nothing else holds any)", when, n, l.name)
			}
		}
	}
	check("during the flood", func(n int) bool { return n <= 16 })
	cancel()
	flood.Wait()
	check("after the flood", func(n int) bool { return n == 16 })
	if !strings.Contains(e.log.String(), "listener full") {
		t.Errorf("shoal did not warn that its listeners were full:\n%s", e.log)
	}
}

// TestSacloudTCPListenerBounded: the sacloud/autoscaler gRPC frontend on
// TCP lets one address hold at most 32 connections and cuts one that never
// starts HTTP/2 after 5 s, while a client's health check is answered.
func TestSacloudTCPListenerBounded(t *testing.T) {
	parallel(t)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	e := newEnv(t, "compat:\n  sacloud_autoscaler:\n    listen: tcp:"+addr+"\n", groupSpec{Name: "web", Min: 1, Max: 1})
	e.start()

	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	began := time.Now()
	n := openOf(t, "127.0.0.9", addr, 40, 500*time.Millisecond)
	t.Logf("127.0.0.9 holds %d of 40 connections", n)
	if n > 32 {
		t.Errorf("127.0.0.9 holds %d idle connections to the gRPC frontend, want at most 32", n)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if hc, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health check over TCP: %v %v", hc, err)
	}
	_ = silent.SetReadDeadline(time.Now().Add(15 * time.Second))
	_, err = io.Copy(io.Discard, silent)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a connection that never started HTTP/2 was open after %s", time.Since(began).Round(time.Second))
	}
	t.Logf("a silent connection was cut after %s", time.Since(began).Round(100*time.Millisecond))
}
