package config

import (
	"errors"
	"testing"
)

func FuzzParse(f *testing.F) {
	seeds := []string{
		``,
		`- a`,
		`listen: :8080
groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]
`,
		`listen: 127.0.0.1:8080
compression: {types: [text/html]}
state_dir: ./.shoal
admin: {socket: shoal.sock, listen: "127.0.0.1:9090", token: secret}
haproxy: {binary: haproxy, global: ["nbthread 1"], defaults: []}
groups:
  - name: web
    min_size: 2
    max_size: 5
    plans: {smallest: 2, medium: 3, largest: 5}
    cooldown: {up: 180s, down: 540}
    drain_timeout: 30s
    balance: leastconn
    hosts: [www.example.com]
    path_prefixes: [/api]
    health: {path: /healthz, interval: 2s, timeout: 1s, rise: 2, fall: 3, grace: 30s}
    template:
      command: ["./bin/demo-backend", "--listen", "127.0.0.1:{{.Port}}", "--name", "{{.Name}}"]
      env: {APP_NAME: "{{.Name}}"}
      dir: .
      stop_timeout: 10s
  - name: api
    min_size: 0
    max_size: 3
    plans: [{name: one, size: 1}, {name: three, size: 3}]
    template: &t {command: [app, "{{printf \"%03d\" .Index}}"]}
compat:
  sacloud_autoscaler: {listen: "unix:a.sock", socket_mode: 0660, socket_group: g}
`,
		`listen: nowhere
groups:
  - name: Web
    min_size: two
    max_size: -1
    plans: {a: 9, a: 1}
    cooldown: "3 minutes"
    template: {command: ["{{.Prot}}", "{{range 3}}{{end}}"], env: [x]}
  - *x
`,
		`a: &a [*a, *a]
groups: *a
listen: *a
`,
		`groups: [{name: web, template: {command: ['{{define "t"}}{{template "t"}}{{end}}{{template "t"}}']}}]`,
		"listen: :1\n---\nlisten: :2\n",
		`listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 5
    plans: {small: 1, large: 5}
    template: {command: [app]}
    autoscale:
      interval: 1s
      rules:
        - {name: hot, metric: cpu.p90, above: 75, for: 1m, action: up, cooldown: 300s, on_missing: up}
        - {metric: queue, below: 1.5, for: 10m, action: {percent: -50}}
        - {metric: size, below: 1, for: 1s, action: {plan: small}}
      target: {metric: requests_per_second, value: 100, tolerance: 0.2, max_step: {up: "50%", down: 2}, period: 30s}
      schedule:
        - {cron: "*/15 8-18 1,15 jan-mar mon-fri", timezone: Asia/Tokyo, duration: 1h, min_size: 2, max_size: 4}
        - {cron: "0 0 29 2 *", duration: 1m, plan: large}
`,
		"<<: {listen: :1}\n",
		"{? [a]: b}",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.yaml", data)
		if err != nil {
			if cfg != nil {
				t.Errorf("Parse returned a config and an error")
			}
			var list ErrorList
			if !errors.As(err, &list) || len(list) == 0 {
				t.Errorf("Parse error %v (%T) is not a non-empty ErrorList", err, err)
			}
			return
		}
		if cfg == nil || len(cfg.Groups) == 0 {
			t.Fatalf("Parse succeeded with config %+v", cfg)
		}
		for _, g := range cfg.Groups {
			if _, _, err := g.Template.Expand(sampleData(g.Name, g.Template.Vars)); err != nil {
				t.Errorf("group %s: template that passed Parse fails Expand: %v", g.Name, err)
			}
		}
	})
}
