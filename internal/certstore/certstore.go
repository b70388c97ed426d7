// Package certstore keeps the certificates HAProxy serves on TLS frontends.
//
// HAProxy writes nothing to disk when its certificates change at runtime, so
// the store writes every site's PEM (chain and key) and a crt-list per
// frontend under the state directory first, then tells the running HAProxy
// over its Runtime API; a reload or a restart reads the same files:
//
//	config certificates ─┐
//	tls.dir files ───────┼─► STATE/certs/FRONTEND/SITE.pem ─► FRONTEND.crtlist ─► bind ... ssl crt-list
//	Install (ACME) ──────┘   (0600, written first)            (read at start/reload)
//	                                 │
//	                                 └─► Runtime API: set/commit ssl cert (changed),
//	                                     new+set+commit ssl cert, add ssl crt-list (added),
//	                                     del ssl crt-list, del ssl cert (removed)
//
// The first certificate of a frontend is its default (served without SNI or
// for names no certificate has); it is always the site "default", so that a
// new default is a changed certificate, never a deleted one: HAProxy cannot
// remove the certificate a bind line defaults to.
package certstore

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

// Runtime runs one HAProxy Runtime API command, with a payload of several
// lines when payload is not empty (haproxy.Manager.Runtime).
type Runtime interface {
	Runtime(ctx context.Context, cmd, payload string) (string, error)
}

// defaultSite is the name of every frontend's default certificate.
const defaultSite = "default"

// maxPayload is what a "set ssl cert" payload may hold: HAProxy reads the
// command and its payload into one buffer of tune.bufsize (16384 bytes by
// default). Measured on 2.6.12: a 16,200-byte PEM after a 30-byte command
// went through, 16,770 bytes got no answer at all; this leaves room for a
// long path in the command.
const maxPayload = 16384 - 1024 - 256

// Store writes the certificates of the TLS frontends and keeps the running
// HAProxy's in line with them. Its methods are safe for concurrent use.
type Store struct {
	stateDir, dir string
	rt            Runtime
	log           *slog.Logger

	mu sync.Mutex
	// written is every TLS frontend's sites as on disk, in crt-list order;
	// previous is what the Write before the last one wrote, for Rollback.
	written, previous map[string][]site
	// served is, by frontend, what HAProxy serves as the last Push found
	// (by fingerprint) or installed it: after a failed Push it is not what
	// was written. A certificate HAProxy serves but the store does not
	// know (a failed replace of another's) is left out.
	served map[string][]site
	// acme names, by frontend, the domains tls.acme keeps certificates for.
	acme map[string][]string
	// rotate lists the frontends whose ticket keys shoal rotates.
	rotate []string
}

// site is one certificate of a frontend.
type site struct {
	name string
	pem  []byte // chain then key, as HAProxy reads it
	leaf *x509.Certificate
}

// New returns a store that keeps its files under stateDir/certs and talks
// to HAProxy through rt.
func New(stateDir string, rt Runtime, log *slog.Logger) *Store {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{
		stateDir: stateDir,
		dir:      Dir(stateDir),
		rt:       rt,
		log:      log.With("component", "certstore"),
		acme:     map[string][]string{},
		served:   map[string][]site{},
	}
}

// Dir is where the store of stateDir keeps its files.
func Dir(stateDir string) string { return filepath.Join(stateDir, "certs") }

// CrtList is the crt-list file of a frontend, which its TLS binds load.
func CrtList(stateDir, frontend string) string {
	return filepath.Join(Dir(stateDir), frontend+".crtlist")
}

// TicketKeys is the file of a frontend's TLS session ticket keys.
func TicketKeys(stateDir, frontend string) string {
	return filepath.Join(Dir(stateDir), frontend+".tlskeys")
}

func (s *Store) crtList(fe string) string    { return CrtList(s.stateDir, fe) }
func (s *Store) ticketKeys(fe string) string { return TicketKeys(s.stateDir, fe) }
func (s *Store) sitePath(fe, name string) string {
	return filepath.Join(s.dir, fe, name+".pem")
}

// installed is where Install keeps an ACME certificate: its source, as a
// config file is the source of a configured one. Frontend names have no
// dot, so no frontend's directory is this one.
func (s *Store) installed(name string) string {
	return filepath.Join(s.dir, "acme.issued", name+".pem")
}

// Write writes the certificates, crt-lists and ticket keys of frontends'
// TLS sections, for HAProxy to read when it starts or reloads. It reads
// every file before it writes any: an error leaves the store as it was.
func (s *Store) Write(frontends []config.Frontend) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("certificate directory: %w", err)
	}
	want := map[string][]site{}
	acme := map[string][]string{}
	var rotate []string
	for _, fe := range frontends {
		if fe.TLS == nil {
			continue
		}
		sites, err := s.sites(fe)
		if err != nil {
			return fmt.Errorf("frontend %s: %w", fe.Name, err)
		}
		want[fe.Name] = sites
		if fe.TLS.ACME != nil {
			acme[fe.Name] = fe.TLS.ACME.Domains
		}
		if fe.TLS.TicketKeys == config.TicketKeysRotate {
			rotate = append(rotate, fe.Name)
		}
	}
	if err := s.writeAll(want); err != nil {
		return err
	}
	for _, fe := range rotate {
		if _, err := os.Stat(s.ticketKeys(fe)); errors.Is(err, os.ErrNotExist) {
			if err := s.writeKeys(fe, newKeys(ticketKeysKept)); err != nil {
				return err
			}
		}
	}
	s.previous, s.written, s.acme, s.rotate = s.written, want, acme, rotate
	return nil
}

// Rollback writes back the files of the Write before the last, as they
// were then (their sources may have changed since): a config reload that
// HAProxy refused leaves the running certificates on disk too.
func (s *Store) Rollback() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.previous == nil {
		return nil // one Write or none: nothing to go back to
	}
	if err := s.writeAll(s.previous); err != nil {
		return err
	}
	s.written = s.previous
	return nil
}

// writeAll writes every frontend's files and removes those of frontends
// no longer there.
func (s *Store) writeAll(sites map[string][]site) error {
	for fe, list := range sites {
		if err := s.writeFrontend(fe, list); err != nil {
			return err
		}
	}
	lists, err := filepath.Glob(filepath.Join(s.dir, "*.crtlist"))
	if err != nil {
		return err
	}
	for _, l := range lists {
		fe := strings.TrimSuffix(filepath.Base(l), ".crtlist")
		if _, ok := sites[fe]; !ok {
			_ = os.Remove(l)
			_ = os.RemoveAll(filepath.Join(s.dir, fe))
		}
	}
	return nil
}

// sites reads a frontend's certificates: the configured ones (or tls.dir's),
// then those Install stored for its ACME domains. Without any, a
// self-signed placeholder is its default until ACME brings one: HAProxy
// refuses a TLS bind without a certificate.
func (s *Store) sites(fe config.Frontend) ([]site, error) {
	files := fe.TLS.Certificates
	if fe.TLS.Dir != "" {
		var err error
		if files, err = config.DirCertificates(fe.TLS.Dir); err != nil {
			return nil, err
		}
	}
	var sites []site
	used := map[string]bool{}
	add := func(name string, pemData []byte) error {
		st, err := parseSite(pemData)
		if err != nil {
			return err
		}
		if len(sites) == 0 {
			name = defaultSite
		}
		base := name
		for i := 2; used[name]; i++ {
			name = fmt.Sprintf("%s-%d", base, i)
		}
		used[name] = true
		st.name = name
		sites = append(sites, st)
		return nil
	}
	for _, f := range files {
		if err := config.CheckCertificate(f.Cert, f.Key); err != nil {
			return nil, err
		}
		pemData, err := combine(f.Cert, f.Key)
		if err != nil {
			return nil, err
		}
		if err := add(siteName(f.Cert), pemData); err != nil {
			return nil, fmt.Errorf("%s: %w", f.Cert, err)
		}
	}
	if fe.TLS.ACME != nil {
		for _, d := range fe.TLS.ACME.Domains {
			pemData, err := os.ReadFile(s.installed(d))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, err
			}
			if len(sites) == 0 {
				// Keep the placeholder as the default: the site named
				// after the domain is then added, never the default changed.
				if err := s.addPlaceholder(add); err != nil {
					return nil, err
				}
			}
			if err := add(d, pemData); err != nil {
				return nil, fmt.Errorf("%s: %w", s.installed(d), err)
			}
		}
	}
	if len(sites) == 0 {
		if err := s.addPlaceholder(add); err != nil {
			return nil, err
		}
	}
	return sites, nil
}

func (s *Store) addPlaceholder(add func(string, []byte) error) error {
	p := filepath.Join(s.dir, "placeholder.pem")
	pemData, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		if pemData, err = selfSigned("shoal placeholder"); err == nil {
			err = writeFile(p, pemData)
		}
	}
	if err != nil {
		return fmt.Errorf("placeholder certificate: %w", err)
	}
	return add(defaultSite, pemData)
}

// siteName makes a site's name from its file: letters, digits, '-', '_'
// and '.', which HAProxy takes in a path without quoting.
func siteName(file string) string {
	name := strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	name = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, name)
	if name = strings.TrimLeft(name, "."); name == "" {
		return "site"
	}
	return name
}

// combine reads a certificate chain and its key into one PEM, the chain
// first, without empty lines (they would end a Runtime API payload).
func combine(cert, key string) ([]byte, error) {
	c, err := os.ReadFile(cert)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	appendBlocks(&b, c, func(t string) bool { return t == "CERTIFICATE" })
	if key != cert {
		if c, err = os.ReadFile(key); err != nil {
			return nil, err
		}
	}
	appendBlocks(&b, c, func(t string) bool { return strings.HasSuffix(t, "PRIVATE KEY") })
	return b.Bytes(), nil
}

func appendBlocks(b *bytes.Buffer, data []byte, keep func(string) bool) {
	for {
		blk, rest := pem.Decode(data)
		if blk == nil {
			return
		}
		if keep(blk.Type) {
			_ = pem.Encode(b, &pem.Block{Type: blk.Type, Bytes: blk.Bytes})
		}
		data = rest
	}
}

// parseSite checks a combined PEM as HAProxy will load it.
func parseSite(pemData []byte) (site, error) {
	pair, err := tls.X509KeyPair(pemData, pemData)
	if err != nil {
		return site{}, err
	}
	if len(pemData) > maxPayload {
		return site{}, fmt.Errorf("certificate and key are %d bytes; HAProxy's Runtime API takes at most %d", len(pemData), maxPayload)
	}
	return site{pem: pemData, leaf: pair.Leaf}, nil
}

// writeFrontend writes fe's site files, then its crt-list, then removes the
// site files no longer listed.
func (s *Store) writeFrontend(fe string, sites []site) error {
	dir := filepath.Join(s.dir, fe)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("certificate directory: %w", err)
	}
	var list strings.Builder
	keep := map[string]bool{}
	for _, st := range sites {
		p := s.sitePath(fe, st.name)
		if old, err := os.ReadFile(p); err != nil || !bytes.Equal(old, st.pem) {
			if err := writeFile(p, st.pem); err != nil {
				return fmt.Errorf("frontend %s: certificate %s: %w", fe, st.name, err)
			}
		}
		keep[filepath.Base(p)] = true
		list.WriteString(p + "\n")
	}
	if err := writeFile(s.crtList(fe), []byte(list.String())); err != nil {
		return fmt.Errorf("frontend %s: crt-list: %w", fe, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("frontend %s: %w", fe, err)
	}
	for _, e := range ents {
		if !keep[e.Name()] {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	return nil
}

// Push makes the running HAProxy serve what was written, over the Runtime
// API, without a reload. A frontend HAProxy does not know yet (added to the
// config) needs a reload instead: Push leaves it alone.
func (s *Store) Push(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for fe := range s.served {
		if _, ok := s.written[fe]; !ok {
			delete(s.served, fe) // gone from the config HAProxy reloaded
		}
	}
	var errs []error
	for _, fe := range slices.Sorted(mapKeys(s.written)) {
		if err := s.pushLocked(ctx, fe); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// pushLocked brings HAProxy's certificates of fe in line with the files,
// comparing with what HAProxy says it holds (the crt-list's entries and
// their leaf's fingerprint), so that it is right after a restart of either:
// changed ones are replaced in one transaction each (the new one is served
// at once, the others untouched), added ones are loaded and appended to the
// crt-list, removed ones leave the crt-list and then memory. It records
// in s.served what HAProxy serves, whatever fails.
func (s *Store) pushLocked(ctx context.Context, fe string) error {
	list := s.crtList(fe)
	out, err := s.rt.Runtime(ctx, "show ssl crt-list "+list, "")
	if err != nil {
		return fmt.Errorf("frontend %s: %w", fe, err)
	}
	if strings.Contains(out, "didn't find") {
		delete(s.served, fe)
		return nil // not loaded yet: HAProxy reads the files when it reloads
	}
	// now is what HAProxy serves, by path: what the last push knew, until
	// a fingerprint or a command says otherwise.
	now := map[string]site{}
	for _, st := range s.served[fe] {
		now[s.sitePath(fe, st.name)] = st
	}
	defer func() { s.served[fe] = s.inOrder(fe, now) }()
	served := map[string]bool{}
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) > 0 && !strings.HasPrefix(f[0], "#") {
			served[f[0]] = true
		}
	}
	for p := range now {
		if !served[p] {
			delete(now, p)
		}
	}
	want := map[string]bool{}
	for _, st := range s.written[fe] {
		p := s.sitePath(fe, st.name)
		want[p] = true
		if !served[p] {
			if err := s.addCert(ctx, list, p, st.pem); err != nil {
				return fmt.Errorf("frontend %s: add certificate %s: %w", fe, st.name, err)
			}
			now[p] = st
			s.log.Info("certificate added", "frontend", fe, "site", st.name, "names", strings.Join(st.leaf.DNSNames, ","))
			continue
		}
		fp, err := s.fingerprint(ctx, p)
		if err != nil {
			return fmt.Errorf("frontend %s: certificate %s: %w", fe, st.name, err)
		}
		if sameLeaf(fp, st) {
			now[p] = st
			continue
		}
		if old, ok := now[p]; ok && !sameLeaf(fp, old) {
			delete(now, p) // HAProxy serves neither: unknown
		}
		if err := s.setCert(ctx, p, st.pem); err != nil {
			return fmt.Errorf("frontend %s: replace certificate %s: %w", fe, st.name, err)
		}
		now[p] = st
		s.log.Info("certificate replaced", "frontend", fe, "site", st.name, "serial", st.leaf.SerialNumber.Text(16))
	}
	for _, p := range slices.Sorted(mapKeys(served)) {
		if want[p] {
			continue
		}
		if err := s.expect(ctx, "del ssl crt-list "+list+" "+p, "", "deleted"); err != nil {
			return fmt.Errorf("frontend %s: remove certificate %s: %w", fe, p, err)
		}
		delete(now, p) // out of the crt-list: no longer served
		if err := s.expect(ctx, "del ssl cert "+p, "", "deleted"); err != nil {
			return fmt.Errorf("frontend %s: remove certificate %s: %w", fe, p, err)
		}
		s.log.Info("certificate removed", "frontend", fe, "file", p)
	}
	return nil
}

// sameLeaf reports whether HAProxy's fingerprint fp is st's leaf's.
func sameLeaf(fp string, st site) bool {
	sum := sha1.Sum(st.leaf.Raw)
	return strings.EqualFold(fp, hex.EncodeToString(sum[:]))
}

// inOrder lists the sites of now (by path) in fe's crt-list order, then
// those no longer written (a removal that failed) by name.
func (s *Store) inOrder(fe string, now map[string]site) []site {
	var list []site
	for _, st := range s.written[fe] {
		if x, ok := now[s.sitePath(fe, st.name)]; ok {
			list = append(list, x)
			delete(now, s.sitePath(fe, st.name))
		}
	}
	for _, p := range slices.Sorted(mapKeys(now)) {
		list = append(list, now[p])
	}
	return list
}

// addCert loads a certificate HAProxy does not serve yet and appends it to
// list. One a failed push left loaded but unlisted is replaced.
func (s *Store) addCert(ctx context.Context, list, path string, pemData []byte) error {
	out, err := s.rt.Runtime(ctx, "new ssl cert "+path, "")
	if err != nil {
		return err
	}
	if !strings.Contains(out, "New empty certificate store") && !strings.Contains(out, "already exists") {
		return fmt.Errorf("haproxy %q: %s", "new ssl cert "+path, strings.TrimSpace(out))
	}
	if err := s.setCert(ctx, path, pemData); err != nil {
		return err
	}
	return s.expect(ctx, "add ssl crt-list "+list+" "+path, "", "Success!")
}

// fingerprint is the SHA-1 fingerprint of the leaf HAProxy serves from path.
func (s *Store) fingerprint(ctx context.Context, path string) (string, error) {
	out, err := s.rt.Runtime(ctx, "show ssl cert "+path, "")
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(out) {
		if v, ok := strings.CutPrefix(line, "SHA1 FingerPrint:"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("haproxy %q: %s", "show ssl cert "+path, strings.TrimSpace(out))
}

// setCert replaces the certificate HAProxy holds for path in one
// transaction.
func (s *Store) setCert(ctx context.Context, path string, pemData []byte) error {
	if err := s.expect(ctx, "set ssl cert "+path, string(pemData), "Transaction"); err != nil {
		return err
	}
	if err := s.expect(ctx, "commit ssl cert "+path, "", "Success!"); err != nil {
		// Leave no transaction open: the next set would extend it.
		_, _ = s.rt.Runtime(ctx, "abort ssl cert "+path, "")
		return err
	}
	return nil
}

// expect runs cmd and fails unless the answer contains want: HAProxy's
// SSL commands answer errors as text.
func (s *Store) expect(ctx context.Context, cmd, payload, want string) error {
	out, err := s.rt.Runtime(ctx, cmd, payload)
	if err != nil {
		return err
	}
	if !strings.Contains(out, want) {
		return fmt.Errorf("haproxy %q: %s", cmd, strings.TrimSpace(out))
	}
	return nil
}

// Install stores an ACME certificate (the chain, leaf first, and its key)
// for the frontends whose tls.acme lists name, and serves it without a
// reload. It is kept in the state directory, so a restart serves it too.
func (s *Store) Install(ctx context.Context, name string, certPEM, keyPEM []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var fronts []string
	for fe, domains := range s.acme {
		if slices.Contains(domains, name) {
			fronts = append(fronts, fe)
		}
	}
	if len(fronts) == 0 {
		return fmt.Errorf("install certificate %s: no frontend's tls.acme.domains lists it", name)
	}
	slices.Sort(fronts)
	var b bytes.Buffer
	appendBlocks(&b, certPEM, func(t string) bool { return t == "CERTIFICATE" })
	appendBlocks(&b, keyPEM, func(t string) bool { return strings.HasSuffix(t, "PRIVATE KEY") })
	st, err := parseSite(b.Bytes())
	if err != nil {
		return fmt.Errorf("install certificate %s: %w", name, err)
	}
	if err := os.MkdirAll(filepath.Dir(s.installed(name)), 0o700); err != nil {
		return fmt.Errorf("install certificate %s: %w", name, err)
	}
	if err := writeFile(s.installed(name), st.pem); err != nil {
		return fmt.Errorf("install certificate %s: %w", name, err)
	}
	var errs []error
	for _, fe := range fronts {
		sites := s.written[fe]
		i := slices.IndexFunc(sites, func(x site) bool { return x.name == name })
		st.name = name
		if i >= 0 {
			sites[i] = st
		} else {
			sites = append(sites, st)
		}
		if err := s.writeFrontend(fe, sites); err != nil {
			errs = append(errs, err)
			continue
		}
		s.written[fe] = sites
		errs = append(errs, s.pushLocked(ctx, fe))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("install certificate %s: %w", name, err)
	}
	return nil
}

// Cert is one certificate a frontend serves.
type Cert struct {
	Frontend string    `json:"frontend"`
	Site     string    `json:"site"`
	Names    []string  `json:"names"`
	Serial   string    `json:"serial"`
	Issuer   string    `json:"issuer"`
	NotAfter time.Time `json:"not_after"`
	// Pending is the serial of the certificate the files hold for the
	// site when HAProxy serves another (a push failed; the next push or
	// reload serves the files').
	Pending string `json:"pending_serial,omitempty"`
	// NotServed marks a site the files hold and HAProxy does not serve
	// (yet): the other fields are the file's.
	NotServed bool `json:"not_served,omitempty"`
}

// Certs lists the certificates HAProxy serves on every TLS frontend, by
// frontend and in crt-list order, as the last push found them; then the
// written sites it does not serve, flagged NotServed.
func (s *Store) Certs() []Cert {
	s.mu.Lock()
	defer s.mu.Unlock()
	var list []Cert
	fronts := map[string]bool{}
	for fe := range s.written {
		fronts[fe] = true
	}
	for fe := range s.served {
		fronts[fe] = true
	}
	for _, fe := range slices.Sorted(mapKeys(fronts)) {
		served := map[string]bool{}
		for _, st := range s.served[fe] {
			served[st.name] = true
			c := certOf(fe, st)
			if i := slices.IndexFunc(s.written[fe], func(w site) bool { return w.name == st.name }); i >= 0 && !s.written[fe][i].leaf.Equal(st.leaf) {
				c.Pending = s.written[fe][i].leaf.SerialNumber.Text(16)
			}
			list = append(list, c)
		}
		for _, st := range s.written[fe] {
			if !served[st.name] {
				c := certOf(fe, st)
				c.NotServed = true
				list = append(list, c)
			}
		}
	}
	return list
}

func certOf(fe string, st site) Cert {
	names := st.leaf.DNSNames
	if len(names) == 0 && st.leaf.Subject.CommonName != "" {
		names = []string{st.leaf.Subject.CommonName}
	}
	for _, ip := range st.leaf.IPAddresses {
		names = append(names, ip.String())
	}
	return Cert{
		Frontend: fe, Site: st.name, Names: names,
		Serial:   st.leaf.SerialNumber.Text(16),
		Issuer:   st.leaf.Issuer.String(),
		NotAfter: st.leaf.NotAfter,
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// writeFile writes data to path atomically, readable by the owner only:
// the file holds a private key.
func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// selfSigned returns a PEM certificate and key for cn, ECDSA P-256.
func selfSigned(cn string) ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: der})
	_ = pem.Encode(&b, &pem.Block{Type: "PRIVATE KEY", Bytes: kder})
	return b.Bytes(), nil
}
