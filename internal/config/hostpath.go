package config

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"unicode"

	"golang.org/x/net/idna"

	"github.com/shoal-lb/shoal/internal/haproxy/hapword"
)

// Host names, socket paths and programs: the checks below, and HAProxy's
// word rules in package hapword, accept exactly what `shoal serve` can write
// into haproxy.cfg as one word and HAProxy can hold (and the programs it can
// start), so that a config that passes `shoal validate` is one that serve
// runs.

// MaxHAProxySocket is the longest stats socket path HAProxy 2.6 accepts: it
// binds PATH.PID.tmp first, which must fit in sun_path.
const MaxHAProxySocket = 97

// maxUnixSocket is the longest path a unix socket can have on Linux (sun_path
// is 108 bytes with the terminating NUL).
const maxUnixSocket = 107

// haproxySocketSuffix is the longest name HAProxy's sockets get under
// STATE_DIR; it must fit in MaxHAProxySocket.
const haproxySocketSuffix = "/haproxy/master.sock"

// checkStateDir checks what HAProxy makes of the state directory: its
// sockets live under it.
func checkStateDir(dir string) error {
	if err := hapword.FilePath(dir); err != nil {
		return err
	}
	if n := len(dir) + len(haproxySocketSuffix); n > MaxHAProxySocket {
		return fmt.Errorf("%s is %d bytes, over HAProxy's limit of %d for a socket path; use a state_dir of at most %d bytes (absolute), got %d",
			dir+haproxySocketSuffix, n, MaxHAProxySocket, MaxHAProxySocket-len(haproxySocketSuffix), len(dir))
	}
	return nil
}

func checkUnixSocket(p string) error {
	if len(p) > maxUnixSocket {
		return fmt.Errorf("socket path %s is %d bytes; a unix socket path can be at most %d bytes", p, len(p), maxUnixSocket)
	}
	return nil
}

// normalizeHost checks a host name for a group's hosts and returns what is
// matched against the Host header: IP literals as written, internationalized
// names in punycode, and "*.example.com" (any subdomain of example.com) kept
// as a wildcard.
func normalizeHost(h string) (string, error) {
	if h == "" {
		return "", errors.New("must not be empty")
	}
	if ip := net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")); ip != nil {
		if ip.To4() == nil {
			return "[" + ip.String() + "]", nil
		}
		return h, nil
	}
	name, wildcard := strings.CutPrefix(h, "*.")
	if strings.Contains(name, "*") {
		return "", fmt.Errorf("a wildcard is allowed only as the whole first label, as in *.example.com; got %q", h)
	}
	if strings.Contains(name, ":") {
		return "", fmt.Errorf("must be a host name or IP address without a port (any port matches), got %q", h)
	}
	if strings.ContainsFunc(name, func(r rune) bool { return r > unicode.MaxASCII }) {
		ascii, err := idna.Lookup.ToASCII(name)
		if err != nil {
			return "", fmt.Errorf("not a valid internationalized host name (%v), got %q", err, h)
		}
		name = ascii
	}
	if err := checkHostName(name); err != nil {
		return "", fmt.Errorf("%v, got %q", err, h)
	}
	if wildcard {
		return "*." + name, nil
	}
	return name, nil
}

func checkHostName(name string) error {
	if len(name) > 253 {
		return errors.New("a host name can be at most 253 bytes")
	}
	for _, label := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		if label == "" || len(label) > 63 {
			return errors.New("must be a host name of dot-separated labels of 1 to 63 characters")
		}
		if strings.ContainsFunc(label, func(r rune) bool { return !hapword.IsAlnum(r) && r != '-' && r != '_' }) {
			return errors.New("must be a host name (letters, digits, '-', '_' and '.'), an IP address, or *.domain")
		}
	}
	return nil
}

// checkListenHost accepts the host part of a bind address.
func checkListenHost(host string) error {
	if host == "" || net.ParseIP(host) != nil {
		return nil
	}
	return checkHostName(host)
}

// ResolveCommand finds an instance's program the way the local provider starts
// it: a name with a slash is relative to dir, a bare name is looked up on PATH.
func ResolveCommand(name, dir string) (string, error) {
	if strings.Contains(name, "/") && !filepath.IsAbs(name) {
		name = filepath.Join(dir, name)
	}
	return exec.LookPath(name)
}
