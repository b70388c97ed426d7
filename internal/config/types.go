// Package config loads and validates shoal's YAML configuration.
//
// Load returns either a fully defaulted, validated *Config or an ErrorList whose
// entries each name FILE:LINE:COL, the field path and what was expected. (A
// file that cannot be read at all yields the wrapped os error instead.)
package config

import (
	"text/template"
	"time"
)

// Config is a validated shoal configuration. Paths are absolute after Load.
type Config struct {
	// Path is the absolute path of the file the config was loaded from.
	Path string

	// Listen is the balancer's frontend address, host:port.
	Listen string
	// Compression is nil when gzip compression is off.
	Compression *Compression
	// StateDir holds the SQLite database, sockets, logs and HAProxy files.
	StateDir string
	Admin    Admin
	HAProxy  HAProxy
	Groups   []Group
	Compat   Compat
	// InstanceLogs bounds the instances' log files.
	InstanceLogs InstanceLogs
	// Metrics configures sampling and history; see DefaultMetrics.
	Metrics Metrics
	// AccessLog is HAProxy's per-request log, read by shoal.
	AccessLog AccessLog
	// Shutdown is what SIGTERM does: ShutdownKeep leaves HAProxy and the
	// instances serving for the next shoal serve to adopt (a restart or an
	// upgrade); ShutdownStop stops them all, as SIGINT and `shoal stop` do.
	Shutdown string

	file string         // the path as given to Parse, for errors
	pos  map[string]Pos // where each field's value is written
}

// Values of Config.Shutdown.
const (
	ShutdownKeep = "keep"
	ShutdownStop = "stop"
)

// Compression turns on gzip (HAProxy's libslz) for the listed content types.
type Compression struct {
	Types []string
}

// Admin is where shoal's control API listens.
type Admin struct {
	// Socket is the unix socket path (mode 0600), default STATE_DIR/shoal.sock.
	Socket string
	// Listen is an optional TCP address; it requires Token.
	Listen string
	// Token is the bearer token for Listen, read from token or token_file.
	Token string
	// TLS, when set, makes Listen speak HTTPS.
	TLS *TLSFiles
	// InsecureRemote allows Listen on a non-loopback address without TLS.
	InsecureRemote bool
}

// TLSFiles are PEM files: a certificate chain and its private key.
type TLSFiles struct {
	Cert string
	Key  string
}

// HAProxy configures the data plane process.
type HAProxy struct {
	// Binary is the haproxy executable (absolute, or a name looked up on PATH at start).
	Binary string
	// Global and Defaults are extra lines appended to those sections verbatim.
	Global   []string
	Defaults []string
	// Timeouts are HAProxy's client and server timeouts.
	Timeouts Timeouts
	// Prometheus is an optional loopback host:port where HAProxy's own
	// exporter serves /metrics.
	Prometheus string
}

// Timeouts are HAProxy's timeouts; a zero field means its default. Each is
// within HAProxy's timer range, 1ms to 2^31-1 ms.
type Timeouts struct {
	// Connect bounds a connection attempt to an instance.
	Connect time.Duration
	// Client and Server bound inactivity on either side of a request.
	Client time.Duration
	Server time.Duration
	// HTTPRequest bounds how long a client may take to send a complete
	// request's headers (slowloris).
	HTTPRequest time.Duration
	// HTTPKeepAlive bounds the wait for the next request on a kept-alive connection.
	HTTPKeepAlive time.Duration
	// Queue bounds how long a request waits for a free server slot.
	Queue time.Duration
}

// DefaultTimeouts are the timeouts used for fields left out of the config.
var DefaultTimeouts = Timeouts{
	Connect:       5 * time.Second,
	Client:        30 * time.Second,
	Server:        30 * time.Second,
	HTTPRequest:   10 * time.Second,
	HTTPKeepAlive: 10 * time.Second,
	Queue:         30 * time.Second,
}

// AccessLog is where HAProxy's per-request log goes: shoal receives it on a
// unix datagram socket and appends it to STATE_DIR/logs/access.log.
type AccessLog struct {
	// Sample logs one request in Sample; 0 turns the access log off. With
	// Adaptive ("sample: auto", the default) it is 1, and shoal sets each
	// group's rate at runtime so that logging stays under about 4 % of its
	// requests (see metrics.SampleRate).
	Sample   int
	Adaptive bool
	// MaxSize is the size at which access.log is rotated; MaxFiles is how many
	// files are kept, access.log included.
	MaxSize  int64
	MaxFiles int
}

// Access log defaults: logging every request costs about 23 % of HAProxy's
// throughput, one in ten about 4 % (so `sample: auto` stays near that).
const (
	DefaultAccessLogMaxSize  = 10 << 20
	DefaultAccessLogMaxFiles = 3
)

// Group is a set of identical instances behind one HAProxy backend.
type Group struct {
	Name    string
	MinSize int
	MaxSize int
	// Plans is the scaling ladder, in the order written; sizes strictly increase.
	Plans        []Plan
	Cooldown     Cooldown
	DrainTimeout time.Duration
	// ReplaceAfter is how long an instance in service may fail its health
	// check (HAProxy has it DOWN) before it is stopped and replaced.
	ReplaceAfter time.Duration
	// ScaleIn is which instance in service a scale-in retires: ScaleInNewest,
	// ScaleInOldest or ScaleInLeastBusy. Instances that serve nobody
	// (starting, DOWN) always go first.
	ScaleIn string
	// Balance is HAProxy's algorithm; only dynamic ones (roundrobin, leastconn, first).
	Balance string
	// Hosts and PathPrefixes route requests to this group; a group with neither is the
	// default backend (at most one such group).
	Hosts        []string
	PathPrefixes []string
	Health       Health
	Template     Template
	// Autoscale is nil when the group scales only when told to.
	Autoscale *Autoscale
	// ScaleToZero is nil unless the group may sleep at 0 instances.
	ScaleToZero *ScaleToZero
	// Deploy paces rolling deploys of the group's template.
	Deploy Deploy
}

// Values of Group.ScaleIn.
const (
	// ScaleInNewest retires the instance that started last.
	ScaleInNewest = "newest"
	// ScaleInOldest retires the instance that started first.
	ScaleInOldest = "oldest"
	// ScaleInLeastBusy retires the instance with the fewest sessions in
	// HAProxy (scur), the newest of those tied.
	ScaleInLeastBusy = "least_busy"
)

// ScaleInPolicies lists the values of Group.ScaleIn.
var ScaleInPolicies = []string{ScaleInNewest, ScaleInOldest, ScaleInLeastBusy}

// Plan is a named size on a group's scaling ladder.
type Plan struct {
	Name string
	Size int
}

// Cooldown: after a job finishes, the next scale-up waits Up and the next scale-down
// waits Down (600 s each by default, sacloud/autoscaler's).
type Cooldown struct {
	Up   time.Duration
	Down time.Duration
}

// Health is the check HAProxy runs against every instance of a group, and
// optionally the passive check of live traffic.
type Health struct {
	// Type is "http" or "tcp".
	Type string
	// For HTTP checks: the request's Method, Path and Host header, the
	// accepted Status codes, and a Body substring or BodyRegex the response
	// must contain (at most one of them).
	Method    string
	Path      string
	Host      string
	Status    []StatusRange
	Body      string
	BodyRegex string
	// For TCP checks: Send is written once connected, then Expect must appear
	// in the answer. With neither, a check is a connect.
	Send   string
	Expect string

	Interval time.Duration
	Timeout  time.Duration
	Rise     int
	Fall     int
	// FastInter is the interval while a server is changing state, DownInter
	// while it is down; zero means Interval. Load defaults FastInter to
	// DefaultFastInter, or Interval when that is shorter.
	FastInter time.Duration
	DownInter time.Duration
	// Passive is nil when HAProxy does not watch live traffic.
	Passive *Passive
	// Grace is how long a new instance may take to pass its first Rise checks.
	Grace time.Duration
}

// DefaultFastInter is health.fastinter when the config leaves it out.
const DefaultFastInter = 500 * time.Millisecond

// StatusRange is an inclusive range of HTTP status codes; Min == Max for one code.
type StatusRange struct {
	Min, Max int
}

// Passive makes HAProxy count errors of live traffic against a server.
type Passive struct {
	// Observe is "layer7" (HTTP errors) or "layer4" (connection errors).
	Observe string
	// ErrorLimit consecutive errors trigger OnError: "mark-down",
	// "fail-check", "sudden-death" or "fastinter".
	ErrorLimit int
	OnError    string
}

// Template describes how to start one instance.
type Template struct {
	// Command and Env hold Go templates; see TemplateData for the fields.
	Command []string
	Env     map[string]string
	// Dir is the working directory (default: the config file's directory).
	Dir string
	// StopTimeout is the grace between SIGTERM and SIGKILL.
	StopTimeout time.Duration
	// CPUs is the number of cores an instance is allotted (default 1); its
	// CPU usage is reported as a percentage of them.
	CPUs float64
	// Vars are the template's variables, {{.Vars.KEY}}; a deploy may
	// override them (see WithVars).
	Vars map[string]string
	// Label is an explicit version (template.version); empty means the
	// version is a hash of the rendered template (see Version).
	Label string
	// PreStart and PreStop are lifecycle hooks; nil when not configured.
	PreStart *Hook
	PreStop  *Hook

	command []*template.Template
	env     map[string]*template.Template
	// overrides are the Vars set by WithVars, which make a labelled
	// template's version differ from its label.
	overrides map[string]string
}

// TemplateData is what instance templates can refer to.
type TemplateData struct {
	Name  string
	Port  int
	Index int
	Group string
	Vars  map[string]string
}

// Compat holds drop-in protocol servers for other tools' clients.
type Compat struct {
	// SacloudAutoscaler is nil when off.
	SacloudAutoscaler *SacloudAutoscaler
}

// SacloudAutoscaler serves sacloud/autoscaler's gRPC ScalingService.
type SacloudAutoscaler struct {
	// Network is "unix" or "tcp"; Address is an absolute socket path or host:port.
	Network string
	Address string
	// SocketMode and SocketGroup apply to a unix socket (default 0600, the owner's group).
	SocketMode  uint32
	SocketGroup string
	AllowRemote bool
}
