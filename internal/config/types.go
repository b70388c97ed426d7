// Package config loads and validates shoal's YAML configuration.
//
// Load returns either a fully defaulted, validated *Config or an ErrorList whose
// entries each name FILE:LINE:COL, the field path and what was expected. (A
// file that cannot be read at all yields the wrapped os error instead.)
package config

import (
	"strconv"
	"time"

	"github.com/shoal-lb/shoal/internal/template"
)

// Config is a validated shoal configuration. Paths are absolute after Load.
//
// The config's types are its schema (see schema.go): each field a key of the
// file fills has that key as its yaml tag, in the order messages list them.
type Config struct {
	// Path is the absolute path of the file the config was loaded from.
	Path string

	// Listen is the balancer's frontend address, host:port: the shorthand
	// for one HTTP frontend (see Frontend); give it or Frontends.
	Listen string `yaml:"listen"`
	// Compression is nil when gzip compression is off (the shorthand
	// frontend's).
	Compression *Compression `yaml:"compression"`
	// Frontends are where clients connect. Load fills it from Listen when
	// the file uses the shorthand, so code reads Frontends only.
	Frontends []Frontend `yaml:"frontends"`
	// StateDir holds the SQLite database, sockets, logs and HAProxy files.
	StateDir string  `yaml:"state_dir"`
	Admin    Admin   `yaml:"admin"`
	HAProxy  HAProxy `yaml:"haproxy"`
	// Providers are the provider instances groups may name besides the
	// built-in "local" (this machine).
	Providers []Provider `yaml:"providers"`
	// Groups are required unless the node only answers DNS (it has a gslb
	// section).
	Groups []Group `yaml:"groups"`
	Compat Compat  `yaml:"compat"`
	// AccessLog is HAProxy's per-request log, read by shoal.
	AccessLog AccessLog `yaml:"access_log"`
	// Metrics configures sampling and history; see DefaultMetrics.
	Metrics Metrics `yaml:"metrics"`
	// InstanceLogs bounds the instances' log files.
	InstanceLogs InstanceLogs `yaml:"instance_logs"`
	// Shutdown is what SIGTERM does: ShutdownKeep leaves HAProxy and the
	// instances serving for the next shoal serve to adopt (a restart or an
	// upgrade); ShutdownStop stops them all, as SIGINT and `shoal stop` do.
	Shutdown string `yaml:"shutdown"`
	// Notify sends events to webhooks, Slack, mail and commands.
	Notify Notify `yaml:"notify"`
	// GSLB, when set, is a DNS server answering with the healthy sites.
	GSLB *GSLB `yaml:"gslb"`
	// HA, when set, makes this shoal a node of an HA pair; nil: a single
	// node.
	HA *HA `yaml:"ha"`

	file string         // the path as given to Parse, for errors
	pos  map[string]Pos // where each field's value is written
	// listeners are the TCP addresses shoal and HAProxy listen on.
	listeners []listenerAt
}

// Values of Config.Shutdown.
const (
	ShutdownKeep = "keep"
	ShutdownStop = "stop"
)

// defaultConfig holds the defaults of the top-level keys. State_dir is
// relative to the config file's directory, admin.socket to state_dir.
var defaultConfig = Config{
	StateDir:     "./.shoal",
	Admin:        Admin{Socket: "shoal.sock"},
	HAProxy:      HAProxy{Binary: "haproxy", Timeouts: DefaultTimeouts},
	AccessLog:    defaultAccessLog,
	Metrics:      DefaultMetrics,
	InstanceLogs: DefaultInstanceLogs,
	Shutdown:     ShutdownKeep,
	Notify:       defaultNotify,
}

// Compression turns on gzip (HAProxy's libslz) for the listed content types.
type Compression struct {
	Types []string `yaml:"types"`
}

// defaultCompression applies when a compression section is there: the
// types of seed 001's ELB, whose line lists 13 with text/plain twice (12
// here).
var defaultCompression = Compression{Types: []string{
	"text/html", "text/plain", "text/css", "text/javascript",
	"application/x-javascript", "application/javascript", "application/json",
	"text/js", "text/xml", "application/xml", "application/xml+rss", "image/svg+xml",
}}

// Admin is where shoal's control API listens.
type Admin struct {
	// Socket is the unix socket path (mode 0600), default STATE_DIR/shoal.sock.
	Socket string `yaml:"socket"`
	// Listen is an optional TCP address; it requires Token.
	Listen string `yaml:"listen"`
	// Token is the bearer token for Listen, as written or read from the
	// file token_file names (which is not kept: the token is what counts).
	Token string   `yaml:"token"`
	_     struct{} `yaml:"token_file"`
	// TLS, when set, makes Listen speak HTTPS.
	TLS *TLSFiles `yaml:"tls"`
	// InsecureRemote allows Listen on a non-loopback address without TLS.
	InsecureRemote bool `yaml:"insecure_remote"`
}

// TLSFiles are PEM files: a certificate chain and its private key.
type TLSFiles struct {
	Cert string `yaml:"cert" required:"true"`
	Key  string `yaml:"key" required:"true"`
}

// HAProxy configures the data plane process.
type HAProxy struct {
	// Binary is the haproxy executable (absolute, or a name looked up on PATH at start).
	Binary string `yaml:"binary"`
	// Global and Defaults are extra lines appended to those sections verbatim.
	Global   []string `yaml:"global"`
	Defaults []string `yaml:"defaults"`
	// Timeouts are HAProxy's client and server timeouts.
	Timeouts Timeouts `yaml:"timeouts"`
	// Prometheus is an optional loopback host:port where HAProxy's own
	// exporter serves /metrics.
	Prometheus string `yaml:"prometheus"`
}

// Timeouts are HAProxy's timeouts; a zero field means its default. Each is
// within HAProxy's timer range, 1ms to 2^31-1 ms.
type Timeouts struct {
	// Connect bounds a connection attempt to an instance.
	Connect time.Duration `yaml:"connect"`
	// Client and Server bound inactivity on either side of a request.
	Client time.Duration `yaml:"client"`
	Server time.Duration `yaml:"server"`
	// HTTPRequest bounds how long a client may take to send a complete
	// request's headers (slowloris).
	HTTPRequest time.Duration `yaml:"http_request"`
	// HTTPKeepAlive bounds the wait for the next request on a kept-alive connection.
	HTTPKeepAlive time.Duration `yaml:"http_keep_alive"`
	// Queue bounds how long a request waits for a free server slot.
	Queue time.Duration `yaml:"queue"`
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
	// Enabled is whether the log can be on. Unwritten (with sample
	// unwritten too) it is on only while a feature reads the latencies it
	// gives: a latency_ms policy metric, a max_p99 analysis,
	// outliers.latency. true turns it on at sample: auto; false (or
	// "sample: 0") off.
	Enabled bool `yaml:"enabled"`
	// Sample logs one request in Sample; 0 turns the access log off. With
	// Adaptive ("sample: auto") it is 1, and each group's backend chooses
	// its rate from its requests over the last second: every request below
	// 100 a second, and about 100 a second above that.
	Sample   int `yaml:"sample"`
	Adaptive bool
	// WhenNeeded (neither enabled nor sample written, the default) logs as
	// "sample: auto" does, but only while a feature reads the latencies the
	// log gives (see Config.LogsRequests): logging costs HAProxy's every
	// request, whether or not anything reads the lines.
	WhenNeeded bool
	// MaxSize is the size at which access.log is rotated; MaxFiles is how many
	// files are kept, access.log included.
	MaxSize  int64 `yaml:"max_size"`
	MaxFiles int   `yaml:"max_files"`
}

// defaultAccessLog is on when needed, at `sample: auto`: logging every
// request costs about 23 % of HAProxy's throughput, one in ten about 4 %;
// auto logs about 100 lines a second, and its per-request rules still cost
// about 2–3 % on a page that takes the application 25 µs (make bench
// BENCH=throughput), which no one should pay for lines nothing reads.
var defaultAccessLog = AccessLog{Enabled: true, Sample: 1, Adaptive: true, WhenNeeded: true, MaxSize: 10 << 20, MaxFiles: 3}

// Group is a set of identical instances behind one HAProxy backend.
type Group struct {
	Name    string `yaml:"name" required:"true"`
	MinSize int    `yaml:"min_size" required:"true"`
	MaxSize int    `yaml:"max_size" required:"true"`
	// Plans is the scaling ladder, in the order written; sizes strictly increase.
	Plans        []Plan        `yaml:"plans"`
	Cooldown     Cooldown      `yaml:"cooldown"`
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// Balance is HAProxy's algorithm; only dynamic ones (roundrobin,
	// leastconn, first) or BalanceHash.
	Balance string `yaml:"balance"`
	// HashOn is what BalanceHash hashes, consistently: "uri" (default),
	// "source" or "header:NAME".
	HashOn string `yaml:"hash_on"`
	// Sticky is nil unless clients stick to an instance by cookie.
	Sticky *Sticky `yaml:"sticky"`
	// Proto is how HAProxy speaks to the instances: "h1" (default) or "h2".
	Proto string `yaml:"proto"`
	// Hosts and PathPrefixes route requests to this group; a group with neither is the
	// default backend (at most one such group).
	Hosts        []string `yaml:"hosts"`
	PathPrefixes []string `yaml:"path_prefixes"`
	Health       Health   `yaml:"health"`
	// Template is required of a group whose instances are processes (local,
	// ssh); a cloud's servers start from their image, so a cloud group has
	// one only for its version.
	Template Template `yaml:"template"`
	// Autoscale is nil when the group scales only when told to.
	Autoscale *Autoscale `yaml:"autoscale"`
	// ReplaceAfter is how long an instance in service may fail its health
	// check (HAProxy has it DOWN) before it is stopped and replaced.
	ReplaceAfter time.Duration `yaml:"replace_after"`
	// Deploy paces rolling deploys of the group's template.
	Deploy Deploy `yaml:"deploy"`
	// ScaleToZero is nil unless the group may sleep at 0 instances.
	ScaleToZero *ScaleToZero `yaml:"scale_to_zero"`
	// Provider names what runs the group's instances: ProviderLocal (the
	// default) or the name of an entry of Config.Providers. It is the
	// one-entry form of providers; with providers it is their first, and
	// what acts on a group's providers reads ProviderList, which has both.
	Provider string `yaml:"provider"`
	// Providers, instead of provider, spreads the group over several
	// providers in order: a scale-out fills the first up to its capacity
	// (its hosts', or the entry's max), then the next; a scale-in releases
	// from the last first. A provider whose start fails is skipped for a
	// back-off and the next one is used.
	Providers []GroupProvider `yaml:"providers"`
	// Placement chooses the host of each new instance when the provider
	// has several.
	Placement Placement `yaml:"placement"`
	// ScaleIn is which instance in service a scale-in retires: ScaleInNewest,
	// ScaleInOldest or ScaleInLeastBusy. Instances that serve nobody
	// (starting, DOWN) always go first.
	ScaleIn string `yaml:"scale_in"`
	// MaxHourlyInstances is a budget (0: none): a scale-out is refused
	// when the instances that ran in the last hour (running now, or ended
	// since) plus those it would start exceed it. Clouds bill a server for
	// the hour it was started in, whether it ran a minute or all of it.
	MaxHourlyInstances int `yaml:"max_hourly_instances"`
	// MaxHourlyCost is a budget (0: none) beside MaxHourlyInstances: a
	// scale-out is refused when the cost of the last hour's instance-hours
	// (by their providers' cost_per_hour) plus an hour of each instance it
	// would start (on the provider it would come from) exceeds it.
	MaxHourlyCost float64 `yaml:"max_hourly_cost"`
	// MaxLifetime (0: none) is how long an instance may run before the
	// group replaces it, launch before terminate, within Disruption;
	// each instance's turn comes a little earlier by a fixed jitter of
	// its name, so a group started at once does not recycle at once.
	MaxLifetime time.Duration `yaml:"max_lifetime"`
	// Update is how instances follow a change of the serving template.
	Update Update `yaml:"update"`
	// Disruption bounds voluntary replacements (lifetime, drift, host
	// drain, consolidation).
	Disruption Disruption `yaml:"disruption"`
	// Outliers is nil unless instances that answer worse than the rest
	// are taken out of rotation (outliers.go).
	Outliers *Outliers `yaml:"outliers"`
	// WarmPool is nil unless the group keeps servers ahead of need (a
	// cloud provider's only).
	WarmPool *WarmPool `yaml:"warm_pool"`
	// Limits is nil unless each instance serves at most Limits.MaxConn
	// requests at once, the rest waiting in HAProxy's queue.
	Limits *Limits `yaml:"limits"`
	// SlowStart is how long a new instance's weight ramps up from 0 to full
	// once it is UP (HAProxy's slowstart); 0: full weight at once.
	SlowStart time.Duration `yaml:"slow_start"`
	// Retries is which failed requests HAProxy sends again, to another
	// instance (3 tries more at most): RetriesConnect only those whose
	// connection failed, for every method (nothing reached the instance);
	// RetriesIdempotent also idempotent requests (GET, HEAD, OPTIONS, PUT,
	// DELETE, TRACE) that got no answer, a broken or timed-out one, or a
	// 502-504, so that an instance dying mid-request fails no GET. HAProxy
	// copies every request of the group for it: measured +1.7 to 2.8 µs of
	// HAProxy CPU per request (+9 to 15 %), bench/README.md "Cost per
	// request". Left out: connect for local instances (a dead one refuses
	// the next connection), idempotent on other providers (a host that dies
	// or drops packets swallows requests already sent); a tcp frontend's
	// group: connect.
	Retries string `yaml:"retries"`
}

// defaultGroup holds the defaults of a group's keys.
var defaultGroup = Group{
	Cooldown:     defaultCooldown,
	DrainTimeout: 30 * time.Second,
	Balance:      "roundrobin",
	HashOn:       HashOnURI,
	Proto:        ProtoH1,
	Health:       DefaultHealth,
	Template:     defaultTemplate,
	ReplaceAfter: 10 * time.Second,
	Deploy:       DefaultDeploy,
	ScaleIn:      ScaleInNewest,
	Retries:      RetriesConnect,
	Provider:     ProviderLocal,
	Placement:    Placement{Strategy: PlaceSpread},
	Update:       Update{Mode: UpdateOpportunistic},
	Disruption:   defaultDisruption,
}

// GroupProvider is one entry of a group's providers.
type GroupProvider struct {
	// Name is ProviderLocal or the name of an entry of providers.
	Name string `yaml:"name" required:"true"`
	// Max bounds the group's instances on this provider (0: its hosts'
	// capacity, or no bound).
	Max int `yaml:"max"`
	// CostPerHour is what one instance there costs an hour (0: nothing),
	// for the cost `shoal status` shows and max_hourly_cost.
	CostPerHour float64 `yaml:"cost_per_hour"`
}

// ProviderList is the group's providers in order: Providers, or the one
// that Provider names (ProviderLocal when neither is set, as in a Group
// built in code).
func (g Group) ProviderList() []GroupProvider {
	if len(g.Providers) > 0 {
		return g.Providers
	}
	if g.Provider != "" {
		return []GroupProvider{{Name: g.Provider}}
	}
	return []GroupProvider{{Name: ProviderLocal}}
}

// UsesProvider reports whether name is one of the group's providers.
func (g Group) UsesProvider(name string) bool {
	for _, p := range g.ProviderList() {
		if p.Name == name {
			return true
		}
	}
	return false
}

// ProviderLocal is the built-in provider: processes on this machine. It
// needs no entry under providers.
const ProviderLocal = "local"

// Placement is how a group's new instances choose among a provider's hosts.
type Placement struct {
	// Strategy is PlaceSpread or PlacePack.
	Strategy string `yaml:"strategy"`
	// Labels are what a host must carry, every one, to take the group's
	// instances.
	Labels map[string]string `yaml:"labels"`
	// Consolidation is nil unless, with strategy pack, a host the group's
	// scale-in left part-used is emptied onto the other hosts in use.
	Consolidation *Consolidation `yaml:"consolidation"`
}

// Consolidation empties a part-used host after a pack-placed group scales
// in, as Karpenter's consolidation deletes a node whose pods fit on the
// others: when every instance there could move to the other hosts in use
// (within their capacity and the group's placement labels) in at most
// MaxMoves moves, none of them protected or held, its instances are
// replaced there one at a time, launch before terminate, within the
// group's disruption budget; the event host.consolidated then says the
// host is empty and can be powered off or returned.
type Consolidation struct {
	// MaxMoves is the most of the group's instances one host's emptying
	// may move: a host that would take more is left as it is.
	MaxMoves int `yaml:"max_moves"`
	// After is how long the group's size must stay as a scale-in left it
	// (and every instance in service) before consolidation looks: a load
	// that comes back soon finds its instances where they were.
	After time.Duration `yaml:"after"`
}

// defaultConsolidation moves at most two instances, a minute after the
// scale-in settled.
var defaultConsolidation = Consolidation{MaxMoves: 2, After: time.Minute}

// Bounds of consolidation's keys.
const (
	maxConsolidationMoves = 1000
	maxConsolidationAfter = 24 * time.Hour
)

// Values of Placement.Strategy.
const (
	// PlaceSpread puts a new instance on the eligible host with the fewest
	// of the group's instances (then the least used): a host's failure
	// takes as few of them as it can.
	PlaceSpread = "spread"
	// PlacePack fills the most used eligible host first: fewer hosts busy.
	PlacePack = "pack"
)

// Provider is a named provider instance (an entry of providers).
type Provider struct {
	Name string `yaml:"name" required:"true"`
	// Type is the entry's type of provider: ssh, exec, ec2 or sacloud; the
	// other keys of the entry are the type's.
	Type string `yaml:"type" required:"true"`
	// HealthGrace is the health.grace of the groups using the provider
	// that do not set their own: a cloud's servers take minutes to boot
	// (DefaultCloudHealthGrace). 0 (ssh): the group's health.grace.
	HealthGrace time.Duration `yaml:"health_grace"`
	// Cloud holds the keys every cloud type (exec, sacloud, ec2) has; nil
	// for other types. The cloud's own keys are in Spec.
	Cloud *CloudProvider `yaml:",inline"`
	// Spec is the rest of the entry, the type's own keys, as its
	// registered Decode made them (each type's package reads it: ssh.Of,
	// ec2.Of, ...).
	Spec any `yaml:"-"`
}

// CloudProvider is what every cloud provider entry has besides its
// driver's keys: where servers serve, how often they are listed and how
// long their API calls may take.
type CloudProvider struct {
	// Port is where every server of the provider serves (HAProxy connects
	// to IP:Port), unless the cloud lists a port of its own (exec's
	// "address": "host:port"). Required of ec2 and sacloud, and of an exec
	// provider whose commands use {{.Port}}; 0: none (exec's servers each
	// list their own).
	Port int `yaml:"port"`
	// Interval is how often the provider lists its servers (one call for
	// all of them); every second while one boots or is being deleted.
	Interval time.Duration `yaml:"interval"`
	// BootTimeout bounds a server's wait from created to running with an
	// address; one that never gets there is deleted.
	BootTimeout time.Duration `yaml:"boot_timeout"`
	// CreateTimeout bounds the retries of a create the cloud refuses for
	// now (throttled, no capacity); DeleteTimeout those of a delete.
	CreateTimeout time.Duration `yaml:"create_timeout"`
	DeleteTimeout time.Duration `yaml:"delete_timeout"`
	// Emulator is nil against a real cloud. For emulators only (moto, the
	// sacloud SDK's fake, a test script), whose servers cannot serve.
	Emulator *Emulator `yaml:"emulator"`
}

// DefaultCloudHealthGrace is a cloud provider's health_grace when the
// config leaves it out: its servers boot for minutes, and health.grace
// counts from when one runs, but its image still has to start the app.
const DefaultCloudHealthGrace = 10 * time.Minute

// DefaultCloud holds the defaults of a cloud provider's common keys.
var DefaultCloud = CloudProvider{Interval: 5 * time.Second, BootTimeout: 10 * time.Minute, CreateTimeout: 5 * time.Minute, DeleteTimeout: 5 * time.Minute}

// Emulator is for testing against a cloud emulator only: each server
// created gets a local stand-in process, and HAProxy sends the server's
// traffic to the stand-in (on 127.0.0.1), never to the address the
// emulator invented.
type Emulator struct {
	// StandIn is the stand-in's argv, a template with the instance
	// template's fields ({{.Port}}: the stand-in's port on 127.0.0.1).
	StandIn []string `yaml:"stand_in" required:"true"`
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

// Values of Group.Retries.
const (
	// RetriesConnect retries a request whose connection failed.
	RetriesConnect = "connect"
	// RetriesIdempotent also retries an idempotent request that failed
	// after it was sent (HAProxy's layer-7 retries).
	RetriesIdempotent = "idempotent"
)

// RetryModes lists the values of Group.Retries.
var RetryModes = []string{RetriesConnect, RetriesIdempotent}

// Plan is a named size on a group's scaling ladder.
type Plan struct {
	Name string `yaml:"name" required:"true"`
	Size int    `yaml:"size" required:"true"`
}

// Cooldown: after a job finishes, the next scale-up waits Up and the next scale-down
// waits Down.
type Cooldown struct {
	Up   time.Duration `yaml:"up"`
	Down time.Duration `yaml:"down"`
}

// defaultCooldown is sacloud/autoscaler's (600 s, one value for both
// directions): shoal's cooldown is its autoscaler.cooldown, so a migrated
// config that leaves it out behaves the same. Neither seed's 180 s or 540 s
// is a default: each post set its own.
var defaultCooldown = Cooldown{Up: 600 * time.Second, Down: 600 * time.Second}

// Health is the check HAProxy runs against every instance of a group, and
// optionally the passive check of live traffic.
type Health struct {
	// Type is "http" or "tcp".
	Type string `yaml:"type"`
	// For HTTP checks: the request's Method, Path and Host header, the
	// accepted Status codes, and a Body substring or BodyRegex the response
	// must contain (at most one of them).
	Method    string        `yaml:"method"`
	Path      string        `yaml:"path"`
	Host      string        `yaml:"host"`
	Status    []StatusRange `yaml:"status"`
	Body      string        `yaml:"body"`
	BodyRegex string        `yaml:"body_regex"`
	// For TCP checks: Send is written once connected, then Expect must appear
	// in the answer. With neither, a check is a connect.
	Send   string `yaml:"send"`
	Expect string `yaml:"expect"`

	Interval time.Duration `yaml:"interval"`
	Timeout  time.Duration `yaml:"timeout"`
	Rise     int           `yaml:"rise"`
	Fall     int           `yaml:"fall"`
	// FastInter is the interval while a server is changing state, DownInter
	// while it is down; zero means Interval. Load defaults FastInter to
	// DefaultFastInter, or Interval when that is shorter.
	FastInter time.Duration `yaml:"fastinter"`
	DownInter time.Duration `yaml:"downinter"`
	// Passive is nil when HAProxy does not watch live traffic.
	Passive *Passive `yaml:"passive"`
	// Grace is how long a new instance may take to pass its first Rise checks.
	Grace time.Duration `yaml:"grace"`
}

// DefaultHealth is an HTTP check's defaults; a TCP check has no method,
// path, host or status.
var DefaultHealth = Health{
	Type: "http", Method: "GET", Path: "/healthz", Host: "localhost", Status: []StatusRange{{200, 399}},
	Interval: 2 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3, FastInter: DefaultFastInter, Grace: 30 * time.Second,
}

// DefaultFastInter is health.fastinter when the config leaves it out.
const DefaultFastInter = 500 * time.Millisecond

// StatusRange is an inclusive range of HTTP status codes; Min == Max for one code.
type StatusRange struct {
	Min, Max int
}

// String writes r as the config and HAProxy do: "200" or "200-399".
func (r StatusRange) String() string {
	if r.Min == r.Max {
		return strconv.Itoa(r.Min)
	}
	return strconv.Itoa(r.Min) + "-" + strconv.Itoa(r.Max)
}

// Passive makes HAProxy count errors of live traffic against a server.
type Passive struct {
	// Enabled false keeps the section's settings but turns it off: Load
	// leaves Health.Passive nil then.
	Enabled bool `yaml:"enabled"`
	// Observe is "layer7" (HTTP errors) or "layer4" (connection errors).
	Observe string `yaml:"observe"`
	// ErrorLimit consecutive errors trigger OnError: "mark-down",
	// "fail-check", "sudden-death" or "fastinter".
	ErrorLimit int    `yaml:"error_limit"`
	OnError    string `yaml:"on_error"`
}

// defaultPassive applies when the passive section is there: it is on unless
// it says otherwise.
var defaultPassive = Passive{Enabled: true, Observe: "layer7", ErrorLimit: 10, OnError: "mark-down"}

// defaultRemotePassive is health.passive of a group on another provider than
// local that leaves the section out: instances on other machines die
// together with their host, and the servers of one host, added together, sit
// side by side in the round robin. One refused or timed-out connection then
// takes a server out of rotation at once (the request is retried on another),
// instead of after fall checks in which a GET's every retry can hit the dead
// host (measured: 2 and 3 failed GETs in 2 of 5 host deaths without it, none
// in 6 with it).
var defaultRemotePassive = Passive{Enabled: true, Observe: "layer4", ErrorLimit: 1, OnError: "mark-down"}

// Template describes how to start one instance. Its json tags are the
// store's form of it (see EncodeTemplate), which has kept "label" for
// version.
type Template struct {
	// Command and Env hold Go templates; see TemplateData for the fields.
	// A group whose instances are processes (not a cloud's) needs Command.
	Command []string          `yaml:"command" json:"command"`
	Env     map[string]string `yaml:"env" json:"env,omitempty"`
	// Image, when set, makes each instance a container of this image (an
	// OCI reference: registry/name:tag or @digest) on the local or ssh
	// provider's host, instead of a process of Command: pulled on the
	// host before it is needed, run by Runtime, stopped with the runtime's
	// stop (grace: StopTimeout), its logs the runtime's.
	Image string `yaml:"image" json:"image,omitempty"`
	// Port is the port the container serves on inside; the instance's
	// host address and port (what HAProxy connects to) are published to it.
	Port int `yaml:"port" json:"port,omitempty"`
	// Args are the image entrypoint's arguments, templates as Command's,
	// each expanded into one argument.
	Args []string `yaml:"args" json:"args,omitempty"`
	// Volumes are the container's mounts, HOST:CONTAINER[:OPTIONS]; a
	// relative host path is the config file's directory's, a bare name a
	// runtime's named volume.
	Volumes []string `yaml:"volumes" json:"volumes,omitempty"`
	// Runtime is the container runtime's program: podman (a container's
	// when not set) or docker.
	Runtime string `yaml:"runtime" json:"runtime,omitempty"`
	// RegistryAuth is the registry credentials the pulls use: podman's
	// auth file (as `podman login` writes it), docker's directory of its
	// config.json. The runtime reads it (on an ssh host, the same path
	// there); shoal never logs it.
	RegistryAuth string `yaml:"registry_auth" json:"registry_auth,omitempty"`
	// InsecureRegistry pulls Image over plain HTTP (podman's
	// --tls-verify=false, for this pull only): a registry on a trusted
	// network. Docker has no such flag (its daemon's insecure-registries).
	InsecureRegistry bool `yaml:"insecure_registry" json:"insecure_registry,omitempty"`
	// Dir is the working directory (default: the config file's directory).
	Dir string `yaml:"dir" json:"dir,omitempty"`
	// StopTimeout is the grace between SIGTERM and SIGKILL.
	StopTimeout time.Duration `yaml:"stop_timeout" json:"stop_timeout"`
	// CPUs is the number of cores an instance is allotted; its CPU usage is
	// reported as a percentage of them.
	CPUs float64 `yaml:"cpus" json:"cpus"`
	// Vars are the template's variables, {{.Vars.KEY}}; a deploy may
	// override them (see WithVars).
	Vars map[string]string `yaml:"vars" json:"vars,omitempty"`
	// Label is an explicit version (template.version); empty means the
	// version is a hash of the rendered template (see Version).
	Label string `yaml:"version" json:"label,omitempty"`
	// PreStart and PreStop are lifecycle hooks; nil when not configured.
	PreStart *Hook `yaml:"pre_start" json:"pre_start,omitempty"`
	PreStop  *Hook `yaml:"pre_stop" json:"pre_stop,omitempty"`

	// program is the compiled Command and Env.
	program template.Program
	// overrides are the Vars set by WithVars, which make a labelled
	// template's version differ from its label.
	overrides map[string]string
}

// defaultTemplate holds the defaults of a template's keys; Load resolves
// Dir against the config file's directory.
var defaultTemplate = Template{StopTimeout: 10 * time.Second, CPUs: DefaultCPUs}

// Container runtimes (template.runtime).
const (
	RuntimePodman = "podman"
	RuntimeDocker = "docker"
)

// IsContainer reports whether t's instances are containers of an image.
func (t *Template) IsContainer() bool { return t.Image != "" }

// TemplateData is what instance templates can refer to.
type TemplateData struct {
	Name string
	// Host is the address the instance serves on, where HAProxy connects:
	// 127.0.0.1 for local instances, the host's address over SSH.
	Host  string
	Port  int
	Index int
	Group string
	Vars  map[string]string
}

// Compat holds drop-in protocol servers for other tools' clients.
type Compat struct {
	// SacloudAutoscaler is nil when off.
	SacloudAutoscaler *SacloudAutoscaler `yaml:"sacloud_autoscaler"`
}

// SacloudAutoscaler serves sacloud/autoscaler's gRPC ScalingService.
type SacloudAutoscaler struct {
	// Listen is "unix:PATH" or "tcp:HOST:PORT", with PATH made absolute:
	// Network is "unix" or "tcp" and Address an absolute socket path or
	// host:port.
	Listen  string `yaml:"listen" required:"true"`
	Network string
	Address string
	// SocketMode and SocketGroup apply to a unix socket (default 0600, the owner's group).
	SocketMode  uint32 `yaml:"socket_mode"`
	SocketGroup string `yaml:"socket_group"`
	AllowRemote bool   `yaml:"allow_remote"`
}

// defaultSacloud applies when compat.sacloud_autoscaler is there.
var defaultSacloud = SacloudAutoscaler{SocketMode: 0o600}
