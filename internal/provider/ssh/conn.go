package ssh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// backoffMin is the reconnection back-off's first wait, doubled after each
// failed attempt up to the provider's reconnect_max.
const backoffMin = 250 * time.Millisecond

// clientConfig reads the host's key and known_hosts files (no network I/O):
// what New and Update refuse a host for.
func clientConfig(hc Host, timeout time.Duration) (*gossh.ClientConfig, error) {
	name := hc.Name()
	raw, err := os.ReadFile(hc.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("host %s: key_file: %w", name, err)
	}
	signer, err := gossh.ParsePrivateKey(raw)
	if err != nil {
		return nil, fmt.Errorf("host %s: key_file %s: %w (an unencrypted PEM or OpenSSH private key is needed)", name, hc.KeyFile, err)
	}
	known := hc.KnownHosts
	if known == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, fmt.Errorf("host %s: known_hosts: %w", name, err)
		}
		known = filepath.Join(home, ".ssh", "known_hosts")
	}
	cb, err := knownhosts.New(known)
	if err != nil {
		return nil, fmt.Errorf("host %s: known_hosts: %w", name, err)
	}
	addr := hc.DialAddress()
	return &gossh.ClientConfig{
		User:            hc.User,
		Auth:            []gossh.AuthMethod{gossh.PublicKeys(signer)},
		HostKeyCallback: hostKeyCallback(cb, known),
		// Ask for the key types known_hosts has for the host: otherwise the
		// server may offer another type of its keys first, which would look
		// like a changed key.
		HostKeyAlgorithms: knownAlgorithms(cb, addr),
		Timeout:           timeout,
	}, nil
}

// hostKeyCallback is knownhosts' check with errors an operator can act on.
func hostKeyCallback(cb gossh.HostKeyCallback, file string) gossh.HostKeyCallback {
	return func(hostname string, remote net.Addr, key gossh.PublicKey) error {
		err := cb(hostname, remote, key)
		var ke *knownhosts.KeyError
		if !errors.As(err, &ke) {
			return err
		}
		host, port, _ := net.SplitHostPort(hostname)
		if len(ke.Want) == 0 {
			return fmt.Errorf("host key of %s (%s %s) is not in %s: check its fingerprint, then add it with `ssh-keyscan -p %s -t %s %s >> %s`",
				hostname, key.Type(), gossh.FingerprintSHA256(key), file, port, key.Type(), host, file)
		}
		return fmt.Errorf("host key of %s CHANGED: it offered %s %s, %s:%d has another; refusing to connect (if the host was reinstalled, replace that line)",
			hostname, key.Type(), gossh.FingerprintSHA256(key), ke.Want[0].Filename, ke.Want[0].Line)
	}
}

// knownAlgorithms lists the host key algorithms of the keys known_hosts
// has for addr; nil (the library's default) when none are known.
func knownAlgorithms(cb gossh.HostKeyCallback, addr string) []string {
	var algos []string
	for _, k := range knownKeys(cb, addr) {
		t := k.Key.Type()
		if t == gossh.KeyAlgoRSA {
			algos = append(algos, gossh.KeyAlgoRSASHA512, gossh.KeyAlgoRSASHA256)
		}
		if !slices.Contains(algos, t) {
			algos = append(algos, t)
		}
	}
	return algos
}

// dial connects and authenticates within timeout: the TCP connect and the
// whole handshake, so a host that accepts the connection and then says
// nothing fails in time.
func dial(ctx context.Context, hc Host, cc *gossh.ClientConfig, timeout time.Duration) (*gossh.Client, error) {
	addr := hc.DialAddress()
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("ssh: %w", err)
	}
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("ssh: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	c, chans, reqs, err := gossh.NewClientConn(conn, addr, cc)
	stop()
	if err != nil {
		conn.Close()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, fmt.Errorf("ssh: %s accepted the connection but did not complete the SSH handshake within %s (connect_timeout)", addr, timeout)
		}
		// The library says only "unable to authenticate, attempted methods
		// [none publickey]": name the key and the login, what the operator
		// fixes.
		if strings.Contains(err.Error(), "unable to authenticate") {
			return nil, fmt.Errorf("ssh: %s refused the key %s for user %s (is its public key in that user's authorized_keys there?): %w", addr, hc.KeyFile, hc.User, err)
		}
		return nil, err // "ssh: handshake failed: …"
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		c.Close()
		return nil, fmt.Errorf("ssh: %w", err)
	}
	return gossh.NewClient(c, chans, reqs), nil
}

// machineFacts are read once per connection.
type machineFacts struct {
	clkTck   int64
	pageSize int64
}

const factsScript = `getconf CLK_TCK && getconf PAGESIZE`

func parseFacts(out []byte) (machineFacts, error) {
	f := strings.Fields(string(out))
	if len(f) != 2 {
		return machineFacts{}, fmt.Errorf("getconf CLK_TCK PAGESIZE: unexpected output %q", out)
	}
	tck, err1 := strconv.ParseInt(f[0], 10, 64)
	ps, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil || tck <= 0 || ps <= 0 {
		return machineFacts{}, fmt.Errorf("getconf CLK_TCK PAGESIZE: unexpected output %q", out)
	}
	return machineFacts{clkTck: tck, pageSize: ps}, nil
}
