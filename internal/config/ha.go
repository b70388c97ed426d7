package config

import (
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// HA makes this shoal one node of an HA pair (or more): the nodes elect a
// leader through etcd, which alone acts on the groups, and share their state
// there (see package ha). Nil: a single node, with its state in SQLite.
type HA struct {
	// Node is this node's name, unique among the live nodes; by default
	// the host name (its first label, lower-cased).
	Node string `yaml:"node"`
	// Cluster names the pair: its keys in etcd are under /shoal/<cluster>/.
	Cluster string `yaml:"cluster"`
	// Priority is this node's VRRP base priority; no two live nodes may
	// share it.
	Priority int `yaml:"priority" required:"true"`
	// Lease is the etcd session's TTL: a leader that cannot renew it for
	// this long is deposed.
	Lease time.Duration `yaml:"lease"`
	Etcd  HAEtcd        `yaml:"etcd" required:"true"`
	// VIP, when set, is a virtual IP that keepalived moves to the leader.
	VIP *HAVIP `yaml:"vip"`
}

// HAEtcd is how a node reaches etcd. Files are relative to the config file.
type HAEtcd struct {
	// Endpoints are http(s)://host:port of etcd's members.
	Endpoints   []string      `yaml:"endpoints" required:"true"`
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// CAFile verifies the members' certificates; CertFile and KeyFile are
	// this node's client certificate.
	CAFile   string `yaml:"ca_file"`
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// Username and PasswordFile log in to etcd; the password is read from
	// the file when the node starts and never logged.
	Username     string `yaml:"username"`
	PasswordFile string `yaml:"password_file"`
}

// HAVIP is the virtual IP keepalived holds on the leader.
type HAVIP struct {
	// Address is the VIP as a CIDR (10.0.0.100/24), as written.
	Address string `yaml:"address" required:"true"`
	// Interface carries the VIP; `shoal validate` does not check that it
	// exists on this machine, `shoal serve` does.
	Interface string `yaml:"interface" required:"true"`
	// RouterID is VRRP's virtual_router_id, the same on every node.
	RouterID int `yaml:"router_id"`
	// Advert is VRRP's advert_int.
	Advert time.Duration `yaml:"advert"`
	// UnicastPeers are the other nodes' addresses; none: VRRP multicast.
	UnicastPeers []string `yaml:"unicast_peers"`
	// Keepalived is the binary, looked up in PATH, then /usr/sbin.
	Keepalived string `yaml:"keepalived"`
}

var (
	defaultHA    = HA{Cluster: "shoal", Lease: 2 * time.Second, Etcd: HAEtcd{DialTimeout: 3 * time.Second}}
	defaultHAVIP = HAVIP{RouterID: 51, Advert: time.Second, Keepalived: "keepalived"}
)

// Bounds of ha values. A lease under 2 s expires on one lost keep-alive
// (etcd sends them every TTL/3); VRRP priorities 0 and 255 are reserved.
const (
	minHALease       = 2 * time.Second
	maxHALease       = time.Minute
	minHADial        = 100 * time.Millisecond
	maxHADial        = time.Minute
	minHAAdvert      = 10 * time.Millisecond
	maxHAAdvert      = 255 * time.Second
	maxHAPasswordLen = 4096
)

// haName is a node or cluster name: it goes into etcd keys and keepalived's
// configuration.
var haName = regexp.MustCompile(`^[a-z0-9-]{1,32}$`)

func (d *decoder) ha(n *yaml.Node) *HA {
	f := section[HA](d, n, "ha")
	h := defaultHA
	if v, vn := f.str("node", ""); vn != nil {
		if !haName.MatchString(v) {
			d.errorf(vn, "ha.node", "must be 1 to 32 of a-z, 0-9 and -, got %q", v)
		}
		h.Node = v
	} else if f.get("node") == nil {
		host, err := os.Hostname()
		host, _, _ = strings.Cut(strings.ToLower(host), ".")
		if err != nil || !haName.MatchString(host) {
			d.errorf(n, "ha.node", "not given, and the host name %q is not 1 to 32 of a-z, 0-9 and -: set it", host)
		}
		h.Node = host
	}
	if v, vn := f.str("cluster", h.Cluster); vn != nil {
		if !haName.MatchString(v) {
			d.errorf(vn, "ha.cluster", "must be 1 to 32 of a-z, 0-9 and -, got %q", v)
		}
		h.Cluster = v
	}
	var pn *yaml.Node
	h.Priority, pn = f.integer("priority", 0)
	if pn != nil && (h.Priority < 1 || h.Priority > 254) {
		d.errorf(pn, "ha.priority", "must be from 1 to 254, got %d", h.Priority)
	}
	var ln *yaml.Node
	h.Lease, ln = f.duration("lease", h.Lease)
	if ln != nil && (h.Lease < minHALease || h.Lease > maxHALease || h.Lease%time.Second != 0) {
		d.errorf(ln, "ha.lease", "must be whole seconds from %s to %s, got %s", minHALease, maxHALease, h.Lease)
	}
	h.Etcd = d.haEtcd(f.get("etcd"))
	if vn := f.get("vip"); vn != nil {
		h.VIP = d.haVIP(vn)
	}
	return &h
}

func (d *decoder) haEtcd(n *yaml.Node) HAEtcd {
	f := section[HAEtcd](d, n, "ha.etcd")
	e := defaultHA.Etcd
	items := f.strings("endpoints")
	for _, it := range items {
		if err := checkEtcdEndpoint(it.val); err != nil {
			d.errorf(it.node, it.field, "%v", err)
		}
		e.Endpoints = append(e.Endpoints, it.val)
	}
	if en := f.get("endpoints"); en != nil && len(items) == 0 && en.Kind == yaml.SequenceNode {
		d.errorf(en, "ha.etcd.endpoints", "must list at least one http(s)://host:port")
	}
	e.DialTimeout = d.within(f, "dial_timeout", e.DialTimeout, minHADial, maxHADial)
	file := func(key string, max int64) (string, *yaml.Node) {
		p, pn := f.str(key, "")
		if pn == nil {
			return "", nil
		}
		p = abs(d.dir, p)
		if _, err := readRegular(p, max); err != nil {
			d.errorf(pn, f.field(key), "must be a readable file: %v", err)
		}
		return p, pn
	}
	var cn, kn *yaml.Node
	e.CAFile, _ = file("ca_file", maxPEMFile)
	e.CertFile, cn = file("cert_file", maxPEMFile)
	e.KeyFile, kn = file("key_file", maxPEMFile)
	if (cn == nil) != (kn == nil) {
		if cn != nil {
			d.errorf(cn, "ha.etcd.cert_file", "needs key_file too")
		} else {
			d.errorf(kn, "ha.etcd.key_file", "needs cert_file too")
		}
	}
	var un, pwn *yaml.Node
	e.Username, un = f.str("username", "")
	if un != nil && e.Username == "" {
		d.errorf(un, "ha.etcd.username", "must not be empty")
	}
	e.PasswordFile, pwn = file("password_file", maxHAPasswordLen)
	if (un == nil) != (pwn == nil) {
		if un != nil {
			d.errorf(un, "ha.etcd.username", "needs password_file too")
		} else {
			d.errorf(pwn, "ha.etcd.password_file", "needs username too")
		}
	}
	return e
}

// checkEtcdEndpoint accepts what clientv3 dials: http or https, a host and
// a port, nothing else.
func checkEtcdEndpoint(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("must be http://host:port or https://host:port, got %q", s)
	}
	if err := checkHostPort(u.Host); err != nil || u.Hostname() == "" {
		return fmt.Errorf("must be http(s)://host:port with a host and a port, got %q", s)
	}
	return nil
}

func (d *decoder) haVIP(n *yaml.Node) *HAVIP {
	f := section[HAVIP](d, n, "ha.vip")
	v := defaultHAVIP
	if a, an := f.str("address", ""); an != nil {
		if p, err := netip.ParsePrefix(a); err != nil || p.Addr().Zone() != "" {
			d.errorf(an, "ha.vip.address", "must be an address with its prefix length (CIDR), such as 10.0.0.100/24, got %q", a)
		}
		v.Address = a
	}
	if i, in := f.str("interface", ""); in != nil {
		// IFNAMSIZ is 16 with the terminating NUL.
		if i == "" || len(i) > 15 || strings.ContainsAny(i, "/ \t\n:") {
			d.errorf(in, "ha.vip.interface", "must be a network interface name (1 to 15 characters, no /, : or spaces), got %q", i)
		}
		v.Interface = i
	}
	var rn *yaml.Node
	v.RouterID, rn = f.integer("router_id", v.RouterID)
	if rn != nil && (v.RouterID < 1 || v.RouterID > 255) {
		d.errorf(rn, "ha.vip.router_id", "must be from 1 to 255, got %d", v.RouterID)
	}
	var avn *yaml.Node
	v.Advert, avn = f.duration("advert", v.Advert)
	if avn != nil && (v.Advert < minHAAdvert || v.Advert > maxHAAdvert || v.Advert%minHAAdvert != 0) {
		d.errorf(avn, "ha.vip.advert", "must be a multiple of 10ms from %s to %s, got %s", minHAAdvert, maxHAAdvert, v.Advert)
	}
	for _, it := range f.strings("unicast_peers") {
		ip, err := netip.ParseAddr(it.val)
		if err != nil || ip.Zone() != "" {
			d.errorf(it.node, it.field, "must be an IPv4 or IPv6 address, got %q", it.val)
			continue
		}
		v.UnicastPeers = append(v.UnicastPeers, ip.Unmap().String())
	}
	if k, kn := f.str("keepalived", v.Keepalived); kn != nil {
		if k == "" {
			d.errorf(kn, "ha.vip.keepalived", "must not be empty")
		}
		v.Keepalived = k
	}
	return &v
}

// Owner marks the pair's instances (the providers' owner marker and tag):
// the same on every node, so either adopts what the other started. Pairs
// that share hosts or a cloud account need different clusters.
func (h *HA) Owner() string { return "shoal-ha-" + h.Cluster }

// EtcdPrefix is the pair's key prefix in etcd, ending in a slash.
func (h *HA) EtcdPrefix() string { return "/shoal/" + h.Cluster + "/" }
