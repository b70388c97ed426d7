package haproxy

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoal-lb/shoal/internal/certstore"
	"github.com/shoal-lb/shoal/internal/config"
)

// TestRenderACME: a frontend with tls.acme sends the CA's challenges to the
// shoal_acme backend before any group's rule, the backend's server is
// shoal's challenge socket, and HAProxy accepts the result; without ACME
// neither is rendered; a group cannot take the backend's name.
func TestRenderACME(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir, "127.0.0.1:8080")
	plain, err := Render(cfg, PathsFor(dir))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain, acmeBackend) {
		t.Errorf("config without ACME mentions %s:\n%s", acmeBackend, plain)
	}

	// HTTP-01 asks on the plain bind; the TLS bind serves what ACME got.
	cfg.Frontends = []config.Frontend{{Name: "shoal", Bind: []string{cfg.Listen, "127.0.0.1:8443"}, Mode: config.ModeHTTP,
		Routes: cfg.Frontends[0].Routes,
		TLS: &config.TLS{ACME: &config.ACME{Email: "ops@example.com", Domains: []string{"example.com"}},
			Bind: []string{"127.0.0.1:8443"}, ALPN: []string{"h2", "http/1.1"}, MinVersion: "1.2", TicketKeys: config.TicketKeysOff}}}
	got, err := Render(cfg, PathsFor(dir))
	if err != nil {
		t.Fatal(err)
	}
	rule := "    use_backend shoal_acme if { path_beg /.well-known/acme-challenge/ }\n"
	i, j := strings.Index(got, rule), strings.Index(got, "    use_backend api ")
	if i < 0 || j < 0 || i > j {
		t.Errorf("the challenge rule is not before the groups' (at %d, api's at %d):\n%s", i, j, got)
	}
	if w := "\nbackend shoal_acme\n    mode http\n    no log\n    server shoal " + ACMESocket(PathsFor(dir)) + "\n"; !strings.Contains(got, w) {
		t.Errorf("config lacks %q:\n%s", w, got)
	}
	cfg.Groups[0].Name = acmeBackend
	if _, err := Render(cfg, PathsFor(dir)); err == nil || !strings.Contains(err.Error(), `group name "shoal_acme"`) {
		t.Errorf("a group named shoal_acme: %v, want an error naming it", err)
	}
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy not installed")
	}
	if err := certstore.New(dir, nil, nil).Write(cfg.Frontends); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "haproxy.cfg")
	writeFile(t, path, got)
	if out, err := exec.Command(bin, "-c", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
}
