// Package acme obtains and renews TLS certificates from an ACME CA (Let's
// Encrypt; pebble in tests) with lego, answers the CA's HTTP-01 challenges,
// which HAProxy routes to shoal, and installs each certificate through an
// Installer (HAProxy's runtime API) without a reload.
//
// Each certificate (named by its first domain) runs this loop:
//
//	load STATE/acme/NAME.{crt,key}
//	  │ valid           │ none, expired or for other domains
//	  ▼                 ▼
//	install ◄─ save ◄─ obtain ◄─────────────────────────────┐
//	  │ ok  │ error     │ error                             │
//	  │     ▼           ▼                                   │
//	  │  back off,   back off, obtain again                 │
//	  │  install     (the served certificate stays served)  │
//	  │  again                                              │
//	  ▼                                                     │
//	wait until due: renew_before ahead of the expiry,       │
//	the CA's renewal info, or 2/3 of the lifetime ──────────┘
//
// Back-off doubles from Options.MinBackoff to Options.MaxBackoff and is
// reset by a success.
package acme

import (
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	legoacme "github.com/go-acme/lego/v5/acme"
	"github.com/go-acme/lego/v5/certcrypto"
	"github.com/go-acme/lego/v5/certificate"
	"github.com/go-acme/lego/v5/challenge/http01"
	"github.com/go-acme/lego/v5/lego"
	legolog "github.com/go-acme/lego/v5/log"
	"github.com/go-acme/lego/v5/registration"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/unixsock"
)

// Installer puts a certificate into service (HAProxy's certificate store).
// name is the certificate's first domain.
type Installer interface {
	Install(ctx context.Context, name string, certPEM, keyPEM []byte) error
}

// Gate tells HAProxy which challenge tokens shoal answers now: it answers
// the others itself, so that requests for tokens no one was given never
// reach shoal (haproxy.Manager.SetChallenge).
type Gate interface {
	SetChallenge(ctx context.Context, token string, pending bool) error
}

// Kinds of Event.
const (
	// EventLoaded: a valid certificate from the state directory was installed.
	EventLoaded = "loaded"
	// EventIssued: a new certificate from the CA was stored and installed.
	EventIssued = "issued"
	// EventFailed: obtaining or installing failed; the certificate served
	// before (if any) is kept and the attempt is retried at Event.Retry.
	EventFailed = "failed"
)

// Event reports what happened to a certificate. It holds no secret.
type Event struct {
	Kind    string
	Name    string
	Domains []string
	// Serial (hex) and NotAfter are the installed certificate's.
	Serial   string
	NotAfter time.Time
	// Err and Retry are set for EventFailed.
	Err   error
	Retry time.Time
}

// Options are New's inputs besides the ACME sections.
type Options struct {
	// StateDir holds STATE_DIR/acme: account keys and certificates, 0600.
	StateDir string
	// Socket is the unix socket the challenge handler listens on, HAProxy's
	// shoal_acme server (see haproxy.ACMESocket).
	Socket    string
	Installer Installer
	// Gate, if set, is told of each token before the CA is asked to
	// fetch it, and when it is done.
	Gate Gate
	Log  *slog.Logger
	// OnEvent, if set, is called for every event (after it is logged).
	OnEvent func(Event)
	// MinBackoff and MaxBackoff bound the wait after a failure (default
	// 1 minute and 1 hour: Let's Encrypt allows 5 failed validations per
	// hour).
	MinBackoff, MaxBackoff time.Duration
}

// Manager keeps the certificates of every ACME section up to date.
type Manager struct {
	opts  Options
	dir   string
	certs []*cert
	chal  *challenges
}

// cert is one certificate's configuration and account.
type cert struct {
	name    string
	domains []string
	acme    config.ACME
	acct    *account
}

// New checks the ACME sections; nothing is contacted until Run.
func New(sections []config.ACME, opts Options) (*Manager, error) {
	if opts.Installer == nil {
		return nil, errors.New("acme: no installer")
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = time.Minute
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(time.Hour, opts.MinBackoff)
	}
	// lego logs (domains, URLs, never keys) through one process-wide logger.
	legolog.SetDefault(opts.Log.With("library", "lego"))
	m := &Manager{opts: opts, dir: filepath.Join(opts.StateDir, "acme"), chal: &challenges{tokens: map[string]token{}, gate: opts.Gate}}
	accounts := map[string]*account{}
	names := map[string][]string{} // the domains of each name, lower case
	for _, s := range sections {
		if len(s.Domains) == 0 {
			return nil, errors.New("acme: no domains")
		}
		for _, d := range s.Domains {
			if !isDomain(d) {
				return nil, fmt.Errorf("acme domain %q: must be a DNS name (HTTP-01 cannot validate wildcards or IP addresses)", d)
			}
		}
		// The name as written: the store finds the frontends whose
		// tls.acme.domains list it.
		name := s.Domains[0]
		key, lower := strings.ToLower(name), lowerAll(s.Domains)
		if other, ok := names[key]; ok {
			if slices.Equal(other, lower) {
				continue // frontends sharing one certificate
			}
			return nil, fmt.Errorf("acme domain %q: first of two different certificates' domains", name)
		}
		names[key] = lower
		// One account per CA and email, shared by its certificates.
		id := s.Directory + "\n" + s.Email
		a := accounts[id]
		if a == nil {
			sum := sha256.Sum256([]byte(id))
			a = &account{email: s.Email, base: filepath.Join(m.dir, "account-"+hex.EncodeToString(sum[:6]))}
			accounts[id] = a
		}
		m.certs = append(m.certs, &cert{name: name, domains: s.Domains, acme: s, acct: a})
	}
	return m, nil
}

// Sections returns the ACME sections of cfg's frontends.
func Sections(cfg *config.Config) []config.ACME {
	var out []config.ACME
	for _, f := range cfg.Frontends {
		if f.TLS != nil && f.TLS.ACME != nil {
			out = append(out, *f.TLS.ACME)
		}
	}
	return out
}

// Run serves the challenges and keeps every certificate up to date until
// ctx ends. It returns an error only if it cannot start.
func (m *Manager) Run(ctx context.Context) error {
	if err := os.MkdirAll(m.dir, 0o700); err != nil {
		return fmt.Errorf("acme: create %s: %w", m.dir, err)
	}
	l, err := unixsock.Listen(m.opts.Socket, 0o600, "")
	if err != nil {
		return fmt.Errorf("acme challenge socket: %w", err)
	}
	srv := &http.Server{Handler: m.chal, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(l) }) // ends at Close below
	for _, c := range m.certs {
		wg.Go(func() { m.keep(ctx, c) })
	}
	<-ctx.Done()
	_ = srv.Close()
	wg.Wait()
	return nil
}

// keep runs one certificate's loop (see the package doc) until ctx ends.
// cur is the newest certificate, served the one HAProxy was last given.
func (m *Manager) keep(ctx context.Context, c *cert) {
	log := m.opts.Log.With("cert", c.name)
	cur, err := c.load(m.dir)
	if err != nil {
		log.Warn("stored certificate unusable; obtaining a new one", "err", err)
	}
	var served *stored
	failures := 0
	fail := func(err error) {
		d := backoff(m.opts.MinBackoff, m.opts.MaxBackoff, failures)
		failures++
		ev := Event{Kind: EventFailed, Name: c.name, Domains: c.domains, Err: err, Retry: time.Now().Add(d)}
		if served != nil {
			ev.Serial, ev.NotAfter = serial(served.leaf), served.leaf.NotAfter
			log.Error("certificate not renewed; the one served stays", "err", err, "failures", failures, "retry_in", d, "serial", ev.Serial, "not_after", ev.NotAfter)
		} else {
			log.Error("certificate not obtained; none is served", "err", err, "failures", failures, "retry_in", d)
		}
		m.emit(ev)
		sleep(ctx, d)
	}
	for ctx.Err() == nil {
		if cur != nil && cur != served && time.Now().Before(cur.leaf.NotAfter) {
			if err := m.install(ctx, c.name, cur); err != nil {
				fail(fmt.Errorf("install certificate %s: %w", c.name, err))
				continue
			}
			served, failures = cur, 0
			kind := EventLoaded
			if cur.fresh {
				kind = EventIssued
			}
			log.Info("certificate installed", "event", kind, "serial", serial(cur.leaf), "not_after", cur.leaf.NotAfter, "domains", strings.Join(c.domains, ","))
			m.emit(Event{Kind: kind, Name: c.name, Domains: c.domains, Serial: serial(cur.leaf), NotAfter: cur.leaf.NotAfter})
		}
		if cur != nil {
			due := m.dueAt(ctx, c, cur, log)
			if wait := time.Until(due); wait > 0 {
				// Renewal info can change (a revocation): look again daily.
				log.Debug("next renewal", "at", due)
				sleep(ctx, min(wait, 24*time.Hour))
				continue
			}
		}
		if ctx.Err() != nil {
			return
		}
		log.Info("obtaining certificate", "domains", strings.Join(c.domains, ","), "directory", c.acme.Directory)
		next, err := m.obtain(ctx, c)
		if err != nil {
			fail(err)
			continue
		}
		cur = next
	}
}

// dueAt is when cur must be renewed: renew_before ahead of its expiry (but
// no sooner than a third into its life: a renew_before longer than the CA's
// lifetimes must not renew again and again), the CA's renewal info, or at
// two thirds of its lifetime. A certificate for other domains than
// configured is due now.
func (m *Manager) dueAt(ctx context.Context, c *cert, cur *stored, log *slog.Logger) time.Time {
	leaf := cur.leaf
	if !sameDomains(leaf.DNSNames, c.domains) {
		return time.Time{}
	}
	life := leaf.NotAfter.Sub(leaf.NotBefore)
	if c.acme.RenewBefore > 0 {
		due := leaf.NotAfter.Add(-c.acme.RenewBefore)
		if earliest := leaf.NotBefore.Add(life / 3); due.Before(earliest) {
			return earliest
		}
		return due
	}
	if cl, err := c.acct.client(ctx, c.acme, m.chal); err == nil {
		info, err := cl.Certificate.GetRenewalInfo(ctx, leaf)
		if err == nil && info.SuggestedWindow.End.After(info.SuggestedWindow.Start) {
			w := info.SuggestedWindow
			// RFC 9773: a random time in the window spreads the CA's load.
			return w.Start.Add(time.Duration(rand.Int64N(int64(w.End.Sub(w.Start)))))
		}
		if err != nil {
			log.Debug("no renewal info from the CA; renewing at two thirds of the lifetime", "err", err)
		}
	}
	return leaf.NotBefore.Add(life * 2 / 3)
}

// obtain gets a new certificate from the CA and stores it.
func (m *Manager) obtain(ctx context.Context, c *cert) (*stored, error) {
	cl, err := c.acct.client(ctx, c.acme, m.chal)
	if err != nil {
		return nil, err
	}
	res, err := cl.Certificate.Obtain(ctx, certificate.ObtainRequest{Domains: c.domains, Bundle: true, KeyType: certcrypto.EC256})
	if pd := (*legoacme.ProblemDetails)(nil); errors.As(err, &pd) && pd.Type == legoacme.AccountDoesNotExistErrorType {
		c.acct.forget()
		return nil, fmt.Errorf("obtain certificate for %s from %s: the CA no longer knows the account (it registers again at the next attempt): %w", strings.Join(c.domains, ","), c.acme.Directory, err)
	}
	if err != nil {
		return nil, fmt.Errorf("obtain certificate for %s from %s: %w", strings.Join(c.domains, ","), c.acme.Directory, err)
	}
	s, err := parseStored(res.Certificate, res.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("certificate for %s from %s: %w", c.name, c.acme.Directory, err)
	}
	// The key first: a crash in between leaves a pair that does not
	// match, which load refuses (and a new certificate is obtained).
	if err := writeFile(filepath.Join(m.dir, c.name+".key"), res.PrivateKey); err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(m.dir, c.name+".crt"), res.Certificate); err != nil {
		return nil, err
	}
	s.fresh = true
	return s, nil
}

// install bounds the installer's time: a wedged HAProxy must not stop the
// loop for good.
func (m *Manager) install(ctx context.Context, name string, s *stored) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return m.opts.Installer.Install(ctx, name, s.certPEM, s.keyPEM)
}

func (m *Manager) emit(ev Event) {
	if m.opts.OnEvent != nil {
		m.opts.OnEvent(ev)
	}
}

// stored is a certificate chain with its key, both PEM.
type stored struct {
	certPEM, keyPEM []byte
	leaf            *x509.Certificate
	// fresh: obtained by this run, not loaded.
	fresh bool
}

// load reads STATE/acme/NAME.{crt,key}: nil if there are none.
func (c *cert) load(dir string) (*stored, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, c.name+".crt"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, c.name+".key"))
	if err != nil {
		return nil, fmt.Errorf("read certificate key: %w", err)
	}
	return parseStored(certPEM, keyPEM)
}

func parseStored(certPEM, keyPEM []byte) (*stored, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("certificate and key: %w", err)
	}
	return &stored{certPEM: certPEM, keyPEM: keyPEM, leaf: pair.Leaf}, nil
}

// account is an ACME account: its key and registration live in
// STATE/acme/account-HASH.{key,json}; the client is made on first use.
type account struct {
	email string
	base  string

	mu  sync.Mutex
	key crypto.Signer
	reg *legoacme.ExtendedAccount
	cl  *lego.Client
}

func (a *account) GetEmail() string                           { return a.email }
func (a *account) GetRegistration() *legoacme.ExtendedAccount { return a.reg }
func (a *account) GetPrivateKey() crypto.Signer               { return a.key }
func (a *account) String() string                             { return "acme account " + a.email }
func (a *account) keyFile() string                            { return a.base + ".key" }
func (a *account) regFile() string                            { return a.base + ".json" }

var _ registration.User = (*account)(nil)

// client returns the account's lego client, registering the account with
// the CA the first time. Errors are the CA's or the state dir's.
func (a *account) client(ctx context.Context, s config.ACME, chal *challenges) (*lego.Client, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cl != nil {
		return a.cl, nil
	}
	if a.key == nil {
		key, err := loadOrCreateKey(a.keyFile())
		if err != nil {
			return nil, err
		}
		a.key = key
	}
	if a.reg == nil {
		if b, err := os.ReadFile(a.regFile()); err == nil {
			var reg legoacme.ExtendedAccount
			if err := json.Unmarshal(b, &reg); err != nil {
				return nil, fmt.Errorf("acme account %s: %w", a.regFile(), err)
			}
			a.reg = &reg
		}
	}
	hc, err := httpClient(s.CA)
	if err != nil {
		return nil, err
	}
	lc := lego.NewConfig(a)
	lc.CADirURL = s.Directory
	lc.HTTPClient = hc
	lc.UserAgent = "shoal"
	cl, err := lego.NewClient(lc)
	if err != nil {
		return nil, fmt.Errorf("acme directory %s: %w", s.Directory, err)
	}
	if a.reg == nil {
		reg, err := cl.Registration.Register(ctx, registration.RegisterOptions{TermsOfServiceAgreed: true})
		if err != nil {
			return nil, fmt.Errorf("register acme account for %s at %s: %w", a.email, s.Directory, err)
		}
		b, err := json.Marshal(reg)
		if err != nil {
			return nil, fmt.Errorf("acme account: %w", err)
		}
		if err := writeFile(a.regFile(), b); err != nil {
			return nil, err
		}
		a.reg = reg
		// The client signs with the account URL from now on.
		if cl, err = lego.NewClient(lc); err != nil {
			return nil, fmt.Errorf("acme directory %s: %w", s.Directory, err)
		}
	}
	if err := cl.Challenge.SetHTTP01Provider(chal); err != nil {
		return nil, fmt.Errorf("acme http-01 provider: %w", err)
	}
	a.cl = cl
	return cl, nil
}

// forget drops a registration the CA no longer knows (its database was
// reset): the next client registers the key again.
func (a *account) forget() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reg, a.cl = nil, nil
	_ = os.Remove(a.regFile())
}

func loadOrCreateKey(path string) (crypto.Signer, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		key, err := certcrypto.ParsePEMPrivateKey(b)
		if err != nil {
			return nil, fmt.Errorf("acme account key %s: %w", path, err)
		}
		return key, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("acme account key: %w", err)
	}
	key, err := certcrypto.GeneratePrivateKey(certcrypto.EC256)
	if err != nil {
		return nil, fmt.Errorf("acme account key: %w", err)
	}
	if err := writeFile(path, certcrypto.PEMEncode(key)); err != nil {
		return nil, err
	}
	return key, nil
}

// httpClient talks to the CA, trusting caFile's roots if given.
func httpClient(caFile string) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = 30 * time.Second
	if caFile != "" {
		b, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("acme ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("acme ca %s: no PEM certificate", caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: tr, Timeout: time.Minute}, nil
}

// writeFile replaces path atomically with a 0600 file.
func writeFile(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// challenges is the HTTP-01 provider and the handler HAProxy's shoal_acme
// backend reaches.
type challenges struct {
	mu     sync.Mutex
	tokens map[string]token
	gate   Gate // nil: HAProxy passes every token on
}

type token struct{ domain, keyAuth string }

// Present keeps the token's answer, then lets it through HAProxy; lego
// asks the CA to fetch it after Present returns.
func (h *challenges) Present(ctx context.Context, domain, tok, keyAuth string) error {
	h.mu.Lock()
	h.tokens[tok] = token{domain: strings.ToLower(domain), keyAuth: keyAuth}
	h.mu.Unlock()
	if h.gate == nil {
		return nil
	}
	if err := h.gate.SetChallenge(ctx, tok, true); err != nil {
		return fmt.Errorf("pass the challenge through haproxy: %w", err)
	}
	return nil
}

func (h *challenges) CleanUp(ctx context.Context, _, tok, _ string) error {
	h.mu.Lock()
	delete(h.tokens, tok)
	h.mu.Unlock()
	if h.gate == nil {
		return nil
	}
	if err := h.gate.SetChallenge(ctx, tok, false); err != nil {
		return fmt.Errorf("close the challenge in haproxy: %w", err)
	}
	return nil
}

func (h *challenges) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tok, ok := strings.CutPrefix(r.URL.Path, http01.PathPrefix)
	host := r.Host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		host = hh
	}
	h.mu.Lock()
	t, known := h.tokens[tok]
	h.mu.Unlock()
	if !ok || !known || r.Method != http.MethodGet || !strings.EqualFold(t.domain, host) {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte(t.keyAuth))
}

// backoff is the wait after the n-th consecutive failure (from 0), with
// ±10% jitter so that many certificates do not retry in step.
func backoff(lo, hi time.Duration, n int) time.Duration {
	d := lo
	for range n {
		if d *= 2; d >= hi {
			d = hi
			break
		}
	}
	return d + time.Duration(rand.Int64N(int64(d)/5+1)) - d/10
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func serial(c *x509.Certificate) string { return c.SerialNumber.Text(16) }

func sameDomains(have, want []string) bool {
	a, b := lowerAll(have), lowerAll(want)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

func lowerAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strings.ToLower(s)
	}
	return out
}

// isDomain accepts a DNS name that is also a safe file name.
func isDomain(s string) bool {
	if s == "" || len(s) > 253 || strings.HasPrefix(s, ".") || strings.HasPrefix(s, "-") || strings.Contains(s, "..") || net.ParseIP(s) != nil {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}
