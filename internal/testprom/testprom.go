// Package testprom runs a real Prometheus server for tests: Debian's
// prometheus (make test-deps installs it), on a free port of 127.0.0.1, with
// its config and storage in the test's temporary directory, scraping the
// targets the test gives. Stop and Start again keep the port and the
// history, as a Prometheus restarted in production does.
package testprom

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/testdep"
	"github.com/shoal-lb/shoal/internal/testport"
)

// Server is one Prometheus.
type Server struct {
	// URL is http://127.0.0.1:PORT.
	URL  string
	bin  string
	addr string
	dir  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	out    lockedBuffer
}

// lockedBuffer is the server's output, written by exec's copying goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Start runs Prometheus scraping targets (host:port of /metrics) every
// scrape; it is stopped when t ends.
func Start(t testing.TB, targets []string, scrape time.Duration) *Server {
	t.Helper()
	bin := testdep.Command(t, "prometheus", "prometheus")
	dir := t.TempDir()
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = fmt.Sprintf("%q", tg)
	}
	conf := fmt.Sprintf(`global:
  scrape_interval: %s
  evaluation_interval: %s
scrape_configs:
  - job_name: test
    static_configs:
      - targets: [%s]
`, scrape, scrape, strings.Join(quoted, ", "))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &Server{bin: bin, dir: dir}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("prometheus output (last 4 KiB):\n%s", tail(s.out.String(), 4096))
		}
	})
	// A port found free may be taken before Prometheus binds it: try again.
	for attempt := 0; ; attempt++ {
		s.addr = fmt.Sprintf("127.0.0.1:%d", testport.Free(t))
		s.URL = "http://" + s.addr
		err := s.Start()
		if err == nil {
			return s
		}
		if attempt == 2 {
			t.Fatalf("prometheus: %v", err)
		}
	}
}

// Start starts the stopped server again, on its port and with its history.
func (s *Server) Start() error {
	s.mu.Lock()
	cmd := exec.Command(s.bin,
		"--config.file="+filepath.Join(s.dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(s.dir, "data"),
		"--web.listen-address="+s.addr,
		"--log.level=warn")
	cmd.Stdout, cmd.Stderr = &s.out, &s.out
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return err
	}
	exited := make(chan struct{})
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("prometheus exited at start: %s", tail(s.output(), 2048))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/-/ready", nil)
		resp, err := http.DefaultClient.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.Stop()
	return fmt.Errorf("prometheus not ready within 30s: %s", tail(s.output(), 2048))
}

// Stop stops the server and waits for it to exit.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

func (s *Server) output() string { return s.out.String() }

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// Exporter serves /metrics with gauges a test sets, for Prometheus to
// scrape: the outside metric (a job queue's length, say) a source reads.
type Exporter struct {
	// Addr is its host:port, a scrape target.
	Addr string

	mu     sync.Mutex
	gauges map[string]float64 // by series, such as `jobs_queued` or `load{who="a"}`
}

// NewExporter serves an exporter on a free port of 127.0.0.1 until t ends.
func NewExporter(t testing.TB) *Exporter {
	t.Helper()
	e := &Exporter{gauges: map[string]float64{}}
	var srv *http.Server
	for attempt := 0; ; attempt++ {
		e.Addr = fmt.Sprintf("127.0.0.1:%d", testport.Free(t))
		ln, err := net.Listen("tcp", e.Addr)
		if err != nil {
			if attempt == 2 {
				t.Fatal(err)
			}
			continue
		}
		srv = &http.Server{Handler: e, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		break
	}
	t.Cleanup(func() { _ = srv.Close() })
	return e
}

// Set sets series (a metric name, with labels if any) to v.
func (e *Exporter) Set(series string, v float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.gauges[series] = v
}

func (e *Exporter) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	for _, k := range slices.Sorted(maps.Keys(e.gauges)) {
		fmt.Fprintf(w, "%s %s\n", k, strconv.FormatFloat(e.gauges[k], 'f', -1, 64))
	}
}
