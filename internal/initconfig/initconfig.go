// Package initconfig writes a first shoal.yaml for what an operator has:
// processes on this machine, servers over SSH or a cloud, optionally behind
// TLS with ACME and as one node of an HA pair. The file is rendered from a
// commented template (not marshalled), so it explains itself; every value
// is written as a quoted YAML scalar, and commands as argv lists. `shoal
// init` (internal/cli) asks for what is missing, scans SSH host keys and
// validates the file with the real loader before writing it.
package initconfig

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"unicode/utf8"
)

// Kinds of cloud `shoal init --cloud` writes a provider for.
var Clouds = []string{"exec", "ec2", "sacloud"}

// Options is what the operator has. Exactly one of Local, SSH and Cloud
// says where the instances run.
type Options struct {
	// Listen is where HAProxy takes plain HTTP (with TLS, the ACME
	// challenges' port 80 and the redirect to https).
	Listen string
	// StateDir is state_dir as written (relative to the config file).
	StateDir string
	// Group names the one group; Min and Max bound its size.
	Group    string
	Min, Max int
	// HealthPath is the HTTP path HAProxy checks each instance at.
	HealthPath string
	// MaxConn, when above 0, is limits.max_conn: the requests an instance
	// serves at once. The policy then scales on concurrency (ConcurrencyTarget).
	MaxConn int

	// Local is the argv of an instance run on this machine.
	Local []string
	SSH   *SSH
	Cloud *Cloud

	TLS *TLS
	HA  *HA
}

// SSH is servers the operator owns, reached over SSH.
type SSH struct {
	// Hosts are addresses, host or host:port.
	Hosts []string
	User  string
	// KeyFile and KnownHosts are written as given (relative paths are
	// relative to the config file).
	KeyFile    string
	KnownHosts string
	// Command is the argv run on the chosen host for each instance.
	Command []string
}

// Cloud is a cloud provider entry.
type Cloud struct {
	Type string // one of Clouds
	// Port is where every server serves; HAProxy connects to IP:Port.
	Port int
	// CLI is exec's program: PROG start NAME, PROG stop ID, PROG list.
	CLI string
	// Region, LaunchTemplate and CredentialsFile (empty: the keys come
	// from the environment) are ec2's.
	Region          string
	LaunchTemplate  string
	CredentialsFile string
	// Zone and Archive (the source archive holding the app) are sacloud's.
	Zone    string
	Archive string
}

// TLS is a frontend whose certificates come from an ACME CA.
type TLS struct {
	Domains []string
	Email   string
	// Directory is the CA's directory URL; empty: Let's Encrypt's.
	Directory string
	// Bind is where HTTPS is served.
	Bind string
}

// HA makes this shoal one node of a pair with Peer.
type HA struct {
	// Peer is the other node's IP address.
	Peer string
	// Node is this node's name; Priority its VRRP priority.
	Node     string
	Priority int
	// Etcd are the endpoints the pair keeps its state in.
	Etcd []string
	// VIP (a CIDR) and Interface, when set, make keepalived move a virtual
	// IP to the leader.
	VIP       string
	Interface string
}

// Defaults are the values `shoal init` starts from.
var Defaults = Options{Listen: "0.0.0.0:8080", StateDir: ".shoal", Group: "web", Min: 2, Max: 4, HealthPath: "/"}

// DefaultHTTPS is where HTTPS is served with --tls; ACME's HTTP-01
// challenges come to port 80.
const (
	DefaultHTTPS     = "[::]:443"
	DefaultHTTPACME  = "[::]:80"
	DefaultCloudPort = 8080
	DefaultZone      = "is1a"
	DefaultPriority  = 100
)

// Check refuses options that cannot make a file, naming the flag: what the
// loader would refuse with less context (which flag) or not at all (a
// command without a port).
func (o Options) Check() error {
	n := 0
	for _, set := range []bool{len(o.Local) > 0, o.SSH != nil, o.Cloud != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return errors.New("say where the instances run: one of --local CMD, --ssh HOST or --cloud exec|ec2|sacloud")
	}
	if o.Min < 0 || o.Max < 1 || o.Min > o.Max {
		return fmt.Errorf("--min %d and --max %d: want 0 <= min <= max and max >= 1", o.Min, o.Max)
	}
	if o.MaxConn < 0 {
		return fmt.Errorf("--max-conn must be at least 1 (requests each instance serves at once), got %d", o.MaxConn)
	}
	if !strings.HasPrefix(o.HealthPath, "/") {
		return fmt.Errorf("--health-path must start with /, got %q", o.HealthPath)
	}
	port := func(flag string, argv []string) error {
		if !slices.ContainsFunc(argv, func(a string) bool { return strings.Contains(a, "{{.Port}}") }) {
			return fmt.Errorf("%s %q never says the instance's port: shoal chooses a port per instance and passes it where the command has {{.Port}} (--listen 127.0.0.1:{{.Port}}, say); an app that reads $PORT still needs it once, so write the command with {{.Port}}", flag, strings.Join(argv, " "))
		}
		return nil
	}
	switch {
	case len(o.Local) > 0:
		if err := port("--local", o.Local); err != nil {
			return err
		}
	case o.SSH != nil:
		s := o.SSH
		switch {
		case len(s.Hosts) == 0:
			return errors.New("--ssh needs at least one HOST")
		case s.User == "":
			return errors.New("--ssh needs --user: the login on the hosts")
		case s.KeyFile == "":
			return errors.New("--ssh needs --key FILE: a private key (without a passphrase) the hosts accept")
		case len(s.Command) == 0:
			return errors.New("--ssh needs --command CMD: the program each instance runs on its host")
		}
		if err := port("--command", s.Command); err != nil {
			return err
		}
	case o.Cloud != nil:
		c := o.Cloud
		switch {
		case !slices.Contains(Clouds, c.Type):
			return fmt.Errorf("--cloud must be one of %s, got %q", strings.Join(Clouds, ", "), c.Type)
		case c.Port < 1 || c.Port > 65535:
			return fmt.Errorf("--port must be from 1 to 65535, got %d", c.Port)
		case c.Type == "exec" && c.CLI == "":
			return errors.New("--cloud exec needs --cloud-cli PROG: the program that creates (PROG start NAME), deletes (PROG stop ID) and lists (PROG list) servers; see docs/clouds.md")
		case c.Type == "ec2" && (c.Region == "" || c.LaunchTemplate == ""):
			return errors.New("--cloud ec2 needs --region and --launch-template NAME (the template holds the AMI, instance type, subnet and security groups)")
		case c.Type == "sacloud" && c.Archive == "":
			return errors.New("--cloud sacloud needs --archive NAME: the source archive whose servers run your app")
		}
	}
	if t := o.TLS; t != nil {
		switch {
		case len(t.Domains) == 0:
			return errors.New("--email is the ACME account's: give the domains to serve over HTTPS with --tls DOMAIN")
		case t.Email == "":
			return errors.New("--tls DOMAIN needs --email: the ACME account's address (expiry notices go there)")
		}
	}
	if h := o.HA; h != nil {
		if _, err := netip.ParseAddr(h.Peer); err != nil {
			return fmt.Errorf("--ha takes the other node's IP address, got %q", h.Peer)
		}
		if len(h.Etcd) == 0 {
			return errors.New("--ha needs --etcd URL (repeatable): the etcd members the pair keeps its state in, http(s)://host:port")
		}
		if (h.VIP == "") != (h.Interface == "") {
			return errors.New("--vip CIDR and --vip-interface IFACE go together")
		}
	}
	for _, v := range o.strings() {
		if !utf8.ValidString(v) {
			return fmt.Errorf("%q is not UTF-8 text", v)
		}
	}
	return nil
}

// strings are every string the file will hold.
func (o Options) strings() []string {
	out := []string{o.Listen, o.StateDir, o.Group, o.HealthPath}
	out = append(out, o.Local...)
	if s := o.SSH; s != nil {
		out = append(out, s.User, s.KeyFile, s.KnownHosts)
		out = append(out, s.Hosts...)
		out = append(out, s.Command...)
	}
	if c := o.Cloud; c != nil {
		out = append(out, c.CLI, c.Region, c.LaunchTemplate, c.CredentialsFile, c.Zone, c.Archive)
	}
	if t := o.TLS; t != nil {
		out = append(out, t.Email, t.Directory, t.Bind)
		out = append(out, t.Domains...)
	}
	if h := o.HA; h != nil {
		out = append(out, h.Peer, h.Node, h.VIP, h.Interface)
		out = append(out, h.Etcd...)
	}
	return out
}

//go:embed shoal.yaml.tmpl
var fileTemplate string

var tmpl = template.Must(template.New("shoal.yaml").Funcs(template.FuncMap{
	"q":    quote,
	"list": list,
}).Parse(fileTemplate))

// ConcurrencyTarget is the policy's target with MaxConn set: 70 % of it in
// flight per instance, so the group grows before requests queue.
func (o Options) ConcurrencyTarget() string {
	return strconv.FormatFloat(0.7*float64(o.MaxConn), 'f', -1, 64)
}

// Render writes the config file for o. It does not validate it: the
// caller runs the loader on the result.
func Render(o Options) ([]byte, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, o); err != nil {
		return nil, fmt.Errorf("render shoal.yaml: %w", err)
	}
	return b.Bytes(), nil
}

// quote writes s as a YAML double-quoted scalar: Go's escapes (\n, \t,
// \", \\, \xNN, \uNNNN) are all YAML's too, so any text stays itself, in
// a block or inside a flow list alike.
func quote(s string) string { return strconv.Quote(s) }

// list writes argv as a YAML flow list of quoted scalars.
func list(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = quote(a)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// DefaultNode is this machine's name as an HA node name: the host name's
// first label, lower-cased, with what a node name cannot hold dropped;
// "a" when nothing is left.
func DefaultNode() string {
	host, _ := os.Hostname()
	host, _, _ = strings.Cut(strings.ToLower(host), ".")
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return -1
	}, host)
	if len(name) > 32 {
		name = name[:32]
	}
	if name == "" {
		return "a"
	}
	return name
}
