package config

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strings"

	"golang.org/x/crypto/bcrypt"
	"gopkg.in/yaml.v3"
)

// BasicAuth asks a route's clients for a user and password (HTTP basic
// authentication), checked by HAProxy against the users file.
type BasicAuth struct {
	// UsersFile holds one "user:hash" a line (bcrypt $2a$/$2b$/$2y$,
	// as htpasswd -B writes, or SHA-512/SHA-256 crypt $6$/$5$); blank
	// lines and lines starting with # are skipped. It is read when the
	// configuration is loaded (and at each reload).
	UsersFile string `yaml:"users_file" required:"true"`
	// Users are the file's entries, in its order; never marshalled.
	Users []User `yaml:"-" json:"-"`
}

// User is one entry of a users file. Hash is a crypt(3) hash, never a
// password; it is never logged.
type User struct {
	Name, Hash string
}

// String shows the user's name, never its hash (a %v of a config).
func (u User) String() string { return u.Name + ":<hash>" }

// Bounds of access control.
const (
	maxCIDRs     = 1000
	maxUsers     = 10_000
	maxUsersFile = 4 << 20
)

var defaultBasicAuth = BasicAuth{}

// userNameRE is what a user name may be: a word of haproxy.cfg, and no
// colon (which ends the name in the Authorization header).
var userNameRE = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,64}$`)

// cryptRE accepts the crypt(3) hashes Debian's libcrypt checks for
// HAProxy 2.6 (tested with haproxy -c and requests): SHA-512 and SHA-256
// crypt, with optional rounds. bcrypt is checked by its own parser.
var cryptRE = regexp.MustCompile(`^\$[56]\$(rounds=[0-9]{1,9}\$)?[./A-Za-z0-9]{1,16}\$[./A-Za-z0-9]{43,86}$`)

// cidrs decodes a route's allow or deny: one CIDR or address, or a list.
func (d *decoder) cidrs(f *fields, key string) []string {
	items := d.oneOrMore(f, key)
	if len(items) > maxCIDRs {
		d.errorf(f.get(key), f.field(key), "must list at most %d networks, got %d", maxCIDRs, len(items))
		return nil
	}
	var out []string
	for _, it := range items {
		p, err := ParseCIDR(it.val)
		if err != nil {
			d.errorf(it.node, it.field, "%v", err)
			continue
		}
		out = append(out, p.String())
	}
	return out
}

// ParseCIDR reads a network such as 10.0.0.0/8 or 2001:db8::/32, or one
// address (a /32 or /128). Bits below the mask must be zero, so that a
// typo such as 10.1.2.3/8 is caught rather than widened.
func ParseCIDR(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("must be an IP address or a network such as 10.0.0.0/8, got %q", s)
		}
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("must be a network such as 10.0.0.0/8 or 2001:db8::/32, got %q", s)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%q has bits set below its /%d mask; did you mean %s?", s, p.Bits(), p.Masked())
	}
	return p, nil
}

// basicAuth decodes a route's basic_auth and reads its users file.
func (d *decoder) basicAuth(n *yaml.Node, path string) *BasicAuth {
	f := section[BasicAuth](d, n, path)
	if f.node == nil {
		return nil
	}
	file, fn := f.str("users_file", "")
	if fn == nil {
		return nil // reported: required
	}
	if file == "" {
		d.errorf(fn, f.field("users_file"), "must name a file of user:hash lines")
		return nil
	}
	ba := &BasicAuth{UsersFile: abs(d.dir, file)}
	users, err := ReadUsersFile(ba.UsersFile)
	if err != nil {
		if le, ok := err.(*Error); ok {
			d.errs = append(d.errs, le)
		} else {
			d.errorf(fn, f.field("users_file"), "%v", err)
		}
		return nil
	}
	ba.Users = users
	return ba
}

// ReadUsersFile reads a users file: "name:hash" lines. A bad line is an
// *Error at the file's line and column; the message names the line's
// user, never its hash.
func ReadUsersFile(path string) ([]User, error) {
	// Stat first: its error names a missing file as "stat PATH", as for
	// the other files a configuration names.
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("users file: %w", err)
	}
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("users file: %w", err)
	}
	defer fh.Close()
	if st, err := fh.Stat(); err != nil {
		return nil, fmt.Errorf("users file %s: %w", path, err)
	} else if !st.Mode().IsRegular() || st.Size() > maxUsersFile {
		return nil, fmt.Errorf("users file %s: must be a regular file of at most %d bytes", path, maxUsersFile)
	}
	bad := func(line, col int, format string, args ...any) error {
		return &Error{File: path, Line: line, Col: col, Msg: fmt.Sprintf(format, args...)}
	}
	var (
		users []User
		seen  = make(map[string]int)
		sc    = bufio.NewScanner(fh)
		no    = 0
	)
	for sc.Scan() {
		no++
		line := strings.TrimRight(sc.Text(), "\r")
		if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		name, hash, ok := strings.Cut(line, ":")
		if !ok {
			return nil, bad(no, 1, "must be user:hash (such as htpasswd -nB USER prints)")
		}
		if !userNameRE.MatchString(name) {
			return nil, bad(no, 1, "user name must be 1 to 64 letters, digits, '.', '_', '@' or '-', got %q", truncate(name))
		}
		if first, dup := seen[name]; dup {
			return nil, bad(no, 1, "user %s is listed twice (first on line %d)", name, first)
		}
		seen[name] = no
		if err := CheckPasswordHash(hash); err != nil {
			return nil, bad(no, len(name)+2, "user %s: %v", name, err)
		}
		users = append(users, User{Name: name, Hash: hash})
		if len(users) > maxUsers {
			return nil, bad(no, 1, "more than %d users", maxUsers)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, bad(no+1, 1, "reading: %v", err)
	}
	if len(users) == 0 {
		return nil, bad(0, 0, "lists no user")
	}
	return users, nil
}

// CheckPasswordHash accepts the hashes HAProxy 2.6 on Debian checks with
// crypt(3): bcrypt ($2a$, $2b$, $2y$) and SHA-512 or SHA-256 crypt ($6$,
// $5$). Plain text, DES and MD5 crypt are refused. HAProxy computes the
// hash on every request, in its event loop: a bcrypt cost above 10 would
// stall every connection of its thread while it hashes.
func CheckPasswordHash(h string) error {
	switch {
	case strings.HasPrefix(h, "$2a$"), strings.HasPrefix(h, "$2b$"), strings.HasPrefix(h, "$2y$"):
		cost, err := bcrypt.Cost([]byte("$2a$" + h[4:]))
		if err != nil {
			return fmt.Errorf("not a bcrypt hash: %v", err)
		}
		if cost > maxBcryptCost {
			return fmt.Errorf("bcrypt cost %d: at most %d (HAProxy hashes each request's password in its event loop)", cost, maxBcryptCost)
		}
		return nil
	case cryptRE.MatchString(h):
		return nil
	}
	return fmt.Errorf("must be a bcrypt ($2y$, htpasswd -B) or SHA-512 crypt ($6$, openssl passwd -6) hash")
}

// maxBcryptCost bounds a bcrypt hash's work (see CheckPasswordHash).
const maxBcryptCost = 10

// trustedProxies decodes a frontend's trusted_proxies.
func (d *decoder) trustedProxies(f *fields, mode string) []string {
	if n := f.get("trusted_proxies"); n != nil && mode == ModeTCP {
		d.errorf(n, f.field("trusted_proxies"), "applies to http frontends only (X-Forwarded-For is a header)")
		return nil
	}
	return d.cidrs(f, "trusted_proxies")
}

// access decodes a route's allow, deny and basic_auth.
func (d *decoder) access(f *fields, r *Route, mode string) {
	r.Allow = d.cidrs(f, "allow")
	r.Deny = d.cidrs(f, "deny")
	if n := f.get("basic_auth"); n != nil {
		if mode == ModeTCP {
			d.errorf(n, f.field("basic_auth"), "applies to http frontends only")
			return
		}
		r.BasicAuth = d.basicAuth(n, f.field("basic_auth"))
	}
	if mode == ModeTCP {
		for _, key := range []string{"allow", "deny"} {
			if n := f.get(key); n != nil {
				d.errorf(n, f.field(key), "applies to http frontends' routes only")
			}
		}
	}
}

// HasAccess reports whether r limits who may use it.
func (r Route) HasAccess() bool {
	return len(r.Allow) > 0 || len(r.Deny) > 0 || r.BasicAuth != nil
}
