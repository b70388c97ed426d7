package config

import (
	"flag"
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the files docs/ has from the config's types: config-defaults.md, shoal.schema.json, config.md")

// defaultsTree is every table in one Config: a pointer is the defaults of
// its section when the file has it, a list holds the defaults of each item.
// It only assembles the tables; no default is written here.
func defaultsTree() Config {
	c := defaultConfig
	c.Compression = &defaultCompression
	c.Admin.TLS = &TLSFiles{}
	c.Compat.SacloudAutoscaler = &defaultSacloud
	g := defaultGroup
	g.Plans = []Plan{{}}
	g.Health.Passive = &defaultPassive
	g.Template.PreStart, g.Template.PreStop = &defaultPreStart, &defaultPreStop
	a := defaultAutoscale
	a.Rules = []Rule{defaultRule}
	a.Target = &defaultTarget
	a.Schedules = []Schedule{defaultSchedule}
	a.Predictive = &defaultPredictive
	g.Autoscale = &a
	g.ScaleToZero = &defaultScaleToZero
	g.Sticky = &defaultSticky
	c.Groups = []Group{g}
	fe := defaultFrontend
	fe.Compression = &defaultCompression
	fe.RateLimit = &defaultRateLimit
	tls := defaultTLS
	tls.Certificates = []TLSFiles{{}}
	tls.ACME = &defaultACME
	fe.TLS = &tls
	r := defaultRoute
	r.Redirect, r.Respond = &defaultRedirect, &defaultRespond
	fe.Routes = []Route{r}
	c.Frontends = []Frontend{fe}
	cloud := DefaultCloud
	cloud.Emulator = &Emulator{}
	c.Providers = []Provider{{Cloud: &cloud}}
	c.Notify.Targets = []NotifyTarget{defaultNotifyTarget}
	rec := defaultGSLBRecord
	rec.Sites = []GSLBSite{{Check: defaultGSLBCheck}}
	c.GSLB = &GSLB{Records: []GSLBRecord{rec}}
	ha := defaultHA
	ha.VIP = &defaultHAVIP
	c.HA = &ha
	return c
}

// inline reports whether f holds keys of its parent's mapping (a
// provider's type-specific keys).
func inline(f reflect.StructField) bool {
	_, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return opts == "inline"
}

// isSection reports whether t is a section of the file: a struct with keys.
func isSection(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && len(schemaOf(t)) > 0
}

// walkDefaults calls leaf for every key below v, a section, with its path
// (list items as [0]) and its value; sections are entered, not passed.
func walkDefaults(v reflect.Value, path string, leaf func(path string, f reflect.StructField, v reflect.Value)) {
	for i := range v.NumField() {
		f := v.Type().Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if (key == "" || key == "-") && !inline(f) {
			continue
		}
		fv, p := v.Field(i), join(path, key)
		if inline(f) {
			if !fv.IsNil() && v.Type() != reflect.TypeFor[Provider]() {
				walkDefaults(fv.Elem(), path, leaf)
			}
			continue
		}
		switch t := f.Type; {
		case isSection(t):
			walkDefaults(fv, p, leaf)
			continue
		case t.Kind() == reflect.Pointer && isSection(t.Elem()) && !fv.IsNil():
			walkDefaults(fv.Elem(), p, leaf)
			continue
		case t.Kind() == reflect.Slice && isSection(t.Elem()) && fv.Len() > 0:
			walkDefaults(fv.Index(0), p+"[0]", leaf)
			continue
		}
		leaf(p, f, fv)
	}
	if v.Type() == reflect.TypeFor[Provider]() {
		// A provider's type-specific keys, type by type as registered.
		for _, kv := range providerKeyDefaults(v) {
			walkDefaults(kv, path, leaf)
		}
	}
}

// providerKeyDefaults are the structs of keys of every registered provider
// type, in registration order, each once: with the defaults of v (a
// Provider of defaultsTree) where it has them inline, else the type's
// registration's.
func providerKeyDefaults(v reflect.Value) []reflect.Value {
	var out []reflect.Value
	seen := map[reflect.Type]bool{}
	for _, pt := range ProviderTypes() {
		for _, kt := range pt.KeyTypes() {
			if seen[kt] {
				continue
			}
			seen[kt] = true
			out = append(out, inlineDefaults(v, kt, pt))
		}
	}
	return out
}

// TestDefaultsTreeComplete fails when a section has no table in
// defaultsTree, so that its defaults would be neither checked nor listed.
func TestDefaultsTreeComplete(t *testing.T) {
	var check func(tp reflect.Type, v reflect.Value, path string)
	check = func(tp reflect.Type, v reflect.Value, path string) {
		for i := range tp.NumField() {
			f := tp.Field(i)
			key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			fv, p := v.Field(i), join(path, key)
			if inline(f) {
				if fv.IsNil() {
					t.Errorf("%s: inline section without a table in defaultsTree", p)
				} else {
					check(f.Type.Elem(), fv.Elem(), path)
				}
				continue
			}
			if key == "" || key == "-" {
				continue
			}
			switch {
			case isSection(f.Type):
				check(f.Type, fv, p)
			case (f.Type.Kind() == reflect.Pointer || f.Type.Kind() == reflect.Slice) && isSection(f.Type.Elem()):
				if fv.IsNil() || f.Type.Kind() == reflect.Slice && fv.Len() == 0 {
					t.Errorf("%s: section without a table in defaultsTree", p)
					continue
				}
				if f.Type.Kind() == reflect.Slice {
					check(f.Type.Elem(), fv.Index(0), p+"[0]")
				} else {
					check(f.Type.Elem(), fv.Elem(), p)
				}
			}
		}
	}
	tree := defaultsTree()
	check(reflect.TypeFor[Config](), reflect.ValueOf(tree), "")
}

// everySection has every section there, with only its required keys, so that
// every other key takes the default Load applies.
const everySection = `frontends:
  - name: edge
    bind: [127.0.0.1:8080, 127.0.0.1:8443]
    tls:
      certificates: [{cert: ../testdata/tls/cert.pem, key: ../testdata/tls/key.pem}]
      acme: {email: ops@example.com, domains: [www.example.com]}
      bind: [127.0.0.1:8443] # a plain bind for the redirect to https
    compression: {}
    timeouts: {}
    rate_limit: {requests: 100, per: 10s}
    routes:
      - {path_prefix: /old, redirect: {https: true}}
      - {respond: {status: 503}}
admin: {}
haproxy: {timeouts: {}}
access_log: {}
metrics: {retention: {}}
instance_logs: {}
notify:
  targets: [{name: page, type: command, command: [page]}]
compat: {sacloud_autoscaler: {listen: "tcp:127.0.0.1:50051"}}
gslb:
  listen: [127.0.0.1:5353]
  zone: example.org
  records: [{name: www, sites: [{address: 192.0.2.1, check: {}}]}]
ha:
  node: a
  priority: 100
  etcd: {endpoints: ["http://127.0.0.1:2379"]}
  vip: {address: 10.0.0.100/24, interface: eth0}
providers:
  - name: rack
    type: ssh
    hosts:
      - address: 10.0.0.2
        user: deploy
        key_file: ../testdata/ssh/id_ed25519
        known_hosts: ../testdata/ssh/known_hosts
        capacity: {}
  - name: cli
    type: exec
    port: 8080
    start: [start]
    stop: [stop]
    list: [list]
    emulator: {stand_in: [stand-in]}
  - name: aws
    type: ec2
    port: 8080
    region: us-east-1
    credentials_file: ../testdata/aws/credentials
    launch_template: {name: web}
  - name: sakura
    type: sacloud
    port: 80
    zone: tk1b
    template:
      plan: {core: 1, memory: 1}
      disks: [{source_archive: {id: "113000000001"}}]
      edit_parameter: {}
      network_interfaces: [{upstream: shared, expose: {}}]
groups:
  - name: web
    min_size: 0
    max_size: 2
    plans: [{name: one, size: 1}]
    cooldown: {}
    health: {passive: {}}
    template:
      command: [app]
      pre_start: {command: [pre]}
      pre_stop: {command: [post]}
    deploy: {}
    scale_to_zero: {}
    autoscale:
      rules: [{metric: cpu.avg, above: 80, for: 1m, action: up}]
      target: {metric: cpu.avg, value: 50, max_step: {}}
      schedule: [{cron: "0 9 * * *", duration: 1h, min_size: 1}]
      predictive: {}
`

// TestLoadAppliesDefaults fails when a default in a table and the value Load
// applies for a key left out differ: every key of every section is compared.
func TestLoadAppliesDefaults(t *testing.T) {
	cfg, err := Parse("conf/shoal.yaml", []byte(everySection))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	// The defaults that are relative to where the file is, and the names
	// made from an item's index, as Load resolves them.
	want := defaultsTree()
	confDir := filepath.Dir(cfg.Path)
	want.StateDir = abs(confDir, want.StateDir)
	want.Admin.Socket = abs(want.StateDir, want.Admin.Socket)
	want.Groups[0].Template.Dir = confDir
	want.Groups[0].Autoscale.Rules[0].Name = "rule-1"
	want.Groups[0].Autoscale.Schedules[0].Name = "schedule-1"

	// Each provider type is an entry of its own; the table has every
	// type's keys in one: so does the first entry, with the others' added.
	first := reflect.ValueOf(&cfg.Providers[0]).Elem()
	for _, p := range cfg.Providers[1:] {
		other := reflect.ValueOf(p)
		for i := range first.NumField() {
			if inline(first.Type().Field(i)) && first.Field(i).IsNil() {
				first.Field(i).Set(other.Field(i))
			}
		}
	}

	// The keys of types registered from their packages are in Spec: the
	// first entry's holds every entry's.
	var specs []any
	for _, p := range cfg.Providers {
		if p.Spec != nil {
			specs = append(specs, p.Spec)
		}
	}
	cfg.Providers[0].Spec = specs

	// A route has one action: the table has every action's keys in one,
	// so does the first route, with the second's respond.
	routes := cfg.Frontends[0].Routes
	routes[0].Respond = routes[1].Respond
	// The shorthand's keys (listen, compression) exclude frontends: they
	// come from a file of their own.
	short, err := Parse("conf/shoal.yaml", []byte("listen: 127.0.0.1:8080\ncompression: {}\n"+everySection[strings.Index(everySection, "\nadmin:")+1:]))
	if err != nil {
		t.Fatalf("Parse the shorthand: %v", err)
	}
	cfg.Compression = short.Compression

	got := reflect.ValueOf(cfg).Elem()
	// Where the file writes a key, with every item as [0], as the walk
	// names them: the other providers' keys are in later items.
	written := map[string]bool{}
	for p := range cfg.pos {
		written[itemRE.ReplaceAllString(p, "[0]")] = true
	}
	compared := 0
	walkDefaults(reflect.ValueOf(want), "", func(path string, f reflect.StructField, v reflect.Value) {
		if f.Name == "_" || f.Tag.Get("required") == "true" {
			return // read into another field, which is compared; no default
		}
		if written[path] {
			return // a required key, given in everySection
		}
		g := valueAt(got, path)
		if !g.IsValid() {
			t.Errorf("%s: not in the loaded config", path)
			return
		}
		compared++
		if !reflect.DeepEqual(g.Interface(), v.Interface()) {
			t.Errorf("%s: Load applies %v, the table says %v", path, g.Interface(), v.Interface())
		}
	})
	if compared < 80 {
		t.Errorf("compared %d defaults; the walk missed sections", compared)
	}
}

var itemRE = regexp.MustCompile(`\[[0-9]+\]`)

// valueAt follows a key path such as "groups[0].health.rise" in v.
func valueAt(v reflect.Value, path string) reflect.Value {
	for part := range strings.SplitSeq(path, ".") {
		key, indexed := strings.CutSuffix(part, "[0]")
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}
			}
			v = v.Elem()
		}
		v = field(v, key)
		if !v.IsValid() {
			return reflect.Value{}
		}
		if indexed {
			if v.Len() == 0 {
				return reflect.Value{}
			}
			v = v.Index(0)
		}
	}
	return v
}

// field returns the field of struct v with yaml key, looking into inline
// sections too.
func field(v reflect.Value, key string) reflect.Value {
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if inline(f) {
			if fv := v.Field(i); !fv.IsNil() {
				if found := field(fv.Elem(), key); found.IsValid() {
					return found
				}
			}
			continue
		}
		if f.Name == "Spec" && v.Type() == reflect.TypeFor[Provider]() {
			// TestLoadAppliesDefaults's merged entry: every entry's Spec.
			specs, _ := v.Field(i).Interface().([]any)
			for _, spec := range specs {
				if found := field(reflect.ValueOf(spec).Elem(), key); found.IsValid() {
					return found
				}
			}
			continue
		}
		if k, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); k == key {
			return v.Field(i)
		}
	}
	return reflect.Value{}
}

// TestConfigDefaultsDoc fails when docs/config-defaults.md is not what the
// tables say; `go test ./internal/config -run TestConfigDefaultsDoc -update`
// rewrites it.
func TestConfigDefaultsDoc(t *testing.T) {
	checkGenerated(t, "../../docs/config-defaults.md", []byte(renderDefaults()))
}

// writtenAs is how the file writes a default that its table holds in
// another form: the table has what `auto` loads as (Sample 1, Adaptive).
var writtenAs = map[string]string{
	"access_log.sample":        "`auto`",
	"providers[].health_grace": "`10m` for exec, sacloud and ec2; none for ssh",
}

// defaultNotes say what a default is relative to, or how Load makes it.
var defaultNotes = map[string]string{
	"state_dir":                              "relative to the config file's directory",
	"admin.socket":                           "relative to state_dir; mode 0600",
	"haproxy.binary":                         "looked up on PATH",
	"access_log.sample":                      "one in N, adapted per group to log about 100 of its requests a second",
	"groups[].health.fastinter":              "or interval when that is shorter",
	"groups[].health.downinter":              "the interval",
	"groups[].template.dir":                  "the config file's directory",
	"providers[].hosts[].key_file":           "relative to the config file's directory; ~ is your home",
	"providers[].hosts[].known_hosts":        "~ is the home of the user running shoal",
	"providers[].hosts[].capacity.instances": "0: unbounded",
	"providers[].hosts[].capacity.cores":     "0: unbounded",
	"groups[].provider":                      "the built-in provider: this machine",
	"providers[].health_grace":               "the health.grace of its groups that set none; without it, theirs",
	"groups[].max_hourly_instances":          "0: no budget",
	"providers[].credentials_file":           "ec2: the keys come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; sacloud: from SAKURACLOUD_ACCESS_TOKEN and SAKURACLOUD_ACCESS_TOKEN_SECRET",
	"providers[].profile":                    "ec2: a profile of credentials_file",
	"providers[].endpoint":                   "ec2: the region's; set it for emulators (moto) only",
	"providers[].server_plans":               "sacloud: every plan takes template.plan",
	"providers[].instance_types":             "ec2: every plan takes instance_type, or the launch template's",
	"providers[].template.network_interfaces[].assign_netmask_len": "0: the block's",
	"groups[].autoscale.rules[].name":                              "`rule-N`, N counting from 1",
	"groups[].autoscale.rules[].above":                             "not set; a rule needs above or below",
	"groups[].autoscale.rules[].below":                             "not set; a rule needs above or below",
	"groups[].autoscale.rules[].for":                               "not set; a rule needs for, or statistic and over",
	"groups[].autoscale.rules[].over":                              "not set; a rule needs for, or statistic and over",
	"groups[].autoscale.schedule[].name":                           "`schedule-N`, N counting from 1",
	"groups[].autoscale.schedule[].min_size":                       "0: not set",
	"groups[].autoscale.schedule[].max_size":                       "0: not set",
	"groups[].autoscale.predictive.capacity":                       "0: measured from the group's own history",
}

func renderDefaults() string {
	var b strings.Builder
	b.WriteString(`# Config defaults

<!-- Generated from the defaults tables in internal/config by
     go test ./internal/config -run TestConfigDefaultsDoc -update
     Do not edit; TestConfigDefaultsDoc fails when this file is stale. -->

What each key of shoal.yaml is when the file leaves it out (see the
[config reference](config.md) for what the keys mean and
the values they accept). ` + "`[]`" + ` marks the items of a list; the keys of an
optional section apply when the section is there.

| key | default |
| --- | --- |
`)
	tree := defaultsTree()
	seen := map[string]bool{} // a key two provider types share is one row
	walkDefaults(reflect.ValueOf(tree), "", func(path string, f reflect.StructField, v reflect.Value) {
		path = strings.ReplaceAll(path, "[0]", "[]")
		if seen[path] {
			return
		}
		seen[path] = true
		def := formatDefault(f, v)
		if w := writtenAs[path]; w != "" {
			def = w
		}
		if note := defaultNotes[path]; note != "" {
			def += " (" + note + ")"
		}
		fmt.Fprintf(&b, "| `%s` | %s |\n", path, def)
	})
	return b.String()
}

// formatDefault writes a table's value as the file would.
func formatDefault(f reflect.StructField, v reflect.Value) string {
	if f.Tag.Get("required") == "true" {
		return "required"
	}
	if f.Name == "_" {
		return "none"
	}
	switch x := v.Interface().(type) {
	case time.Duration:
		return "`" + formatDuration(x) + "`"
	case fmt.Stringer:
		return "`" + x.String() + "`"
	case uint32: // socket_mode, a file mode
		return fmt.Sprintf("`%#o`", x)
	case int64: // max_size, a number of bytes
		return "`" + formatSize(x) + "`"
	case bool:
		return "`" + strconv.FormatBool(x) + "`"
	case string:
		if x == "" {
			return "none"
		}
		return "`" + x + "`"
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return "none"
		}
	case reflect.Slice, reflect.Map:
		if v.Len() == 0 {
			return "none"
		}
		items := make([]string, v.Len())
		for i := range items {
			items[i] = fmt.Sprint(v.Index(i).Interface())
		}
		return "`[" + strings.Join(items, ", ") + "]`"
	}
	return "`" + fmt.Sprint(v.Interface()) + "`"
}

// formatSize writes n bytes in the largest binary unit that divides it.
func formatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// formatDuration drops the zero units time.Duration.String writes: 10m, not 10m0s.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
