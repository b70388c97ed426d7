package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestDeployConfigErrors(t *testing.T) {
	for _, tc := range []struct{ name, group, at, want string }{
		{"unknown deploy field", `deploy: {max_surge: 1, surge: 2}`, `surge: 2`,
			`groups[0].deploy.surge: unknown field; allowed: strategy, max_surge, max_unavailable, min_ready, failure_threshold, canary, blue_green`},
		{"no progress possible", `deploy: {max_surge: 0}`, `0}`,
			`groups[0].deploy.max_surge: max_surge and max_unavailable must not both be 0: a deploy could never replace an instance`},
		{"threshold zero", `deploy: {failure_threshold: 0}`, `0}`,
			`groups[0].deploy.failure_threshold: must be from 1 to 1000, got 0`},
		{"min_ready not a duration", `deploy: {min_ready: soon}`, `soon`,
			`groups[0].deploy.min_ready: must be a duration such as "30s" or "3m", or a whole number of seconds; got "soon"`},
		{"undeclared variable", `template: {command: [app, "{{.Vars.tag}}"]}`, `"{{.Vars.tag}}"`,
			`groups[0].template.command[1]: template: map has no entry for key "tag"`},
		{"bad variable name", `template: {command: [app], vars: {"a-b": x}}`, `"a-b"`,
			`groups[0].template.vars.a-b: a variable name must match ^[A-Za-z_][A-Za-z0-9_]{0,63}$ (it is used as {{.Vars.NAME}}), got "a-b"`},
		{"hook without command", `template: {command: [app], pre_start: {timeout: 5s}}`, `{timeout`,
			`groups[0].template.pre_start.command: required`},
		{"hook with a bad field", `template: {command: [app], pre_stop: {command: ["{{.Nope}}"]}}`, `"{{.Nope}}"`,
			`groups[0].template.pre_stop.command[0]: template: can't evaluate field Nope (have .Name, .Port, .Index, .Group, .Vars)`},
		{"version with a space", `template: {command: [app], version: "v 2"}`, `"v 2"`,
			`groups[0].template.version: must be 1 to 64 printable characters without spaces, got "v 2"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := "listen: 127.0.0.1:8080\ngroups:\n  - {name: web, min_size: 1, max_size: 2, "
			if !strings.HasPrefix(tc.group, "template") {
				doc += "template: {command: [app]}, "
			}
			doc += tc.group + "}\n"
			line := strings.Split(doc, "\n")[2]
			want := fmt.Sprintf("shoal.yaml:3:%d: %s", strings.Index(line, tc.at)+1, tc.want)
			_, err := Parse("shoal.yaml", []byte(doc))
			if err == nil || err.Error() != want {
				t.Fatalf("Parse error:\n got: %v\nwant: %s", err, want)
			}
		})
	}
}

func TestTemplateVarsHooksAndVersion(t *testing.T) {
	doc := `listen: 127.0.0.1:8080
groups:
  - name: web
    min_size: 1
    max_size: 4
    deploy: {max_surge: 2, max_unavailable: 1, min_ready: 5s, failure_threshold: 2}
    template:
      command: [app, "--tag={{.Vars.tag}}", "--port={{.Port}}"]
      vars: {tag: v1, mode: ""}
      pre_start: {command: [rsync, "{{.Vars.tag}}", "{{.Name}}"]}
      pre_stop: {command: [deregister, "{{.Port}}"], timeout: 3s}
`
	cfg, err := Parse("shoal.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.Groups[0]
	if g.Deploy != (Deploy{Strategy: StrategyRolling, MaxSurge: 2, MaxUnavailable: 1, MinReady: 5 * time.Second, FailureThreshold: 2}) {
		t.Fatalf("deploy = %+v", g.Deploy)
	}
	tmpl := g.Template
	if tmpl.PreStart.Timeout != defaultPreStart.Timeout || tmpl.PreStop.Timeout != 3*time.Second {
		t.Fatalf("hook timeouts %s, %s", tmpl.PreStart.Timeout, tmpl.PreStop.Timeout)
	}
	argv, _, err := tmpl.Expand(TemplateData{Name: "web-002", Port: 4000, Index: 2, Group: "web"})
	if err != nil || strings.Join(argv, " ") != "app --tag=v1 --port=4000" {
		t.Fatalf("Expand = %q, %v", argv, err)
	}
	hook, err := tmpl.ExpandHook(tmpl.PreStart, TemplateData{Name: "web-002", Port: 4000, Index: 2, Group: "web"})
	if err != nil || strings.Join(hook, " ") != "rsync v1 web-002" {
		t.Fatalf("ExpandHook = %q, %v", hook, err)
	}

	v1 := tmpl.Version("web")
	if len(v1) != 12 || v1 != tmpl.Version("web") {
		t.Fatalf("version %q is not a stable 12-digit hash", v1)
	}
	v2tmpl, err := tmpl.WithVars("web", map[string]string{"tag": "v2"})
	if err != nil {
		t.Fatal(err)
	}
	if v2 := v2tmpl.Version("web"); v2 == v1 {
		t.Fatal("overriding a variable kept the version")
	}
	if argv, _, _ := v2tmpl.Expand(TemplateData{Name: "web-001", Port: 1, Index: 1, Group: "web"}); argv[1] != "--tag=v2" {
		t.Fatalf("override not applied: %q", argv)
	}
	if tmpl.Vars["tag"] != "v1" {
		t.Fatal("WithVars changed the original template")
	}
	var unknown *UnknownVarError
	if _, err := tmpl.WithVars("web", map[string]string{"colour": "x"}); !errors.As(err, &unknown) || strings.Join(unknown.Known, ",") != "mode,tag" {
		t.Fatalf("unknown variable: %v", err)
	}

	// An explicit label is the version until a deploy overrides a variable.
	tmpl.Label = "2026.11.1"
	if v := tmpl.Version("web"); v != "2026.11.1" {
		t.Fatalf("labelled version %q", v)
	}
	over, _ := tmpl.WithVars("web", map[string]string{"mode": "fast"})
	if v := over.Version("web"); !strings.HasPrefix(v, "2026.11.1+") || len(v) != len("2026.11.1+")+8 {
		t.Fatalf("labelled version with an override %q", v)
	}
}

// TestTemplateSameSource: two loads of one template are the same; a change
// of a variable, the label or a hook is not (a reload must apply it).
func TestTemplateSameSource(t *testing.T) {
	load := func(extra string) Template {
		t.Helper()
		cfg, err := Parse("shoal.yaml", []byte("listen: 127.0.0.1:8080\ngroups:\n  - {name: web, min_size: 1, max_size: 2, template: {command: [app], vars: {tag: v1}"+extra+"}}\n"))
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Groups[0].Template
	}
	a := load(", pre_stop: {command: [dereg]}")
	if !a.SameSource(load(", pre_stop: {command: [dereg]}")) {
		t.Fatal("two loads of one template differ")
	}
	for _, extra := range []string{"", ", pre_stop: {command: [dereg], timeout: 1s}", ", pre_stop: {command: [dereg]}, version: v1"} {
		if a.SameSource(load(extra)) {
			t.Errorf("a template with %q is the same as without", extra)
		}
	}
	over, _ := a.WithVars("web", map[string]string{"tag": "v2"})
	if a.SameSource(over) {
		t.Error("overridden variables are the same template")
	}
}
