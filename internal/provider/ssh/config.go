package ssh

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
	"gopkg.in/yaml.v3"

	"github.com/shoal-lb/shoal/internal/config"
)

// Type is the type name of ssh entries of providers: instances run as
// processes on servers reached over SSH.
const Type = "ssh"

// ProviderType is ssh's entry type (registered by provider/all).
var ProviderType = config.ProviderType{Name: Type, Keys: []any{keyDefaults()},
	Decode: decodeEntry,
	// A pool on hosts is processes running out of rotation: there is no
	// server to shut down and boot.
	WarmStates: func(*config.Provider) ([]string, string) {
		return []string{config.WarmRunning}, " (an ssh provider's pool is instances started and health-checked on its hosts, out of rotation)"
	},
	Hosts: func(p *config.Provider) []map[string]string {
		var hosts []map[string]string
		for _, h := range Of(*p).Hosts {
			hosts = append(hosts, h.Labels)
		}
		return hosts
	}}

// Of returns the ssh keys of entry p (nil when p is not an ssh entry).
func Of(p config.Provider) *Config {
	c, _ := p.Spec.(*Config)
	return c
}

// keyDefaults are the keys with their defaults, every optional section
// present (for the reference).
func keyDefaults() Config {
	s := Defaults
	s.Hosts = []Host{defaultHost}
	return s
}

// Config runs instances on servers the operator owns, over SSH.
type Config struct {
	Hosts []Host `yaml:"hosts" required:"true"`
	// HostDownAfter is how long a host's SSH connection and its instances'
	// health checks must both fail before the host is marked down and its
	// instances are replaced on the others.
	HostDownAfter time.Duration `yaml:"host_down_after"`
	// ConnectTimeout bounds one SSH dial and handshake; a command that
	// gets no answer for as long is taken as a hung host.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// RemoteDir is where instance logs and shoal's files live on each host,
	// relative to the login's home unless absolute.
	RemoteDir string `yaml:"remote_dir"`
	// ReconnectMax caps the wait between attempts to reach a host that
	// does not answer (250 ms at first, doubling): the longest a host that
	// is back may go unnoticed.
	ReconnectMax time.Duration `yaml:"reconnect_max"`
}

// Defaults holds the defaults of an ssh provider's keys.
var Defaults = Config{HostDownAfter: 15 * time.Second, ConnectTimeout: 5 * time.Second, RemoteDir: ".shoal", ReconnectMax: 30 * time.Second}

// Host is one server of an ssh provider.
type Host struct {
	// Address is host or host:port (port 22 when left out); instances
	// serve on the host part, which is also the host's name in status and
	// events.
	Address string `yaml:"address" required:"true"`
	User    string `yaml:"user" required:"true"`
	// KeyFile is the private key (unencrypted PEM or OpenSSH format);
	// KnownHosts is the known_hosts file the host's key must be in
	// (default ~/.ssh/known_hosts of the user running shoal).
	KeyFile    string `yaml:"key_file" required:"true"`
	KnownHosts string `yaml:"known_hosts"`
	// Capacity bounds what the host takes; zero fields do not bound.
	Capacity Capacity `yaml:"capacity"`
	// Labels are matched against groups' placement.labels.
	Labels map[string]string `yaml:"labels"`
	// Ports is the inclusive range instance ports are chosen from.
	Ports PortRange `yaml:"ports"`
}

// Capacity is how much a host takes: at most Instances instances (of every
// group), and instances whose template.cpus add up to at most Cores.
type Capacity struct {
	Instances int     `yaml:"instances"`
	Cores     float64 `yaml:"cores"`
}

// PortRange is an inclusive range of TCP ports, written "20000-29999".
type PortRange struct {
	Min, Max int
}

// DefaultPorts is an ssh host's ports when the config leaves them out.
var DefaultPorts = PortRange{Min: 20000, Max: 29999}

// defaultHost holds the defaults of an ssh host's keys; Load expands
// the leading ~ of KnownHosts to the home of the user running shoal.
var defaultHost = Host{KnownHosts: "~/.ssh/known_hosts", Ports: DefaultPorts}

// String writes r as the config does: "20000-29999".
func (r PortRange) String() string {
	return strconv.Itoa(r.Min) + "-" + strconv.Itoa(r.Max)
}

// Name is the host part of the host's address: its name in status, events
// and records, and where its instances serve.
func (h Host) Name() string {
	if host, _, err := net.SplitHostPort(h.Address); err == nil {
		return host
	}
	return strings.Trim(h.Address, "[]")
}

// DialAddress is the host's address with its SSH port (22 when left out).
func (h Host) DialAddress() string {
	if _, _, err := net.SplitHostPort(h.Address); err == nil {
		return h.Address
	}
	return net.JoinHostPort(strings.Trim(h.Address, "[]"), "22")
}

// knownKeys lists the keys a known_hosts callback (knownhosts.New) has for
// addr (host:port), found by asking it about a key no host has: its error
// lists them. None means the host is unknown.
func knownKeys(cb gossh.HostKeyCallback, addr string) []knownhosts.KnownKey {
	probe, err := gossh.NewPublicKey(ed25519.PublicKey(bytes.Repeat([]byte{0}, ed25519.PublicKeySize)))
	if err != nil {
		return nil
	}
	var ke *knownhosts.KeyError
	if err := cb(addr, &net.TCPAddr{IP: net.IPv4zero}, probe); !errors.As(err, &ke) {
		return nil
	}
	return ke.Want
}

const (
	// maxHosts bounds one provider's hosts; more is a generated file gone
	// wrong.
	maxHosts = 1000
	// minHostDownAfter keeps a host's brief hiccup (a check or two lost)
	// from replacing its instances.
	minHostDownAfter = 2 * time.Second
	// minConnectTimeout is less than any real handshake needs.
	minConnectTimeout = 100 * time.Millisecond
)

// decodeEntry decodes the keys of a provider of type ssh.
func decodeEntry(f *config.ProviderEntry, p *config.Provider) {
	def := Defaults
	s := &Config{}
	p.Spec = s
	s.HostDownAfter = f.Duration("host_down_after", def.HostDownAfter, minHostDownAfter, config.MaxTimeout)
	s.ConnectTimeout = f.Duration("connect_timeout", def.ConnectTimeout, minConnectTimeout, 10*time.Minute)
	s.RemoteDir, _ = f.String("remote_dir", def.RemoteDir)
	s.ReconnectMax = f.Duration("reconnect_max", def.ReconnectMax, backoffMin, config.MaxTimeout)
	if rn := f.Node("remote_dir"); rn != nil && (s.RemoteDir == "" || strings.ContainsAny(s.RemoteDir, "\x00\n")) {
		f.Errorf(rn, f.Field("remote_dir"), "must be a directory path (relative to the login's home, or absolute), got %s", config.Describe(rn))
	}
	hn := f.Node("hosts")
	if hn == nil {
		return // reported as required
	}
	items, ok := f.Sequence(hn, f.Field("hosts"), "a list of hosts")
	if !ok {
		return
	}
	if len(items) == 0 {
		f.Errorf(hn, f.Field("hosts"), "must list at least one host")
	}
	if len(items) > maxHosts {
		f.Errorf(hn, f.Field("hosts"), "at most %d hosts, got %d", maxHosts, len(items))
		return
	}
	seen := map[string]*yaml.Node{}
	for i, item := range items {
		path := fmt.Sprintf("%s[%d]", f.Field("hosts"), i)
		h, an, ok := decodeHost(f, item, path)
		if !ok {
			continue
		}
		if an != nil {
			if first, dup := seen[h.DialAddress()]; dup {
				f.Errorf(an, path+".address", "duplicate host %s (first at line %d)", h.DialAddress(), first.Line)
			} else {
				seen[h.DialAddress()] = an
			}
		}
		s.Hosts = append(s.Hosts, h)
	}
}

// decodeHost decodes one host, checking its key files as the provider will
// use them, without connecting: a key that cannot sign or a host key that
// is not known would fail every start.
func decodeHost(e *config.ProviderEntry, item *yaml.Node, path string) (h Host, addrNode *yaml.Node, ok bool) {
	f := e.Section(item, path, Host{})
	if f.Root() == nil {
		return h, nil, false
	}
	def := defaultHost
	if addr, n := f.String("address", ""); n != nil {
		h.Address = addr
		if err := checkAddress(addr); err != nil {
			f.Errorf(n, f.Field("address"), "%v", err)
		} else {
			addrNode = n
		}
	}
	if user, n := f.String("user", ""); n != nil {
		if user == "" || strings.ContainsFunc(user, func(r rune) bool { return r <= ' ' || r == ':' || r == '@' }) {
			f.Errorf(n, f.Field("user"), "must be a login name, got %q", user)
		}
		h.User = user
	}
	if kf, n := f.String("key_file", ""); n != nil {
		h.KeyFile = f.Path(kf)
		if err := checkKeyFile(h.KeyFile); err != nil {
			f.Errorf(n, f.Field("key_file"), "%v", err)
		}
	}
	kh, kn := f.String("known_hosts", def.KnownHosts)
	h.KnownHosts = f.Path(kh)
	if addrNode != nil {
		if err := checkKnownHost(h.KnownHosts, h.DialAddress()); err != nil {
			if kn == nil {
				kn = addrNode // the default file: the host is what is missing
			}
			f.Errorf(kn, f.Field("known_hosts"), "%v", err)
		}
	}
	if cn := f.Node("capacity"); cn != nil {
		h.Capacity = decodeCapacity(f, cn, f.Field("capacity"))
	}
	if ln := f.Node("labels"); ln != nil {
		h.Labels = f.Labels(ln, f.Field("labels"))
	}
	h.Ports = def.Ports
	if pn := f.Node("ports"); pn != nil {
		if r, err := parsePortRange(pn); err != nil {
			f.Errorf(pn, f.Field("ports"), "%v", err)
		} else {
			h.Ports = r
		}
	}
	return h, addrNode, true
}

func checkAddress(addr string) error {
	host, port := addr, ""
	if h, p, err := net.SplitHostPort(addr); err == nil {
		host, port = h, p
	} else if strings.Count(addr, ":") == 1 {
		return fmt.Errorf("must be HOST or HOST:PORT, got %q", addr)
	}
	host = strings.Trim(host, "[]")
	if port != "" {
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("port must be a number from 1 to 65535, got %q", port)
		}
	}
	if host == "" {
		return fmt.Errorf("must be HOST or HOST:PORT, got %q", addr)
	}
	if net.ParseIP(host) == nil {
		if err := config.CheckHostName(host); err != nil {
			return fmt.Errorf("host must be an IP address or a host name, got %q", host)
		}
	}
	return nil
}

// checkKeyFile makes sure path is a private key shoal can sign with.
func checkKeyFile(path string) error {
	b, err := config.ReadRegular(path, config.MaxKeyFile)
	if err != nil {
		return err
	}
	_, err = gossh.ParsePrivateKey(b)
	var missing *gossh.PassphraseMissingError
	switch {
	case errors.As(err, &missing):
		return fmt.Errorf("%s is encrypted with a passphrase, which shoal cannot type; use a key without one (ssh-keygen -p -N '' -f %s makes a copy's passphrase empty)", path, path)
	case err != nil:
		return fmt.Errorf("%s is not a private key in PEM or OpenSSH format: %v", path, err)
	}
	return nil
}

// checkKnownHost makes sure the known_hosts file at path has a key for
// addr (host:port): a host whose key is not known is never connected to.
func checkKnownHost(path, addr string) error {
	if _, err := config.ReadRegular(path, config.MaxKeyFile); err != nil {
		return fmt.Errorf("known_hosts: %w", err)
	}
	cb, err := knownhosts.New(path)
	if err != nil {
		return fmt.Errorf("known_hosts %s does not parse: %v", path, err)
	}
	if len(knownKeys(cb, addr)) > 0 {
		return nil
	}
	host, port, _ := net.SplitHostPort(addr)
	scan := "ssh-keyscan -H " + host
	if port != "22" {
		scan = "ssh-keyscan -H -p " + port + " " + host
	}
	return fmt.Errorf("%s has no key for %s; shoal never connects to a host whose key it does not know: check the host's key, then add it with %s >> %s", path, addr, scan, path)
}

func decodeCapacity(e *config.ProviderEntry, n *yaml.Node, path string) Capacity {
	f := e.Section(n, path, Capacity{})
	var c Capacity
	if v, n := f.Int("instances", 0); n != nil {
		if v < 0 {
			f.Errorf(n, f.Field("instances"), "must be >= 0 (0: unbounded), got %d", v)
		} else {
			c.Instances = v
		}
	}
	if n := f.Node("cores"); n != nil {
		if v, ok := f.Number(n, f.Field("cores")); ok {
			if v < 0 || v > math.MaxInt32 {
				f.Errorf(n, f.Field("cores"), "must be >= 0 (0: unbounded), got %s", config.Truncate(n.Value))
			} else {
				c.Cores = v
			}
		}
	}
	return c
}

// parsePortRange reads "MIN-MAX" or one port.
func parsePortRange(n *yaml.Node) (PortRange, error) {
	bad := fmt.Errorf(`must be a port range such as "20000-29999", got %s`, config.Describe(n))
	if n.Kind != yaml.ScalarNode {
		return PortRange{}, bad
	}
	lo, hi, found := strings.Cut(n.Value, "-")
	if !found {
		hi = lo
	}
	a, err1 := strconv.Atoi(strings.TrimSpace(lo))
	b, err2 := strconv.Atoi(strings.TrimSpace(hi))
	switch {
	case err1 != nil || err2 != nil:
		return PortRange{}, bad
	case a < 1 || b > 65535:
		return PortRange{}, fmt.Errorf("ports must be from 1 to 65535, got %s", n.Value)
	case a > b:
		return PortRange{}, fmt.Errorf("range must go from low to high, got %s", n.Value)
	}
	return PortRange{Min: a, Max: b}, nil
}
