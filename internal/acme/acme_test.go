package acme

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/certstore"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/testbin"
	"github.com/shoal-lb/shoal/internal/testpebble"
)

// installer records what is installed, as HAProxy's certificate store would
// receive it.
type installer struct {
	// store, when set, is the certificate store that installs each
	// certificate into HAProxy first.
	store Installer
	mu    sync.Mutex
	got   []installed
}

type installed struct {
	name            string
	certPEM, keyPEM []byte
	leaf            *x509.Certificate
	chain           []*x509.Certificate
}

func (in *installer) Install(_ context.Context, name string, certPEM, keyPEM []byte) error {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("test installer: %w", err)
	}
	var chain []*x509.Certificate
	for _, der := range pair.Certificate {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return err
		}
		chain = append(chain, c)
	}
	if in.store != nil {
		if err := in.store.Install(context.Background(), name, certPEM, keyPEM); err != nil {
			return err
		}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.got = append(in.got, installed{name: name, certPEM: certPEM, keyPEM: keyPEM, leaf: pair.Leaf, chain: chain})
	return nil
}

func (in *installer) list() []installed {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]installed(nil), in.got...)
}

// run starts a Manager until the test ends; its events arrive on the channel.
func run(t *testing.T, sections []config.ACME, stateDir string, in Installer, gate Gate, minBackoff, maxBackoff time.Duration) <-chan Event {
	t.Helper()
	events := make(chan Event, 100)
	m, err := New(sections, Options{
		StateDir: stateDir, Socket: haproxy.ACMESocket(haproxy.PathsFor(stateDir)), Installer: in, Gate: gate,
		Log: testLogger(t), OnEvent: func(ev Event) { events <- ev },
		MinBackoff: minBackoff, MaxBackoff: maxBackoff,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return events
}

func next(t *testing.T, events <-chan Event, timeout time.Duration) Event {
	t.Helper()
	select {
	case ev := <-events:
		return ev
	case <-time.After(timeout):
		t.Fatalf("no event in %s", timeout)
		return Event{}
	}
}

// startHAProxy runs HAProxy with a frontend whose plain bind on port sends
// the CA's challenges to shoal and whose TLS bind on tlsPort serves what
// the certificate store it returns installs. reload gives HAProxy another
// ACME section, as shoal's reload does before the manager sees it (the
// challenges HAProxy sends to shoal are for the section's domains).
func startHAProxy(t *testing.T, stateDir string, port, tlsPort int, acme config.ACME) (lb *haproxy.Manager, store *certstore.Store, reload func(config.ACME)) {
	t.Helper()
	listen, tlsListen := fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("127.0.0.1:%d", tlsPort)
	cfg := &config.Config{
		Listen:   listen,
		StateDir: stateDir,
		HAProxy:  config.HAProxy{Binary: "haproxy", Timeouts: config.DefaultTimeouts},
		Frontends: []config.Frontend{{Name: "shoal", Bind: []string{listen, tlsListen}, Mode: config.ModeHTTP,
			TLS: &config.TLS{ACME: &acme, Bind: []string{tlsListen}, ALPN: []string{"h2", "http/1.1"}, MinVersion: "1.2", TicketKeys: config.TicketKeysOff}}},
		Groups: []config.Group{{Name: "web", Balance: "roundrobin", Health: config.DefaultHealth}},
	}
	lb = haproxy.NewManager(cfg, testLogger(t))
	store = certstore.New(stateDir, lb, testLogger(t))
	if err := store.Write(cfg.Frontends); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := lb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := lb.Stop(ctx); err != nil {
			t.Errorf("stop haproxy: %v", err)
		}
	})
	return lb, store, func(a config.ACME) {
		t.Helper()
		next := *cfg
		next.Frontends = slices.Clone(cfg.Frontends)
		tls := *cfg.Frontends[0].TLS
		tls.ACME = &a
		next.Frontends[0].TLS = &tls
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := lb.Reload(ctx, &next); err != nil {
			t.Fatal(err)
		}
	}
}

// servedSerial is the serial of the certificate HAProxy serves for name on
// addr.
func servedSerial(t *testing.T, addr, name string) string {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{ServerName: name, InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("TLS to %s for %s: %v", addr, name, err)
	}
	defer conn.Close()
	return serial(conn.ConnectionState().PeerCertificates[0])
}

// TestIssueRenewThroughHAProxy: pebble validates the HTTP-01 challenge
// through HAProxy's plain bind (its shoal_acme backend answers), the chain
// installed verifies against pebble's root; the certificate is renewed
// before it expires with a new serial installed; the account key and the
// certificates are 0600 in the state dir; a restart installs the stored
// certificate; with the CA down, renewal fails with an error naming the
// directory, backs off (doubling, capped) and keeps the old certificate;
// and when the CA is back (reset: it forgot the account), the manager
// registers again and obtains the certificate.
func TestIssueRenewThroughHAProxy(t *testing.T) {
	t.Parallel() // waits out certificate lifetimes; own pebble, ports, state dir and HAProxy
	const domain = "www.shoal.test"
	port := testpebble.FreePort(t, "tcp")
	const lifetime, renewBefore = 40 * time.Second, 28 * time.Second
	ca := testpebble.Start(t, port, lifetime)
	state, err := os.MkdirTemp("/tmp", "acme-") // short: socket paths
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	section := config.ACME{Email: "ops@shoal.test", Directory: ca.Directory, Domains: []string{domain, "api.shoal.test"}, CA: ca.CAFile,
		RenewBefore: renewBefore}
	tlsPort := testpebble.FreePort(t, "tcp")
	lb, store, reload := startHAProxy(t, state, port, tlsPort, section)
	tlsAddr := fmt.Sprintf("127.0.0.1:%d", tlsPort)

	in := &installer{store: store}
	ctx, stop := context.WithCancel(context.Background())
	events := make(chan Event, 100)
	m, err := New([]config.ACME{section}, Options{StateDir: state, Socket: haproxy.ACMESocket(haproxy.PathsFor(state)),
		Installer: in, Gate: lb, Log: testLogger(t), OnEvent: func(ev Event) { events <- ev }, MinBackoff: time.Second, MaxBackoff: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(stop)

	roots := ca.Roots(t)
	verify := func(c installed) {
		t.Helper()
		if c.name != domain {
			t.Errorf("installed as %q, want %q", c.name, domain)
		}
		inter := x509.NewCertPool()
		for _, ic := range c.chain[1:] {
			inter.AddCert(ic)
		}
		for _, name := range section.Domains {
			if _, err := c.leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: name}); err != nil {
				t.Errorf("serial %x for %s: %v", c.leaf.SerialNumber, name, err)
			}
		}
	}

	ev := next(t, events, 60*time.Second)
	if ev.Kind != EventIssued {
		t.Fatalf("first event %+v, want %s", ev, EventIssued)
	}
	first := in.list()
	if len(first) != 1 || serial(first[0].leaf) != ev.Serial {
		t.Fatalf("installed %d certificates, event serial %s", len(first), ev.Serial)
	}
	verify(first[0])
	if got := servedSerial(t, tlsAddr, domain); got != ev.Serial {
		t.Errorf("HAProxy serves serial %s for %s, want the issued %s", got, domain, ev.Serial)
	}
	answered := func() int64 {
		t.Helper()
		stats, err := lb.Stats(context.Background(), "shoal_acme")
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range stats {
			if s.Name == "shoal" {
				return s.Responses[2]
			}
		}
		t.Fatalf("no server shoal in shoal_acme: %+v", stats)
		return 0
	}
	issuing := answered()
	if issuing < int64(len(section.Domains)) {
		t.Errorf("HAProxy's shoal_acme answered %d challenges with 2xx, want >= %d (one per domain)", issuing, len(section.Domains))
	}

	ev = next(t, events, lifetime)
	if ev.Kind != EventIssued || ev.Serial == serial(first[0].leaf) {
		t.Fatalf("second event %+v, want %s with a new serial", ev, EventIssued)
	}
	renewed, at := in.list()[1], time.Now()
	if due := first[0].leaf.NotAfter.Add(-renewBefore); at.Before(due) || !at.Before(first[0].leaf.NotAfter) {
		t.Errorf("renewed at %s, want between renew_before ahead of expiry (%s) and the expiry (%s)",
			at.Format(time.StampMilli), due.Format(time.StampMilli), first[0].leaf.NotAfter.Format(time.StampMilli))
	}
	verify(renewed)
	for _, name := range section.Domains {
		if got := servedSerial(t, tlsAddr, name); got != ev.Serial {
			t.Errorf("HAProxy serves serial %s for %s after the renewal, want %s", got, name, ev.Serial)
		}
	}
	renewing := answered() - issuing
	if renewing < int64(len(section.Domains)) {
		t.Errorf("HAProxy's shoal_acme answered %d challenges for the renewal, want >= %d", renewing, len(section.Domains))
	}
	t.Logf("issued serial %x (not after %s), renewed serial %x at %s; shoal_acme answered %d+%d challenges",
		first[0].leaf.SerialNumber, first[0].leaf.NotAfter.Format(time.StampMilli), renewed.leaf.SerialNumber,
		at.Format(time.StampMilli), issuing, renewing)

	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(state, "acme", "*"))
	if len(files) != 4 { // account key and registration, certificate and key
		t.Errorf("state files %v, want 4", files)
	}
	for _, f := range files {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v (%v), want 0600", f, fi.Mode().Perm(), err)
		}
	}
	var stored []byte
	if stored, err = os.ReadFile(filepath.Join(state, "acme", domain+".crt")); err != nil {
		t.Fatal(err)
	}
	last := in.list()[len(in.list())-1]
	if !bytes.Equal(stored, last.certPEM) {
		t.Error("the stored certificate is not the one last installed")
	}

	// The CA goes down; a restarted manager that must renew at once (a
	// domain was added) installs the stored certificate, then fails with a
	// clear error and backs off.
	ca.Stop()
	section.Domains = append(section.Domains, "new.shoal.test")
	reload(section)
	in2 := &installer{}
	events2 := run(t, []config.ACME{section}, state, in2, lb, 200*time.Millisecond, 800*time.Millisecond)
	ev = next(t, events2, 10*time.Second)
	if ev.Kind != EventLoaded || ev.Serial != serial(last.leaf) {
		t.Fatalf("after restart: %+v, want %s serial %s", ev, EventLoaded, serial(last.leaf))
	}
	var prev time.Time
	var waits []time.Duration
	for range 4 {
		ev = next(t, events2, 10*time.Second)
		if ev.Kind != EventFailed {
			t.Fatalf("CA down: %+v, want %s", ev, EventFailed)
		}
		if msg := ev.Err.Error(); !strings.Contains(msg, ca.Directory) || !strings.Contains(msg, "connection refused") {
			t.Errorf("error %q does not name the directory and the refusal", msg)
		}
		if ev.Serial != serial(last.leaf) {
			t.Errorf("failure reports serial %q served, want %q", ev.Serial, serial(last.leaf))
		}
		now := time.Now()
		waits = append(waits, ev.Retry.Sub(now).Round(10*time.Millisecond))
		if !prev.IsZero() && now.Sub(prev) < 150*time.Millisecond {
			t.Errorf("retried %s after the previous failure, want >= the back-off", now.Sub(prev))
		}
		prev = now
	}
	t.Logf("back-off after each failure: %v", waits)
	// 200ms, 400ms, 800ms, 800ms, each ±10%.
	for i, want := range []time.Duration{200, 400, 800, 800} {
		if w := waits[i]; w < want*time.Millisecond*85/100 || w > want*time.Millisecond*115/100 {
			t.Errorf("back-off %d: %s, want %dms ±10%%", i, w, want)
		}
	}
	if got := in2.list(); len(got) != 1 || serial(got[0].leaf) != serial(last.leaf) {
		t.Errorf("with the CA down %d certificates were installed, want only the stored one", len(got))
	}

	// The CA comes back, reset (a new root, no accounts): the manager
	// registers again and obtains the certificate for the new domains.
	ca.Restart(t)
	roots = ca.Roots(t)
	var forgotten bool
	for deadline := time.Now().Add(60 * time.Second); ; {
		ev = next(t, events2, time.Until(deadline))
		if ev.Kind == EventIssued {
			break
		}
		forgotten = forgotten || ev.Err != nil && strings.Contains(ev.Err.Error(), "no longer knows the account")
	}
	if !forgotten {
		t.Error("no failure said the CA forgot the account")
	}
	got := in2.list()
	verify(got[len(got)-1])
	if n := len(got[len(got)-1].leaf.DNSNames); n != 3 {
		t.Errorf("the new certificate has %d names, want 3", n)
	}
}

// TestNewRefuses: sections New cannot keep certificates for.
func TestNewRefuses(t *testing.T) {
	for _, tc := range []struct {
		domains []string
		want    string
	}{
		{[]string{"*.example.com"}, "wildcards"},
		{[]string{"127.0.0.1"}, "IP addresses"},
		{[]string{"../etc"}, "DNS name"},
		{nil, "no domains"},
	} {
		_, err := New([]config.ACME{{Email: "a@b.c", Domains: tc.domains}}, Options{Installer: &installer{}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error with %q", tc.domains, err, tc.want)
		}
	}
	two := []config.ACME{{Domains: []string{"a.test"}}, {Domains: []string{"A.test", "b.test"}}}
	if _, err := New(two, Options{Installer: &installer{}}); err == nil {
		t.Error("two certificates named a.test: no error")
	}
	// Two frontends (IPv4 and IPv6, say) share one certificate.
	shared := []config.ACME{{Domains: []string{"a.test", "b.test"}}, {Domains: []string{"A.test", "b.test"}}}
	if m, err := New(shared, Options{Installer: &installer{}}); err != nil || len(m.certs) != 1 {
		t.Errorf("one certificate on two frontends: %v", err)
	}
}

// recordingGate records what SetChallenge is told; it fails for token "bad".
type recordingGate []string

func (g *recordingGate) SetChallenge(_ context.Context, token string, pending bool) error {
	*g = append(*g, fmt.Sprintf("%s %t", token, pending))
	if token == "bad" {
		return errors.New("refused")
	}
	return nil
}

// TestChallengeHandler: the handler answers a token presented for the
// request's host only, and nothing after CleanUp; the gate (HAProxy) is
// told of the token when it is presented and cleaned up, and a gate that
// fails fails the presentation (the CA is not asked to fetch it).
func TestChallengeHandler(t *testing.T) {
	gate := &recordingGate{}
	h := &challenges{tokens: map[string]token{}, gate: gate}
	if err := h.Present(context.Background(), "Example.com", "tok", "tok.key"); err != nil {
		t.Fatal(err)
	}
	if err := h.Present(context.Background(), "example.com", "bad", "bad.key"); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("Present with a failing gate: %v, want its error", err)
	}
	get := func(host, path string) (int, string) {
		r, _ := http.NewRequest(http.MethodGet, "http://"+host+path, nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	if code, body := get("example.com:80", "/.well-known/acme-challenge/tok"); code != 200 || body != "tok.key" {
		t.Errorf("GET token: %d %q", code, body)
	}
	if code, _ := get("other.com", "/.well-known/acme-challenge/tok"); code != 404 {
		t.Errorf("GET token for another host: %d, want 404", code)
	}
	_ = h.CleanUp(context.Background(), "example.com", "tok", "tok.key")
	if code, _ := get("example.com", "/.well-known/acme-challenge/tok"); code != 404 {
		t.Errorf("GET token after CleanUp: %d, want 404", code)
	}
	if want := []string{"tok true", "bad true", "tok false"}; !slices.Equal(*gate, want) {
		t.Errorf("the gate was told %q, want %q", *gate, want)
	}
}

// testLogger prints the log if the test fails, and checks that no secret
// (a PEM block) is ever logged.
func testLogger(t *testing.T) *slog.Logger {
	var buf testbin.Buffer
	t.Cleanup(func() {
		if strings.Contains(buf.String(), "-----BEGIN ") {
			t.Error("a PEM block was logged")
		}
		if t.Failed() {
			t.Logf("log:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestDueAt: renew_before counts back from the expiry, but not to before a
// third of the lifetime; without it and
// without renewal info (the CA is unreachable here), a certificate is due
// at two thirds of its lifetime; one for other domains is due at once.
func TestDueAt(t *testing.T) {
	notBefore := time.Now().Truncate(time.Second)
	leaf := &x509.Certificate{DNSNames: []string{"a.test", "b.test"}, NotBefore: notBefore, NotAfter: notBefore.Add(90 * time.Hour)}
	closed := fmt.Sprintf("https://127.0.0.1:%d/dir", testpebble.FreePort(t, "tcp"))
	m, err := New([]config.ACME{{Email: "a@b.test", Directory: closed, Domains: []string{"b.test", "A.test"}}}, Options{StateDir: t.TempDir(), Installer: &installer{}})
	if err != nil {
		t.Fatal(err)
	}
	c, log := m.certs[0], testLogger(t)
	if got, want := m.dueAt(context.Background(), c, &stored{leaf: leaf}, log), notBefore.Add(60*time.Hour); !got.Equal(want) {
		t.Errorf("without renew_before: due %s, want %s", got, want)
	}
	c.acme.RenewBefore = 20 * time.Hour
	if got, want := m.dueAt(context.Background(), c, &stored{leaf: leaf}, log), notBefore.Add(70*time.Hour); !got.Equal(want) {
		t.Errorf("renew_before 20h: due %s, want %s", got, want)
	}
	c.acme.RenewBefore = 100 * time.Hour
	if got, want := m.dueAt(context.Background(), c, &stored{leaf: leaf}, log), notBefore.Add(30*time.Hour); !got.Equal(want) {
		t.Errorf("renew_before 100h, longer than the lifetime: due %s, want %s (a third into it)", got, want)
	}
	c.domains = []string{"a.test", "c.test"}
	if got := m.dueAt(context.Background(), c, &stored{leaf: leaf}, log); got.After(time.Now()) {
		t.Errorf("for other domains: due %s, want now", got)
	}
}

// TestRenewDefaultTiming: without renew_before, on pebble's short-lived
// certificates, through HAProxy. A CA without renewal info (pebble's
// directory with its renewalInfo hidden) gets the certificate renewed at
// two thirds of its lifetime; a CA with it (pebble's ARI, the window set
// through its management API before the manager starts) gets it renewed in
// that window, long before two thirds; each renewed serial is served.
func TestRenewDefaultTiming(t *testing.T) {
	t.Parallel() // waits out certificate lifetimes; own pebble, ports, state dir and HAProxy
	const domain = "www.shoal.test"
	port := testpebble.FreePort(t, "tcp")
	const lifetime = 36 * time.Second
	ca := testpebble.Start(t, port, lifetime)

	// The directory the manager is given: pebble's, with renewalInfo left
	// out while hideARI is set; every other URL in it is pebble's own.
	var hideARI atomic.Bool
	hc, err := httpClient(ca.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	dirLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dirSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := hc.Get(ca.Directory)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		var dir map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&dir); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if hideARI.Load() {
			delete(dir, "renewalInfo")
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(dir)
	})}
	// pebble's localhost certificate, which its minica (the CA file) signs.
	go dirSrv.ServeTLS(dirLn, filepath.Join(ca.Module, "test/certs/localhost/cert.pem"), filepath.Join(ca.Module, "test/certs/localhost/key.pem"))
	t.Cleanup(func() { dirSrv.Close() })

	state, err := os.MkdirTemp("/tmp", "acme-") // short: socket paths
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	section := config.ACME{Email: "ops@shoal.test", Directory: "https://" + dirLn.Addr().String() + "/dir", Domains: []string{domain}, CA: ca.CAFile}
	tlsPort := testpebble.FreePort(t, "tcp")
	lb, store, _ := startHAProxy(t, state, port, tlsPort, section)
	tlsAddr := fmt.Sprintf("127.0.0.1:%d", tlsPort)
	served := func(want string) {
		t.Helper()
		if got := servedSerial(t, tlsAddr, domain); got != want {
			t.Errorf("HAProxy serves serial %s for %s, want %s", got, domain, want)
		}
	}

	// Without renewal info: two thirds of the lifetime.
	hideARI.Store(true)
	in := &installer{store: store}
	ctx, stop := context.WithCancel(context.Background())
	m, err := New([]config.ACME{section}, Options{StateDir: state, Socket: haproxy.ACMESocket(haproxy.PathsFor(state)),
		Installer: in, Gate: lb, Log: testLogger(t), OnEvent: func(ev Event) {}, MinBackoff: time.Second, MaxBackoff: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(stop)
	issued := func(n int, within time.Duration) (installed, time.Time) {
		t.Helper()
		for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if got := in.list(); len(got) >= n {
				return got[n-1], time.Now()
			}
		}
		t.Fatalf("certificate %d not installed within %s", n, within)
		return installed{}, time.Time{}
	}
	first, _ := issued(1, 60*time.Second)
	served(serial(first.leaf))
	second, atA := issued(2, lifetime)
	life := first.leaf.NotAfter.Sub(first.leaf.NotBefore)
	at := atA
	// The renewal starts at two thirds; obtaining it takes seconds.
	if due := first.leaf.NotBefore.Add(life * 2 / 3); at.Before(due) || !at.Before(first.leaf.NotAfter) {
		t.Errorf("without renewal info: renewed at %s, want after two thirds of the lifetime (%s) and before the expiry (issued %s, expires %s)",
			at.Format(time.StampMilli), due.Format(time.StampMilli), first.leaf.NotBefore.Format(time.StampMilli), first.leaf.NotAfter.Format(time.StampMilli))
	}
	served(serial(second.leaf))
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// With renewal info: the CA's window for the stored certificate, set
	// before the manager reads it, 2 to 3 seconds from now.
	hideARI.Store(false)
	start := time.Now().Add(2 * time.Second)
	ari, _ := json.Marshal(map[string]any{"suggestedWindow": map[string]string{
		"start": start.UTC().Format(time.RFC3339Nano), "end": start.Add(time.Second).UTC().Format(time.RFC3339Nano)}})
	body, _ := json.Marshal(map[string]string{"Certificate": string(second.certPEM), "ARIResponse": string(ari)})
	resp, err := hc.Post(ca.Mgmt+"/set-renewal-info/", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("pebble set-renewal-info: %s", resp.Status)
	}
	in = &installer{store: store}
	ctx, stop = context.WithCancel(context.Background())
	m, err = New([]config.ACME{section}, Options{StateDir: state, Socket: haproxy.ACMESocket(haproxy.PathsFor(state)),
		Installer: in, Gate: lb, Log: testLogger(t), OnEvent: func(ev Event) {}, MinBackoff: time.Second, MaxBackoff: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(stop)
	if loaded, _ := issued(1, 10*time.Second); serial(loaded.leaf) != serial(second.leaf) {
		t.Fatalf("after a restart: installed %s, want the stored %s", serial(loaded.leaf), serial(second.leaf))
	}
	third, at := issued(2, lifetime)
	twoThirds := second.leaf.NotBefore.Add(life * 2 / 3)
	if at.Before(start) || !at.Before(twoThirds) {
		t.Errorf("with renewal info: renewed at %s, want after the CA's window's start (%s) and before two thirds of the lifetime (%s)",
			at.Format(time.StampMilli), start.Format(time.StampMilli), twoThirds.Format(time.StampMilli))
	}
	served(serial(third.leaf))
	t.Logf("lifetime %s: renewed %s into it without renewal info; with the window at %s, at %s (two thirds: %s)",
		life, atA.Sub(first.leaf.NotBefore).Round(time.Millisecond), start.Format(time.StampMilli), at.Format(time.StampMilli), twoThirds.Format(time.StampMilli))
}
