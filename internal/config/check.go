package config

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
	"unicode"

	"golang.org/x/net/idna"
)

// The checks below accept exactly what `shoal serve` can write into
// haproxy.cfg as one word and HAProxy can hold, so that a config that passes
// `shoal validate` is one that serve runs.

// maxTimeout bounds grace, drain and stop timeouts: the job timeout adds them
// up, and anything longer than a day is a typo.
const maxTimeout = 24 * time.Hour

// maxCooldown bounds cooldowns, which are added to the current time.
const maxCooldown = 30 * 24 * time.Hour

// MaxHAProxySocket is the longest stats socket path HAProxy 2.6 accepts: it
// binds PATH.PID.tmp first, which must fit in sun_path.
const MaxHAProxySocket = 97

// maxUnixSocket is the longest path a unix socket can have on Linux (sun_path
// is 108 bytes with the terminating NUL).
const maxUnixSocket = 107

// haproxySocketSuffix is the longest name HAProxy's sockets get under
// STATE_DIR; it must fit in MaxHAProxySocket.
const haproxySocketSuffix = "/haproxy/master.sock"

// sectionKeywords start a new haproxy.cfg section; a verbatim global or
// defaults line starting with one would silently move the lines after it.
var sectionKeywords = map[string]bool{
	"global": true, "defaults": true, "frontend": true, "backend": true, "listen": true,
	"peers": true, "resolvers": true, "userlist": true, "mailers": true, "program": true,
	"http-errors": true, "ring": true, "cache": true, "fcgi-app": true,
}

// CheckLine keeps an extra haproxy.cfg line on its line and in its section.
// Like the other Check functions it is shared with the renderer, which
// refuses what it could not write safely.
func CheckLine(l string) error {
	if strings.ContainsFunc(l, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
		return errors.New("must be a single line without control characters")
	}
	if f := strings.Fields(l); len(f) > 0 && sectionKeywords[f[0]] {
		return fmt.Errorf("must not start a new haproxy.cfg section (%q); shoal writes the sections itself", f[0])
	}
	if f := strings.Fields(l); len(f) > 0 && (f[0] == "server-state-file" || f[0] == "server-state-base" || f[0] == "load-server-state-from-file") {
		return fmt.Errorf("must not use a server-state file (%q): shoal writes every server into the configuration before each reload, and a state file would override it at every reload", f[0])
	}
	return nil
}

// checkFilePath rejects paths that cannot be one word in haproxy.cfg and on
// HAProxy's command line (-S splits on commas).
func checkFilePath(p string) error {
	if p == "" {
		return errors.New("must not be empty")
	}
	if strings.ContainsFunc(p, func(r rune) bool { return r <= ' ' || r == 0x7f || strings.ContainsRune(`#"'\,`, r) }) {
		return fmt.Errorf("must not contain spaces, control characters, quotes, '#', '\\' or ',' (HAProxy takes it as one word), got %q", p)
	}
	return nil
}

// checkStateDir checks what HAProxy makes of the state directory: its
// sockets live under it.
func checkStateDir(dir string) error {
	if err := checkFilePath(dir); err != nil {
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

// CheckMediaType accepts type/subtype made of RFC 9110 token characters.
func CheckMediaType(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	if strings.Contains(s, ";") {
		// HAProxy compares the response's type/subtype only, so a parameter
		// could never match; refusing says so instead of dropping it silently.
		return fmt.Errorf("give the media type without parameters (such as %q), got %q", strings.TrimSpace(s[:strings.Index(s, ";")]), s)
	}
	typ, sub, ok := strings.Cut(s, "/")
	if !ok || !isToken(typ) || !isToken(sub) {
		return fmt.Errorf("must be a media type such as text/html, got %q", s)
	}
	return nil
}

// isToken accepts RFC 9110 token characters except those HAProxy's parser
// reads specially ('#' comment, quote, backquote) or that no media type uses.
func isToken(t string) bool {
	return t != "" && !strings.ContainsFunc(t, func(r rune) bool {
		return !isAlnum(r) && !strings.ContainsRune("!$&^_.+-*", r)
	})
}

func isAlnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

// CheckPathPrefix accepts a URL path HAProxy's path_beg can match.
func CheckPathPrefix(p string) error {
	if err := checkURLPath(p); err != nil {
		return err
	}
	if strings.Contains(p, "?") {
		return fmt.Errorf("must not contain '?': a prefix is matched against the path without the query string, got %q", p)
	}
	return nil
}

// CheckHealthPath accepts a request URI for the health check; it may carry a query.
func CheckHealthPath(p string) error {
	return checkURLPath(p)
}

func checkURLPath(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("must start with \"/\", got %q", p)
	}
	if strings.Contains(p, "#") {
		return fmt.Errorf("must not contain '#': a fragment is never sent to a server (and starts a comment in haproxy.cfg), got %q", p)
	}
	if strings.ContainsFunc(p, func(r rune) bool { return r <= ' ' || r >= 0x7f || strings.ContainsRune(`"'\`, r) }) {
		return fmt.Errorf("must be printable ASCII without spaces, quotes or '\\' (percent-encode other characters, e.g. %%20 for a space), got %q", p)
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
		if strings.ContainsFunc(label, func(r rune) bool { return !isAlnum(r) && r != '-' && r != '_' }) {
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

// Pos is where a field's value is in the config file.
type Pos struct{ Line, Col int }

// FieldError returns an Error about field located where the field (or, when
// it took a default, its closest enclosing field) is written in the file.
func (c *Config) FieldError(field, format string, args ...any) *Error {
	e := &Error{File: c.file, Field: field, Msg: fmt.Sprintf(format, args...)}
	for f := field; f != ""; f = parentField(f) {
		if p, ok := c.pos[f]; ok {
			e.Line, e.Col = p.Line, p.Col
			break
		}
	}
	if e.File == "" {
		e.File = c.Path
	}
	return e
}

// parentField strips the last ".key" or "[i]" from a field path.
func parentField(f string) string {
	i := strings.LastIndexAny(f, ".[")
	if i < 0 {
		return ""
	}
	return f[:i]
}

// ResolveCommand finds an instance's program the way the local provider starts
// it: a name with a slash is relative to dir, a bare name is looked up on PATH.
func ResolveCommand(name, dir string) (string, error) {
	if strings.Contains(name, "/") && !filepath.IsAbs(name) {
		name = filepath.Join(dir, name)
	}
	return exec.LookPath(name)
}
