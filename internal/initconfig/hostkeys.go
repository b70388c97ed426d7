package initconfig

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strings"
	"time"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// HostKey is the key a host offered when scanned.
type HostKey struct {
	// Address is the host as the config names it; Dial is it with its
	// port (22 when left out).
	Address string
	Dial    string
	Key     gossh.PublicKey
}

// Fingerprint is the key's SHA256 fingerprint, as ssh-keygen -lf shows it.
func (k HostKey) Fingerprint() string { return gossh.FingerprintSHA256(k.Key) }

// DialAddress is addr (host or host:port) with its SSH port.
func DialAddress(addr string) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	return net.JoinHostPort(strings.Trim(addr, "[]"), "22")
}

// scanAlgorithms are the host key types asked for, in order: a host
// offers its first one it has. shoal's ssh provider later asks for the
// types known_hosts has for the host, so this one.
var scanAlgorithms = []string{
	gossh.KeyAlgoED25519,
	gossh.KeyAlgoECDSA256, gossh.KeyAlgoECDSA384, gossh.KeyAlgoECDSA521,
	gossh.KeyAlgoRSASHA512, gossh.KeyAlgoRSASHA256,
}

// errScanned ends the handshake once the host's key is in hand: nothing
// is sent on its behalf, no login is tried.
var errScanned = errors.New("host key scanned")

// Scan connects to addr and returns the host key it offers, within
// timeout, without logging in: what ssh-keyscan does.
func Scan(ctx context.Context, addr string, timeout time.Duration) (HostKey, error) {
	dial := DialAddress(addr)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", dial)
	if err != nil {
		return HostKey{}, fmt.Errorf("scan host key of %s: %w", dial, err)
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		return HostKey{}, fmt.Errorf("scan host key of %s: %w", dial, err)
	}
	// The handshake has no context: closing the connection ends it.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	var key gossh.PublicKey
	cc := &gossh.ClientConfig{
		User:              "shoal-init",
		HostKeyAlgorithms: scanAlgorithms,
		HostKeyCallback: func(_ string, _ net.Addr, k gossh.PublicKey) error {
			key = k
			return errScanned
		},
	}
	_, _, _, err = gossh.NewClientConn(conn, dial, cc)
	if key == nil {
		return HostKey{}, fmt.Errorf("scan host key of %s: %w", dial, err)
	}
	return HostKey{Address: addr, Dial: dial, Key: key}, nil
}

// MergeKnownHosts returns the known_hosts file at path (none yet: an empty
// one) with a line for each key it does not have, and how many it added.
// A host it knows with another key of the same type is an error: the host
// changed its key, or is not the host it was; that is for the operator to
// look into, not for init to paper over.
func MergeKnownHosts(path string, keys []HostKey) (data []byte, added int, err error) {
	data, err = os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("known_hosts: %w", err)
	}
	var cb gossh.HostKeyCallback
	if err == nil {
		if cb, err = knownhosts.New(path); err != nil {
			return nil, 0, fmt.Errorf("known_hosts %s does not parse: %w", path, err)
		}
	}
	out := bytes.Clone(data)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	for _, k := range keys {
		if cb != nil {
			err := cb(k.Dial, &net.TCPAddr{IP: net.IPv4zero}, k.Key)
			var ke *knownhosts.KeyError
			switch {
			case err == nil:
				continue // known already
			case errors.As(err, &ke):
				for _, w := range ke.Want {
					if w.Key.Type() == k.Key.Type() {
						return nil, 0, fmt.Errorf("%s:%d has another %s key for %s than the host offers (%s, it offered %s): the host's key changed, or this is not that host; if it was reinstalled, remove that line and run init again",
							w.Filename, w.Line, w.Key.Type(), k.Dial, gossh.FingerprintSHA256(w.Key), k.Fingerprint())
					}
				}
			default:
				return nil, 0, fmt.Errorf("known_hosts %s: %w", path, err)
			}
		}
		out = append(out, knownhosts.Line([]string{knownhosts.Normalize(k.Dial)}, k.Key)...)
		out = append(out, '\n')
		added++
	}
	return out, added, nil
}
