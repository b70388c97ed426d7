package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"gopkg.in/yaml.v3"

	"github.com/shoal-lb/shoal/internal/haproxy/hapword"
	"github.com/shoal-lb/shoal/internal/template"
)

// balanceAlgorithms are HAProxy's dynamic algorithms, and BalanceHash (which
// is consistent, so dynamic too): only they allow servers to be added to a
// running backend.
var balanceAlgorithms = []string{"roundrobin", "leastconn", "first", BalanceHash}

// maxGroupSize bounds max_size: shoal was measured at 1,000 instances on one
// machine (issue 45), and a group may hold them all.
const maxGroupSize = 1000

// namePattern keeps group and plan names usable as HAProxy backend names and
// as instance name prefixes.
const namePattern = `[a-z0-9][a-z0-9_-]{0,31}`

var nameRE = regexp.MustCompile(`^` + namePattern + `$`)

// maxPEMFile bounds a TLS certificate or key file; a long chain is a few KiB.
const maxPEMFile = 1 << 20

// maxTokenFile bounds how much of token_file is read; a token is far smaller.
const maxTokenFile = 4 << 10

// Load reads and validates the configuration file at path. Problems with the
// content are reported together as an ErrorList; a file that cannot be read
// yields the underlying error, wrapped.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	return Parse(path, data)
}

// CoreAddress is where the core a config file describes answers: what the
// commands that only talk to a running core need from the file.
type CoreAddress struct {
	// Socket is admin.socket, absolute.
	Socket string
	// StateDir holds the core's lock file.
	StateDir string
}

// LocateCore reads the file at path leniently for its core's address: a bad
// edit under a running core must not keep the operator from looking at it,
// stopping it or asking it to reload. The file's problems come back as an
// ErrorList beside an address read from whatever could be decoded (the lines
// before a YAML syntax error, else the defaults). Only a file that cannot be
// read yields no address.
func LocateCore(path string) (CoreAddress, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return CoreAddress{}, fmt.Errorf("load config: %w", err)
	}
	cfg, err := Parse(path, data)
	if err == nil {
		return CoreAddress{Socket: cfg.Admin.Socket, StateDir: cfg.StateDir}, nil
	}
	var el ErrorList
	if !errors.As(err, &el) {
		return CoreAddress{}, err
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return CoreAddress{}, fmt.Errorf("load config: %w", err)
	}
	partial := func(data []byte) *Config {
		d := &decoder{file: path, dir: dir, budget: 1000 + 2*len(data)}
		return d.document(data)
	}
	// The decoder goes on past errors in values, so state_dir and admin are
	// read even when another field is wrong; a YAML syntax error leaves no
	// document, but the lines before it usually are one.
	cfg = partial(data)
	if cfg == nil && len(el) > 0 && el[0].Line > 1 {
		lines := bytes.SplitAfter(data, []byte("\n"))
		cfg = partial(bytes.Join(lines[:min(el[0].Line-1, len(lines))], nil))
	}
	if cfg == nil {
		cfg = partial([]byte("{}"))
	}
	return CoreAddress{Socket: cfg.Admin.Socket, StateDir: cfg.StateDir}, el
}

// Parse validates data as the configuration file at path; path names the file
// in errors and relative paths are resolved against its directory.
func Parse(path string, data []byte) (*Config, error) {
	absPath, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	// Without aliases a document has fewer values than bytes; sharing a
	// section between a few groups stays far below this.
	d := &decoder{file: path, dir: dir, budget: 1000 + 2*len(data)}
	cfg := d.document(data)
	if len(d.errs) > 0 {
		return nil, d.sorted()
	}
	cfg.Path, cfg.file, cfg.pos, cfg.listeners = absPath, path, d.pos, d.listeners
	return cfg, nil
}

// top decodes data, which holds one YAML document, and returns the
// document's top node: nil when the document is empty, and not ok after a
// syntax error that leaves none. what names the file for the error about a
// second document.
func (d *decoder) top(data []byte, what string) (root *yaml.Node, ok bool) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, true
		}
		d.syntaxError(err)
		return nil, false
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		d.errorf(&extra, "", "unexpected second YAML document; %s holds one", what)
	} else if !errors.Is(err, io.EOF) {
		d.syntaxError(err)
	}
	if len(doc.Content) == 0 || isNull(doc.Content[0]) {
		return nil, true
	}
	return doc.Content[0], true
}

// sorted returns the errors in file order: checks that compare fields
// (duplicate names, a second default group) run after the fields themselves.
func (d *decoder) sorted() ErrorList {
	slices.SortStableFunc(d.errs, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Col, b.Col))
	})
	return d.errs
}

// yamlLine extracts the position from a yaml.v3 syntax error; yaml.v3 reports
// only a line, and not always that.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

func (d *decoder) syntaxError(err error) {
	e := &Error{File: d.file, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	if m := yamlLine.FindStringSubmatchIndex(err.Error()); m != nil {
		e.Line, _ = strconv.Atoi(err.Error()[m[2]:m[3]])
		e.Msg = err.Error()[m[1]:]
	}
	e.Msg = "invalid YAML: " + e.Msg
	d.errs = append(d.errs, e)
}

const msgEmpty = "empty config; expected a mapping with listen and groups"

func (d *decoder) document(data []byte) *Config {
	root, ok := d.top(data, "a config file")
	if !ok {
		return nil
	}
	if root == nil {
		d.errs = append(d.errs, &Error{File: d.file, Line: 1, Col: 1, Msg: msgEmpty})
		return nil
	}
	if root.Kind != yaml.MappingNode {
		d.errorf(root, "", "config must be a mapping with listen and groups, got %s", describe(root))
		return nil
	}
	return d.config(root)
}

func (d *decoder) config(root *yaml.Node) *Config {
	top := section[Config](d, root, "")
	def := defaultConfig
	cfg := &Config{}

	if !top.has("gslb") {
		top.require("groups") // a node that only answers DNS needs none
	}
	if !top.has("frontends") {
		top.require("listen") // the one-frontend shorthand
	}
	if s, n := top.str("listen", ""); n != nil {
		if err := checkHostPort(s); err != nil {
			d.errorf(n, "listen", "%v", err)
		} else if host, _, _ := net.SplitHostPort(s); checkListenHost(host) != nil {
			d.errorf(n, "listen", "host must be an IP address or a host name, got %q", host)
		} else if !top.has("frontends") {
			d.listenTCP(n, "listen", s, byHAProxy)
		}
		cfg.Listen = s
	}

	if top.has("compression") {
		cfg.Compression = d.compression(top.get("compression"), "compression")
	}

	stateDir, n := top.str("state_dir", def.StateDir)
	cfg.StateDir = abs(d.dir, stateDir)
	if n != nil && stateDir == "" {
		d.errorf(n, "state_dir", "must not be empty")
	} else if err := checkStateDir(cfg.StateDir); err != nil {
		if n == nil {
			n = root // the default, under the config file's directory
		}
		d.errorf(n, "state_dir", "%v", err)
	}

	// Each section is decoded by itself; what one names or is bounded by in
	// another is link's, below, or given to its decoder as an argument.
	cfg.Admin = d.admin(top.get("admin"), cfg.StateDir)
	cfg.HAProxy = d.haproxy(top.get("haproxy"))
	cfg.Metrics = d.metrics(top.get("metrics"))
	var provs map[string]providerLabels
	cfg.Providers, provs = d.providers(top.get("providers"))
	var refs []groupRef
	cfg.Groups, refs = d.groups(top.get("groups"), !top.has("frontends"))
	d.link(cfg, provs, refs)
	cfg.Frontends = d.frontends(top, cfg) // routes name groups
	cfg.AccessLog = d.accessLog(top.get("access_log"))
	d.checkLatencyReaders(cfg)
	cfg.InstanceLogs = d.instanceLogs(top.get("instance_logs"), "instance_logs")

	cfg.Notify = d.notify(top.get("notify"), cfg.Groups)
	if top.has("gslb") {
		cfg.GSLB = d.gslb(top.get("gslb"))
	}
	if top.has("ha") {
		cfg.HA = d.ha(top.get("ha"))
	}

	cfg.Shutdown, n = top.str("shutdown", def.Shutdown)
	if cfg.Shutdown != ShutdownKeep && cfg.Shutdown != ShutdownStop {
		d.errorf(n, "shutdown", "must be %s or %s, got %q", ShutdownKeep, ShutdownStop, cfg.Shutdown)
	}

	compat := section[Compat](d, top.get("compat"), "compat")
	if n := compat.get("sacloud_autoscaler"); n != nil {
		cfg.Compat.SacloudAutoscaler = d.sacloud(n, "compat.sacloud_autoscaler", cfg.StateDir)
	}
	d.checkListeners()
	return cfg
}

// checkHostPort accepts what HAProxy's bind and Go's net.Listen both accept:
// an optional host and a numeric port.
func checkHostPort(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("must be host:port, got %q", s)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("port must be a number from 1 to 65535, got %q", port)
	}
	return nil
}

func (d *decoder) admin(n *yaml.Node, stateDir string) Admin {
	f := section[Admin](d, n, "admin")
	def := defaultConfig.Admin
	var a Admin

	sock, sn := f.str("socket", def.Socket)
	if sn != nil && sock == "" {
		d.errorf(sn, "admin.socket", "must not be empty")
	}
	a.Socket = abs(stateDir, sock)
	d.listenUnix(sn, "admin.socket", a.Socket)
	if err := checkUnixSocket(a.Socket); err != nil {
		if sn == nil {
			sn = n
		}
		if sn != nil {
			d.errorf(sn, "admin.socket", "%v; set admin.socket to a shorter path", err)
		} else {
			d.errs = append(d.errs, &Error{File: d.file, Field: "admin.socket", Msg: err.Error() + "; set admin.socket to a shorter path"})
		}
	}

	listen, ln := f.str("listen", "")
	if ln != nil {
		if err := checkHostPort(listen); err != nil {
			d.errorf(ln, "admin.listen", "%v", err)
		} else {
			d.listenTCP(ln, "admin.listen", listen, byShoal)
		}
		a.Listen = listen
	}

	token, tn := f.str("token", "")
	if tn != nil {
		if err := checkToken(token); err != nil {
			d.errorf(tn, "admin.token", "%v", err)
		}
		a.Token = token
	}
	if file, fn := f.str("token_file", ""); fn != nil {
		if tn != nil {
			d.errorf(fn, "admin.token_file", "conflicts with admin.token; set only one")
		} else if token, err := readToken(abs(d.dir, file)); err != nil {
			d.errorf(fn, "admin.token_file", "%v", err)
		} else {
			a.Token = token
		}
	}
	if ln != nil && tn == nil && f.get("token_file") == nil {
		d.errorf(ln, "admin.listen", "requires token or token_file: the TCP API must be authenticated")
	}
	if tlsNode := f.get("tls"); tlsNode != nil {
		a.TLS = d.tlsFiles(tlsNode, "admin.tls")
		if ln == nil {
			d.errorf(tlsNode, "admin.tls", "applies only with admin.listen")
		}
	}
	a.InsecureRemote, _ = f.boolean("insecure_remote", def.InsecureRemote)
	if ln != nil && a.Listen != "" && a.TLS == nil && !a.InsecureRemote && checkHostPort(a.Listen) == nil {
		if host, _, _ := net.SplitHostPort(a.Listen); !isLoopback(host) {
			d.errorf(ln, "admin.listen", "%q is not a loopback address, and without TLS the token and every request cross the network in clear text; set admin.tls: {cert, key}, or insecure_remote: true to accept that", cmp.Or(host, "(all interfaces)"))
		}
	}
	return a
}

// tlsFiles decodes {cert, key} and checks, as serve would, that they load
// as a certificate and its private key, and that it has not expired.
func (d *decoder) tlsFiles(n *yaml.Node, path string) *TLSFiles {
	f := section[TLSFiles](d, n, path)
	cert, cn := f.str("cert", "")
	key, kn := f.str("key", "")
	if cn == nil || kn == nil {
		return nil
	}
	t := &TLSFiles{Cert: abs(d.dir, cert), Key: abs(d.dir, key)}
	for _, p := range []struct {
		path string
		node *yaml.Node
		name string
	}{{t.Cert, cn, "cert"}, {t.Key, kn, "key"}} {
		if fi, err := os.Stat(p.path); err != nil {
			d.errorf(p.node, join(path, p.name), "%v", err)
			return nil
		} else if !fi.Mode().IsRegular() || fi.Size() > maxPEMFile {
			d.errorf(p.node, join(path, p.name), "%s must be a regular PEM file of at most %d bytes", p.path, maxPEMFile)
			return nil
		}
	}
	if err := CheckCertificate(t.Cert, t.Key); err != nil {
		if ke := (*KeyError)(nil); errors.As(err, &ke) {
			d.errorf(kn, join(path, "key"), "%v", err)
		} else {
			d.errorf(cn, join(path, "cert"), "%v", err)
		}
		return nil
	}
	return t
}

func checkToken(t string) error {
	if t == "" {
		return errors.New("must not be empty")
	}
	if strings.ContainsFunc(t, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return errors.New("must not contain spaces or control characters")
	}
	return nil
}

// readToken reads a token file (see readRegular).
func readToken(path string) (string, error) {
	b, err := readRegular(path, maxTokenFile)
	if err != nil {
		return "", err
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	if err := checkToken(token); err != nil {
		return "", fmt.Errorf("token in %s %w", path, err)
	}
	return token, nil
}

func (d *decoder) haproxy(n *yaml.Node) HAProxy {
	f := section[HAProxy](d, n, "haproxy")
	var h HAProxy
	bin, bn := f.str("binary", defaultConfig.HAProxy.Binary)
	if bn != nil && bin == "" {
		d.errorf(bn, "haproxy.binary", "must not be empty")
	}
	// A bare name is looked up on PATH when shoal starts; a path is relative
	// to the config file like every other path.
	if strings.ContainsRune(bin, filepath.Separator) {
		bin = abs(d.dir, bin)
	}
	h.Binary = bin
	h.Global = d.checkEach(f.strings("global"), hapword.Line)
	h.Defaults = d.checkEach(f.strings("defaults"), hapword.Line)
	h.Timeouts = d.timeouts(f.get("timeouts"), f.field("timeouts"))
	h.Prometheus = d.loopbackListen(f, "prometheus", byHAProxy)
	return h
}

// loopbackListen decodes an optional host:port for an unauthenticated
// listener, which must be a loopback address.
func (d *decoder) loopbackListen(f *fields, key string, by int) string {
	s, n := f.str(key, "")
	if n == nil {
		return ""
	}
	if err := checkHostPort(s); err != nil {
		d.errorf(n, f.field(key), "%v", err)
		return ""
	}
	if host, _, _ := net.SplitHostPort(s); !isLoopback(host) {
		d.errorf(n, f.field(key), "must be a loopback address such as 127.0.0.1:9101 (it serves metrics without authentication), got %q", s)
		return ""
	}
	d.listenTCP(n, f.field(key), s, by)
	return s
}

// groups decodes the groups, with what link checks of each; shorthand is
// whether the file routes to them with their hosts and path_prefixes (it
// has no frontends section).
func (d *decoder) groups(n *yaml.Node, shorthand bool) ([]Group, []groupRef) {
	if n == nil {
		return nil, nil // reported by require
	}
	items, ok := d.sequence(n, "groups", "a list of groups")
	if !ok {
		return nil, nil
	}
	if len(items) == 0 {
		d.errorf(n, "groups", "must list at least one group")
		return nil, nil
	}
	var (
		groups       []Group
		refs         []groupRef
		names        = make(map[string]*yaml.Node)
		defaultGroup string // path and name of the group without routing
	)
	for i, item := range items {
		path := fmt.Sprintf("groups[%d]", i)
		g, ref, nameNode, ok := d.group(item, path, shorthand)
		if !ok {
			continue
		}
		if nameNode != nil {
			if first, dup := names[g.Name]; dup {
				d.errorf(nameNode, path+".name", "duplicate group name %q (first at line %d)", g.Name, first.Line)
			} else {
				names[g.Name] = nameNode
			}
		}
		if shorthand && len(g.Hosts) == 0 && len(g.PathPrefixes) == 0 {
			if defaultGroup != "" {
				d.errorf(item, path, "has neither hosts nor path_prefixes, so it would be a second default backend after %s; give one of them hosts or path_prefixes", defaultGroup)
			} else {
				defaultGroup = path
				if g.Name != "" {
					defaultGroup += fmt.Sprintf(" (%s)", g.Name)
				}
			}
		}
		groups, refs = append(groups, g), append(refs, ref)
	}
	return groups, refs
}

// group decodes one group, leaving in ref what link checks against the
// other sections; ok is false if item is not a mapping.
func (d *decoder) group(item *yaml.Node, path string, shorthand bool) (g Group, ref groupRef, nameNode *yaml.Node, ok bool) {
	f := section[Group](d, item, path)
	if f.node == nil {
		return g, ref, nil, false
	}
	def := defaultGroup

	if name, n := f.str("name", ""); n != nil {
		if !nameRE.MatchString(name) {
			d.errorf(n, f.field("name"), "must match %s (it names an HAProxy backend and its instances), got %q", namePattern, name)
		} else {
			g.Name, nameNode = name, n
		}
	}

	minOK, maxOK := d.sizeRange(f, &g)
	if v, n := f.integer("max_hourly_instances", 0); n != nil {
		switch {
		case v < 0:
			d.errorf(n, f.field("max_hourly_instances"), "must be >= 0 (0: no budget), got %d", v)
		case v > 0 && minOK && v < g.MinSize:
			d.errorf(n, f.field("max_hourly_instances"), "must be 0 (no budget) or at least min_size (%d), got %d: the group could never run min_size instances", g.MinSize, v)
		default:
			g.MaxHourlyInstances = v
		}
	}
	if v, n := f.number("max_hourly_cost"); n != nil {
		if v < 0 {
			d.errorf(n, f.field("max_hourly_cost"), "must be >= 0 (0: no budget), got %v", v)
		} else {
			g.MaxHourlyCost = v
		}
	}
	g.Plans = d.plans(f.get("plans"), f.field("plans"), g.Range(), minOK && maxOK)
	g.Autoscale = d.autoscale(f.get("autoscale"), f.field("autoscale"), &g, minOK && maxOK)

	g.Cooldown = def.Cooldown
	if n := f.get("cooldown"); n != nil {
		g.Cooldown = d.cooldown(n, f.field("cooldown"))
	}
	g.DrainTimeout = d.within(f, "drain_timeout", def.DrainTimeout, 0, maxTimeout)
	g.ReplaceAfter = d.within(f, "replace_after", def.ReplaceAfter, time.Second, maxTimeout)
	scaleIn, sn := f.str("scale_in", def.ScaleIn)
	if sn != nil && !slices.Contains(ScaleInPolicies, scaleIn) {
		d.errorf(sn, f.field("scale_in"), "must be one of %s (which instance in service a scale-in retires), got %q",
			strings.Join(ScaleInPolicies, ", "), scaleIn)
		scaleIn = def.ScaleIn
	}
	g.ScaleIn = scaleIn
	d.balance(f, &g)

	for _, it := range f.strings("hosts") {
		h, err := normalizeHost(it.val)
		if err != nil {
			d.errorf(it.node, it.field, "%v", err)
		}
		g.Hosts = append(g.Hosts, h)
	}
	g.PathPrefixes = d.checkEach(f.strings("path_prefixes"), hapword.PathPrefix)
	if !shorthand {
		for _, key := range []string{"hosts", "path_prefixes"} {
			if n := f.get(key); n != nil {
				d.errorf(n, f.field(key), "routes the listen shorthand's frontend; with frontends, route with frontends[].routes (host, path_prefix)")
			}
		}
	}

	g.Health = d.health(f.get("health"), f.field("health"))
	d.limits(f, &g)
	ref = groupRef{keys: f, zeroNode: f.get("scale_to_zero")}
	g.Provider, ref.provider = f.str("provider", def.Provider)
	if n := f.get("providers"); n != nil {
		if ref.provider != nil {
			d.errorf(n, f.field("providers"), "a group has provider or providers, not both: provider %s is the one-entry form of providers: [{name: %s}]", g.Provider, g.Provider)
		}
		g.Providers, ref.providers = d.groupProviders(n, f.field("providers"))
		if len(g.Providers) > 0 {
			g.Provider = g.Providers[0].Name
		}
	}
	if slices.ContainsFunc(g.ProviderList(), func(p GroupProvider) bool { return p.Name != ProviderLocal }) && !hasKey(f.get("health"), "passive") {
		p := defaultRemotePassive
		g.Health.Passive = &p
	}
	g.Retries = d.retries(f, g)
	g.ScaleToZero, ref.zero = d.scaleToZero(f, &g, minOK)
	g.Template, ref.template = d.template(f.get("template"), f.field("template"), g.Name)
	g.Deploy = d.deploy(f.get("deploy"), f.field("deploy"))
	d.recycling(f, &g)
	g.Outliers = d.outliers(f.get("outliers"), f.field("outliers"), &g)
	g.WarmPool = d.warmPool(f.get("warm_pool"), f.field("warm_pool"), &g)
	return g, ref, nameNode, true
}

// retries decodes a group's retries. Left out, a group with instances on
// another machine (ssh, a cloud) retries idempotent requests too: a host
// that dies or drops packets swallows requests already sent, which only a
// layer-7 retry saves; a local instance that dies refuses the next
// connection, which the connection retry redispatches.
func (d *decoder) retries(f *fields, g Group) string {
	def := defaultGroup.Retries
	if slices.ContainsFunc(g.ProviderList(), func(p GroupProvider) bool { return p.Name != ProviderLocal }) {
		def = RetriesIdempotent
	}
	v, n := f.str("retries", def)
	if n != nil && !slices.Contains(RetryModes, v) {
		d.errorf(n, f.field("retries"), "must be one of %s (connect: retry failed connections only; idempotent: also idempotent requests that failed after they were sent), got %q",
			strings.Join(RetryModes, ", "), v)
		return def
	}
	return v
}

// cooldown accepts {up, down} or, as the seed wrote it, one duration for both.
func (d *decoder) cooldown(n *yaml.Node, path string) Cooldown {
	switch n.Kind {
	case yaml.ScalarNode:
		v, ok := d.duration(n, path)
		if ok && v > maxCooldown {
			d.errorf(n, path, "must be from 0s to %s, got %s", maxCooldown, v)
		}
		return Cooldown{Up: v, Down: v}
	case yaml.MappingNode:
		f := section[Cooldown](d, n, path)
		var c Cooldown
		c.Up = d.within(f, "up", defaultCooldown.Up, 0, maxCooldown)
		c.Down = d.within(f, "down", defaultCooldown.Down, 0, maxCooldown)
		return c
	}
	d.errorf(n, path, "must be a duration or a mapping with up and down, got %s", describe(n))
	return defaultCooldown
}

// within decodes a duration that must lie in [least, most].
func (d *decoder) within(f *fields, key string, def, least, most time.Duration) time.Duration {
	v, n := f.duration(key, def)
	if n != nil && (v < least || v > most) {
		if least == 0 {
			d.errorf(n, f.field(key), "must be from 0s to %s, got %s", most, v)
		} else {
			d.errorf(n, f.field(key), "must be at least %s and at most %s, got %s", least, most, v)
		}
	}
	return v
}

// maxChecks bounds rise and fall; more consecutive checks than this is a typo.
const maxChecks = 1000

func (d *decoder) count(f *fields, key string, def int) int {
	v, n := f.integer(key, def)
	if n != nil && (v < 1 || v > maxChecks) {
		d.errorf(n, f.field(key), "must be from 1 to %d, got %d", maxChecks, v)
		return def
	}
	return v
}

// argv decodes a command list: every element is a template trial-run with
// data, and the first must not expand to nothing. over, when not nil, sees
// every expansion and ends the list once it reports a bound exceeded.
func (d *decoder) argv(n *yaml.Node, field string, data TemplateData, over func(n *yaml.Node, field, out string) bool) (texts []string, compiled template.Argv) {
	items, ok := d.sequence(n, field, "a list of strings")
	if ok && len(items) == 0 {
		d.errorf(n, field, "must not be empty")
	}
	for i, item := range items {
		ifield := fmt.Sprintf("%s[%d]", field, i)
		s, ok := d.str(item, ifield)
		if !ok {
			continue
		}
		tt, out, err := template.Compile(s, data)
		if err == nil && i == 0 && out == "" {
			err = errors.New("expands to an empty program name")
		}
		if err != nil {
			d.errorf(item, ifield, "%v", err)
			continue
		}
		if over != nil && over(item, ifield, out) {
			break
		}
		texts = append(texts, s)
		compiled = append(compiled, tt)
	}
	return texts, compiled
}

// template decodes and compiles an instance template, trial-running every
// string with sample data for group; its keys are for link, which requires
// a command of a group whose instances are processes (a cloud's servers run
// their image).
func (d *decoder) template(n *yaml.Node, path, group string) (Template, *fields) {
	f := section[Template](d, n, path)
	def := defaultTemplate
	t := Template{Dir: d.dir}
	// Variables first: every other field is trial-run with them.
	t.Vars = d.vars(f.get("vars"), f.field("vars"))
	data := sampleData(group, t.Vars)
	// Expand bounds each instance's fields in all; so does the trial run.
	total := 0
	overTotal := func(n *yaml.Node, field, out string) bool {
		if total += len(out); total > template.MaxTotal {
			d.errorf(n, field, "%v", template.ErrTotalTooLong)
			return true
		}
		return false
	}

	d.container(f, &t, data, overTotal)
	if cn := f.get("command"); cn != nil && !t.IsContainer() {
		t.Command, t.program.Command = d.argv(cn, f.field("command"), data, overTotal)
	}

	if en := f.get("env"); en != nil {
		entries, _ := d.entries(en, f.field("env"))
		for _, e := range entries {
			field := join(f.field("env"), e.key)
			if err := template.CheckEnvName(e.key); err != nil {
				d.errorf(e.k, field, "%v", err)
				continue
			}
			s, ok := d.value(e.v, field)
			if !ok {
				continue
			}
			tt, out, err := template.Compile(s, data)
			if err != nil {
				d.errorf(e.v, field, "%v", err)
				continue
			}
			if overTotal(e.v, field, out) {
				break
			}
			if t.Env == nil {
				t.Env = make(map[string]string)
				t.program.Env = make(map[string]*template.Arg)
			}
			t.Env[e.key], t.program.Env[e.key] = s, tt
		}
	}

	if dir, n := f.str("dir", ""); n != nil {
		if dir == "" {
			d.errorf(n, f.field("dir"), "must not be empty")
		}
		t.Dir = abs(d.dir, dir)
	}
	t.StopTimeout = d.within(f, "stop_timeout", def.StopTimeout, 0, maxTimeout)
	t.CPUs = d.cpus(f)
	if label, ln := f.str("version", ""); ln != nil {
		if err := checkLabel(label); err != nil {
			d.errorf(ln, f.field("version"), "%v", err)
		}
		t.Label = label
	}
	t.PreStart = d.hook(f.get("pre_start"), f.field("pre_start"), data, defaultPreStart)
	t.PreStop = d.hook(f.get("pre_stop"), f.field("pre_stop"), data, defaultPreStop)
	return t, f
}

// sacloud decodes the sacloud/autoscaler compatibility server. Its protocol
// has no authentication, hence the loopback rule for TCP.
func (d *decoder) sacloud(n *yaml.Node, path, stateDir string) *SacloudAutoscaler {
	f := section[SacloudAutoscaler](d, n, path)
	s := &SacloudAutoscaler{SocketMode: defaultSacloud.SocketMode}
	s.AllowRemote, _ = f.boolean("allow_remote", defaultSacloud.AllowRemote)

	if listen, ln := f.str("listen", ""); ln != nil {
		scheme, rest, _ := strings.Cut(listen, ":")
		switch scheme {
		case "unix":
			if rest == "" {
				d.errorf(ln, f.field("listen"), "unix: needs a socket path")
			}
			s.Network, s.Address = "unix", abs(stateDir, rest)
			if err := checkUnixSocket(s.Address); err != nil {
				d.errorf(ln, f.field("listen"), "%v", err)
			} else {
				d.listenUnix(ln, f.field("listen"), s.Address)
			}
		case "tcp":
			s.Network, s.Address = "tcp", rest
			if err := checkHostPort(rest); err != nil {
				d.errorf(ln, f.field("listen"), "%v", err)
			} else if host, _, _ := net.SplitHostPort(rest); !s.AllowRemote && !isLoopback(host) {
				d.errorf(ln, f.field("listen"), "%q is not a loopback address and the protocol has no authentication; set allow_remote: true to accept that", host)
			} else {
				d.listenTCP(ln, f.field("listen"), rest, byShoal)
			}
		default:
			d.errorf(ln, f.field("listen"), `must be "unix:PATH" or "tcp:HOST:PORT", got %q`, listen)
		}
		s.Listen = s.Network + ":" + s.Address
	}

	if mn := f.get("socket_mode"); mn != nil {
		if mode, ok := fileMode(mn); !ok {
			d.errorf(mn, f.field("socket_mode"), `must be an octal file mode such as "0660", got %s`, describe(mn))
		} else {
			s.SocketMode = mode
		}
		if s.Network == "tcp" {
			d.errorf(mn, f.field("socket_mode"), "applies only to a unix: listen address")
		}
	}
	if group, gn := f.str("socket_group", ""); gn != nil {
		if group == "" {
			d.errorf(gn, f.field("socket_group"), "must not be empty")
		}
		if s.Network == "tcp" {
			d.errorf(gn, f.field("socket_group"), "applies only to a unix: listen address")
		}
		s.SocketGroup = group
	}
	return s
}

// fileMode accepts permission bits as an octal string ("0660") or as a YAML
// integer, which yaml.v3 reads as octal when it has a leading zero.
func fileMode(n *yaml.Node) (uint32, bool) {
	if n.Kind != yaml.ScalarNode {
		return 0, false
	}
	var v uint64
	switch n.ShortTag() {
	case "!!int":
		if n.Decode(&v) != nil {
			return 0, false
		}
	case "!!str":
		var err error
		if v, err = strconv.ParseUint(n.Value, 8, 32); err != nil {
			return 0, false
		}
	default:
		return 0, false
	}
	return uint32(v), v <= 0o777
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
