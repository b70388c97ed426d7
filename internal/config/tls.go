package config

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// ALPN protocols a TLS frontend may offer: HAProxy speaks both to clients.
var alpnProtocols = []string{"h2", "http/1.1"}

// Values of TLS.MinVersion, as HAProxy's ssl-min-ver names them.
var tlsVersions = map[string]string{"1.2": "TLSv1.2", "1.3": "TLSv1.3"}

// HAProxyTLSVersion returns HAProxy's name for TLS.MinVersion ("TLSv1.2").
func HAProxyTLSVersion(v string) (string, bool) {
	s, ok := tlsVersions[v]
	return s, ok
}

// certExtensions are the files of a tls.dir that are certificates; the
// others (keys, .ocsp responses) are read beside them or ignored.
var certExtensions = []string{".pem", ".crt", ".cer"}

// tls decodes a frontend's tls section. Every certificate is loaded as the
// store will load it, so that a missing file, a key that does not match or
// an expired certificate is a config error, not a failed HAProxy reload.
func (d *decoder) tls(n *yaml.Node, path string) *TLS {
	f := section[TLS](d, n, path)
	t := defaultTLS
	t.ALPN = slices.Clone(defaultTLS.ALPN)

	if cn := f.get("certificates"); cn != nil {
		items, ok := d.sequence(cn, f.field("certificates"), "a list of {cert, key}")
		if ok && len(items) == 0 {
			d.errorf(cn, f.field("certificates"), "must list at least one {cert, key}; leave it out to use dir or acme")
		}
		for i, it := range items {
			field := fmt.Sprintf("%s[%d]", f.field("certificates"), i)
			if c := d.tlsFiles(it, field); c != nil {
				t.Certificates = append(t.Certificates, *c)
			}
		}
	}
	if dir, dn := f.str("dir", ""); dn != nil {
		t.Dir = abs(d.dir, dir)
		if f.get("certificates") != nil {
			d.errorf(dn, f.field("dir"), "conflicts with certificates; set only one")
		} else if _, err := DirCertificates(t.Dir); err != nil {
			d.errorf(dn, f.field("dir"), "%v", err)
		}
	}
	if an := f.get("acme"); an != nil {
		t.ACME = d.acme(an, f.field("acme"))
	}
	if f.node != nil && f.get("certificates") == nil && f.get("dir") == nil && f.get("acme") == nil {
		d.errorf(f.node, path, "needs certificates, dir or acme: where the certificates come from")
	}

	for _, it := range f.strings("bind") {
		if err := checkHostPort(it.val); err != nil {
			d.errorf(it.node, it.field, "%v", err)
		}
		t.Bind = append(t.Bind, it.val)
	}
	if an := f.get("alpn"); an != nil {
		items := f.strings("alpn")
		if an.Kind == yaml.SequenceNode && len(an.Content) == 0 {
			d.errorf(an, f.field("alpn"), "must list at least one protocol: %s", strings.Join(alpnProtocols, ", "))
		}
		t.ALPN = nil
		for _, it := range items {
			switch {
			case !slices.Contains(alpnProtocols, it.val):
				d.errorf(it.node, it.field, "must be one of %s, got %q", strings.Join(alpnProtocols, ", "), it.val)
			case slices.Contains(t.ALPN, it.val):
				d.errorf(it.node, it.field, "%q is listed twice", it.val)
			}
			t.ALPN = append(t.ALPN, it.val)
		}
	}
	var vn *yaml.Node
	t.MinVersion, vn = f.str("min_version", defaultTLS.MinVersion)
	if _, ok := tlsVersions[t.MinVersion]; !ok {
		d.errorf(vn, f.field("min_version"), `must be "1.2" or "1.3", got %q`, t.MinVersion)
	}
	t.RedirectHTTP, _ = f.boolean("redirect_http", defaultTLS.RedirectHTTP)
	var kn *yaml.Node
	t.TicketKeys, kn = f.str("ticket_keys", defaultTLS.TicketKeys)
	if t.TicketKeys != TicketKeysRotate && t.TicketKeys != TicketKeysOff {
		d.errorf(kn, f.field("ticket_keys"), "must be %s or %s, got %q", TicketKeysRotate, TicketKeysOff, t.TicketKeys)
	}
	return &t
}

// checkTLSBinds checks fe's tls.bind against its binds, and that
// redirect_http has plain binds to redirect from.
func (d *decoder) checkTLSBinds(path string, fe Frontend) {
	t := fe.TLS
	for i, b := range t.Bind {
		if !slices.Contains(fe.Bind, b) {
			d.errorAt(fmt.Sprintf("%s.bind[%d]", path, i), "%q is not one of the frontend's bind addresses (%s)", b, strings.Join(fe.Bind, ", "))
		}
	}
	if !t.RedirectHTTP {
		return
	}
	switch field := path + ".redirect_http"; {
	case fe.Mode == ModeTCP:
		d.errorAt(field, "applies to http frontends only")
	case !fe.hasPlainBind():
		d.errorAt(field, "every bind speaks TLS, so there is no plain bind to redirect; list the TLS ones in tls.bind")
	}
}

// acme decodes tls.acme.
func (d *decoder) acme(n *yaml.Node, path string) *ACME {
	f := section[ACME](d, n, path)
	a := defaultACME
	if email, en := f.str("email", ""); en != nil {
		if strings.ContainsFunc(email, func(r rune) bool { return r <= ' ' || r == 0x7f }) || !strings.Contains(email, "@") {
			d.errorf(en, f.field("email"), "must be an email address, got %q", truncate(email))
		}
		a.Email = email
	}
	var dn *yaml.Node
	a.Directory, dn = f.str("directory", defaultACME.Directory)
	if u, err := url.Parse(a.Directory); err != nil || u.Scheme != "https" || u.Host == "" {
		d.errorf(dn, f.field("directory"), "must be an https:// URL, got %q", truncate(a.Directory))
	}
	dl := f.get("domains")
	if dl != nil && dl.Kind == yaml.SequenceNode && len(dl.Content) == 0 {
		d.errorf(dl, f.field("domains"), "must list at least one domain")
	}
	for _, it := range f.strings("domains") {
		// HTTP-01, the challenge HAProxy routes to shoal, cannot prove a
		// wildcard.
		if strings.HasPrefix(it.val, "*") {
			d.errorf(it.node, it.field, "a wildcard cannot be validated over HTTP-01, got %q", it.val)
		} else if err := checkHostName(it.val); err != nil {
			d.errorf(it.node, it.field, "%v, got %q", err, it.val)
		}
		a.Domains = append(a.Domains, it.val)
	}
	if ca, cn := f.str("ca", ""); cn != nil {
		a.CA = abs(d.dir, ca)
		if err := checkCAFile(a.CA); err != nil {
			d.errorf(cn, f.field("ca"), "%v", err)
		}
	}
	a.RenewBefore, _ = f.duration("renew_before", defaultACME.RenewBefore)
	return &a
}

// checkCAFile makes sure path holds PEM certificates to trust.
func checkCAFile(path string) error {
	b, err := readRegular(path, maxPEMFile)
	if err != nil {
		return err
	}
	if !x509.NewCertPool().AppendCertsFromPEM(b) {
		return fmt.Errorf("%s holds no PEM certificate", path)
	}
	return nil
}

// DirCertificates returns the certificate files of dir (.pem, .crt or .cer),
// each with its key, sorted by name, after loading each as the store will:
// the key is in the same file or beside it with the extension .key.
func DirCertificates(dir string) ([]TLSFiles, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var list []TLSFiles
	for _, e := range ents {
		ext := filepath.Ext(e.Name())
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") || !slices.Contains(certExtensions, ext) {
			continue
		}
		cert := filepath.Join(dir, e.Name())
		b, err := readRegular(cert, maxPEMFile)
		if err != nil {
			return nil, err
		}
		key := cert
		if !hasPEMKey(b) {
			key = strings.TrimSuffix(cert, ext) + ".key"
		}
		if err := CheckCertificate(cert, key); err != nil {
			return nil, err
		}
		list = append(list, TLSFiles{Cert: cert, Key: key})
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("%s holds no certificate (files named *%s)", dir, strings.Join(certExtensions, ", *"))
	}
	return list, nil
}

func hasPEMKey(b []byte) bool {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return false
		}
		if strings.HasSuffix(blk.Type, "PRIVATE KEY") {
			return true
		}
	}
}

// KeyError is CheckCertificate's error when the key is at fault: it cannot
// be read, holds no private key, or is not the certificate's; a
// configuration error then names the key, not the certificate.
type KeyError struct{ Err error }

func (e *KeyError) Error() string { return e.Err.Error() }
func (e *KeyError) Unwrap() error { return e.Err }

// CheckCertificate loads cert and key as a pair and rejects a certificate
// that has expired: HAProxy would serve it, and every client refuse it.
func CheckCertificate(cert, key string) error {
	for _, p := range []string{cert, key} {
		if fi, err := os.Stat(p); err != nil {
			return blame(p == key && p != cert, err)
		} else if !fi.Mode().IsRegular() || fi.Size() > maxPEMFile {
			return blame(p == key && p != cert, fmt.Errorf("%s must be a regular PEM file of at most %d bytes", p, maxPEMFile))
		}
	}
	certPEM, err := os.ReadFile(cert)
	if err != nil {
		return err
	}
	keyPEM, err := os.ReadFile(key)
	if err != nil {
		return blame(key != cert, err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if cert == key {
			return fmt.Errorf("cannot use %s: %w", cert, err)
		}
		// The certificate parses on its own: what failed is the key.
		return blame(hasLeaf(certPEM), fmt.Errorf("cannot use %s with key %s: %w", cert, key, err))
	}
	if pair.Leaf == nil {
		return fmt.Errorf("%s: %w", cert, errors.New("no certificate"))
	}
	if now := time.Now(); now.After(pair.Leaf.NotAfter) {
		return fmt.Errorf("%s expired on %s", cert, pair.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// blame makes err a KeyError when the key is at fault.
func blame(key bool, err error) error {
	if key {
		return &KeyError{err}
	}
	return err
}

// hasLeaf reports whether b's first certificate block parses.
func hasLeaf(b []byte) bool {
	for {
		var blk *pem.Block
		if blk, b = pem.Decode(b); blk == nil {
			return false
		}
		if blk.Type == "CERTIFICATE" {
			_, err := x509.ParseCertificate(blk.Bytes)
			return err == nil
		}
	}
}
