package core

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy"
)

// recordingInstaller stands in for the TLS frontends' certificate store.
type recordingInstaller struct {
	mu    sync.Mutex
	names []string
}

func (r *recordingInstaller) Install(_ context.Context, name string, _, _ []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.names = append(r.names, name)
	return nil
}

func (r *recordingInstaller) installed() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.names...)
}

// TestACMERunner: the runner starts the manager only when a frontend has
// tls.acme (its challenge socket appears and a stored certificate is
// installed through the store), keeps it across a reload that changes
// nothing, refuses sections the manager cannot keep without stopping the
// running one, and stops it (the socket gone) when tls.acme goes away.
func TestACMERunner(t *testing.T) {
	state, err := os.MkdirTemp("/tmp", "acme-core-") // short: socket paths
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	// A CA that is down: only the stored certificate can be installed.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	directory := fmt.Sprintf("https://%s/dir", l.Addr())
	l.Close()
	// A stored certificate (for 127.0.0.1: due at once, and the CA is down).
	if err := os.MkdirAll(filepath.Join(state, "acme"), 0o700); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, _ := writeCert(t, t.TempDir())
	for from, to := range map[string]string{certFile: "a.test.crt", keyFile: "a.test.key"} {
		if err := os.Rename(from, filepath.Join(state, "acme", to)); err != nil {
			t.Fatal(err)
		}
	}

	withACME := func(domains ...string) *config.Config {
		return &config.Config{StateDir: state, Frontends: []config.Frontend{
			{Name: "plain", Bind: []string{"127.0.0.1:80"}},
			{Name: "shoal", Bind: []string{"127.0.0.1:443"}, TLS: &config.TLS{ACME: &config.ACME{Email: "ops@a.test", Directory: directory, Domains: domains}}},
		}}
	}
	sock := haproxy.ACMESocket(haproxy.PathsFor(state))
	in := &recordingInstaller{}
	r := newACMERunner(state, in, nil, slog.New(slog.DiscardHandler))
	t.Cleanup(r.close)

	if err := r.apply(&config.Config{StateDir: state, Frontends: withACME("a.test").Frontends[:1]}); err != nil || r.stop != nil {
		t.Fatalf("without tls.acme: running %t, err %v", r.stop != nil, err)
	}
	if err := r.apply(withACME("a.test")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the stored certificate installed", func() bool { return len(in.installed()) == 1 })
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("challenge socket: %v", err)
	}
	if err := r.apply(withACME("a.test")); err != nil {
		t.Fatal(err)
	}
	if err := r.apply(withACME("*.a.test")); err == nil || !strings.Contains(err.Error(), "tls.acme") {
		t.Errorf("wildcard: %v, want a tls.acme error", err)
	}
	// A restart would install the stored certificate again.
	time.Sleep(200 * time.Millisecond)
	if got := in.installed(); len(got) != 1 || got[0] != "a.test" || r.stop == nil {
		t.Errorf("installed %v, running %t; want [a.test] once: an unchanged or refused config must not restart the manager", got, r.stop != nil)
	}
	if err := r.apply(&config.Config{StateDir: state}); err != nil || r.stop != nil {
		t.Fatalf("tls.acme removed: running %t, err %v", r.stop != nil, err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("challenge socket after stop: %v, want it gone", err)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
