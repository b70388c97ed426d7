package config

import (
	"cmp"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Who opens a listener decides what an empty host means: HAProxy binds
// ":80" on IPv4's every address, Go's net.Listen on both families'.
const (
	byHAProxy = iota
	byShoal
)

// listenerAt is an address that shoal or its HAProxy listens on, and where
// the file gives it: every one is recorded as it is decoded, and
// checkListeners compares them once the whole file is read, for validate
// and serve alike.
type listenerAt struct {
	field string
	node  *yaml.Node // nil: a default, not in the file
	// host and port of a TCP listener. gslb.listen's listen over UDP
	// too, which nothing else does: TCP is what can collide.
	host, port string
	by         int
	// path of a unix socket.
	path string
}

// listenTCP records a TCP listener at addr, a host:port already checked.
func (d *decoder) listenTCP(n *yaml.Node, field, addr string, by int) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return // reported
	}
	d.listeners = append(d.listeners, listenerAt{field: field, node: n, host: host, port: port, by: by})
}

// listenUnix records a unix socket at path, absolute.
func (d *decoder) listenUnix(n *yaml.Node, field, path string) {
	d.listeners = append(d.listeners, listenerAt{field: field, node: n, path: filepath.Clean(path)})
}

// checkListeners reports each listener that one before it in the file (or
// a default) would keep from opening: the same socket path, or the same
// port on an address both cover. HAProxy binds with
// noreuseport and Go never sets SO_REUSEPORT, so the kernel refuses the
// second; without this check `shoal serve` would fail where `shoal
// validate` passed.
func (d *decoder) checkListeners() {
	ls := slices.Clone(d.listeners)
	line := func(l listenerAt) (int, int) {
		if l.node == nil {
			return 0, 0
		}
		return l.node.Line, l.node.Column
	}
	slices.SortStableFunc(ls, func(a, b listenerAt) int {
		al, ac := line(a)
		bl, bc := line(b)
		return cmp.Or(cmp.Compare(al, bl), cmp.Compare(ac, bc))
	})
	for i, l := range ls {
		if l.node == nil {
			continue // a default: the written one is reported
		}
		for _, e := range ls[:i] {
			if !l.collides(e) {
				continue
			}
			what := l.path
			if what == "" {
				what = net.JoinHostPort(l.host, l.port)
			}
			if e.node == nil {
				d.errorf(l.node, l.field, "%s is already taken by %s (its default, %s)", what, e.field, cmp.Or(e.path, net.JoinHostPort(e.host, e.port)))
			} else {
				d.errorf(l.node, l.field, "%s is already bound by %s (line %d)", what, e.field, e.node.Line)
			}
			break
		}
	}
}

// collides reports whether l and e cannot both listen.
func (l listenerAt) collides(e listenerAt) bool {
	if l.path != "" || e.path != "" {
		return l.path == e.path
	}
	if l.port != e.port {
		return false
	}
	a, b := l.scope(), e.scope()
	switch {
	case a.all || b.all:
		return true
	case a.any4:
		return b.any4 || b.ip.Is4() || b.name != ""
	case b.any4:
		return a.ip.Is4() || a.name != ""
	case a.name != "" || b.name != "":
		// Names are not resolved here: equal names collide.
		return a.name == b.name
	}
	return a.ip == b.ip
}

// scope is what a listener's host covers.
type scope struct {
	all  bool // every address of both families
	any4 bool // every IPv4 address
	ip   netip.Addr
	name string // a host name, lower case
}

func (l listenerAt) scope() scope {
	switch h := l.host; {
	case h == "" && l.by == byShoal:
		return scope{all: true}
	case h == "" || h == "0.0.0.0":
		return scope{any4: true}
	case strings.EqualFold(h, "localhost"):
		// Go and HAProxy listen on its first address, IPv4's.
		return scope{ip: netip.AddrFrom4([4]byte{127, 0, 0, 1})}
	}
	if ip, err := netip.ParseAddr(l.host); err == nil {
		if ip = ip.Unmap(); ip.IsUnspecified() {
			// "::" takes IPv4 too, by Linux's default (bindv6only 0).
			return scope{all: ip.Is6(), any4: ip.Is4()}
		}
		return scope{ip: ip}
	}
	return scope{name: strings.ToLower(l.host)}
}

// Listener is a TCP address that shoal or its HAProxy listens on.
type Listener struct {
	// Field names it in the file (for FieldError).
	Field string
	// Host is as written: empty, an IP address or a name.
	Host, Port string
}

// Listeners lists the TCP addresses the file has shoal and HAProxy listen
// on.
func (c *Config) Listeners() []Listener {
	var ls []Listener
	for _, l := range c.listeners {
		if l.path == "" {
			ls = append(ls, Listener{Field: l.field, Host: l.host, Port: l.port})
		}
	}
	return ls
}
