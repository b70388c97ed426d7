// Package testpebble runs pebble, Let's Encrypt's test CA, for the tests of
// several packages: pebble-challtestsrv is its DNS and answers 127.0.0.1
// for every name, so that pebble validates HTTP-01 challenges on a local
// port. Never a public CA.
package testpebble

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/testport"
)

// Version is the pebble the Makefile's test-deps installs (PEBBLE_VERSION
// there).
const Version = "v2.10.1"

// CA is a running pebble.
type CA struct {
	Directory string // the ACME directory URL
	Mgmt      string // the management API's base URL
	CAFile    string // the CA of both URLs' TLS
	Module    string // pebble's module directory (its test certificates)
	args      []string
	cmd       *exec.Cmd
}

// Require finds the binaries and the module's files, skipping the test
// when they (or HAProxy, which every caller needs) are missing, failing in
// CI.
func Require(t *testing.T) (bin, challtestsrv, module string) {
	t.Helper()
	missing := func(what string) {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s missing: run make test-deps", what)
		}
		t.Skipf("%s missing: run make test-deps", what)
	}
	if _, err := exec.LookPath("haproxy"); err != nil {
		missing("haproxy")
	}
	out, err := exec.Command("go", "env", "GOPATH", "GOMODCACHE").Output()
	if err != nil {
		missing("go env: " + err.Error())
	}
	env := strings.Fields(string(out))
	gobin := filepath.Join(strings.Split(env[0], string(os.PathListSeparator))[0], "bin")
	look := func(name string) string {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		p := filepath.Join(gobin, name)
		if _, err := os.Stat(p); err != nil {
			missing(name)
		}
		return p
	}
	bin, challtestsrv = look("pebble"), look("pebble-challtestsrv")
	module = filepath.Join(env[1], "github.com/letsencrypt/pebble/v2@"+Version)
	if _, err := os.Stat(filepath.Join(module, "test/certs/pebble.minica.pem")); err != nil {
		missing("pebble module " + Version)
	}
	return bin, challtestsrv, module
}

// Start runs pebble until the test ends, validating HTTP-01 on httpPort
// of 127.0.0.1, issuing certificates valid for validity.
func Start(t *testing.T, httpPort int, validity time.Duration) *CA {
	t.Helper()
	bin, challtestsrv, module := Require(t)
	dir := t.TempDir()
	dns := FreePort(t, "udp")
	run(t, "pebble-challtestsrv", exec.Command(challtestsrv,
		"-dnsserver", fmt.Sprintf("127.0.0.1:%d", dns), "-management", fmt.Sprintf("127.0.0.1:%d", FreePort(t, "tcp")),
		"-defaultIPv4", "127.0.0.1", "-defaultIPv6", "",
		"-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", ""))

	listen, mgmt := FreePort(t, "tcp"), FreePort(t, "tcp")
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress":           fmt.Sprintf("127.0.0.1:%d", listen),
		"managementListenAddress": fmt.Sprintf("127.0.0.1:%d", mgmt),
		"certificate":             filepath.Join(module, "test/certs/localhost/cert.pem"),
		"privateKey":              filepath.Join(module, "test/certs/localhost/key.pem"),
		"httpPort":                httpPort,
		"tlsPort":                 FreePort(t, "tcp"),
		"keyAlgorithm":            "ecdsa",
		"retryAfter":              map[string]int{"authz": 1, "order": 1},
		"profiles":                map[string]any{"default": map[string]any{"validityPeriod": int(validity / time.Second)}},
	}}
	b, _ := json.Marshal(cfg)
	cfgFile := filepath.Join(dir, "pebble.json")
	if err := os.WriteFile(cfgFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	p := &CA{
		Directory: fmt.Sprintf("https://127.0.0.1:%d/dir", listen),
		Mgmt:      fmt.Sprintf("https://127.0.0.1:%d", mgmt),
		CAFile:    filepath.Join(module, "test/certs/pebble.minica.pem"),
		Module:    module,
		args:      []string{bin, "-config", cfgFile, "-dnsserver", fmt.Sprintf("127.0.0.1:%d", dns)},
	}
	p.Restart(t)
	return p
}

// Restart runs pebble (again: a new CA, its root and accounts new) and
// waits until it answers.
func (p *CA) Restart(t *testing.T) {
	t.Helper()
	cmd := exec.Command(p.args[0], p.args[1:]...)
	// No random sleep before validating, no bad nonces thrown in, and a
	// renewal is validated again (through HAProxy) rather than reusing the
	// authorization.
	cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0")
	p.cmd = run(t, "pebble", cmd)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := p.Get(p.Directory)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pebble did not answer in 10s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Client is an HTTP client that trusts pebble's minica.
func (p *CA) Client() (*http.Client, error) {
	b, err := os.ReadFile(p.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: no PEM certificate", p.CAFile)
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}, nil
}

// Get fetches one of pebble's URLs.
func (p *CA) Get(url string) ([]byte, error) {
	hc, err := p.Client()
	if err != nil {
		return nil, err
	}
	resp, err := hc.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return b, err
}

// Roots is pebble's issuing root, from its management API.
func (p *CA) Roots(t *testing.T) *x509.CertPool {
	t.Helper()
	b, err := p.Get(p.Mgmt + "/roots/0")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("pebble's root is not PEM: %q", b)
	}
	return pool
}

// Stop kills pebble: the CA is down.
func (p *CA) Stop() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// run runs cmd until the test ends, its output in the test's log if it
// fails.
func run(t *testing.T, name string, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, out.String())
		}
	})
	return cmd
}

// FreePort is a port of 127.0.0.1 free at the moment, tcp or udp.
func FreePort(t *testing.T, network string) int {
	t.Helper()
	return testport.Free(t) // free for both networks
}
