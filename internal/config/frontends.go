package config

import (
	"errors"
	"fmt"
	"net"
	"regexp/syntax"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/shoal-lb/shoal/internal/haproxy/hapword"
)

// Frontend is where clients connect: one HAProxy frontend of the same name.
// The top-level listen (with compression and the groups' hosts and
// path_prefixes) is the shorthand for one HTTP frontend named "shoal";
// Load turns either form into Config.Frontends.
type Frontend struct {
	Name string `yaml:"name" required:"true"`
	// Bind are the addresses HAProxy listens on: "host:port", "[v6]:port"
	// or ":port" (every address).
	Bind []string `yaml:"bind" required:"true"`
	// Mode is ModeHTTP (the default) or ModeTCP; a TCP frontend's single
	// route names its group, checked at layer 4.
	Mode string `yaml:"mode"`
	// TLS is nil for plain HTTP (or TCP).
	TLS *TLS `yaml:"tls"`
	// Routes are tried in order; the first that matches decides.
	Routes []Route `yaml:"routes"`
	// Compression is nil when gzip compression is off.
	Compression *Compression `yaml:"compression"`
	// Timeouts: client, http_request and http_keep_alive apply to a
	// frontend; a zero field is haproxy.timeouts'.
	Timeouts Timeouts `yaml:"timeouts"`
	// MaxConnections caps the frontend's concurrent connections (0:
	// HAProxy's default).
	MaxConnections int `yaml:"max_connections"`
	// RateLimit is nil when clients are not limited.
	RateLimit *RateLimit `yaml:"rate_limit"`
	// TrustedProxies are the networks whose X-Forwarded-For is believed:
	// a route's allow and deny, and a rate limit by ip, see, for a request
	// from one of them, the last address in X-Forwarded-For that is not a
	// trusted proxy; for any other, the connection's source (a forged
	// header changes nothing).
	TrustedProxies []string `yaml:"trusted_proxies"`
	// ForwardedHeaders sends instances X-Forwarded-For and
	// X-Forwarded-Proto, replacing a client's own (default true). False
	// passes the request's headers as the client sent them, forged ones
	// included, and saves what the headers cost: about 5 % of HAProxy's
	// CPU per request and 2 % of requests/s on a small page (see
	// docs/routing.md).
	ForwardedHeaders bool `yaml:"forwarded_headers"`
}

// Values of Frontend.Mode.
const (
	ModeHTTP = "http"
	ModeTCP  = "tcp"
)

// Route matches requests and says what to do with them. Every condition
// given must hold; a route with none matches every request. Exactly one
// action: Group, Weights, Redirect or Respond. Routes are rendered into
// HAProxy ACLs, never evaluated in Go.
type Route struct {
	// Host is exact names or "*.suffix" (any subdomain), any one of them.
	Host []string `yaml:"host"`
	// PathPrefix and PathRegex match the path (without the query).
	PathPrefix []string `yaml:"path_prefix"`
	PathRegex  string   `yaml:"path_regex"`
	// Method is any one of these methods.
	Method []string `yaml:"method"`
	// Header is every named header with its exact value.
	Header map[string]string `yaml:"header"`

	Group    string    `yaml:"group"`
	Weights  []Weight  `yaml:"weights"`
	Redirect *Redirect `yaml:"redirect"`
	Respond  *Respond  `yaml:"respond"`

	// Allow, when given, admits only clients in these networks (addresses
	// or CIDRs); the others get 403 before the route's action. The client
	// is the connection's source (see Frontend.TrustedProxies).
	Allow []string `yaml:"allow"`
	// Deny answers 403 to clients in these networks, allowed or not.
	Deny []string `yaml:"deny"`
	// BasicAuth, when set, answers 401 to a request without a valid user.
	BasicAuth *BasicAuth `yaml:"basic_auth"`
}

// Weight is one group's share of a route's requests (canary 95/5); the file
// writes weights as a mapping, {web: 95, canary: 5}, kept in its order.
type Weight struct {
	Group  string
	Weight int
}

// Redirect answers with a redirect: to Location, or to the same URL over
// https when HTTPS is set.
type Redirect struct {
	Code     int    `yaml:"code"`
	Location string `yaml:"location"`
	// HTTPS redirects requests that came over a plain bind to the same URL
	// over https; on a TLS bind the route does not match (the next decides).
	HTTPS bool `yaml:"https"`
}

// Respond answers the request itself (a maintenance page, a 503 for bots).
type Respond struct {
	Status      int    `yaml:"status" required:"true"`
	Body        string `yaml:"body"`
	ContentType string `yaml:"content_type"`
}

// TLS terminates TLS on a frontend's binds.
type TLS struct {
	// Certificates are PEM files; Dir is a directory of them (each
	// certificate with its key in the same file or beside it as .key).
	// SNI picks the certificate; the first is the default.
	Certificates []TLSFiles `yaml:"certificates"`
	Dir          string     `yaml:"dir"`
	// ACME obtains and renews the certificates of its domains.
	ACME *ACME `yaml:"acme"`
	// Bind are the frontend's binds that speak TLS; empty means all.
	Bind []string `yaml:"bind"`
	// ALPN is offered in this order; default h2 then http/1.1.
	ALPN []string `yaml:"alpn"`
	// MinVersion is "1.2" (default) or "1.3".
	MinVersion string `yaml:"min_version"`
	// RedirectHTTP redirects requests on the frontend's plain binds to
	// https (but ACME's HTTP-01 challenges).
	RedirectHTTP bool `yaml:"redirect_http"`
	// TicketKeys is TicketKeysRotate (default: shoal writes and rotates
	// HAProxy's session ticket keys) or TicketKeysOff.
	TicketKeys string `yaml:"ticket_keys"`
}

// Values of TLS.TicketKeys.
const (
	TicketKeysRotate = "rotate"
	TicketKeysOff    = "off"
)

// ACME is an ACME account and the domains it keeps certificates for.
type ACME struct {
	Email string `yaml:"email" required:"true"`
	// Directory is the CA's directory URL (default Let's Encrypt's).
	Directory string   `yaml:"directory"`
	Domains   []string `yaml:"domains" required:"true"`
	// CA is a PEM file of roots to trust for Directory (a private CA,
	// pebble in tests); empty: the system's.
	CA string `yaml:"ca"`
	// RenewBefore renews a certificate this long before it expires;
	// zero: at two thirds of its lifetime, or as the CA's renewal info says.
	RenewBefore time.Duration `yaml:"renew_before"`
}

// RateLimit limits each client to Requests per Per, answering 429 beyond.
type RateLimit struct {
	Requests int           `yaml:"requests" required:"true"`
	Per      time.Duration `yaml:"per" required:"true"`
	// By is "ip" (default) or "header:NAME" (an API key, say). A header's
	// value is tracked and shown (status, dashboard) by the first 12 hex
	// digits of its SHA-256, never the value: printf %s KEY | sha256sum.
	By string `yaml:"by"`
}

// Sticky keeps a client on one instance with a cookie HAProxy sets; a
// draining instance keeps its sticky clients until they move or it stops.
type Sticky struct {
	Cookie string `yaml:"cookie" required:"true"`
}

// Values of Group.Balance besides HAProxy's dynamic algorithms; hash is
// consistent hashing on Group.HashOn.
const BalanceHash = "hash"

// The defaults of the sections above, one table per type (see schema.go).
var (
	defaultFrontend  = Frontend{Mode: ModeHTTP, ForwardedHeaders: true}
	defaultRoute     = Route{}
	defaultRedirect  = Redirect{Code: 302}
	defaultRespond   = Respond{ContentType: "text/plain"}
	defaultTLS       = TLS{ALPN: []string{"h2", "http/1.1"}, MinVersion: "1.2", TicketKeys: TicketKeysRotate}
	defaultACME      = ACME{Directory: "https://acme-v02.api.letsencrypt.org/directory"}
	defaultRateLimit = RateLimit{By: "ip"}
	defaultSticky    = Sticky{}
)

// HandoffFrontend is the HAProxy frontend that takes the requests an old
// worker held for a group that scales to zero (see haproxy.holdLines).
const HandoffFrontend = "shoal_handoff"

// ShorthandName is the frontend the top-level listen stands for.
const ShorthandName = "shoal"

// Shorthand is the frontend that the top-level listen, compression and the
// groups' hosts and path_prefixes stand for: one route per group that has
// either, in the order written, and the group with neither last, as the
// catch-all.
func Shorthand(listen string, c *Compression, groups []Group) Frontend {
	fe := defaultFrontend
	fe.Name, fe.Bind, fe.Compression = ShorthandName, []string{listen}, c
	var catchAll []Route
	for _, g := range groups {
		r := Route{Host: g.Hosts, PathPrefix: g.PathPrefixes, Group: g.Name}
		if len(g.Hosts) == 0 && len(g.PathPrefixes) == 0 {
			catchAll = append(catchAll, r)
			continue
		}
		fe.Routes = append(fe.Routes, r)
	}
	fe.Routes = append(fe.Routes, catchAll...)
	return fe
}

// Bounds of a frontend's values.
const (
	maxFrontends   = 100
	maxRoutes      = 1000
	maxConnections = 1_000_000
	// maxWeight is HAProxy's largest server weight, a familiar bound.
	maxWeight = 256
	// maxRespondBody keeps a respond body well inside HAProxy's 16 KiB
	// buffer together with its headers.
	maxRespondBody = 8 << 10
)

// redirectCodes are the codes HAProxy's redirect accepts.
var redirectCodes = []int{301, 302, 303, 307, 308}

// frontends decodes the frontends section, or makes the shorthand's one
// frontend when the file has none.
func (d *decoder) frontends(top *fields, cfg *Config) []Frontend {
	if !top.has("frontends") {
		if cfg.Listen == "" {
			return nil // reported: listen is required
		}
		return []Frontend{Shorthand(cfg.Listen, cfg.Compression, cfg.Groups)}
	}
	for _, key := range []string{"listen", "compression"} {
		if n := top.vals[key]; n != nil {
			d.errorf(n, key, "is the one-frontend shorthand; with frontends, give each frontend its bind and compression")
		}
	}
	n := top.get("frontends")
	if n == nil {
		d.errorf(top.vals["frontends"], "frontends", "must list at least one frontend")
		return nil
	}
	items, ok := d.sequence(n, "frontends", "a list of frontends")
	if !ok {
		return nil
	}
	if len(items) == 0 || len(items) > maxFrontends {
		d.errorf(n, "frontends", "must list 1 to %d frontends, got %d", maxFrontends, len(items))
		return nil
	}
	groups := make(map[string]bool, len(cfg.Groups))
	for _, g := range cfg.Groups {
		groups[g.Name] = true
	}
	var (
		fes   []Frontend
		names = make(map[string]*yaml.Node)
		// modes records which mode of frontend routes to each group.
		modes = make(map[string]string)
	)
	for i, item := range items {
		path := fmt.Sprintf("frontends[%d]", i)
		fe, ok := d.frontend(item, path, groups)
		if !ok {
			continue
		}
		switch first, dup := names[fe.Name]; {
		case fe.Name == "":
		case dup:
			d.errorAt(path+".name", "duplicate frontend name %q (first at line %d)", fe.Name, first.Line)
		case groups[fe.Name]:
			// The access log names the frontend for the requests it
			// answers itself, the group's backend for the others.
			d.errorAt(path+".name", "%q names a group too; give the frontend another name", fe.Name)
		default:
			names[fe.Name] = item
		}
		for j, r := range fe.Routes {
			for _, g := range r.groups() {
				if m, seen := modes[g]; seen && m != fe.Mode {
					d.errorAt(fmt.Sprintf("%s.routes[%d]", path, j), "group %s is used by both an http and a tcp frontend; its backend has one mode", g)
				}
				modes[g] = fe.Mode
			}
		}
		fes = append(fes, fe)
	}
	d.tcpGroups(cfg.Groups, modes)
	return fes
}

// tcpGroups checks the groups a tcp frontend routes to, whose backends
// see bytes, not requests: checked at layer 4 (the default http check
// becomes a connect check), never held at zero instances.
func (d *decoder) tcpGroups(groups []Group, modes map[string]string) {
	for i := range groups {
		g := &groups[i]
		if modes[g.Name] != ModeTCP {
			continue
		}
		path := fmt.Sprintf("groups[%d]", i)
		switch {
		case d.written(path + ".health.type"):
			if g.Health.Type != "tcp" {
				d.errorAt(path+".health.type", "a tcp frontend routes to group %s: its health check must be tcp", g.Name)
			}
		default:
			g.Health.Type = "tcp"
		}
		if p := g.Health.Passive; p != nil && p.Observe == "layer7" {
			d.errorAt(path+".health.passive.observe", "a tcp frontend routes to group %s: observe must be layer4", g.Name)
		}
		if g.ScaleToZero != nil {
			d.errorAt(path+".scale_to_zero", "a tcp frontend routes to group %s, which cannot hold connections while it has no instance", g.Name)
		}
		switch {
		case d.written(path+".retries") && g.Retries != RetriesConnect:
			d.errorAt(path+".retries", "a tcp frontend routes to group %s: its backend sees bytes, not requests, so only a failed connection can be retried: retries must be connect", g.Name)
		default:
			g.Retries = RetriesConnect
		}
		if g.Outliers != nil {
			d.errorAt(path+".outliers", "a tcp frontend routes to group %s: its backend sees bytes, not HTTP answers or their latency, so there is nothing to tell an outlier by; leave outliers out (health checks still take a dead instance out)", g.Name)
		}
	}
}

// written reports whether the file gives field.
func (d *decoder) written(field string) bool {
	_, ok := d.pos[field]
	return ok
}

// errorAt reports a problem with field where the file writes it, or its
// closest enclosing field.
func (d *decoder) errorAt(field, format string, args ...any) {
	n := &yaml.Node{}
	for f := field; f != ""; f = parentField(f) {
		if p, ok := d.pos[f]; ok {
			n.Line, n.Column = p.Line, p.Col
			break
		}
	}
	d.errorf(n, field, format, args...)
}

// groups lists the groups r sends requests to.
func (r Route) groups() []string {
	if r.Group != "" {
		return []string{r.Group}
	}
	var gs []string
	for _, w := range r.Weights {
		gs = append(gs, w.Group)
	}
	return gs
}

// frontend decodes one frontend; ok is false if item is not a mapping.
func (d *decoder) frontend(item *yaml.Node, path string, groups map[string]bool) (Frontend, bool) {
	f := section[Frontend](d, item, path)
	if f.node == nil {
		return Frontend{}, false
	}
	fe := defaultFrontend
	if name, n := f.str("name", ""); n != nil {
		switch {
		case !nameRE.MatchString(name):
			d.errorf(n, f.field("name"), "must match %s (it names an HAProxy frontend), got %q", namePattern, name)
		case name == "prometheus":
			d.errorf(n, f.field("name"), "prometheus is the name of haproxy.prometheus's frontend; choose another")
		case name == HandoffFrontend:
			d.errorf(n, f.field("name"), "%s is the name of the frontend that takes held requests from a replaced HAProxy worker; choose another", name)
		default:
			fe.Name = name
		}
	}
	for _, it := range d.oneOrMore(f, "bind") {
		if err := checkHostPort(it.val); err != nil {
			d.errorf(it.node, it.field, "%v", err)
		} else if host, _, _ := net.SplitHostPort(it.val); checkListenHost(host) != nil {
			d.errorf(it.node, it.field, "host must be an IP address or a host name, got %q", host)
		} else {
			d.listenTCP(it.node, it.field, it.val, byHAProxy)
		}
		fe.Bind = append(fe.Bind, it.val)
	}
	mode, mn := f.str("mode", defaultFrontend.Mode)
	if mode != ModeHTTP && mode != ModeTCP {
		d.errorf(mn, f.field("mode"), "must be %s or %s, got %q", ModeHTTP, ModeTCP, mode)
		mode = ModeHTTP
	}
	fe.Mode = mode
	if n := f.get("tls"); n != nil {
		fe.TLS = d.tls(n, f.field("tls"))
		d.checkTLSBinds(f.field("tls"), fe)
	}
	if n := f.get("compression"); n != nil {
		if mode == ModeTCP {
			d.errorf(n, f.field("compression"), "applies to http frontends only")
		}
		fe.Compression = d.compression(n, f.field("compression"))
	}
	fe.Timeouts = d.frontendTimeouts(f.get("timeouts"), f.field("timeouts"), mode)
	if v, n := f.integer("max_connections", 0); n != nil {
		if v < 0 || v > maxConnections {
			d.errorf(n, f.field("max_connections"), "must be from 0 (HAProxy's default) to %d, got %d", maxConnections, v)
		} else {
			fe.MaxConnections = v
		}
	}
	if n := f.get("rate_limit"); n != nil {
		if mode == ModeTCP {
			d.errorf(n, f.field("rate_limit"), "applies to http frontends only (it answers 429)")
		}
		fe.RateLimit = d.rateLimit(n, f.field("rate_limit"))
	}
	fe.TrustedProxies = d.trustedProxies(f, mode)
	if v, n := f.boolean("forwarded_headers", defaultFrontend.ForwardedHeaders); n != nil && mode == ModeTCP {
		d.errorf(n, f.field("forwarded_headers"), "applies to http frontends only (they are headers)")
	} else {
		fe.ForwardedHeaders = v
	}
	fe.Routes = d.routes(f, mode, groups, fe.hasPlainBind())
	return fe, true
}

// compression decodes a compression section.
func (d *decoder) compression(n *yaml.Node, path string) *Compression {
	c := section[Compression](d, n, path)
	comp := &Compression{Types: slices.Clone(defaultCompression.Types)}
	if tn := c.get("types"); tn != nil {
		if tn.Kind == yaml.SequenceNode && len(tn.Content) == 0 {
			d.errorf(tn, c.field("types"), "must list at least one type; leave it out for the defaults")
		}
		comp.Types = d.checkEach(c.strings("types"), hapword.MediaType)
	}
	return comp
}

// frontendTimeouts decodes the timeouts a frontend has (HAProxy's connect,
// server and queue timeouts are a backend's); zero is haproxy.timeouts'.
func (d *decoder) frontendTimeouts(n *yaml.Node, path, mode string) Timeouts {
	f := section[Timeouts](d, n, path)
	for _, key := range []string{"connect", "server", "queue"} {
		if kn := f.vals[key]; kn != nil {
			d.errorf(kn, f.field(key), "is a backend's timeout; set it in haproxy.timeouts (a frontend has client, http_request and http_keep_alive)")
		}
	}
	if mode == ModeTCP {
		for _, key := range []string{"http_request", "http_keep_alive"} {
			if kn := f.vals[key]; kn != nil {
				d.errorf(kn, f.field(key), "applies to http frontends only")
			}
		}
	}
	return Timeouts{
		Client:        d.timer(f, "client", 0),
		HTTPRequest:   d.timer(f, "http_request", 0),
		HTTPKeepAlive: d.timer(f, "http_keep_alive", 0),
	}
}

// routes decodes a frontend's routes and reports the ones an earlier route
// shadows: first match wins, so they could never match.
func (d *decoder) routes(f *fields, mode string, groups map[string]bool, plain bool) []Route {
	path := f.field("routes")
	n := f.get("routes")
	if n == nil {
		if f.node != nil {
			d.errorf(f.node, path, "required: a frontend needs at least one route")
		}
		return nil
	}
	items, ok := d.sequence(n, path, "a list of routes")
	if !ok {
		return nil
	}
	if len(items) == 0 || len(items) > maxRoutes {
		d.errorf(n, path, "must list 1 to %d routes, got %d", maxRoutes, len(items))
		return nil
	}
	if mode == ModeTCP && len(items) > 1 {
		d.errorf(items[1], fmt.Sprintf("%s[1]", path), "a tcp frontend has one route, naming its group")
	}
	var (
		routes []Route
		nodes  []*yaml.Node
	)
	for i, item := range items {
		rpath := fmt.Sprintf("%s[%d]", path, i)
		r, ok := d.route(item, rpath, mode, groups, plain)
		if !ok {
			continue
		}
		for j, earlier := range routes {
			if earlier.covers(r) {
				d.errorf(item, rpath, "can never match: the earlier route at line %d matches every request this one does (first match wins); put this one first or narrow that one", nodes[j].Line)
				break
			}
		}
		routes, nodes = append(routes, r), append(nodes, item)
	}
	return routes
}

// route decodes one route; ok is false when it has an error, so that it
// is not compared with the others. plain is whether the frontend has a
// bind without TLS.
func (d *decoder) route(item *yaml.Node, path, mode string, groups map[string]bool, plain bool) (Route, bool) {
	f := section[Route](d, item, path)
	if f.node == nil {
		return Route{}, false
	}
	var r Route
	// A condition left out for an error would make the route match more.
	errs := len(d.errs)
	for _, it := range d.oneOrMore(f, "host") {
		h, err := normalizeHost(it.val)
		if err != nil {
			d.errorf(it.node, it.field, "%v", err)
			continue
		}
		r.Host = append(r.Host, h)
	}
	for _, it := range d.oneOrMore(f, "path_prefix") {
		if err := hapword.PathPrefix(it.val); err != nil {
			d.errorf(it.node, it.field, "%v", err)
			continue
		}
		r.PathPrefix = append(r.PathPrefix, it.val)
	}
	if re, n := f.str("path_regex", ""); n != nil {
		if err := CheckPathRegex(re); err != nil {
			d.errorf(n, f.field("path_regex"), "%v", err)
		} else {
			r.PathRegex = re
		}
	}
	for _, it := range d.oneOrMore(f, "method") {
		if err := hapword.HTTPToken(it.val); err != nil {
			d.errorf(it.node, it.field, "must be an HTTP method such as GET: %v", err)
			continue
		}
		r.Method = append(r.Method, it.val)
	}
	if hn := f.get("header"); hn != nil {
		entries, _ := d.entries(hn, f.field("header"))
		seen := make(map[string]*yaml.Node)
		for _, e := range entries {
			field := join(f.field("header"), e.key)
			if err := hapword.HTTPToken(e.key); err != nil {
				d.errorf(e.k, field, "must be a header name: %v", err)
				continue
			}
			if first, dup := seen[strings.ToLower(e.key)]; dup {
				d.errorf(e.k, field, "the same header as line %d (names are case-insensitive)", first.Line)
				continue
			}
			seen[strings.ToLower(e.key)] = e.k
			v, ok := d.value(e.v, field)
			if !ok {
				continue
			}
			if err := CheckQuotable(v); err != nil || v == "" {
				d.errorf(e.v, field, "must be a value without control characters (matched exactly), got %q", truncate(v))
				continue
			}
			if r.Header == nil {
				r.Header = make(map[string]string)
			}
			r.Header[e.key] = v
		}
	}

	d.access(f, &r, mode)

	var actions []string
	for _, key := range []string{"group", "weights", "redirect", "respond"} {
		if f.get(key) != nil {
			actions = append(actions, key)
		}
	}
	switch {
	case len(actions) == 0:
		d.errorf(item, path, "needs one action: group, weights, redirect or respond")
		return r, false
	case len(actions) > 1:
		d.errorf(f.get(actions[1]), f.field(actions[1]), "a route has one action, and this one has %s", strings.Join(actions, " and "))
		return r, false
	}
	switch actions[0] {
	case "group":
		g, n := f.str("group", "")
		if n != nil && !groups[g] {
			d.errorf(n, f.field("group"), "unknown group %q", g)
		}
		r.Group = g
	case "weights":
		r.Weights = d.weights(f.get("weights"), f.field("weights"), groups)
	case "redirect":
		r.Redirect = d.redirect(f.get("redirect"), f.field("redirect"))
		if r.Redirect.HTTPS && !plain {
			d.errorAt(f.field("redirect")+".https", "every bind of this frontend speaks TLS, so no request would be redirected to https (on TLS the route does not match); drop the route, or list the TLS binds in tls.bind and add a plain one")
		}
	case "respond":
		r.Respond = d.respond(f.get("respond"), f.field("respond"))
	}
	if mode == ModeTCP && (actions[0] != "group" || r.hasConditions()) {
		d.errorf(item, path, "a tcp frontend's route names one group and nothing else (it sees bytes, not requests)")
	}
	return r, len(d.errs) == errs
}

// oneOrMore reads a key that takes one string or a list of them; an
// empty list is an error (left out, a condition matches any request).
func (d *decoder) oneOrMore(f *fields, key string) []item {
	n := f.get(key)
	if n == nil {
		return nil
	}
	if n.Kind == yaml.ScalarNode {
		s, ok := d.str(n, f.field(key))
		if !ok {
			return nil
		}
		return []item{{s, n, f.field(key)}}
	}
	if n.Kind == yaml.SequenceNode && len(n.Content) == 0 {
		d.errorf(n, f.field(key), "must list at least one")
	}
	return f.strings(key)
}

func (d *decoder) weights(n *yaml.Node, path string, groups map[string]bool) []Weight {
	entries, ok := d.entries(n, path)
	if !ok {
		return nil
	}
	var (
		ws  []Weight
		sum int
	)
	for _, e := range entries {
		field := join(path, e.key)
		if !groups[e.key] {
			d.errorf(e.k, field, "unknown group %q", e.key)
			ok = false
			continue
		}
		v, vok := d.integer(e.v, field)
		if !vok {
			ok = false
			continue
		}
		if v < 0 || v > maxWeight {
			d.errorf(e.v, field, "must be from 0 to %d, got %d", maxWeight, v)
			ok = false
			continue
		}
		sum += v
		ws = append(ws, Weight{Group: e.key, Weight: v})
	}
	if ok && sum == 0 {
		d.errorf(n, path, "the weights add up to 0: no group would get a request")
	}
	return ws
}

func (d *decoder) redirect(n *yaml.Node, path string) *Redirect {
	f := section[Redirect](d, n, path)
	r := defaultRedirect
	if code, cn := f.integer("code", r.Code); cn != nil {
		if !slices.Contains(redirectCodes, code) {
			d.errorf(cn, f.field("code"), "must be one of 301, 302, 303, 307, 308, got %d", code)
		}
		r.Code = code
	}
	r.HTTPS, _ = f.boolean("https", false)
	loc, ln := f.str("location", "")
	switch {
	case ln != nil && r.HTTPS:
		d.errorf(ln, f.field("location"), "give location or https: true, not both")
	case ln != nil:
		if err := hapword.Location(loc); err != nil {
			d.errorf(ln, f.field("location"), "%v", err)
		}
		r.Location = loc
	case !r.HTTPS && f.node != nil:
		d.errorf(f.node, f.field("location"), "required unless https: true")
	}
	return &r
}

func (d *decoder) respond(n *yaml.Node, path string) *Respond {
	f := section[Respond](d, n, path)
	r := defaultRespond
	if st, sn := f.integer("status", 0); sn != nil {
		// HAProxy's return accepts these.
		if st < 200 || st > 599 {
			d.errorf(sn, f.field("status"), "must be an HTTP status from 200 to 599, got %d", st)
		}
		r.Status = st
	}
	if body, bn := f.str("body", ""); bn != nil {
		if len(body) > maxRespondBody {
			d.errorf(bn, f.field("body"), "must be at most %d bytes (it must fit in HAProxy's buffer), got %d", maxRespondBody, len(body))
		} else if err := CheckQuotable(body); err != nil {
			d.errorf(bn, f.field("body"), "%v", err)
		}
		r.Body = body
	}
	if ct, cn := f.str("content_type", r.ContentType); cn != nil {
		if err := checkContentType(ct); err != nil {
			d.errorf(cn, f.field("content_type"), "%v", err)
		}
		r.ContentType = ct
	}
	return &r
}

// hasPlainBind reports whether some of fe's binds do not speak TLS.
func (fe Frontend) hasPlainBind() bool {
	if fe.TLS == nil {
		return true
	}
	return slices.ContainsFunc(fe.Bind, func(b string) bool {
		return len(fe.TLS.Bind) > 0 && !slices.Contains(fe.TLS.Bind, b)
	})
}

// hasConditions reports whether r matches less than every request.
func (r Route) hasConditions() bool {
	return len(r.Host) > 0 || len(r.PathPrefix) > 0 || r.PathRegex != "" || len(r.Method) > 0 || len(r.Header) > 0
}

// covers reports whether r matches every request that later does, so that
// later can never match after it. It is conservative: false when it
// cannot tell (two different regexes).
func (r Route) covers(later Route) bool {
	// A redirect to https matches plain requests only (see haproxy's
	// routeACLs): the TLS ones go on to the later routes.
	if r.httpsOnly() && !later.httpsOnly() {
		return false
	}
	if len(r.Host) > 0 && (len(later.Host) == 0 || !allCovered(later.Host, r.Host, hostCovers)) {
		return false
	}
	if len(r.PathPrefix) > 0 && (len(later.PathPrefix) == 0 || !allCovered(later.PathPrefix, r.PathPrefix, strings.HasPrefix)) {
		return false
	}
	if r.PathRegex != "" && r.PathRegex != later.PathRegex {
		return false
	}
	if len(r.Method) > 0 && (len(later.Method) == 0 || !allCovered(later.Method, r.Method, func(a, b string) bool { return a == b })) {
		return false
	}
	for name, v := range r.Header {
		found := false
		for ln, lv := range later.Header {
			if strings.EqualFold(name, ln) && v == lv {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// httpsOnly reports whether r redirects plain requests to https, and so
// matches no request that came over TLS.
func (r Route) httpsOnly() bool { return r.Redirect != nil && r.Redirect.HTTPS }

// allCovered reports whether every one of vals is covered by one of by.
func allCovered(vals, by []string, covers func(val, by string) bool) bool {
	for _, v := range vals {
		if !slices.ContainsFunc(by, func(b string) bool { return covers(v, b) }) {
			return false
		}
	}
	return true
}

// hostCovers reports whether host pattern by matches every Host that h
// does: the same name, or a wildcard of h's parent domains.
func hostCovers(h, by string) bool {
	h, by = strings.ToLower(h), strings.ToLower(by)
	if h == by {
		return true
	}
	suffix, ok := strings.CutPrefix(by, "*")
	return ok && strings.HasSuffix(strings.TrimPrefix(h, "*"), suffix)
}

// CheckPathRegex accepts a regular expression that Go's regexp/syntax
// parses (Perl syntax, which HAProxy's PCRE2 reads the same way) and that
// can be written quoted into haproxy.cfg. haproxy -c, run before any
// reload, checks the rest.
func CheckPathRegex(re string) error {
	if re == "" {
		return errors.New("must not be empty")
	}
	if _, err := syntax.Parse(re, syntax.Perl); err != nil {
		return fmt.Errorf("not a regular expression HAProxy can compile: %v", err)
	}
	return CheckQuotable(re)
}

// CheckQuotable accepts text that Render can write as one double-quoted
// word of haproxy.cfg: UTF-8 without control characters but newlines and
// tabs (escaped there).
func CheckQuotable(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("must be valid UTF-8")
	}
	if strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' }) {
		return fmt.Errorf("must not contain control characters (newlines and tabs are fine), got %q", truncate(s))
	}
	return nil
}

// checkContentType accepts a media type with optional parameters
// ("text/html; charset=utf-8").
func checkContentType(ct string) error {
	typ, params, _ := strings.Cut(ct, ";")
	if err := hapword.MediaType(strings.TrimSpace(typ)); err != nil {
		return err
	}
	if strings.ContainsFunc(params, func(r rune) bool { return r < ' ' || r >= 0x7f || r == '"' || r == '\\' }) {
		return fmt.Errorf("parameters must be printable ASCII without quotes, got %q", ct)
	}
	return nil
}

// TCPGroups are the groups a tcp frontend routes to: their backends speak
// TCP and are checked at layer 4.
func (c *Config) TCPGroups() map[string]bool {
	tcp := make(map[string]bool)
	for _, fe := range c.Frontends {
		if fe.Mode == ModeTCP {
			for _, r := range fe.Routes {
				tcp[r.Group] = true
			}
		}
	}
	return tcp
}
