package config

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"text/template"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/shoal-lb/shoal/internal/event"
)

// Notify is where shoal tells operators about events (see package event):
// each target gets the events its filters select, through a queue in the
// store that survives restarts.
type Notify struct {
	// TTL is how long an undelivered notification is retried before it is
	// dropped (and counted).
	TTL time.Duration `yaml:"ttl"`
	// RetryMin is the first back-off after a failed delivery; it doubles
	// with each failure up to retry_max.
	RetryMin time.Duration `yaml:"retry_min"`
	// RetryMax bounds the back-off between delivery attempts.
	RetryMax time.Duration  `yaml:"retry_max"`
	Targets  []NotifyTarget `yaml:"targets"`
}

var defaultNotify = Notify{TTL: 24 * time.Hour, RetryMin: time.Second, RetryMax: 5 * time.Minute}

// Types of notification targets.
const (
	NotifyWebhook = "webhook"
	NotifySlack   = "slack"
	NotifyEmail   = "email"
	NotifyCommand = "command"
)

type notifyType struct {
	name           string
	keys, required []string
}

// notifyTypes are the types of target, the keys each takes besides the
// common ones, and those of them it requires (a webhook requires its
// secret too, from one of two keys).
var notifyTypes = []notifyType{
	{NotifyWebhook, []string{"url", "secret_file", "secret_env"}, []string{"url"}},
	{NotifySlack, []string{"url"}, []string{"url"}},
	{NotifyEmail, []string{"smtp", "from", "to", "username", "password_file", "password_env", "ca_file"}, []string{"smtp", "from", "to"}},
	{NotifyCommand, []string{"command"}, []string{"command"}},
}

// NotifyTarget is one receiver of notifications.
type NotifyTarget struct {
	// Name names the target in logs, metrics and the queue.
	Name string `yaml:"name" required:"true"`
	// Type is how the target is told: webhook (a signed JSON POST), slack
	// (an incoming webhook), email (SMTP with STARTTLS) or command (a
	// program given the event on stdin).
	Type string `yaml:"type" required:"true"`
	// Events selects event types ("instance.launched") or families
	// ("instance.*"); none selects every event.
	Events []string `yaml:"events"`
	// Groups selects the events of these groups (and those of no group);
	// none selects every group's.
	Groups []string `yaml:"groups"`
	// Timeout bounds one delivery attempt.
	Timeout time.Duration `yaml:"timeout"`
	// URL is where a webhook or slack target posts.
	URL string `yaml:"url"`
	// Secret keys a webhook's HMAC-SHA256 signature; it is read from the
	// file secret_file names or the variable secret_env names.
	Secret string
	// secret_file is a file that holds a webhook's signing secret (a webhook
	// needs it or secret_env).
	_ struct{} `yaml:"secret_file"`
	// secret_env is an environment variable that holds a webhook's signing
	// secret.
	_ struct{} `yaml:"secret_env"`
	// SMTP is an email target's server, host:port; it must offer STARTTLS.
	SMTP string `yaml:"smtp"`
	// From is an email target's sender address.
	From string `yaml:"from"`
	// To are an email target's recipient addresses.
	To []string `yaml:"to"`
	// Username, when set, logs an email target in with PLAIN after
	// STARTTLS, with the password from password_file or password_env.
	Username string `yaml:"username"`
	Password string
	// password_file is a file that holds the SMTP password.
	_ struct{} `yaml:"password_file"`
	// password_env is an environment variable that holds the SMTP password.
	_ struct{} `yaml:"password_env"`
	// CAFile, when set, is the only CA trusted for the SMTP server's
	// certificate (else the system's).
	CAFile string `yaml:"ca_file"`
	// Command is a command target's argv: each element a text/template
	// of the event ({{.Type}}, {{.Group}}, {{.Subject}}); the event's JSON
	// is its stdin. No shell runs it.
	Command []string `yaml:"command"`
	// Argv are Command's parsed templates.
	Argv []*template.Template
}

var defaultNotifyTarget = NotifyTarget{Timeout: 10 * time.Second}

// maxSecretFile bounds how much of a secret file is read.
const maxSecretFile = 4 << 10

func (d *decoder) notify(n *yaml.Node, groups []Group) Notify {
	f := section[Notify](d, n, "notify")
	def := defaultNotify
	var nt Notify
	nt.TTL, _ = f.duration("ttl", def.TTL)
	nt.RetryMin, _ = f.duration("retry_min", def.RetryMin)
	var rn *yaml.Node
	nt.RetryMax, rn = f.duration("retry_max", def.RetryMax)
	for _, c := range []struct {
		key string
		v   time.Duration
	}{{"ttl", nt.TTL}, {"retry_min", nt.RetryMin}, {"retry_max", nt.RetryMax}} {
		if c.v <= 0 {
			d.errorAt(f.field(c.key), "must be positive, got %s", c.v)
		}
	}
	if rn != nil && nt.RetryMax < nt.RetryMin {
		d.errorf(rn, f.field("retry_max"), "must be at least retry_min (%s), got %s", nt.RetryMin, nt.RetryMax)
	}
	tn := f.get("targets")
	if tn == nil {
		return nt
	}
	items, ok := d.sequence(tn, "notify.targets", "a list of notification targets")
	if !ok {
		return nt
	}
	names := map[string]int{}
	for i, item := range items {
		path := fmt.Sprintf("notify.targets[%d]", i)
		t := d.notifyTarget(item, path, groups)
		if t.Name != "" {
			if first, dup := names[t.Name]; dup {
				d.errorAt(path+".name", "duplicate target name %q (first is notify.targets[%d])", t.Name, first)
				continue
			}
			names[t.Name] = i
		}
		nt.Targets = append(nt.Targets, t)
	}
	return nt
}

func (d *decoder) notifyTarget(n *yaml.Node, path string, groups []Group) NotifyTarget {
	f := section[NotifyTarget](d, n, path)
	t := defaultNotifyTarget
	var nn *yaml.Node
	t.Name, nn = f.str("name", "")
	if nn != nil && !nameRE.MatchString(t.Name) {
		d.errorf(nn, f.field("name"), "must match %s, got %q", namePattern, t.Name)
	}
	var tn *yaml.Node
	t.Type, tn = f.str("type", "")
	var to *yaml.Node
	t.Timeout, to = f.duration("timeout", t.Timeout)
	if to != nil && t.Timeout <= 0 {
		d.errorf(to, f.field("timeout"), "must be positive, got %s", t.Timeout)
	}
	for _, it := range f.strings("events") {
		if !knownEvents(it.val) {
			d.errorf(it.node, it.field, "unknown event type %q; known: %s (or a family such as instance.*)", it.val, eventList())
		}
		t.Events = append(t.Events, it.val)
	}
	for _, it := range f.strings("groups") {
		if !slices.ContainsFunc(groups, func(g Group) bool { return g.Name == it.val }) {
			d.errorf(it.node, it.field, "no group named %q", it.val)
		}
		t.Groups = append(t.Groups, it.val)
	}
	i := slices.IndexFunc(notifyTypes, func(nt notifyType) bool { return nt.name == t.Type })
	if i < 0 {
		if tn != nil {
			d.errorf(tn, f.field("type"), "must be %s, %s, %s or %s, got %q", NotifyWebhook, NotifySlack, NotifyEmail, NotifyCommand, t.Type)
		}
		return t
	}
	own := notifyTypes[i]
	for _, other := range notifyTypes {
		for _, k := range other.keys {
			if other.name != t.Type && !slices.Contains(own.keys, k) && f.has(k) {
				d.errorAt(f.field(k), "applies to type %s, not %s", other.name, t.Type)
			}
		}
	}
	f.require(own.required...)
	switch t.Type {
	case NotifyWebhook, NotifySlack:
		if u, un := f.str("url", ""); un != nil {
			if err := checkNotifyURL(u); err != nil {
				d.errorf(un, f.field("url"), "%v", err)
			}
			t.URL = u
		}
		if t.Type == NotifyWebhook {
			t.Secret = d.secret(f, "secret", true)
		}
	case NotifyEmail:
		if s, sn := f.str("smtp", ""); sn != nil {
			if err := checkHostPort(s); err != nil {
				d.errorf(sn, f.field("smtp"), "%v", err)
			}
			t.SMTP = s
		}
		t.From, _ = f.str("from", "")
		for _, it := range f.strings("to") {
			t.To = append(t.To, it.val)
		}
		if f.has("to") && len(t.To) == 0 {
			d.errorAt(f.field("to"), "must name at least one address")
		}
		for _, a := range append([]string{t.From}, t.To...) {
			if strings.ContainsAny(a, "\r\n<>") {
				d.errorAt(f.field("to"), "addresses must not contain line breaks or angle brackets, got %q", a)
			}
		}
		var un *yaml.Node
		t.Username, un = f.str("username", "")
		t.Password = d.secret(f, "password", un != nil)
		if ca, cn := f.str("ca_file", ""); cn != nil {
			t.CAFile = d.path(ca)
			if _, err := readRegular(t.CAFile, 1<<20); err != nil {
				d.errorf(cn, f.field("ca_file"), "%v", err)
			}
		}
	case NotifyCommand:
		for _, it := range f.strings("command") {
			tmpl, err := template.New(it.field).Option("missingkey=error").Parse(it.val)
			if err != nil {
				d.errorf(it.node, it.field, "does not parse as a template: %v", err)
				continue
			}
			t.Command = append(t.Command, it.val)
			t.Argv = append(t.Argv, tmpl)
		}
		if f.get("command") != nil && len(t.Command) == 0 {
			d.errorAt(f.field("command"), "must name a program")
		}
	}
	return t
}

// secret reads what key_file or key_env holds; required reports neither.
func (d *decoder) secret(f *fields, key string, required bool) string {
	file, fn := f.str(key+"_file", "")
	env, en := f.str(key+"_env", "")
	switch {
	case fn != nil && en != nil:
		d.errorf(en, f.field(key+"_env"), "conflicts with %s; set only one", f.field(key+"_file"))
	case fn != nil:
		b, err := readRegular(d.path(file), maxSecretFile)
		s := strings.TrimSpace(string(b))
		if err == nil && s == "" {
			err = fmt.Errorf("%s is empty", d.path(file))
		}
		if err != nil {
			d.errorf(fn, f.field(key+"_file"), "%v", err)
		}
		return s
	case en != nil:
		s := os.Getenv(env)
		if s == "" {
			d.errorf(en, f.field(key+"_env"), "%s is not set in shoal's environment", env)
		}
		return s
	case required && f.node != nil:
		d.errorf(f.node, f.field(key+"_file"), "required (or %s_env): the %s is never written in the config", key, key)
	}
	return ""
}

// checkNotifyURL accepts an absolute http or https URL.
func checkNotifyURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("must be an http:// or https:// URL, got %q", s)
	}
	if _, port, err := net.SplitHostPort(u.Host); err == nil && port == "" {
		return fmt.Errorf("must name a port after ':', got %q", s)
	}
	return nil
}

// knownEvents reports whether s names an event type or a family of them.
func knownEvents(s string) bool {
	if fam, ok := strings.CutSuffix(s, ".*"); ok {
		return slices.ContainsFunc(event.Types, func(t event.Type) bool { return strings.HasPrefix(string(t), fam+".") })
	}
	return event.Known(event.Type(s))
}

func eventList() string {
	s := make([]string, len(event.Types))
	for i, t := range event.Types {
		s[i] = string(t)
	}
	return strings.Join(s, ", ")
}
