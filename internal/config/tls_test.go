package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/shoal-lb/shoal/internal/testcert"
)

// decodeTLS decodes text as a frontend's tls section of dir/shoal.yaml.
func decodeTLS(t *testing.T, dir, text string) (*TLS, ErrorList) {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatal(err)
	}
	d := &decoder{file: "shoal.yaml", dir: dir, budget: 1 << 20}
	tls := d.tls(doc.Content[0], "frontends[0].tls")
	return tls, d.sorted()
}

// TestDecodeTLS: every problem with a frontend's certificates is an error
// that names the field and the file, found when the config loads.
func TestDecodeTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t)
	ca.Valid(t, "a.test").Write(t, dir, "a")
	ca.Valid(t, "b.test").Write(t, dir, "b")
	ca.Leaf(t, time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour), "old.test").Write(t, dir, "old")
	certs := filepath.Join(dir, "certs")
	empty := filepath.Join(dir, "empty")
	for _, d := range []string{certs, empty} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	ca.Valid(t, "c.test").Write(t, certs, "c")
	writeTestFile(t, filepath.Join(dir, "ca.pem"), string(ca.PEM))
	garbage := filepath.Join(dir, "garbage.crt")
	writeTestFile(t, garbage, "not a certificate\n")

	for _, tt := range []struct {
		name, text, want string
	}{
		{"certificates", "{certificates: [{cert: a.crt, key: a.key}, {cert: b.crt, key: b.key}], redirect_http: true}", ""},
		{"dir", "{dir: certs, alpn: [http/1.1], min_version: '1.3', ticket_keys: off}", ""},
		{"acme only", "{acme: {email: ops@example.com, domains: [example.com], directory: 'https://127.0.0.1:14000/dir', ca: ca.pem, renew_before: 720h}}", ""},
		{"no source", "{redirect_http: true}",
			"shoal.yaml:1:1: frontends[0].tls: needs certificates, dir or acme"},
		{"missing cert", "{certificates: [{cert: nope.crt, key: a.key}]}",
			"shoal.yaml:1:24: frontends[0].tls.certificates[0].cert: stat " + filepath.Join(dir, "nope.crt") + ": no such file or directory"},
		{"not a certificate", "{certificates: [{cert: garbage.crt, key: a.key}]}",
			"shoal.yaml:1:24: frontends[0].tls.certificates[0].cert: cannot use " + garbage + " with key " + filepath.Join(dir, "a.key") + ": tls: failed to find any PEM data in certificate input"},
		{"cert is a directory", "{certificates: [{cert: certs, key: a.key}]}",
			"shoal.yaml:1:24: frontends[0].tls.certificates[0].cert: " + certs + " must be a regular PEM file"},
		{"key of another certificate", "{certificates: [{cert: a.crt, key: b.key}]}",
			"shoal.yaml:1:36: frontends[0].tls.certificates[0].key: cannot use " + filepath.Join(dir, "a.crt") + " with key " + filepath.Join(dir, "b.key") + ": tls: private key does not match public key"},
		{"key is not a key", "{certificates: [{cert: a.crt, key: garbage.crt}]}",
			"shoal.yaml:1:36: frontends[0].tls.certificates[0].key: cannot use " + filepath.Join(dir, "a.crt") + " with key " + garbage + ": tls: failed to find any PEM data in key input"},
		{"key is a certificate", "{certificates: [{cert: a.crt, key: b.crt}]}",
			"shoal.yaml:1:36: frontends[0].tls.certificates[0].key: cannot use " + filepath.Join(dir, "a.crt") + " with key " + filepath.Join(dir, "b.crt") + ": tls: found a certificate rather than a key in the PEM for the private key"},
		{"missing key", "{certificates: [{cert: a.crt, key: nope.key}]}",
			"shoal.yaml:1:36: frontends[0].tls.certificates[0].key: stat " + filepath.Join(dir, "nope.key") + ": no such file or directory"},
		{"expired", "{certificates: [{cert: old.crt, key: old.key}]}",
			"shoal.yaml:1:24: frontends[0].tls.certificates[0].cert: " + filepath.Join(dir, "old.crt") + " expired on "},
		{"empty dir", "{dir: empty}",
			"shoal.yaml:1:7: frontends[0].tls.dir: " + empty + " holds no certificate"},
		{"missing dir", "{dir: nodir}",
			"shoal.yaml:1:7: frontends[0].tls.dir: open " + filepath.Join(dir, "nodir") + ": no such file or directory"},
		{"dir and certificates", "{dir: certs, certificates: [{cert: a.crt, key: a.key}]}",
			"shoal.yaml:1:7: frontends[0].tls.dir: conflicts with certificates"},
		{"empty certificates", "{certificates: []}",
			"shoal.yaml:1:16: frontends[0].tls.certificates: must list at least one"},
		{"alpn", "{dir: certs, alpn: [h3]}",
			`shoal.yaml:1:21: frontends[0].tls.alpn[0]: must be one of h2, http/1.1, got "h3"`},
		{"min_version", "{dir: certs, min_version: '1.1'}",
			`shoal.yaml:1:27: frontends[0].tls.min_version: must be "1.2" or "1.3", got "1.1"`},
		{"ticket_keys", "{dir: certs, ticket_keys: never}",
			`shoal.yaml:1:27: frontends[0].tls.ticket_keys: must be rotate or off, got "never"`},
		{"bind", "{dir: certs, bind: [443]}",
			`shoal.yaml:1:21: frontends[0].tls.bind[0]: must be host:port, got "443"`},
		{"acme wildcard", "{acme: {email: ops@example.com, domains: ['*.example.com']}}",
			`shoal.yaml:1:43: frontends[0].tls.acme.domains[0]: a wildcard cannot be validated over HTTP-01`},
		{"acme email", "{acme: {email: ops, domains: [example.com]}}",
			`shoal.yaml:1:16: frontends[0].tls.acme.email: must be an email address, got "ops"`},
		{"acme directory", "{acme: {email: ops@example.com, domains: [example.com], directory: 'http://ca/dir'}}",
			`shoal.yaml:1:68: frontends[0].tls.acme.directory: must be an https:// URL`},
		{"acme ca", "{acme: {email: ops@example.com, domains: [example.com], ca: a.key}}",
			`shoal.yaml:1:61: frontends[0].tls.acme.ca: ` + filepath.Join(dir, "a.key") + ` holds no PEM certificate`},
		{"acme domains", "{acme: {email: ops@example.com}}",
			`shoal.yaml:1:8: frontends[0].tls.acme.domains: required`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, errs := decodeTLS(t, dir, tt.text)
			if tt.want == "" {
				if len(errs) > 0 {
					t.Fatal(errs)
				}
				if got == nil || len(got.Certificates) == 0 && got.Dir == "" && got.ACME == nil {
					t.Fatalf("decoded %+v", got)
				}
				return
			}
			if len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), tt.want) {
				t.Fatalf("errors:\n%v\nwant one starting with:\n%s", errs, tt.want)
			}
		})
	}
}

// TestDecodeTLSValues: what a tls section decodes to, defaults included.
func TestDecodeTLSValues(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t)
	ca.Valid(t, "a.test").Write(t, dir, "a")
	got, errs := decodeTLS(t, dir, "{certificates: [{cert: a.crt, key: a.key}], redirect_http: true}")
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	want := TLS{
		Certificates: []TLSFiles{{Cert: filepath.Join(dir, "a.crt"), Key: filepath.Join(dir, "a.key")}},
		ALPN:         []string{"h2", "http/1.1"}, MinVersion: "1.2", RedirectHTTP: true, TicketKeys: TicketKeysRotate,
	}
	if got.MinVersion != want.MinVersion || got.TicketKeys != want.TicketKeys || !got.RedirectHTTP ||
		strings.Join(got.ALPN, ",") != "h2,http/1.1" || len(got.Certificates) != 1 || got.Certificates[0] != want.Certificates[0] {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
}
