package config

import (
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestDefaultsTreeComplete fails when a section has no table in
// DefaultsTree, so that its defaults would be neither checked nor listed.
func TestDefaultsTreeComplete(t *testing.T) {
	var check func(tp reflect.Type, v reflect.Value, path string)
	check = func(tp reflect.Type, v reflect.Value, path string) {
		for i := range tp.NumField() {
			f := tp.Field(i)
			key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			fv, p := v.Field(i), join(path, key)
			if IsInline(f) {
				if fv.IsNil() {
					t.Errorf("%s: inline section without a table in DefaultsTree", p)
				} else {
					check(f.Type.Elem(), fv.Elem(), path)
				}
				continue
			}
			if key == "" || key == "-" {
				continue
			}
			switch {
			case IsSection(f.Type):
				check(f.Type, fv, p)
			case (f.Type.Kind() == reflect.Pointer || f.Type.Kind() == reflect.Slice) && IsSection(f.Type.Elem()):
				if fv.IsNil() || f.Type.Kind() == reflect.Slice && fv.Len() == 0 {
					t.Errorf("%s: section without a table in DefaultsTree", p)
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
	tree := DefaultsTree()
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
      - {path_prefix: /pool, group: pool}
      - {respond: {status: 503}}
admin: {}
haproxy: {timeouts: {}}
access_log: {}
metrics:
  retention: {}
  sources:
    - {name: q, command: [q]}
    - {name: p, prometheus: {url: "http://127.0.0.1:9090", query: up, auth: {basic: {username: u, password_file: ../testdata/secret}}}}
    - {name: h, http: {url: "http://127.0.0.1:9091/q", json_path: .depth}}
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
    power_off: [power-off]
    power_on: [power-on]
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
    providers: [{name: rack}]
    placement: {strategy: pack, consolidation: {}}
    cooldown: {}
    health: {passive: {}}
    limits: {max_conn: 4}
    template:
      command: [app]
      pre_start: {command: [pre]}
      pre_stop: {command: [post]}
    deploy: {strategy: canary, canary: {steps: [{weight: 5%}], analysis: {min_requests: 10, max_error_rate: {above: 1%}, max_p99: {above: 1s}}}}
    scale_to_zero: {}
    outliers: {max_ejected: 50%, failure_rate: {}, latency: {}}
    autoscale:
      rules: [{metric: cpu.avg, above: 80, for: 1m, action: up}]
      target: {metric: cpu.avg, value: 50, max_step: {}}
      schedule: [{cron: "0 9 * * *", duration: 1h, min_size: 1, when: {metric: cpu.avg, above: 0, below: 1}}]
      predictive: {}
  - name: pool
    min_size: 0
    max_size: 1
    provider: cli
    warm_pool: {size: 1}
    deploy: {strategy: blue_green, blue_green: {weight: 5%, analysis: {min_requests: 10, max_error_rate: {above: 1%}, max_p99: {above: 1s}}}}
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
	want := DefaultsTree()
	confDir := filepath.Dir(cfg.Path)
	want.StateDir = abs(confDir, want.StateDir)
	want.Admin.Socket = abs(want.StateDir, want.Admin.Socket)
	want.Groups[0].Template.Dir = confDir
	want.Groups[0].Autoscale.Rules[0].Name = "rule-1"
	want.Groups[0].Autoscale.Schedules[0].Name = "schedule-1"
	// The first group is on another provider: it retries idempotent
	// requests unless told (docgen's note on groups[].retries).
	want.Groups[0].Retries = RetriesIdempotent

	// Each provider type is an entry of its own; the table has every
	// type's keys in one: so does the first entry, with the others' added.
	first := reflect.ValueOf(&cfg.Providers[0]).Elem()
	for _, p := range cfg.Providers[1:] {
		other := reflect.ValueOf(p)
		for i := range first.NumField() {
			if IsInline(first.Type().Field(i)) && first.Field(i).IsNil() {
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

	// A source has one kind: the table has every kind's keys in one, so
	// does the first source, with the others'.
	srcs := cfg.Metrics.Sources
	srcs[0].Prometheus, srcs[0].HTTP = srcs[1].Prometheus, srcs[2].HTTP

	// A route has one action: the table has every action's keys in one,
	// so does the first route, with the second's respond.
	routes := cfg.Frontends[0].Routes
	routes[0].Respond = routes[2].Respond
	// A warm pool is a cloud group's: the second group's.
	cfg.Groups[0].WarmPool = cfg.Groups[1].WarmPool
	// A deploy has one strategy: the table has canary's and blue_green's
	// keys; blue_green is the second group's.
	cfg.Groups[0].Deploy.BlueGreen = cfg.Groups[1].Deploy.BlueGreen
	// The shorthand's keys (listen, compression) exclude frontends: they
	// come from a file of their own.
	// (without the second group, routed by frontends only).
	rest := everySection[strings.Index(everySection, "\nadmin:")+1 : strings.Index(everySection, "  - name: pool\n")]
	short, err := Parse("conf/shoal.yaml", []byte("listen: 127.0.0.1:8080\ncompression: {}\n"+rest))
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
	// provider is the first of a written providers list.
	written["groups[0].provider"] = true
	compared := 0
	WalkDefaults(reflect.ValueOf(want), "", func(path string, f reflect.StructField, v reflect.Value) {
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
		if IsInline(f) {
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
