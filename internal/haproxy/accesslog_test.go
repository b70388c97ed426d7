package haproxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/accesslog"
	"github.com/shoal-lb/shoal/internal/config"
)

// TestAccessLogAndSlowClients runs real HAProxy with the access log read by
// an accesslog.Reader: requests reach access.log and subscribers parsed, the
// instance sees X-Forwarded-For/-Proto, and a client sending its headers
// slower than timeout http-request is cut off with 408 while others are served.
func TestAccessLogAndSlowClients(t *testing.T) {
	requireHAProxy(t)
	ctx := context.Background()
	stateDir := t.TempDir()
	cleanupHAProxy(t, stateDir)
	port := freePort(t)
	cfg := testConfig(stateDir, "127.0.0.1:"+strconv.Itoa(port))
	cfg.AccessLog = config.AccessLog{Sample: 1}
	const httpRequest = 500 * time.Millisecond
	cfg.HAProxy.Timeouts.HTTPRequest = httpRequest

	logFile := filepath.Join(stateDir, "logs", "access.log")
	r, err := accesslog.Open(accesslog.Options{Socket: PathsFor(stateDir).LogSocket, File: logFile, MaxSize: 1 << 20, MaxFiles: 2, SampleRate: 1})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stopReader := context.WithCancel(ctx)
	readerDone := make(chan error, 1)
	go func() { readerDone <- r.Run(rctx) }()
	t.Cleanup(func() {
		stopReader()
		if err := <-readerDone; err != nil {
			t.Errorf("reader: %v", err)
		}
	})
	entries, unsubscribe := r.Subscribe(100)
	defer unsubscribe()

	startForwardEcho(ctx, t, cfg)

	// A slow client starts sending its headers one byte at a time.
	slow := make(chan string, 1)
	go func() {
		c, err := net.Dial("tcp", cfg.Listen)
		if err != nil {
			slow <- err.Error()
			return
		}
		defer c.Close()
		go func() {
			for _, b := range []byte("GET /slow HTTP/1.1\r\nHost: localhost\r\nX-Padding: aaaaaaaaaaaaaaaa\r\n\r\n") {
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		status, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			status = err.Error()
		}
		slow <- strings.TrimSpace(status)
	}()

	// Meanwhile other clients are served, with a spoofed X-Forwarded-For
	// replaced by the address HAProxy saw.
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	const normal = 10
	var wg sync.WaitGroup
	errs := make(chan error, normal)
	for i := range normal {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 50 * time.Millisecond)
			req, _ := http.NewRequest("GET", fmt.Sprintf("http://%s/fwd?i=%d", cfg.Listen, i), nil)
			req.Header.Set("X-Forwarded-For", "6.6.6.6")
			req.Header.Set("X-Forwarded-Proto", "https")
			resp, err := client.Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || string(body) != "127.0.0.1|http" {
				errs <- fmt.Errorf("request %d: status %d, instance saw %q, want 127.0.0.1|http", i, resp.StatusCode, body)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	start := time.Now()
	if got := <-slow; !strings.HasPrefix(got, "HTTP/1.1 408") {
		t.Errorf("slow client got %q, want HTTP/1.1 408", got)
	}
	t.Logf("slow client cut off %v after the normal requests ended", time.Since(start))

	// Every request is in the log, parsed.
	var fwd []accesslog.Entry
	var slowEntry *accesslog.Entry
	deadline := time.After(5 * time.Second)
	for len(fwd) < normal || slowEntry == nil {
		select {
		case e := <-entries:
			if strings.HasPrefix(e.URI, "/fwd?") {
				fwd = append(fwd, e)
			} else {
				slowEntry = &e
			}
		case <-deadline:
			t.Fatalf("log entries: %d of %d normal, slow %v; reader %+v", len(fwd), normal, slowEntry, r.Stats())
		}
	}
	for _, e := range fwd {
		if e.Backend != "web" || e.Server != "app" || e.Status != 200 || e.Method != "GET" || e.Termination != "----" ||
			!strings.HasPrefix(e.Client, "127.0.0.1:") || e.Tw < 0 || e.Tc < 0 || e.Tr < 0 || e.Ta < e.Tr || e.Bytes <= 0 ||
			e.Retries != 0 || e.SampleRate != 1 || time.Since(e.Time) > time.Minute || time.Since(e.Time) < 0 {
			t.Errorf("entry %+v", e)
		}
	}
	t.Logf("slow client's entry: %+v", *slowEntry)
	if e := slowEntry; e.Status != 408 || !strings.HasPrefix(e.Termination, "cR") || e.Server != "<NOSRV>" || e.Ta < httpRequest {
		t.Errorf("slow client's entry %+v, want 408 cR-- after %v", *e, httpRequest)
	}
	if s := r.Stats(); s.Malformed != 0 || s.Lines != normal+1 {
		t.Errorf("reader stats %+v, want %d lines, none malformed", s, normal+1)
	}
	waitFor(t, 5*time.Second, "access.log", func() (bool, string) {
		b, _ := os.ReadFile(logFile)
		return strings.Count(string(b), "\n") == normal+1 && strings.Contains(string(b), " GET /fwd?i=3\n"), string(b)
	})
}
