package core

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shoal-lb/shoal/internal/accesslog"
)

// TestAccessLogLines: lines sent to a real reader's socket are counted by
// kind on /metrics.
func TestAccessLogLines(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "log.sock")
	r, err := accesslog.Open(accesslog.Options{Socket: sock, File: filepath.Join(dir, "access.log"), MaxSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, line := range []string{
		"1795424991.690 127.0.0.1:47712 web s1 200 0 1 2 3 569 0 ---- - GET /a",
		"1795424991.691 127.0.0.1:47713 web s1 200 0 1 2 3 569 0 ---- - GET /b",
		"127.0.0.1:34236 [28/Nov/2026:10:59:40.239] edge/1: Connection closed during SSL handshake",
		"garbage",
	} {
		if _, err := c.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); r.Stats().Lines < 4 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(accessLogLines{r})
	want := `# HELP shoal_access_log_lines_total ` + accessLogLinesHelp + `
# TYPE shoal_access_log_lines_total counter
shoal_access_log_lines_total{kind="malformed"} 1
shoal_access_log_lines_total{kind="notice"} 1
shoal_access_log_lines_total{kind="request"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "shoal_access_log_lines_total"); err != nil {
		t.Error(err)
	}
}
