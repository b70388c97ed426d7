package core

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
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
	writeSelfSigned(t, filepath.Join(state, "acme"), "a.test")

	withACME := func(domains ...string) *config.Config {
		return &config.Config{StateDir: state, Frontends: []config.Frontend{
			{Name: "plain", Bind: []string{"127.0.0.1:80"}},
			{Name: "shoal", Bind: []string{"127.0.0.1:443"}, TLS: &config.TLS{ACME: &config.ACME{Email: "ops@a.test", Directory: directory, Domains: domains}}},
		}}
	}
	sock := haproxy.ACMESocket(haproxy.PathsFor(state))
	in := &recordingInstaller{}
	r := newACMERunner(state, in, slog.New(slog.DiscardHandler))
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

// writeSelfSigned stores a certificate for name, valid for a day, where the
// ACME manager keeps them.
func writeSelfSigned(t *testing.T, dir, name string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for file, blk := range map[string]*pem.Block{
		name + ".crt": {Type: "CERTIFICATE", Bytes: der},
		name + ".key": {Type: "PRIVATE KEY", Bytes: kder},
	} {
		if err := os.WriteFile(filepath.Join(dir, file), pem.EncodeToMemory(blk), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
