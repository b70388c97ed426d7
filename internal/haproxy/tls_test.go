package haproxy

import (
	"context"
	"crypto/tls"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/shoal-lb/shoal/internal/certstore"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/testcert"
	"github.com/shoal-lb/shoal/internal/testdep"
)

// TestRenderTLS: what a TLS frontend's binds and rules are, and that
// HAProxy accepts them with the store's files.
func TestRenderTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t)
	cert, key := ca.Valid(t, "a.test").Write(t, dir, "a")
	cfg := testConfig(dir, "127.0.0.1:8080")
	fe := &cfg.Frontends[0]
	fe.Bind = []string{"127.0.0.1:8080", "[::1]:8443"}
	fe.TLS = &config.TLS{Certificates: []config.TLSFiles{{Cert: cert, Key: key}}, Bind: []string{"[::1]:8443"},
		ALPN: []string{"h2", "http/1.1"}, MinVersion: "1.3", RedirectHTTP: true, TicketKeys: config.TicketKeysOff}
	got, err := Render(cfg, PathsFor(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"    bind 127.0.0.1:8080\n",
		"    bind [::1]:8443 ssl crt-list " + certstore.CrtList(dir, "shoal") + " alpn h2,http/1.1 ssl-min-ver TLSv1.3 no-tls-tickets\n",
		"    http-request set-header X-Forwarded-Proto https if { ssl_fc }\n",
		"    http-request redirect scheme https code 301 if !{ ssl_fc } !{ path_beg /.well-known/acme-challenge/ }\n",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("config lacks %q:\n%s", w, got)
		}
	}
	if strings.Contains(got, "X-Forwarded-Proto http\n") {
		t.Errorf("a TLS frontend says X-Forwarded-Proto http unconditionally:\n%s", got)
	}

	// Every bind TLS: the scheme without a condition, and no redirect.
	allTLS := *fe
	allTLS.TLS = &config.TLS{RedirectHTTP: true}
	if got := protoLines(allTLS); len(got) != 1 || got[0] != "http-request set-header X-Forwarded-Proto https" {
		t.Errorf("a frontend whose binds all speak TLS: %q, want one unconditional X-Forwarded-Proto https", got)
	}
	if got := tlsLines(allTLS); len(got) != 0 {
		t.Errorf("a frontend whose binds all speak TLS: %q, want no redirect", got)
	}

	tcp := *fe
	tcp.Mode = config.ModeTCP
	if opts, err := tlsBind(dir, tcp); err != nil || strings.Contains(opts, "alpn") {
		t.Errorf("a tcp frontend's TLS bind: %q, %v; want no alpn", opts, err)
	}

	bad := *fe.TLS
	bad.Bind = []string{"127.0.0.1:9999"}
	fe.TLS = &bad
	if _, err := Render(cfg, PathsFor(dir)); err == nil || !strings.Contains(err.Error(), `tls.bind "127.0.0.1:9999"`) {
		t.Errorf("tls.bind not among the binds: %v", err)
	}

	bin := testdep.Command(t, "haproxy", "haproxy")
	fe.TLS.Bind = []string{"[::1]:8443"}
	if err := certstore.New(dir, nil, nil).Write(cfg.Frontends); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "haproxy.cfg")
	writeFile(t, path, got)
	if out, err := exec.Command(bin, "-c", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
}

// tlsEnv is a Manager whose frontend has a plain and a TLS bind, the
// certificates of a.test and b.test, and one backend that echoes what
// HAProxy told it.
type tlsEnv struct {
	m                 *Manager
	cfg               *config.Config
	store             *certstore.Store
	ca                *testcert.CA
	dir               string
	plain, secure     string
	serialA, serialB  *big.Int
	forwardedProtocol chan string
}

func startTLS(t *testing.T) *tlsEnv {
	t.Helper()
	requireHAProxy(t)
	ctx := context.Background()
	stateDir, dir := t.TempDir(), t.TempDir()
	cleanupHAProxy(t, stateDir)
	e := &tlsEnv{ca: testcert.NewCA(t), dir: dir, forwardedProtocol: make(chan string, 100)}
	e.plain, e.secure = "127.0.0.1:"+strconv.Itoa(freePort(t)), "127.0.0.1:"+strconv.Itoa(freePort(t))
	la, lb := e.ca.Valid(t, "a.test"), e.ca.Valid(t, "b.test")
	e.serialA, e.serialB = la.Serial, lb.Serial
	ac, ak := la.Write(t, dir, "a")
	bc, bk := lb.Write(t, dir, "b")
	e.cfg = testConfig(stateDir, e.plain)
	fe := &e.cfg.Frontends[0]
	fe.Bind = []string{e.plain, e.secure}
	fe.TLS = &config.TLS{Certificates: []config.TLSFiles{{Cert: ac, Key: ak}, {Cert: bc, Key: bk}}, Bind: []string{e.secure},
		ALPN: []string{"h2", "http/1.1"}, MinVersion: "1.2", RedirectHTTP: true, TicketKeys: config.TicketKeysRotate}

	e.m = newTestManager(t, e.cfg)
	e.store = certstore.New(stateDir, e.m, testLogger(t))
	if err := e.store.Write(e.cfg.Frontends); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case e.forwardedProtocol <- r.Header.Get("X-Forwarded-Proto") + " " + r.Proto:
		default:
		}
		io.WriteString(w, "ok")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	health := e.cfg.Groups[0].Health
	if err := e.m.AddServer(ctx, Server{Backend: "web", Name: "s1", Addr: ln.Addr().String(), Health: health}, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "s1 in service", func() (bool, string) {
		resp, err := e.client(nil).Get("https://" + e.secure + "/")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == 200, resp.Status
	})
	return e
}

// client is an HTTP/1.1 client that trusts the test CA and sends SNI a.test.
func (e *tlsEnv) client(check func(*http.Request, []*http.Request) error) *http.Client {
	return &http.Client{
		Timeout:       5 * time.Second,
		CheckRedirect: check,
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{ServerName: "a.test", RootCAs: e.ca.Pool}, DisableKeepAlives: true},
	}
}

func (e *tlsEnv) serial(t *testing.T, name string) *big.Int {
	t.Helper()
	conn, err := tls.Dial("tcp", e.secure, &tls.Config{ServerName: name, RootCAs: e.ca.Pool})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

// TestTLSFrontend: through the configuration shoal renders, SNI picks each
// name's certificate, ALPN gives HTTP/2 to clients that ask (HTTP/1.1 to the
// instance), below the minimum version fails, plain HTTP is redirected to
// https but ACME's challenges, and the instance is told the scheme.
func TestTLSFrontend(t *testing.T) {
	t.Parallel() // its own HAProxy, state dir and ports
	e := startTLS(t)
	if got := e.serial(t, "a.test"); got.Cmp(e.serialA) != 0 {
		t.Errorf("a.test: serial %x, want %x", got, e.serialA)
	}
	if got := e.serial(t, "b.test"); got.Cmp(e.serialB) != 0 {
		t.Errorf("b.test: serial %x, want %x", got, e.serialB)
	}

	h2 := &http.Client{Timeout: 5 * time.Second, Transport: &http2.Transport{TLSClientConfig: &tls.Config{ServerName: "b.test", RootCAs: e.ca.Pool}}}
	resp, err := h2.Get("https://" + e.secure + "/")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
		t.Errorf("h2 client: %s %s", resp.Proto, resp.Status)
	}
	if got := lastForwarded(e); got != "https HTTP/1.1" {
		t.Errorf("the instance saw %q, want X-Forwarded-Proto https over HTTP/1.1", got)
	}
	for _, proto := range []string{"h2", "http/1.1"} {
		conn, err := tls.Dial("tcp", e.secure, &tls.Config{ServerName: "a.test", RootCAs: e.ca.Pool, NextProtos: []string{proto}})
		if err != nil {
			t.Fatal(err)
		}
		if got := conn.ConnectionState().NegotiatedProtocol; got != proto {
			t.Errorf("ALPN %s: negotiated %q", proto, got)
		}
		conn.Close()
	}
	if conn, err := tls.Dial("tcp", e.secure, &tls.Config{ServerName: "a.test", RootCAs: e.ca.Pool, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}); err == nil {
		conn.Close()
		t.Error("a TLS 1.1 client got through min_version 1.2")
	}

	noFollow := e.client(func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse })
	resp, err = noFollow.Get("http://" + e.plain + "/page?x=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != 301 || loc != "https://"+e.plain+"/page?x=1" {
		t.Errorf("plain http: %s, Location %q; want 301 to https", resp.Status, loc)
	}
	resp, err = noFollow.Get("http://" + e.plain + "/.well-known/acme-challenge/token")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("ACME challenge over http: %s, want it passed on (200)", resp.Status)
	}
	if got := lastForwarded(e); got != "http HTTP/1.1" {
		t.Errorf("the instance saw %q for plain http, want X-Forwarded-Proto http", got)
	}
}

func lastForwarded(e *tlsEnv) string {
	var last string
	for {
		select {
		case last = <-e.forwardedProtocol:
		default:
			return last
		}
	}
}

// TestTLSCertificateOnlyReload: a config whose only change is a
// certificate's content does not reload HAProxy; the store serves it at
// once over the Runtime API.
func TestTLSCertificateOnlyReload(t *testing.T) {
	e := startTLS(t)
	ctx := context.Background()
	pid := e.m.PID()
	leaf := e.ca.Valid(t, "a.test")
	cert, key := leaf.Write(t, e.dir, "a") // the same files, new content
	cfg := *e.cfg
	cfg.Frontends = []config.Frontend{e.cfg.Frontends[0]}
	tlsCfg := *cfg.Frontends[0].TLS
	tlsCfg.Certificates = []config.TLSFiles{{Cert: cert, Key: key}, tlsCfg.Certificates[1]}
	cfg.Frontends[0].TLS = &tlsCfg
	if err := e.store.Write(cfg.Frontends); err != nil {
		t.Fatal(err)
	}
	reloaded, err := e.m.Reload(ctx, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if reloaded {
		t.Error("HAProxy was reloaded for a certificate's content")
	}
	if err := e.store.Push(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.serial(t, "a.test"); got.Cmp(leaf.Serial) != 0 {
		t.Errorf("a.test serves %x, want the new %x", got, leaf.Serial)
	}
	if got := e.serial(t, "b.test"); got.Cmp(e.serialB) != 0 {
		t.Errorf("b.test serves %x, want it untouched (%x)", got, e.serialB)
	}
	if e.m.PID() != pid {
		t.Errorf("master pid %d → %d", pid, e.m.PID())
	}
	// A restart reads the same files.
	if b, err := os.ReadFile(filepath.Join(certstore.Dir(e.cfg.StateDir), "shoal", "default.pem")); err != nil || !strings.Contains(string(b), strings.TrimSpace(string(leaf.KeyPEM))[:40]) {
		t.Errorf("default.pem does not hold the new key (%v)", err)
	}
}
