package core

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/testbin"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/connlimit"
)

// writeCert writes a self-signed certificate for 127.0.0.1 and its key.
func writeCert(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "shoal test"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// startAdmin serves the real API handler (no job manager: /healthz needs
// none) on a real TCP listener with lim, and stops it when the test ends.
func startAdmin(t *testing.T, a config.Admin, lim adminLimits) (addr string, log *testbin.Buffer) {
	t.Helper()
	log = &testbin.Buffer{}
	h := api.NewHandler(nil, nil, slog.New(slog.NewTextHandler(log, nil)), a.Token)
	srv, l, err := listenAdmin(a, h, slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug})), lim)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return l.Addr().String(), log
}

// closedWithin reports whether the server closes c within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func TestAdminListenerTLSAndAuth(t *testing.T) {
	certFile, keyFile, pool := writeCert(t, t.TempDir())
	lim := defaultAdminLimits
	addr, log := startAdmin(t, config.Admin{Listen: "127.0.0.1:0", Token: "s3cret", TLS: &config.TLSFiles{Cert: certFile, Key: keyFile}}, lim)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
	get := func(token string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", "https://"+addr+"/healthz", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get("s3cret"); code != 200 {
		t.Fatalf("HTTPS with the token: %d, want 200", code)
	}
	// Plain HTTP to the TLS port is refused, never answered in clear text.
	if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plain HTTP was served on the TLS listener")
		}
	}

	for i := range 10 {
		if code := get("wrong"); code != 401 {
			t.Fatalf("wrong token #%d: %d, want 401", i+1, code)
		}
	}
	// After 10 failures in a minute even the right token is not checked.
	if code := get("s3cret"); code != 429 {
		t.Fatalf("right token after 10 failures: %d, want 429", code)
	}
	out := log.String()
	if !strings.Contains(out, "api authentication failed") || !strings.Contains(out, "remote=127.0.0.1:") || !strings.Contains(out, "failures limited") {
		t.Fatalf("auth failures not logged with the remote address:\n%s", out)
	}
	if n := strings.Count(out, "api authentication failed"); n != 10 {
		t.Fatalf("%d failure lines logged, want 10", n)
	}
}

func TestAdminListenerCutsSlowAndIdleConnections(t *testing.T) {
	lim := adminLimits{readHeader: 300 * time.Millisecond, read: time.Second, write: 5 * time.Second, idle: 500 * time.Millisecond,
		conns: connlimit.Limits{Max: 8, PerSource: 8, Reserve: 2, Probation: time.Second}}
	addr, _ := startAdmin(t, config.Admin{Listen: "127.0.0.1:0", Token: "s3cret"}, lim)

	// Silent: never sends a byte.
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// Slowloris: starts a header and never finishes it.
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if _, err := io.WriteString(slow, "GET /healthz HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if !closedWithin(silent, 10*time.Second) || !closedWithin(slow, 10*time.Second) {
		t.Fatal("a silent or slow connection was not cut")
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Fatalf("slow connections cut after %s, want about the 300ms header timeout", d)
	}

	// Idle keep-alive: one request, then nothing.
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if _, err := io.WriteString(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("request on the idle connection: %v %v", resp, err)
	}
	resp.Body.Close()
	if !closedWithin(idle, 10*time.Second) {
		t.Fatal("an idle keep-alive connection was not cut")
	}
}

// TestAdminListenerConnectionCap: connections that never send a request,
// from one address, cannot hold more than its share, and cannot keep out a
// client with the token: each new connection displaces the oldest idle one
// without the token, and a connection that proved the token is not cut to
// make room.
func TestAdminListenerConnectionCap(t *testing.T) {
	lim := adminLimits{readHeader: 30 * time.Second, read: 30 * time.Second, write: 30 * time.Second, idle: 30 * time.Second,
		conns: connlimit.Limits{Max: 6, PerSource: 3, Reserve: 2, Probation: 2 * time.Second}}
	addr, _ := startAdmin(t, config.Admin{Listen: "127.0.0.1:0", Token: "s3cret"}, lim)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	dial := func(src string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		return c
	}
	get := func(c net.Conn, token string) int {
		t.Helper()
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+token+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("request: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// An operator's keep-alive connection from 127.0.0.1.
	op := dial("127.0.0.1")
	if code := get(op, "s3cret"); code != 200 {
		t.Fatalf("the operator's request: %d", code)
	}
	// Five silent connections from 127.0.0.2: its first two are cut.
	var flood []net.Conn
	for range 5 {
		flood = append(flood, dial("127.0.0.2"))
	}
	for i, c := range flood {
		if cut := closedWithin(c, 300*time.Millisecond); cut != (i < 2) {
			t.Errorf("flood connection %d: cut %v, want %v (3 per address)", i+1, cut, i < 2)
		}
	}
	// Without the token, connections hold at most 4 (6 less a reserve of
	// 2): 127.0.0.3's second displaces the oldest of 127.0.0.2, the address
	// that holds the most.
	other := []net.Conn{dial("127.0.0.3"), dial("127.0.0.3")}
	if !closedWithin(flood[2], 2*time.Second) {
		t.Error("the oldest idle connection of 127.0.0.2 was left open")
	}
	// A new client is served at once: 127.0.0.2 and .3 hold two each, and
	// the oldest of them made room.
	late := dial("127.0.0.4")
	if code := get(late, "s3cret"); code != 200 {
		t.Fatalf("a new client's request: %d", code)
	}
	if !closedWithin(flood[3], 2*time.Second) {
		t.Error("the oldest idle connection was left open")
	}
	// The operator's idle connection was not cut: it carries another request.
	if code := get(op, "s3cret"); code != 200 {
		t.Fatalf("the operator's second request: %d", code)
	}
	if closedWithin(other[0], 100*time.Millisecond) {
		t.Error("127.0.0.3's connection was cut while 127.0.0.2 held more")
	}
}
