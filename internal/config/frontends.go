package config

import "time"

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
	HTTPS    bool   `yaml:"https"`
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
	// By is "ip" (default) or "header:NAME" (an API key, say).
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
	defaultFrontend  = Frontend{Mode: ModeHTTP}
	defaultRoute     = Route{}
	defaultRedirect  = Redirect{Code: 302}
	defaultRespond   = Respond{ContentType: "text/plain"}
	defaultTLS       = TLS{ALPN: []string{"h2", "http/1.1"}, MinVersion: "1.2", TicketKeys: TicketKeysRotate}
	defaultACME      = ACME{Directory: "https://acme-v02.api.letsencrypt.org/directory"}
	defaultRateLimit = RateLimit{By: "ip"}
	defaultSticky    = Sticky{}
)
