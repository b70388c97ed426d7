package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/template"
)

// The documents below start on the line after the backtick, so that line N of
// the file is line N of the raw string as it appears here.

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want string
	}{
		{
			name: "empty document",
			doc:  ``,
			want: `shoal.yaml:1:1: empty config; expected a mapping with listen and groups`,
		},
		{
			name: "comments only",
			doc: `# nothing here
`,
			want: `shoal.yaml:1:1: empty config; expected a mapping with listen and groups`,
		},
		{
			name: "not a mapping",
			doc: `- listen: :8080
`,
			want: `shoal.yaml:1:1: config must be a mapping with listen and groups, got a list`,
		},
		{
			name: "syntax error with a line",
			doc: `groups:
  - name: web
 listen: :8080
`,
			want: `shoal.yaml:2: invalid YAML: did not find expected key`,
		},
		{
			name: "syntax error without a line",
			doc: `listen: groups: x
`,
			want: `shoal.yaml: invalid YAML: mapping values are not allowed in this context`,
		},
		{
			name: "second document",
			doc: `listen: :8080
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
---
listen: :8081
`,
			want: `shoal.yaml:3:1: unexpected second YAML document; a config file holds one`,
		},
		{
			name: "unknown top-level field",
			doc: `listen: :8080
listen_addr: :8081
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
`,
			want: `shoal.yaml:2:1: listen_addr: unknown field; allowed: listen, compression, frontends, state_dir, admin, haproxy, providers, groups, compat, access_log, metrics, instance_logs, shutdown, notify, gslb, ha`,
		},
		{
			name: "unknown group field",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    drain: 30s
    template: {command: [app]}
`,
			want: `shoal.yaml:6:5: groups[0].drain: unknown field; allowed: name, min_size, max_size, plans, cooldown, drain_timeout, balance, hash_on, sticky, proto, hosts, path_prefixes, health, template, autoscale, replace_after, deploy, scale_to_zero, provider, providers, placement, scale_in, max_hourly_instances, max_hourly_cost, max_lifetime, update, disruption, outliers, warm_pool, limits, slow_start, retries`,
		},
		{
			name: "unknown nested field",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    health: {intervall: 2s}
    template: {command: [app]}
`,
			want: `shoal.yaml:6:14: groups[0].health.intervall: unknown field; allowed: type, method, path, host, status, body, body_regex, send, expect, interval, timeout, rise, fall, fastinter, downinter, passive, grace`,
		},
		{
			name: "duplicate key",
			doc: `listen: :8080
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
listen: :8081
`,
			want: `shoal.yaml:3:1: listen: duplicate key (first at line 1)`,
		},
		{
			name: "merge key",
			doc: `listen: :8080
<<: {state_dir: x}
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
`,
			want: `shoal.yaml:2:1: merge keys (<<) are not supported`,
		},
		{
			name: "string where an integer is expected",
			doc: `listen: :8080
groups:
  - name: web
    min_size: two
    max_size: 2
    template: {command: [app]}
`,
			want: `shoal.yaml:4:15: groups[0].min_size: must be an integer, got "two"`,
		},
		{
			name: "integer out of range",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 9223372036854775808
    template: {command: [app]}
`,
			want: `shoal.yaml:5:15: groups[0].max_size: integer out of range: 9223372036854775808`,
		},
		{
			name: "mapping where a list is expected",
			doc: `listen: :8080
groups: {name: web}
`,
			want: `shoal.yaml:2:9: groups: must be a list of groups, got a mapping`,
		},
		{
			name: "list where a mapping is expected",
			doc: `listen: :8080
admin: [shoal.sock]
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
`,
			want: `shoal.yaml:2:8: admin: must be a mapping, got a list`,
		},
		{
			name: "scalar where a list of strings is expected",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    hosts: www.example.com
    template: {command: [app]}
`,
			want: `shoal.yaml:6:12: groups[0].hosts: must be a list of strings, got "www.example.com"`,
		},
		{
			name: "mapping where a string is expected",
			doc: `listen: {host: localhost, port: 8080}
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
`,
			want: `shoal.yaml:1:9: listen: must be a string, got a mapping`,
		},
		{
			name: "string where a bool is expected",
			doc: `listen: :8080
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
compat:
  sacloud_autoscaler: {listen: "unix:a.sock", allow_remote: "yes"}
`,
			want: `shoal.yaml:4:61: compat.sacloud_autoscaler.allow_remote: must be true or false, got "yes"`,
		},
		{
			name: "group that is not a mapping",
			doc: `listen: :8080
groups: [web]
`,
			want: `shoal.yaml:2:10: groups[0]: must be a mapping, got "web"`,
		},
		{
			name: "no groups",
			doc: `listen: :8080
groups: []
`,
			want: `shoal.yaml:2:9: groups: must list at least one group`,
		},
		{
			name: "missing top-level fields",
			doc: `state_dir: /var/lib/shoal
`,
			want: "shoal.yaml:1:1: groups: required\n" +
				"shoal.yaml:1:1: listen: required",
		},
		{
			name: "null required field",
			doc: `listen:
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
`,
			want: `shoal.yaml:1:1: listen: required`,
		},
		{
			name: "missing group fields",
			doc: `listen: :8080
groups:
  - hosts: [www.example.com]
`,
			want: "shoal.yaml:3:5: groups[0].name: required\n" +
				"shoal.yaml:3:5: groups[0].min_size: required\n" +
				"shoal.yaml:3:5: groups[0].max_size: required\n" +
				"shoal.yaml:3:5: groups[0].template: required",
		},
		{
			name: "missing command",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    template:
      dir: /srv/web
`,
			want: `shoal.yaml:7:7: groups[0].template.command: required`,
		},
		{
			name: "empty command",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    template: {command: []}
`,
			want: `shoal.yaml:6:25: groups[0].template.command: must not be empty`,
		},
		{
			name: "empty program name",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    template: {command: ["{{if false}}app{{end}}"]}
`,
			want: `shoal.yaml:6:26: groups[0].template.command[0]: expands to an empty program name`,
		},
		{
			name: "bad listen address",
			doc: `listen: localhost
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
`,
			want: `shoal.yaml:1:9: listen: must be host:port, got "localhost"`,
		},
		{
			name: "listen port out of range",
			doc: `listen: 127.0.0.1:65536
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
`,
			want: `shoal.yaml:1:9: listen: port must be a number from 1 to 65535, got "65536"`,
		},
		{
			name: "listen port by name",
			doc: `listen: "[::1]:http"
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
`,
			want: `shoal.yaml:1:9: listen: port must be a number from 1 to 65535, got "http"`,
		},
		{
			name: "empty compression types",
			doc: `listen: :8080
compression: {types: []}
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
`,
			want: `shoal.yaml:2:22: compression.types: must list at least one type; leave it out for the defaults`,
		},
		{
			name: "bad compression type",
			doc: `listen: :8080
compression: {types: [text/html, html]}
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
`,
			want: `shoal.yaml:2:34: compression.types[1]: must be a media type such as text/html, got "html"`,
		},
		{
			name: "multi-line haproxy line",
			doc: `listen: :8080
haproxy:
  global: ["nbthread 1", "nbthread 2\nlisten evil"]
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
`,
			want: `shoal.yaml:3:26: haproxy.global[1]: must be a single line without control characters`,
		},
		{
			name: "admin.listen without token",
			doc: `listen: :8080
admin:
  listen: 127.0.0.1:9090
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
`,
			want: `shoal.yaml:3:11: admin.listen: requires token or token_file: the TCP API must be authenticated`,
		},
		{
			name: "token and token_file",
			doc: `listen: :8080
admin:
  listen: 127.0.0.1:9090
  token: s3cret
  token_file: token.txt
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
`,
			want: `shoal.yaml:5:15: admin.token_file: conflicts with admin.token; set only one`,
		},
		{
			name: "token with spaces",
			doc: `listen: :8080
admin:
  token: "two words"
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
`,
			want: `shoal.yaml:3:10: admin.token: must not contain spaces or control characters`,
		},
		{
			name: "bad group name",
			doc: `listen: :8080
groups:
  - name: Web
    min_size: 1
    max_size: 2
    template: {command: [app]}
`,
			want: `shoal.yaml:3:11: groups[0].name: must match [a-z0-9][a-z0-9_-]{0,31} (it names an HAProxy backend and its instances), got "Web"`,
		},
		{
			name: "negative min_size",
			doc: `listen: :8080
groups:
  - name: web
    min_size: -1
    max_size: 2
    template: {command: [app]}
`,
			want: `shoal.yaml:4:15: groups[0].min_size: must be >= 0, got -1`,
		},
		{
			name: "max_size above the limit",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 1001
    template: {command: [app]}
`,
			want: `shoal.yaml:5:15: groups[0].max_size: must be from 1 to 1000, got 1001`,
		},
		{
			name: "min_size above max_size",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 3
    max_size: 2
    template: {command: [app]}
`,
			want: `shoal.yaml:5:15: groups[0].max_size: must be >= min_size (3), got 2`,
		},
		{
			name: "plan outside the size range",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    plans: {small: 1, big: 3}
    template: {command: [app]}
`,
			want: `shoal.yaml:6:28: groups[0].plans.big: must be within min_size..max_size (1..2), got 3`,
		},
		{
			name: "plans not increasing",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 5
    plans:
      small: 3
      large: 3
    template: {command: [app]}
`,
			want: `shoal.yaml:8:14: groups[0].plans.large: must be greater than the previous plan's size (small: 3), got 3`,
		},
		{
			name: "plans not increasing, list form",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 5
    plans:
      - {name: small, size: 4}
      - {name: large, size: 2}
    template: {command: [app]}
`,
			want: `shoal.yaml:8:29: groups[0].plans[1].size: must be greater than the previous plan's size (small: 4), got 2`,
		},
		{
			name: "duplicate plan name",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 5
    plans:
      - {name: small, size: 2}
      - {name: small, size: 3}
    template: {command: [app]}
`,
			want: `shoal.yaml:8:16: groups[0].plans[1].name: duplicate plan name "small" (first at line 7)`,
		},
		{
			name: "duplicate plan name, mapping form",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 5
    plans:
      small: 2
      small: 3
    template: {command: [app]}
`,
			want: `shoal.yaml:8:7: groups[0].plans.small: duplicate key (first at line 7)`,
		},
		{
			name: "bad plan name",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 5
    plans: {Small: 2}
    template: {command: [app]}
`,
			want: `shoal.yaml:6:13: groups[0].plans.Small: must match [a-z0-9][a-z0-9_-]{0,31}, got "Small"`,
		},
		{
			name: "plan size not an integer",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 5
    plans: {small: lots}
    template: {command: [app]}
`,
			want: `shoal.yaml:6:20: groups[0].plans.small: must be an integer, got "lots"`,
		},
		{
			name: "plans of the wrong type",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 5
    plans: small
    template: {command: [app]}
`,
			want: `shoal.yaml:6:12: groups[0].plans: must be a mapping of name to size or a list of {name, size}, got "small"`,
		},
		{
			name: "cooldown of the wrong type",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 5
    cooldown: [1m, 2m]
    template: {command: [app]}
`,
			want: `shoal.yaml:6:15: groups[0].cooldown: must be a duration or a mapping with up and down, got a list`,
		},
		{
			name: "duplicate group names",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    template: {command: [app]}
  - name: web
    min_size: 1
    max_size: 2
    hosts: [api.example.com]
    template: {command: [app]}
`,
			want: `shoal.yaml:7:11: groups[1].name: duplicate group name "web" (first at line 3)`,
		},
		{
			name: "two default groups",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    template: {command: [app]}
  - name: api
    min_size: 1
    max_size: 2
    template: {command: [app]}
`,
			want: `shoal.yaml:7:5: groups[1]: has neither hosts nor path_prefixes, so it would be a second default backend after groups[0] (web); give one of them hosts or path_prefixes`,
		},
		{
			name: "duration in words",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    cooldown: {up: 3 minutes}
    template: {command: [app]}
`,
			want: `shoal.yaml:6:20: groups[0].cooldown.up: must be a duration such as "30s" or "3m", or a whole number of seconds; got "3 minutes"`,
		},
		{
			name: "negative duration",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    drain_timeout: -1s
    template: {command: [app]}
`,
			want: `shoal.yaml:6:20: groups[0].drain_timeout: must not be negative, got -1s`,
		},
		{
			name: "instance_logs out of range",
			doc: `listen: :8080
instance_logs: {max_size: 10 parsecs, keep: 1000, retention: 1s}
groups:
  - name: web
    min_size: 1
    max_size: 2
    template: {command: [app]}
`,
			want: `shoal.yaml:2:27: instance_logs.max_size: must be a size such as "10MiB", "512KiB" or a number of bytes; got "10 parsecs"
shoal.yaml:2:45: instance_logs.keep: must be from 0 to 100, got 1000
shoal.yaml:2:62: instance_logs.retention: must be at least 1m0s and at most 87600h0m0s, got 1s`,
		},
		{
			name: "replace_after too short",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    replace_after: 500ms
    template: {command: [app]}
`,
			want: `shoal.yaml:6:20: groups[0].replace_after: must be at least 1s and at most 24h0m0s, got 500ms`,
		},
		{
			name: "negative seconds",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    cooldown: -5
    template: {command: [app]}
`,
			want: `shoal.yaml:6:15: groups[0].cooldown: must not be negative, got -5s`,
		},
		{
			name: "fractional seconds",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    template: {command: [app], stop_timeout: 1.5}
`,
			want: `shoal.yaml:6:46: groups[0].template.stop_timeout: must be a duration such as "30s" or "3m", or a whole number of seconds; got 1.5`,
		},
		{
			name: "zero health interval",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    health: {interval: 0}
    template: {command: [app]}
`,
			want: `shoal.yaml:6:24: groups[0].health.interval: must be from 1ms to 2147483647ms (596h31m23.647s, HAProxy's timer range), got 0s`,
		},
		{
			name: "zero rise",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    health: {rise: 0}
    template: {command: [app]}
`,
			want: `shoal.yaml:6:20: groups[0].health.rise: must be from 1 to 1000, got 0`,
		},
		{
			name: "health path without slash",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    health: {path: healthz}
    template: {command: [app]}
`,
			want: `shoal.yaml:6:20: groups[0].health.path: must start with "/", got "healthz"`,
		},
		{
			name: "path prefix without slash",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    path_prefixes: [/api, v2]
    template: {command: [app]}
`,
			want: `shoal.yaml:6:27: groups[0].path_prefixes[1]: must start with "/", got "v2"`,
		},
		{
			name: "host with a space",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    hosts: ["www.example.com example.org"]
    template: {command: [app]}
`,
			want: `shoal.yaml:6:13: groups[0].hosts[0]: must be a host name (letters, digits, '-', '_' and '.'), an IP address, or *.domain, got "www.example.com example.org"`,
		},
		{
			name: "static balance algorithm",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    balance: source
    template: {command: [app]}
`,
			want: `shoal.yaml:6:14: groups[0].balance: must be one of roundrobin, leastconn, first, hash (HAProxy can add servers at runtime only with a dynamic algorithm), got "source"`,
		},
		{
			name: "template field that does not exist",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    template:
      command: [app, --listen, "127.0.0.1:{{.Prot}}"]
`,
			want: `shoal.yaml:7:32: groups[0].template.command[2]: template: can't evaluate field Prot (have .Name, .Port, .Index, .Group, .Vars)`,
		},
		{
			name: "template that does not parse",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    template:
      command: [app, "--name={{.Name"]
`,
			want: `shoal.yaml:7:22: groups[0].template.command[1]: template: unclosed action`,
		},
		{
			name: "template with range",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    template:
      command: [app, "{{range 1000000000}}{{end}}"]
`,
			want: `shoal.yaml:7:22: groups[0].template.command[1]: template: {{range}} is not supported`,
		},
		{
			name: "template with range inside if",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    template:
      command: [app, "{{if .Name}}x{{else}}{{range 3}}{{end}}{{end}}"]
`,
			want: `shoal.yaml:7:22: groups[0].template.command[1]: template: {{range}} is not supported`,
		},
		{
			name: "template that expands too far",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    template:
      command: [app, '{{printf "%0999999d" 0}}']
`,
			want: `shoal.yaml:7:22: groups[0].template.command[1]: expands to more than 65536 bytes (64 KiB, the limit for one field)`,
		},
		{
			name: "bad template in env",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    template:
      command: [app]
      env:
        APP_NAME: "{{upper .Name}}"
`,
			want: `shoal.yaml:9:19: groups[0].template.env.APP_NAME: template: function "upper" not defined`,
		},
		{
			name: "bad env name",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    template:
      command: [app]
      env: {"A=B": x}
`,
			want: `shoal.yaml:8:13: groups[0].template.env.A=B: invalid environment variable name "A=B"`,
		},
		{
			name: "env that is a list",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    template:
      command: [app]
      env: [A=B]
`,
			want: `shoal.yaml:8:12: groups[0].template.env: must be a mapping, got a list`,
		},
		{
			name: "compat listen scheme",
			doc: `listen: :8080
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
compat:
  sacloud_autoscaler:
    listen: http://127.0.0.1:8081
`,
			want: `shoal.yaml:5:13: compat.sacloud_autoscaler.listen: must be "unix:PATH" or "tcp:HOST:PORT", got "http://127.0.0.1:8081"`,
		},
		{
			name: "compat remote tcp",
			doc: `listen: :8080
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
compat:
  sacloud_autoscaler:
    listen: tcp:0.0.0.0:8081
`,
			want: `shoal.yaml:5:13: compat.sacloud_autoscaler.listen: "0.0.0.0" is not a loopback address and the protocol has no authentication; set allow_remote: true to accept that`,
		},
		{
			name: "compat tcp on all interfaces",
			doc: `listen: :8080
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
compat:
  sacloud_autoscaler:
    listen: "tcp::8081"
`,
			want: `shoal.yaml:5:13: compat.sacloud_autoscaler.listen: "" is not a loopback address and the protocol has no authentication; set allow_remote: true to accept that`,
		},
		{
			name: "compat socket mode on tcp",
			doc: `listen: :8080
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
compat:
  sacloud_autoscaler:
    listen: tcp:localhost:8081
    socket_mode: "0660"
`,
			want: `shoal.yaml:6:18: compat.sacloud_autoscaler.socket_mode: applies only to a unix: listen address`,
		},
		{
			name: "compat socket mode not octal",
			doc: `listen: :8080
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
compat:
  sacloud_autoscaler:
    listen: unix:autoscaler.sock
    socket_mode: 660
`,
			want: `shoal.yaml:6:18: compat.sacloud_autoscaler.socket_mode: must be an octal file mode such as "0660", got 660`,
		},
		{
			name: "compat unix without a path",
			doc: `listen: :8080
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
compat:
  sacloud_autoscaler:
    listen: "unix:"
`,
			want: `shoal.yaml:5:13: compat.sacloud_autoscaler.listen: unix: needs a socket path`,
		},
		{
			name: "compat socket mode beyond permission bits",
			doc: `listen: :8080
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
compat:
  sacloud_autoscaler:
    listen: unix:autoscaler.sock
    socket_mode: "01000"
`,
			want: `shoal.yaml:6:18: compat.sacloud_autoscaler.socket_mode: must be an octal file mode such as "0660", got "01000"`,
		},
		{
			name: "compat without listen",
			doc: `listen: :8080
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
compat:
  sacloud_autoscaler:
    socket_group: autoscaler
`,
			want: `shoal.yaml:5:5: compat.sacloud_autoscaler.listen: required`,
		},
		{
			name: "path prefix with a space",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    path_prefixes: ["/a b"]
    template: {command: [app]}`,
			want: `shoal.yaml:6:21: groups[0].path_prefixes[0]: must be printable ASCII without spaces, quotes or '\' (percent-encode other characters, e.g. %20 for a space), got "/a b"`,
		},
		{
			name: "path prefix with a query",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    path_prefixes: ["/a?x=1"]
    template: {command: [app]}`,
			want: `shoal.yaml:6:21: groups[0].path_prefixes[0]: must not contain '?': a prefix is matched against the path without the query string, got "/a?x=1"`,
		},
		{
			name: "health path with a fragment",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    health: {path: "/healthz#x"}
    template: {command: [app]}`,
			want: `shoal.yaml:6:20: groups[0].health.path: must not contain '#': a fragment is never sent to a server (and starts a comment in haproxy.cfg), got "/healthz#x"`,
		},
		{
			name: "host with a misplaced wildcard",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    hosts: ["www.*.example.com"]
    template: {command: [app]}`,
			want: `shoal.yaml:6:13: groups[0].hosts[0]: a wildcard is allowed only as the whole first label, as in *.example.com; got "www.*.example.com"`,
		},
		{
			name: "host with a port",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    hosts: ["www.example.com:8080"]
    template: {command: [app]}`,
			want: `shoal.yaml:6:13: groups[0].hosts[0]: must be a host name or IP address without a port (any port matches), got "www.example.com:8080"`,
		},
		{
			name: "bad IDN host",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    hosts: ["xn--a.exämple.com"]
    template: {command: [app]}`,
			want: `shoal.yaml:6:13: groups[0].hosts[0]: not a valid internationalized host name (idna: invalid label "\u0080"), got "xn--a.exämple.com"`,
		},
		{
			name: "health interval over HAProxy's timer",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    health: {interval: 600h}
    template: {command: [app]}`,
			want: `shoal.yaml:6:24: groups[0].health.interval: must be from 1ms to 2147483647ms (596h31m23.647s, HAProxy's timer range), got 600h0m0s`,
		},
		{
			name: "health timeout over HAProxy's timer",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    health: {timeout: 2147484s}
    template: {command: [app]}`,
			want: `shoal.yaml:6:23: groups[0].health.timeout: must be from 1ms to 2147483647ms (596h31m23.647s, HAProxy's timer range), got 596h31m24s`,
		},
		{
			name: "grace shorter than rise checks",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    health: {interval: 10s, fastinter: 10s, rise: 3, timeout: 2s, grace: 20s}
    template: {command: [app]}`,
			want: `shoal.yaml:6:74: groups[0].health.grace: 20s is shorter than rise × interval + timeout = 3 × 10s + 2s = 32s, so a healthy instance is stopped before it can pass; set grace to at least 32s`,
		},
		{
			name: "default grace shorter than rise checks",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    health: {interval: 40s}
    template: {command: [app]}`,
			want: `shoal.yaml:6:24: groups[0].health.grace: 30s (the default) is shorter than downinter + (rise - 1) × fastinter + timeout = 40s + 1 × 500ms + 1s = 41.5s, so a healthy instance is stopped before it can pass; set grace to at least 41.5s`,
		},
		{
			name: "unknown scale_in",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    scale_in: random
    template: {command: [app]}`,
			want: `shoal.yaml:6:15: groups[0].scale_in: must be one of newest, oldest, least_busy (which instance in service a scale-in retires), got "random"`,
		},
		{
			name: "huge drain timeout",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    drain_timeout: 2562047h
    template: {command: [app]}`,
			want: `shoal.yaml:6:20: groups[0].drain_timeout: must be from 0s to 24h0m0s, got 2562047h0m0s`,
		},
		{
			name: "huge stop timeout",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    template: {command: [app], stop_timeout: 9223372036s}
`,
			want: `shoal.yaml:6:46: groups[0].template.stop_timeout: must be from 0s to 24h0m0s, got 2562047h47m16s`,
		},
		{
			name: "huge cooldown",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    cooldown: 100000h
    template: {command: [app]}`,
			want: `shoal.yaml:6:15: groups[0].cooldown: must be from 0s to 720h0m0s, got 100000h0m0s`,
		},
		{
			name: "huge rise",
			doc: `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    health: {rise: 9223372036854775807}
    template: {command: [app]}`,
			want: `shoal.yaml:6:20: groups[0].health.rise: must be from 1 to 1000, got 9223372036854775807`,
		},
		{
			name: "compression type with parameters",
			doc: `listen: :8080
compression: {types: ["text/html; charset=utf-8"]}
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
`,
			want: `shoal.yaml:2:23: compression.types[0]: give the media type without parameters (such as "text/html"), got "text/html; charset=utf-8"`,
		},
		{
			name: "haproxy global line opening a section",
			doc: `listen: :8080
haproxy: {global: ["listen x"]}
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
`,
			want: `shoal.yaml:2:20: haproxy.global[0]: must not start a new haproxy.cfg section ("listen"); shoal writes the sections itself`,
		},
		{
			name: "haproxy server-state file",
			doc: `listen: :8080
haproxy: {global: ["server-state-file /tmp/s"], defaults: ["load-server-state-from-file global"]}
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
`,
			want: `shoal.yaml:2:20: haproxy.global[0]: must not use a server-state file ("server-state-file"): shoal writes every server into the configuration before each reload, and a state file would override it at every reload
shoal.yaml:2:60: haproxy.defaults[0]: must not use a server-state file ("load-server-state-from-file"): shoal writes every server into the configuration before each reload, and a state file would override it at every reload`,
		},
		{
			name: "state_dir with a space",
			doc: `listen: :8080
state_dir: "/tmp/my state"
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
`,
			want: `shoal.yaml:2:12: state_dir: must not contain spaces, control characters, quotes, '#', '\' or ',' (HAProxy takes it as one word), got "/tmp/my state"`,
		},
		{
			name: "state_dir too long for HAProxy's sockets",
			doc: `listen: :8080
state_dir: /tmp/dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
`,
			want: `shoal.yaml:2:12: state_dir: /tmp/dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd/haproxy/master.sock is 105 bytes, over HAProxy's limit of 97 for a socket path; use a state_dir of at most 77 bytes (absolute), got 85`,
		},
		{
			name: "admin socket too long",
			doc: `listen: :8080
admin: {socket: /tmp/ssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssss}
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
`,
			want: `shoal.yaml:2:17: admin.socket: socket path /tmp/ssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssss is 115 bytes; a unix socket path can be at most 107 bytes; set admin.socket to a shorter path`,
		},
		{
			name: "listen host not a host",
			doc: `listen: "exa mple:8080"
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
`,
			want: `shoal.yaml:1:9: listen: host must be an IP address or a host name, got "exa mple"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse("shoal.yaml", []byte(tt.doc))
			if cfg != nil {
				t.Errorf("Parse returned a config along with an error")
			}
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("Parse error = %v (%T), want ErrorList", err, err)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("Parse error:\n got: %s\nwant: %s", got, tt.want)
			}
		})
	}
}

func TestParseTokenFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "shoal.yaml")
	if err := os.WriteFile(filepath.Join(dir, "blank"), []byte(" \n\t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		file, want string
	}{
		{"blank", path + `:4:15: admin.token_file: ` + filepath.Join(dir, "blank") + ` is empty`},
		{"missing", path + `:4:15: admin.token_file: stat ` + filepath.Join(dir, "missing") + `: no such file or directory`},
		{".", path + `:4:15: admin.token_file: ` + dir + ` is not a regular file`},
	}
	for _, tt := range tests {
		doc := `listen: :8080
admin:
  listen: 127.0.0.1:9090
  token_file: ` + tt.file + `
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
`
		_, err := Parse(path, []byte(doc))
		if err == nil || err.Error() != tt.want {
			t.Errorf("token_file %s: error\n got: %v\nwant: %s", tt.file, err, tt.want)
		}
	}
}

// TestParseManyErrors checks that one pass reports every problem, in file
// order even where a check spans fields or runs late.
func TestParseManyErrors(t *testing.T) {
	doc := `groups:
  - name: web
    min_size: 3
    max_size: 2
    cooldown: {up: 3 minutes, down: 9m}
    template:
      command: ["{{.Prot}}"]
  - name: web
    min_size: 0
    max_size: 1
    template: {command: [app], dir: 7, bogus: 1}
state_dir: [x]
listen: nowhere
`
	want := []string{
		`shoal.yaml:4:15: groups[0].max_size: must be >= min_size (3), got 2`,
		`shoal.yaml:5:20: groups[0].cooldown.up: must be a duration such as "30s" or "3m", or a whole number of seconds; got "3 minutes"`,
		`shoal.yaml:7:17: groups[0].template.command[0]: template: can't evaluate field Prot (have .Name, .Port, .Index, .Group, .Vars)`,
		`shoal.yaml:8:5: groups[1]: has neither hosts nor path_prefixes, so it would be a second default backend after groups[0] (web); give one of them hosts or path_prefixes`,
		`shoal.yaml:8:11: groups[1].name: duplicate group name "web" (first at line 2)`,
		`shoal.yaml:11:40: groups[1].template.bogus: unknown field; allowed: command, env, image, port, args, volumes, runtime, registry_auth, insecure_registry, dir, stop_timeout, cpus, vars, version, pre_start, pre_stop`,
		`shoal.yaml:12:12: state_dir: must be a string, got a list`,
		`shoal.yaml:13:9: listen: must be host:port, got "nowhere"`,
	}
	_, err := Parse("shoal.yaml", []byte(doc))
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("Parse error = %v (%T), want ErrorList", err, err)
	}
	got := strings.Split(err.Error(), "\n")
	if !slices.Equal(got, want) {
		t.Errorf("Parse errors:\n got: %s\nwant: %s", strings.Join(got, "\n      "), strings.Join(want, "\n      "))
	}
	if len(list) != len(want) {
		t.Fatalf("len(ErrorList) = %d, want %d", len(list), len(want))
	}
	if e := list[0]; e.File != "shoal.yaml" || e.Line != 4 || e.Col != 15 || e.Field != "groups[0].max_size" || e.Msg != "must be >= min_size (3), got 2" {
		t.Errorf("list[0] = %+v", *e)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "shoal.yaml")
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	doc := `listen: 127.0.0.1:8080
compression:
state_dir: state
admin:
  listen: 127.0.0.1:9090
  token_file: token
haproxy:
  binary: ./bin/haproxy
  global: ["nbthread 1"]
instance_logs: {max_size: 1MiB, keep: 5, retention: 2h}
groups:
  - name: web
    min_size: 2
    max_size: 5
    plans:
      smallest: 2
      medium: 3
      largest: 5
    cooldown: 540
    template:
      command: ["./bin/demo-backend", "--listen", "127.0.0.1:{{.Port}}", "--name", "{{.Name}}"]
      env: {APP_NAME: "{{.Name}}", GROUP: "{{.Group}}", EMPTY: , PORT: 8080}
  - name: api
    min_size: 0
    max_size: 3
    plans: [{name: one, size: 1}, {name: three, size: 3}]
    cooldown: {up: 60, down: 2m}
    drain_timeout: 5s
    replace_after: 20s
    balance: leastconn
    hosts: [api.example.com]
    path_prefixes: [/api]
    health: {path: /ping, interval: 500ms, timeout: 250ms, rise: 1, fall: 2, grace: 1m}
    template:
      command: [/usr/bin/api, "--index={{.Index}}"]
      dir: /srv/api
      stop_timeout: 3
      cpus: 0.5
    scale_in: least_busy
compat:
  sacloud_autoscaler:
    listen: unix:autoscaler.sock
    socket_mode: "0660"
    socket_group: autoscaler
`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}

	argv, env, err := cfg.Groups[0].Template.Expand(TemplateData{Name: "web-007", Port: 10007, Index: 7, Group: "web"})
	if err != nil {
		t.Fatalf("Expand: %v", err)
	}
	if want := []string{"./bin/demo-backend", "--listen", "127.0.0.1:10007", "--name", "web-007"}; !slices.Equal(argv, want) {
		t.Errorf("argv = %q, want %q", argv, want)
	}
	if want := []string{"APP_NAME=web-007", "EMPTY=", "GROUP=web", "PORT=8080"}; !slices.Equal(env, want) {
		t.Errorf("env = %q, want %q", env, want)
	}
	argv, env, err = cfg.Groups[1].Template.Expand(TemplateData{Name: "api-002", Port: 10002, Index: 2, Group: "api"})
	if err != nil {
		t.Fatalf("Expand: %v", err)
	}
	if want := []string{"/usr/bin/api", "--index=2"}; !slices.Equal(argv, want) || len(env) != 0 {
		t.Errorf("Expand = %q, %q; want %q and no env", argv, env, want)
	}

	// The compiled templates were checked above; compare everything else.
	for i := range cfg.Groups {
		cfg.Groups[i].Template.program = template.Program{}
	}
	if e := cfg.FieldError("groups[1].health.grace", "x"); e.Line != 33 || e.Col != 85 {
		t.Errorf("FieldError does not locate groups[1].health.grace: %v", e)
	}
	cfg.file, cfg.pos, cfg.listeners = "", nil, nil
	stateDir := filepath.Join(dir, "state")
	want := &Config{
		Path:        path,
		Listen:      "127.0.0.1:8080",
		Compression: &Compression{Types: defaultCompression.Types},
		StateDir:    stateDir,
		Admin: Admin{
			Socket: filepath.Join(stateDir, "shoal.sock"),
			Listen: "127.0.0.1:9090",
			Token:  "s3cret",
		},
		HAProxy: HAProxy{
			Binary:   filepath.Join(dir, "bin/haproxy"),
			Global:   []string{"nbthread 1"},
			Timeouts: DefaultTimeouts,
		},
		AccessLog: AccessLog{Enabled: true, Sample: 1, Adaptive: true, WhenNeeded: true, MaxSize: 10 << 20, MaxFiles: 3},
		Shutdown:  ShutdownKeep,
		Notify:    defaultNotify,
		Groups: []Group{
			{
				Name:    "web",
				MinSize: 2,
				MaxSize: 5,
				// In the order written, not sorted by name.
				Plans:        []Plan{{"smallest", 2}, {"medium", 3}, {"largest", 5}},
				Cooldown:     Cooldown{Up: 540 * time.Second, Down: 540 * time.Second},
				DrainTimeout: 30 * time.Second,
				ReplaceAfter: 10 * time.Second,
				ScaleIn:      ScaleInNewest,
				Retries:      RetriesConnect,
				Update:       defaultGroup.Update,
				Disruption:   defaultDisruption,
				Provider:     ProviderLocal,
				Placement:    Placement{Strategy: PlaceSpread},
				Balance:      "roundrobin",
				HashOn:       HashOnURI,
				Proto:        ProtoH1,
				Health: Health{
					Type:      "http",
					Method:    "GET",
					Path:      "/healthz",
					Host:      "localhost",
					Status:    []StatusRange{{200, 399}},
					Interval:  2 * time.Second,
					Timeout:   time.Second,
					Rise:      2,
					Fall:      3,
					FastInter: DefaultFastInter,
					Grace:     30 * time.Second,
				},
				Template: Template{
					Command:     []string{"./bin/demo-backend", "--listen", "127.0.0.1:{{.Port}}", "--name", "{{.Name}}"},
					Env:         map[string]string{"APP_NAME": "{{.Name}}", "GROUP": "{{.Group}}", "EMPTY": "", "PORT": "8080"},
					Dir:         dir,
					StopTimeout: 10 * time.Second,
					CPUs:        1,
				},
				Deploy: DefaultDeploy,
			},
			{
				Name:         "api",
				MinSize:      0,
				MaxSize:      3,
				Plans:        []Plan{{"one", 1}, {"three", 3}},
				Cooldown:     Cooldown{Up: time.Minute, Down: 2 * time.Minute},
				DrainTimeout: 5 * time.Second,
				ReplaceAfter: 20 * time.Second,
				ScaleIn:      ScaleInLeastBusy,
				Retries:      RetriesConnect,
				Update:       defaultGroup.Update,
				Disruption:   defaultDisruption,
				Provider:     ProviderLocal,
				Placement:    Placement{Strategy: PlaceSpread},
				Balance:      "leastconn",
				HashOn:       HashOnURI,
				Proto:        ProtoH1,
				Hosts:        []string{"api.example.com"},
				PathPrefixes: []string{"/api"},
				Health: Health{
					Type:      "http",
					Method:    "GET",
					Path:      "/ping",
					Host:      "localhost",
					Status:    []StatusRange{{200, 399}},
					Interval:  500 * time.Millisecond,
					Timeout:   250 * time.Millisecond,
					Rise:      1,
					Fall:      2,
					FastInter: 500 * time.Millisecond,
					Grace:     time.Minute,
				},
				Template: Template{
					Command:     []string{"/usr/bin/api", "--index={{.Index}}"},
					Dir:         "/srv/api",
					StopTimeout: 3 * time.Second,
					CPUs:        0.5,
				},
				Deploy: DefaultDeploy,
			},
		},
		InstanceLogs: InstanceLogs{MaxSize: 1 << 20, Keep: 5, Retention: 2 * time.Hour},
		Compat: Compat{SacloudAutoscaler: &SacloudAutoscaler{
			Listen:      "unix:" + filepath.Join(stateDir, "autoscaler.sock"),
			Network:     "unix",
			Address:     filepath.Join(stateDir, "autoscaler.sock"),
			SocketMode:  0o660,
			SocketGroup: "autoscaler",
		}},
		Metrics: DefaultMetrics,
	}
	// The shorthand's frontend: the routed group first, the catch-all last.
	want.Frontends = []Frontend{{Name: ShorthandName, Bind: []string{want.Listen}, Mode: ModeHTTP, ForwardedHeaders: true, Compression: want.Compression, Routes: []Route{
		{Host: []string{"api.example.com"}, PathPrefix: []string{"/api"}, Group: "api"},
		{Group: "web"},
	}}}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("Load:\n got: %+v\nwant: %+v", cfg, want)
	}
}

func TestParseDefaults(t *testing.T) {
	doc := `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    template: {command: [app]}
compat:
  sacloud_autoscaler: {listen: "tcp:[::1]:8081"}
`
	cfg, err := Parse("conf/shoal.yaml", []byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	confDir := filepath.Join(wd, "conf")
	if cfg.Path != filepath.Join(confDir, "shoal.yaml") {
		t.Errorf("Path = %q", cfg.Path)
	}
	if cfg.Compression != nil {
		t.Errorf("Compression = %+v, want nil", cfg.Compression)
	}
	if want := filepath.Join(confDir, ".shoal"); cfg.StateDir != want {
		t.Errorf("StateDir = %q, want %q", cfg.StateDir, want)
	}
	if want := (Admin{Socket: filepath.Join(confDir, ".shoal", "shoal.sock")}); cfg.Admin != want {
		t.Errorf("Admin = %+v, want %+v", cfg.Admin, want)
	}
	if cfg.HAProxy.Binary != "haproxy" {
		t.Errorf("HAProxy.Binary = %q, want haproxy", cfg.HAProxy.Binary)
	}
	g := cfg.Groups[0]
	if g.Cooldown != defaultCooldown || g.Plans != nil || g.Template.Dir != confDir || g.Template.StopTimeout != 10*time.Second {
		t.Errorf("group defaults: %+v", g)
	}
	if want := (SacloudAutoscaler{Listen: "tcp:[::1]:8081", Network: "tcp", Address: "[::1]:8081", SocketMode: 0o600}); *cfg.Compat.SacloudAutoscaler != want {
		t.Errorf("SacloudAutoscaler = %+v, want %+v", *cfg.Compat.SacloudAutoscaler, want)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load error = %v, want one wrapping os.ErrNotExist", err)
	}
}

func TestAliases(t *testing.T) {
	doc := `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    health: &health {path: /ok}
    template: &tmpl {command: [app, "{{.Name}}"]}
  - name: api
    min_size: 1
    max_size: 2
    hosts: [api.example.com]
    health: *health
    template: *tmpl
`
	cfg, err := Parse("shoal.yaml", []byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if cfg.Groups[1].Health.Path != "/ok" || !slices.Equal(cfg.Groups[1].Template.Command, []string{"app", "{{.Name}}"}) {
		t.Errorf("aliased group = %+v", cfg.Groups[1])
	}
}

func TestLookups(t *testing.T) {
	doc := `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 5
    plans: {small: 1, large: 5}
    template: {command: [app]}
  - name: api
    min_size: 1
    max_size: 2
    hosts: [api.example.com]
    template: {command: [app]}
`
	cfg, err := Parse("shoal.yaml", []byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got := cfg.GroupNames(); !slices.Equal(got, []string{"web", "api"}) {
		t.Errorf("GroupNames = %q", got)
	}
	g, ok := cfg.Group("web")
	if !ok || g != &cfg.Groups[0] {
		t.Fatalf("Group(web) = %p, %v; want &cfg.Groups[0]", g, ok)
	}
	if _, ok := cfg.Group("nope"); ok {
		t.Errorf("Group(nope) found")
	}
	if got := g.PlanNames(); !slices.Equal(got, []string{"small", "large"}) {
		t.Errorf("PlanNames = %q", got)
	}
	if p, ok := g.PlanBySize(5); !ok || p != (Plan{"large", 5}) {
		t.Errorf("PlanBySize(5) = %v, %v", p, ok)
	}
	if _, ok := g.PlanBySize(3); ok {
		t.Errorf("PlanBySize(3) found a plan")
	}
	if p, ok := g.PlanByName("small"); !ok || p != (Plan{"small", 1}) {
		t.Errorf("PlanByName(small) = %v, %v", p, ok)
	}
	if _, ok := g.PlanByName("medium"); ok {
		t.Errorf("PlanByName(medium) found a plan")
	}
}

func TestNewTemplate(t *testing.T) {
	tmpl, err := NewTemplate([]string{"app", "--port={{.Port}}"}, map[string]string{"B": "{{.Index}}", "A": "{{.Group}}"})
	if err != nil {
		t.Fatalf("NewTemplate: %v", err)
	}
	argv, env, err := tmpl.Expand(TemplateData{Name: "x-001", Port: 9, Index: 1, Group: "x"})
	if err != nil {
		t.Fatalf("Expand: %v", err)
	}
	if !slices.Equal(argv, []string{"app", "--port=9"}) || !slices.Equal(env, []string{"A=x", "B=1"}) {
		t.Errorf("Expand = %q, %q", argv, env)
	}

	for _, tt := range []struct {
		command []string
		env     map[string]string
		want    string
	}{
		{nil, nil, "command: must not be empty"},
		{[]string{"app", "{{.Nope}}"}, nil, "command[1]: template: can't evaluate field Nope (have .Name, .Port, .Index, .Group, .Vars)"},
		{[]string{"app"}, map[string]string{"X": "{{"}, "env.X: template: unclosed action"},
		{[]string{"app"}, map[string]string{"": "x"}, `env.: invalid environment variable name ""`},
		{[]string{`{{define "x"}}x{{end}}{{template "x"}}`}, nil, "command[0]: template: {{define}} and {{block}} are not supported"},
		{[]string{"a\x00b"}, nil, "command[0]: must not contain NUL bytes"},
		{[]string{`{{define "t"}}a{{end}}{{define "t"}}b{{end}}`}, nil, `command[0]: template: multiple definition of template "t"`},
	} {
		if _, err := NewTemplate(tt.command, tt.env); err == nil || err.Error() != tt.want {
			t.Errorf("NewTemplate(%q, %q) error = %v, want %s", tt.command, tt.env, err, tt.want)
		}
	}
}

func TestExpandLiteral(t *testing.T) {
	// Templates built without NewTemplate, as by a zero value or a copy whose
	// fields were edited, are compiled on demand.
	tmpl := Template{Command: []string{"{{.Group}}-app"}, Env: map[string]string{"N": "{{.Name}}"}}
	argv, env, err := tmpl.Expand(TemplateData{Name: "g-001", Group: "g"})
	if err != nil || !slices.Equal(argv, []string{"g-app"}) || !slices.Equal(env, []string{"N=g-001"}) {
		t.Errorf("Expand = %q, %q, %v", argv, env, err)
	}
	var zero Template
	if _, _, err := zero.Expand(TemplateData{}); err == nil {
		t.Errorf("Expand of a zero Template succeeded")
	}
}

func TestErrorFormat(t *testing.T) {
	for _, tt := range []struct {
		e    Error
		want string
	}{
		{Error{"shoal.yaml", 12, 15, "groups[0].max_size", "must be >= min_size (3), got 2"}, "shoal.yaml:12:15: groups[0].max_size: must be >= min_size (3), got 2"},
		{Error{"shoal.yaml", 3, 0, "", "invalid YAML: x"}, "shoal.yaml:3: invalid YAML: x"},
		{Error{"shoal.yaml", 0, 0, "", "invalid YAML: x"}, "shoal.yaml: invalid YAML: x"},
	} {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
	list := ErrorList{{"a", 1, 1, "x", "m"}, {"a", 2, 1, "y", "n"}}
	if got, want := list.Error(), "a:1:1: x: m\na:2:1: y: n"; got != want {
		t.Errorf("ErrorList.Error() = %q, want %q", got, want)
	}
}

// TestAliasExpansion checks that a short document cannot make the walk (and
// the template runs it drives) quadratic by naming a long list many times.
func TestAliasExpansion(t *testing.T) {
	doc := "listen: :8080\ngroups: [&g {name: web, min_size: 1, max_size: 2, template: {command: [" +
		strings.Repeat("app, ", 2000) + "]}}" + strings.Repeat(", *g", 2000) + "]\n"
	_, err := Parse("shoal.yaml", []byte(doc))
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("Parse error = %v, want ErrorList", err)
	}
	var n int
	for _, e := range list {
		if e.Msg == "aliases expand the document too far" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("got %d alias expansion errors among %d, want 1", n, len(list))
	}
}

// TestTemplateAmplification: a few bytes of template cannot make shoal build
// a huge string, neither when the config is loaded nor when an instance is
// started; the error names the field and the limit.
func TestTemplateAmplification(t *testing.T) {
	doc := func(command, env string) string {
		return "listen: :8080\ngroups:\n  - name: web\n    min_size: 1\n    max_size: 2\n    template:\n      command: " + command + "\n      env: " + env + "\n"
	}
	var chain strings.Builder // each variable doubles the previous one
	chain.WriteString(`{{$a := printf "%s%s" .Name .Name}}`)
	for v := 'b'; v <= 'z'; v++ {
		fmt.Fprintf(&chain, `{{$%c := printf "%%s%%s" $%c $%c}}`, v, v-1, v-1)
	}
	chain.WriteString(`{{$z}}`)
	lt := `{{$a := "<<<<<<<<"}}` // doubled to 16384 '<', whose escapes are 65536 bytes
	for v := 'b'; v <= 'l'; v++ {
		lt += fmt.Sprintf(`{{$%c := print $%c $%c}}`, v, v-1, v-1)
	}
	lt += `{{html (print $l "<")}}`
	for _, tt := range []struct {
		name, command, env, want string
	}{
		{"printf width", `['{{printf "%0700000000d" 0}}']`, `{}`,
			`shoal.yaml:7:17: groups[0].template.command[0]: expands to more than 65536 bytes (64 KiB, the limit for one field)`},
		{"printf precision", `[app, '{{printf "%.900000000f" 1.0}}']`, `{}`,
			`shoal.yaml:7:22: groups[0].template.command[1]: expands to more than 65536 bytes (64 KiB, the limit for one field)`},
		{"printf width from an argument", `[app, '{{printf "%*d" 900000000 1}}']`, `{}`,
			`shoal.yaml:7:22: groups[0].template.command[1]: template: error calling printf: printf: widths and precisions from arguments (*) are not supported`},
		{"doubling variables", `[app, '` + chain.String() + `']`, `{}`,
			`shoal.yaml:7:22: groups[0].template.command[1]: expands to more than 65536 bytes (64 KiB, the limit for one field)`},
		{"html of a large string", `[app, '` + lt + `']`, `{}`,
			`shoal.yaml:7:22: groups[0].template.command[1]: expands to more than 65536 bytes (64 KiB, the limit for one field)`},
		{"env over the total", `[app]`, `{` + envs(20) + `}`,
			`shoal.yaml:8:`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := Parse("shoal.yaml", []byte(doc(tt.command, tt.env)))
			runtime.ReadMemStats(&after)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("Parse error:\n got: %v\nwant: %s", err, tt.want)
			}
			if tt.name == "env over the total" && !strings.Contains(err.Error(), "1 MiB, the limit for a template's command and env together") {
				t.Fatalf("Parse error %v does not name the total limit", err)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
				t.Fatalf("Parse allocated %d MiB", alloc>>20)
			}
		})
	}

	// A template that is small for the sample instance but not for others is
	// refused when that instance is expanded.
	cmd := []string{"app"}
	for range 20 {
		cmd = append(cmd, `{{if eq .Index 7}}{{printf "%060000d" 0}}{{end}}`)
	}
	tmpl, err := NewTemplate(cmd, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := tmpl.Expand(TemplateData{Name: "web-001", Index: 1}); err != nil {
		t.Fatalf("Expand(index 1): %v", err)
	}
	_, _, err = tmpl.Expand(TemplateData{Name: "web-007", Index: 7})
	if err == nil || !strings.Contains(err.Error(), "command[18]: expands past 1048576 bytes (1 MiB") {
		t.Fatalf("Expand(index 7) error = %v, want the 1 MiB total named", err)
	}
}

// envs returns n YAML flow entries whose values each expand to 60000 bytes.
func envs(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `E%d: '{{printf "%%060000d" 0}}', `, i)
	}
	return b.String()
}

// writeTestCert writes a self-signed certificate and its key as PEM files.
func writeTestCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeTestFile(t, certFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	writeTestFile(t, keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})))
	return certFile, keyFile
}

func writeTestFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestParseAdminTLS: TLS files are checked at load, and a TCP admin address
// other than loopback needs TLS or an explicit insecure_remote.
func TestParseAdminTLS(t *testing.T) {
	dir := t.TempDir()
	writeTestCert(t, dir)
	other := t.TempDir()
	writeTestCert(t, other) // a key that does not belong to dir's cert
	writeTestFile(t, filepath.Join(dir, "token"), "s3cret\n")
	doc := func(admin string) string {
		return "listen: :8080\nadmin:\n" + admin + "groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]\n"
	}
	for _, tt := range []struct {
		name, admin, want string
	}{
		{"loopback without TLS", "  listen: 127.0.0.1:9090\n  token_file: token\n", ""},
		{"remote with TLS", "  listen: 0.0.0.0:9090\n  token_file: token\n  tls: {cert: cert.pem, key: key.pem}\n", ""},
		{"remote without TLS, accepted explicitly", "  listen: 192.0.2.1:9090\n  token_file: token\n  insecure_remote: true\n", ""},
		{"remote without TLS", "  listen: 192.0.2.1:9090\n  token_file: token\n",
			`shoal.yaml:3:11: admin.listen: "192.0.2.1" is not a loopback address, and without TLS the token and every request cross the network in clear text; set admin.tls: {cert, key}, or insecure_remote: true to accept that`},
		{"all interfaces without TLS", "  listen: :9090\n  token_file: token\n",
			`shoal.yaml:3:11: admin.listen: "(all interfaces)" is not a loopback address`},
		{"missing key file", "  listen: 127.0.0.1:9090\n  token_file: token\n  tls: {cert: cert.pem, key: nokey.pem}\n",
			`shoal.yaml:5:30: admin.tls.key: stat ` + filepath.Join(dir, "nokey.pem") + `: no such file or directory`},
		{"key of another certificate", "  listen: 127.0.0.1:9090\n  token_file: token\n  tls: {cert: cert.pem, key: " + filepath.Join(other, "key.pem") + "}\n",
			`shoal.yaml:5:30: admin.tls.key: cannot use ` + filepath.Join(dir, "cert.pem") + ` with key ` + filepath.Join(other, "key.pem") + `: tls: private key does not match public key`},
		{"tls without listen", "  tls: {cert: cert.pem, key: key.pem}\n", `shoal.yaml:3:8: admin.tls: applies only with admin.listen`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse(filepath.Join(dir, "shoal.yaml"), []byte(doc(tt.admin)))
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(tt.admin, "tls:") && (cfg.Admin.TLS == nil || cfg.Admin.TLS.Key != filepath.Join(dir, "key.pem")) {
					t.Fatalf("Admin.TLS = %+v", cfg.Admin.TLS)
				}
				return
			}
			if err == nil || !strings.HasPrefix(strings.TrimPrefix(err.Error(), dir+"/"), tt.want) {
				t.Fatalf("Parse error:\n got: %v\nwant: %s", err, tt.want)
			}
		})
	}
}

// TestLargestDurationsDoNotOverflow: the longest accepted grace, drain and
// stop timeouts still add up (as the job timeout does) without overflowing,
// and a nanosecond more is refused.
func TestLargestDurationsDoNotOverflow(t *testing.T) {
	doc := func(d string) string {
		return "listen: :8080\ngroups:\n  - name: web\n    min_size: 1\n    max_size: 2\n    drain_timeout: " + d +
			"\n    health: {grace: " + d + "}\n    cooldown: 720h\n    template: {command: [app], stop_timeout: " + d + "}\n"
	}
	cfg, err := Parse("shoal.yaml", []byte(doc("24h")))
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.Groups[0]
	if sum := 2*(g.Health.Grace+g.DrainTimeout+g.Template.StopTimeout) + 30*time.Second; sum <= 0 || sum != 144*time.Hour+30*time.Second {
		t.Fatalf("2 × (grace + drain + stop) + 30s = %s", sum)
	}
	_, err = Parse("shoal.yaml", []byte(doc("24h0m0.000000001s")))
	for _, field := range []string{"drain_timeout: must be from 0s to 24h0m0s", "health.grace: must be at least 1ms and at most 24h0m0s", "stop_timeout: must be from 0s to 24h0m0s"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("Parse with 24h + 1ns: %v, want %q", err, field)
		}
	}
}

// TestCooldownForms: one duration (as sacloud/autoscaler's one cooldown, in
// seconds or with a unit) sets both directions; {up, down} each; left out,
// both are 600 s, sacloud/autoscaler's default.
func TestCooldownForms(t *testing.T) {
	for _, tt := range []struct {
		yaml string
		want Cooldown
	}{
		{"    cooldown: 600s\n", Cooldown{Up: 600 * time.Second, Down: 600 * time.Second}},
		{"    cooldown: 540\n", Cooldown{Up: 540 * time.Second, Down: 540 * time.Second}},
		{"    cooldown: {up: 0s, down: 30s}\n", Cooldown{Up: 0, Down: 30 * time.Second}},
		{"    cooldown: {down: 30s}\n", Cooldown{Up: 600 * time.Second, Down: 30 * time.Second}},
		{"", Cooldown{Up: 600 * time.Second, Down: 600 * time.Second}},
	} {
		cfg, err := Parse("shoal.yaml", []byte("listen: :8080\ngroups:\n  - name: web\n    min_size: 1\n    max_size: 2\n"+tt.yaml+"    template: {command: [app]}\n"))
		if err != nil {
			t.Errorf("%q: %v", tt.yaml, err)
			continue
		}
		if got := cfg.Groups[0].Cooldown; got != tt.want {
			t.Errorf("%q: cooldown %+v, want %+v", tt.yaml, got, tt.want)
		}
	}
}

// TestLocateCore: a file with errors still names its core's socket and state
// directory, as far as it can be read, with the errors beside them.
func TestLocateCore(t *testing.T) {
	dir := t.TempDir()
	group := "groups:\n  - name: web\n    min_size: %d\n    max_size: 2\n    template: {command: [/bin/true]}\n"
	tests := []struct {
		name       string
		doc        string
		socket     string // relative to dir
		stateDir   string
		wantErrors string // a substring of the ErrorList; "" for none
	}{
		{
			name:   "valid",
			doc:    "listen: 127.0.0.1:8080\nstate_dir: st\nadmin: {socket: ctl.sock}\n" + fmt.Sprintf(group, 1),
			socket: "st/ctl.sock", stateDir: "st",
		},
		{
			name:   "an invalid value elsewhere",
			doc:    "listen: 127.0.0.1:8080\nstate_dir: st\nadmin: {socket: ctl.sock}\n" + fmt.Sprintf(group, 3),
			socket: "st/ctl.sock", stateDir: "st", wantErrors: "shoal.yaml:7:15: groups[0].max_size: must be >= min_size",
		},
		{
			name:   "a YAML syntax error after state_dir",
			doc:    "listen: 127.0.0.1:8080\nstate_dir: st\nadmin: {socket: ctl.sock}\n" + fmt.Sprintf(group, 1) + "  - name: api\n   min_size: 1\n",
			socket: "st/ctl.sock", stateDir: "st", wantErrors: "invalid YAML",
		},
		{
			name:   "a YAML syntax error on the first line: the defaults",
			doc:    "listen: [\nstate_dir: st\n",
			socket: ".shoal/shoal.sock", stateDir: ".shoal", wantErrors: "invalid YAML",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "shoal.yaml")
			writeTestFile(t, path, tc.doc)
			addr, err := LocateCore(path)
			var el ErrorList
			switch {
			case tc.wantErrors == "" && err != nil:
				t.Fatalf("LocateCore: %v", err)
			case tc.wantErrors != "" && (!errors.As(err, &el) || !strings.Contains(el.Error(), tc.wantErrors)):
				t.Fatalf("LocateCore error = %v, want an ErrorList with %q", err, tc.wantErrors)
			}
			want := CoreAddress{Socket: filepath.Join(dir, tc.socket), StateDir: filepath.Join(dir, tc.stateDir)}
			if addr != want {
				t.Fatalf("LocateCore = %+v, want %+v", addr, want)
			}
		})
	}
	if _, err := LocateCore(filepath.Join(dir, "nope.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LocateCore of a missing file: %v, want one wrapping os.ErrNotExist", err)
	}
}
