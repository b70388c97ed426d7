package certstore_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/certstore"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/testcert"
	"github.com/shoal-lb/shoal/internal/testdep"
)

// runtime sends the store's commands to HAProxy's stats socket.
type runtime struct{ c *haproxy.Client }

func (r runtime) Runtime(ctx context.Context, cmd, payload string) (string, error) {
	if payload == "" {
		return r.c.Exec(ctx, cmd)
	}
	return r.c.ExecPayload(ctx, cmd, payload)
}

// env is an HAProxy serving one TLS frontend "web" from a store's files,
// configured by hand (what shoal renders is tested in internal/haproxy).
type env struct {
	ca       *testcert.CA
	dir      string // where the test writes certificates
	stateDir string
	store    *certstore.Store
	addr     string
	fe       config.Frontend
}

func requireHAProxy(t *testing.T) {
	t.Helper()
	testdep.Command(t, "haproxy", "haproxy")
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// newEnv writes the store for fe's TLS section and starts HAProxy on it.
func newEnv(t *testing.T, ca *testcert.CA, dir string, tlsCfg *config.TLS) *env {
	t.Helper()
	requireHAProxy(t)
	e := &env{ca: ca, dir: dir, stateDir: t.TempDir(), addr: freeAddr(t)}
	e.fe = config.Frontend{Name: "web", Bind: []string{e.addr}, TLS: tlsCfg}
	sock := filepath.Join(e.stateDir, "admin.sock")
	e.store = certstore.New(e.stateDir, runtime{&haproxy.Client{Socket: sock}}, nil)
	if err := e.store.Write([]config.Frontend{e.fe}); err != nil {
		t.Fatal(err)
	}
	cfgText := fmt.Sprintf(`global
    stats socket %s mode 600 level admin
defaults
    mode http
    timeout connect 5s
    timeout client 5s
    timeout server 5s
frontend web
    bind %s ssl crt-list %s alpn h2,http/1.1 ssl-min-ver TLSv1.2 tls-ticket-keys %s
    http-request return status 200 content-type text/plain string ok
`, sock, e.addr, certstore.CrtList(e.stateDir, "web"), certstore.TicketKeys(e.stateDir, "web"))
	cfgFile := filepath.Join(e.stateDir, "haproxy.cfg")
	if err := os.WriteFile(cfgFile, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd := exec.Command("haproxy", "-f", cfgFile)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("haproxy:\n%s", out.String())
		}
	})
	// Both the frontend and the stats socket: HAProxy may bind one first.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", e.addr); err == nil {
			c.Close()
			if s, err := net.Dial("unix", sock); err == nil {
				s.Close()
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("haproxy did not listen on %s and %s: %s", e.addr, sock, out.String())
		}
	}
	return e
}

// files writes a certificate for names as dir/NAME.crt and .key.
func (e *env) files(t *testing.T, name string, names ...string) (config.TLSFiles, *big.Int) {
	t.Helper()
	leaf := e.ca.Valid(t, names...)
	cert, key := leaf.Write(t, e.dir, name)
	return config.TLSFiles{Cert: cert, Key: key}, leaf.Serial
}

// served returns the serial of the certificate HAProxy serves for SNI name
// on a new connection; the default's may not be for name, so it is not
// verified.
func (e *env) served(t *testing.T, name string) *big.Int {
	t.Helper()
	conn, err := tls.Dial("tcp", e.addr, &tls.Config{ServerName: name, InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("TLS to %s as %s: %v", e.addr, name, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

func (e *env) apply(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.store.Write([]config.Frontend{e.fe}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Push(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSNI: each of two names gets its certificate; a name neither has gets
// the first (the default).
func TestSNI(t *testing.T) {
	ca, dir := testcert.NewCA(t), t.TempDir()
	e := &env{ca: ca, dir: dir}
	a, aSerial := e.files(t, "a", "a.test")
	b, bSerial := e.files(t, "b", "b.test")
	e = newEnv(t, ca, dir, &config.TLS{Certificates: []config.TLSFiles{a, b}, TicketKeys: config.TicketKeysRotate})
	if got := e.served(t, "a.test"); got.Cmp(aSerial) != 0 {
		t.Errorf("a.test: serial %x, want %x", got, aSerial)
	}
	if got := e.served(t, "b.test"); got.Cmp(bSerial) != 0 {
		t.Errorf("b.test: serial %x, want %x", got, bSerial)
	}
	if got := e.served(t, "other.test"); got.Cmp(aSerial) != 0 {
		t.Errorf("other.test: serial %x, want the default's %x", got, aSerial)
	}

	for _, f := range []string{certstore.CrtList(e.stateDir, "web"), filepath.Join(certstore.Dir(e.stateDir), "web", "default.pem"), certstore.TicketKeys(e.stateDir, "web")} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
}

// TestSwapUnderLoad: a certificate replaced under keep-alive and
// new-connection load fails no request, and new connections get the new
// serial at once; the other name is untouched.
func TestSwapUnderLoad(t *testing.T) {
	ca, dir := testcert.NewCA(t), t.TempDir()
	e := &env{ca: ca, dir: dir}
	a, _ := e.files(t, "a", "a.test")
	b, bSerial := e.files(t, "b", "b.test")
	e = newEnv(t, ca, dir, &config.TLS{Certificates: []config.TLSFiles{a, b}, TicketKeys: config.TicketKeysRotate})

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	load := func(keepAlive bool) {
		defer wg.Done()
		tr := &http.Transport{
			TLSClientConfig:   &tls.Config{ServerName: "b.test", RootCAs: ca.Pool},
			DisableKeepAlives: !keepAlive,
			ForceAttemptHTTP2: true,
		}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
		for i := 0; i < 20000 && ctx.Err() == nil; i++ {
			resp, err := client.Get("https://" + e.addr + "/")
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				continue
			}
			ok.Add(1)
		}
	}
	for _, keepAlive := range []bool{true, true, false, false} {
		wg.Add(1)
		go load(keepAlive)
	}
	time.Sleep(time.Second)
	b2, b2Serial := e.files(t, "b", "b.test") // the same files, rewritten
	e.fe.TLS.Certificates[1] = b2
	e.apply(t)
	if got := e.served(t, "b.test"); got.Cmp(b2Serial) != 0 {
		t.Errorf("after the swap b.test serves %x, want the new %x (old %x)", got, b2Serial, bSerial)
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Errorf("%d of %d requests failed; first: %v", failed.Load(), failed.Load()+ok.Load(), firstErr.Load())
	}
	if ok.Load() < 100 {
		t.Errorf("only %d requests succeeded", ok.Load())
	}
	t.Logf("%d requests, %d failed, across the swap", ok.Load()+failed.Load(), failed.Load())
}

// TestAddRemoveSite: a site added to the config is served at once, and one
// removed is no longer; an ACME certificate installed is served and kept.
func TestAddRemoveSite(t *testing.T) {
	ca, dir := testcert.NewCA(t), t.TempDir()
	e := &env{ca: ca, dir: dir}
	a, aSerial := e.files(t, "a", "a.test")
	e = newEnv(t, ca, dir, &config.TLS{
		Certificates: []config.TLSFiles{a}, TicketKeys: config.TicketKeysRotate,
		ACME: &config.ACME{Domains: []string{"acme.test"}},
	})

	c, cSerial := e.files(t, "c", "c.test")
	e.fe.TLS.Certificates = append(e.fe.TLS.Certificates, c)
	e.apply(t)
	if got := e.served(t, "c.test"); got.Cmp(cSerial) != 0 {
		t.Fatalf("added c.test serves %x, want %x", got, cSerial)
	}

	leaf := ca.Valid(t, "acme.test")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.store.Install(ctx, "acme.test", leaf.CertPEM, leaf.KeyPEM); err != nil {
		t.Fatal(err)
	}
	if got := e.served(t, "acme.test"); got.Cmp(leaf.Serial) != 0 {
		t.Fatalf("installed acme.test serves %x, want %x", got, leaf.Serial)
	}
	if err := e.store.Install(ctx, "other.test", leaf.CertPEM, leaf.KeyPEM); err == nil {
		t.Error("Install of a domain no frontend lists: no error")
	}

	e.fe.TLS.Certificates = e.fe.TLS.Certificates[:1]
	e.apply(t)
	if got := e.served(t, "c.test"); got.Cmp(aSerial) != 0 {
		t.Errorf("removed c.test serves %x, want the default's %x", got, aSerial)
	}
	// The installed certificate is in the files: a restart serves it.
	list, err := os.ReadFile(certstore.CrtList(e.stateDir, "web"))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(certstore.Dir(e.stateDir), "web", "default.pem") + "\n" +
		filepath.Join(certstore.Dir(e.stateDir), "web", "acme.test.pem") + "\n"; string(list) != want {
		t.Errorf("crt-list:\n%s\nwant:\n%s", list, want)
	}
	var names []string
	for _, c := range e.store.Certs() {
		names = append(names, c.Site+"="+strings.Join(c.Names, ","))
	}
	if got := strings.Join(names, " "); got != "default=a.test acme.test=acme.test" {
		t.Errorf("Certs: %s", got)
	}
}

// TestTicketKeyRotation: a session resumed with a ticket still resumes
// after one rotation (the old key still decrypts), and the file holds the
// keys HAProxy was given.
func TestTicketKeyRotation(t *testing.T) {
	ca, dir := testcert.NewCA(t), t.TempDir()
	e := &env{ca: ca, dir: dir}
	a, _ := e.files(t, "a", "a.test")
	e = newEnv(t, ca, dir, &config.TLS{Certificates: []config.TLSFiles{a}, TicketKeys: config.TicketKeysRotate})
	// TLS 1.2: a 1.3 ticket arrives after the handshake, which this test
	// does not wait for.
	cfg := &tls.Config{ServerName: "a.test", RootCAs: ca.Pool, ClientSessionCache: tls.NewLRUClientSessionCache(4), MaxVersion: tls.VersionTLS12}
	dial := func() bool {
		t.Helper()
		conn, err := tls.Dial("tcp", e.addr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().DidResume
	}
	dial()
	if !dial() {
		t.Fatal("the second connection did not resume")
	}
	before, err := os.ReadFile(certstore.TicketKeys(e.stateDir, "web"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.store.RotateTicketKeys(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(certstore.TicketKeys(e.stateDir, "web"))
	if err != nil {
		t.Fatal(err)
	}
	b, a2 := strings.Fields(string(before)), strings.Fields(string(after))
	if len(a2) != 3 || a2[0] != b[1] || a2[1] != b[2] || a2[2] == b[2] {
		t.Fatalf("keys file after rotation:\n%s\nbefore:\n%s", after, before)
	}
	if !dial() {
		t.Error("a ticket issued before one rotation no longer resumes")
	}
}

// TestRollback: after a reload HAProxy refused, the files are those of
// the running config again, even though the source files changed; a
// frontend the refused config added is gone.
func TestRollback(t *testing.T) {
	ca, dir, stateDir := testcert.NewCA(t), t.TempDir(), t.TempDir()
	cert, key := ca.Valid(t, "a.test").Write(t, dir, "a")
	fe := config.Frontend{Name: "web", TLS: &config.TLS{Certificates: []config.TLSFiles{{Cert: cert, Key: key}}, TicketKeys: config.TicketKeysOff}}
	s := certstore.New(stateDir, nil, nil)
	if err := s.Write([]config.Frontend{fe}); err != nil {
		t.Fatal(err)
	}
	site := filepath.Join(certstore.Dir(stateDir), "web", "default.pem")
	running, err := os.ReadFile(site)
	if err != nil {
		t.Fatal(err)
	}
	ca.Valid(t, "a.test").Write(t, dir, "a")
	other := fe
	other.Name = "other"
	if err := s.Write([]config.Frontend{fe, other}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(site); string(b) == string(running) {
		t.Fatal("the second Write did not change the site file")
	}
	if err := s.Rollback(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(site); string(b) != string(running) {
		t.Error("Rollback did not write the running certificate back")
	}
	if _, err := os.Stat(certstore.CrtList(stateDir, "other")); !os.IsNotExist(err) {
		t.Errorf("the refused config's frontend is still there: %v", err)
	}
	if got := s.Certs(); len(got) != 1 || got[0].Frontend != "web" {
		t.Errorf("Certs after Rollback: %+v", got)
	}
}

// TestCertsReportServed: after a push HAProxy refused, Certs reports what
// HAProxy serves (checked over TLS), with the files' serial as pending and
// a site it does not serve flagged; the next push that succeeds brings
// both in line.
func TestCertsReportServed(t *testing.T) {
	ca, dir := testcert.NewCA(t), t.TempDir()
	e := &env{ca: ca, dir: dir}
	a, aSerial := e.files(t, "a", "a.test")
	b, _ := e.files(t, "b", "b.test")
	e = newEnv(t, ca, dir, &config.TLS{Certificates: []config.TLSFiles{a, b}, TicketKeys: config.TicketKeysRotate})
	e.apply(t)
	hex := func(n *big.Int) string { return n.Text(16) }
	report := func() map[string]certstore.Cert {
		got := map[string]certstore.Cert{}
		for _, c := range e.store.Certs() {
			got[c.Site] = c
		}
		return got
	}
	if got := report()["default"]; got.Serial != hex(aSerial) || got.Pending != "" || got.NotServed {
		t.Fatalf("default after a push: %+v, want serial %s", got, hex(aSerial))
	}

	// HAProxy holds one certificate transaction at a time: one left open
	// on b makes it refuse "set ssl cert" of any other.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	other := &haproxy.Client{Socket: filepath.Join(e.stateDir, "admin.sock")}
	bPath := filepath.Join(certstore.Dir(e.stateDir), "web", "b.pem")
	bPEM, err := os.ReadFile(bPath)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := other.ExecPayload(ctx, "set ssl cert "+bPath, string(bPEM)); err != nil || !strings.Contains(out, "Transaction") {
		t.Fatalf("set ssl cert %s: %q, %v", bPath, out, err)
	}
	a2, a2Serial := e.files(t, "a", "a.test") // the same files, rewritten
	c, cSerial := e.files(t, "c", "c.test")
	e.fe.TLS.Certificates = []config.TLSFiles{a2, b, c}
	if err := e.store.Write([]config.Frontend{e.fe}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Push(ctx); err == nil {
		t.Fatal("Push succeeded while another certificate transaction was open")
	}
	if got := e.served(t, "a.test"); got.Cmp(aSerial) != 0 {
		t.Fatalf("HAProxy serves %x for a.test, want the old %x", got, aSerial)
	}
	got := report()
	if d := got["default"]; d.Serial != hex(aSerial) || d.Pending != hex(a2Serial) || d.NotServed {
		t.Errorf("default after a failed push: %+v, want serial %s (served) pending %s", d, hex(aSerial), hex(a2Serial))
	}
	if c := got["c"]; !c.NotServed || c.Serial != hex(cSerial) {
		t.Errorf("c after a failed push: %+v, want it flagged not served", c)
	}
	if b := got["b"]; b.NotServed || b.Pending != "" {
		t.Errorf("b after a failed push: %+v, want it served as written", b)
	}

	if out, err := other.Exec(ctx, "abort ssl cert "+bPath); err != nil || !strings.Contains(out, "aborted") {
		t.Fatalf("abort ssl cert: %q, %v", out, err)
	}
	if err := e.store.Push(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.served(t, "a.test"); got.Cmp(a2Serial) != 0 {
		t.Fatalf("HAProxy serves %x for a.test, want the new %x", got, a2Serial)
	}
	got = report()
	if d := got["default"]; d.Serial != hex(a2Serial) || d.Pending != "" || d.NotServed {
		t.Errorf("default after the push: %+v, want serial %s", d, hex(a2Serial))
	}
	if c := got["c"]; c.NotServed || c.Serial != hex(cSerial) {
		t.Errorf("c after the push: %+v, want it served", c)
	}
}

// TestPayloadLimit: a certificate and key that would not fit one Runtime
// API payload (tune.bufsize) are refused, naming the sizes, by Write and by
// Install, and leave the files as they were; one that fits is written.
func TestPayloadLimit(t *testing.T) {
	ca, dir, stateDir := testcert.NewCA(t), t.TempDir(), t.TempDir()
	leaf := ca.Valid(t, "a.test")
	// A chain HAProxy would load: the leaf, then the CA again and again.
	chain := func(n int) []byte {
		b := append([]byte{}, leaf.CertPEM...)
		for range n {
			b = append(b, ca.PEM...)
		}
		return b
	}
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key := write("a.key", leaf.KeyPEM)
	s := certstore.New(stateDir, nil, nil)
	small := config.Frontend{Name: "web", TLS: &config.TLS{Certificates: []config.TLSFiles{{Cert: write("small.crt", chain(1)), Key: key}},
		ACME: &config.ACME{Domains: []string{"acme.test"}}, TicketKeys: config.TicketKeysOff}}
	if err := s.Write([]config.Frontend{small}); err != nil {
		t.Fatalf("a chain of %d bytes: %v", len(chain(1)), err)
	}
	site := filepath.Join(certstore.Dir(stateDir), "web", "default.pem")
	before, err := os.ReadFile(site)
	if err != nil {
		t.Fatal(err)
	}

	n := 16384/len(ca.PEM) + 1
	large := small
	large.TLS = &config.TLS{Certificates: []config.TLSFiles{{Cert: write("big.crt", chain(n)), Key: key}}, TicketKeys: config.TicketKeysOff}
	err = s.Write([]config.Frontend{large})
	if err == nil || !strings.Contains(err.Error(), "HAProxy's Runtime API takes at most") {
		t.Fatalf("a chain of %d bytes: %v, want it refused as too large for one payload", len(chain(n)), err)
	}
	if after, _ := os.ReadFile(site); string(after) != string(before) {
		t.Error("a refused Write changed the site's file")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = s.Install(ctx, "acme.test", chain(n), leaf.KeyPEM)
	if err == nil || !strings.Contains(err.Error(), "HAProxy's Runtime API takes at most") {
		t.Fatalf("Install of a chain of %d bytes: %v, want it refused as too large for one payload", len(chain(n)), err)
	}
	if _, err := os.Stat(filepath.Join(certstore.Dir(stateDir), "web", "acme.test.pem")); !os.IsNotExist(err) {
		t.Errorf("a refused Install wrote the site: %v", err)
	}
}
