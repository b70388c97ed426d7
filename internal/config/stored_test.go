package config

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestStoredTemplate: a loaded template with variables overridden by a
// deploy, a label, env and hooks comes back from the store as the same
// template (same source, same version, same expansion); a stored template
// that no longer compiles is an error.
func TestStoredTemplate(t *testing.T) {
	doc := `listen: 127.0.0.1:8080
groups:
  - name: web
    min_size: 1
    max_size: 4
    template:
      command: [app, "--tag={{.Vars.tag}}", "--port={{.Port}}"]
      env: {MODE: "{{.Vars.mode}}"}
      stop_timeout: 4s
      cpus: 0.5
      version: "2026.11"
      vars: {tag: v1, mode: slow}
      pre_start: {command: [rsync, "{{.Vars.tag}}", "{{.Name}}"]}
      pre_stop: {command: [deregister, "{{.Port}}"], timeout: 3s}
`
	cfg, err := Parse("shoal.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := cfg.Groups[0].Template.WithVars("web", map[string]string{"tag": "v2"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeTemplate("web", EncodeTemplate(tmpl))
	if err != nil {
		t.Fatal(err)
	}
	if !got.SameSource(tmpl) || got.Version("web") != tmpl.Version("web") || !strings.HasPrefix(got.Version("web"), "2026.11+") {
		t.Fatalf("decoded %+v (version %s), want %+v (version %s)", got, got.Version("web"), tmpl, tmpl.Version("web"))
	}
	d := TemplateData{Name: "web-002", Port: 4000, Index: 2, Group: "web"}
	argv, env, err := got.Expand(d)
	if err != nil || strings.Join(argv, " ") != "app --tag=v2 --port=4000" || strings.Join(env, " ") != "MODE=slow" {
		t.Fatalf("Expand = %q, %q, %v", argv, env, err)
	}
	if hook, err := got.ExpandHook(got.PreStart, d); err != nil || strings.Join(hook, " ") != "rsync v2 web-002" {
		t.Fatalf("ExpandHook = %q, %v", hook, err)
	}

	for _, bad := range []string{`{`, `{"command":[]}`, `{"command":["{{.Nope"]}`, `{"command":["app"],"pre_stop":{"command":["{{"]}}`} {
		if _, err := DecodeTemplate("web", bad); err == nil || !strings.HasPrefix(err.Error(), "stored template: ") {
			t.Errorf("DecodeTemplate(%s) = %v, want a stored template error", bad, err)
		}
	}
}

// TestStoredTemplateFormat: a row written before Template carried the json
// tags itself (storedTemplate listed the fields) still reads back whole, and
// writes back the same keys.
func TestStoredTemplateFormat(t *testing.T) {
	const row = `{"command":["app","--tag={{.Vars.tag}}"],"env":{"MODE":"x"},"dir":"/srv","stop_timeout":4000000000,"cpus":0.5,` +
		`"vars":{"tag":"v1"},"label":"2026.11","overrides":{"tag":"v2"},` +
		`"pre_start":{"command":["rsync","{{.Name}}"],"timeout":60000000000},"pre_stop":{"command":["deregister"],"timeout":3000000000}}`
	got, err := DecodeTemplate("web", row)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got.Command, " ") != "app --tag={{.Vars.tag}}" || got.Env["MODE"] != "x" || got.Dir != "/srv" ||
		got.StopTimeout != 4*time.Second || got.CPUs != 0.5 || got.Vars["tag"] != "v1" || got.Label != "2026.11" ||
		got.Overrides()["tag"] != "v2" || got.Version("web") == "2026.11" ||
		got.PreStart == nil || got.PreStart.Timeout != time.Minute || strings.Join(got.PreStart.Command, " ") != "rsync {{.Name}}" ||
		got.PreStop == nil || got.PreStop.Timeout != 3*time.Second {
		t.Fatalf("decoded %+v", got)
	}
	var old, now map[string]any
	if err := json.Unmarshal([]byte(row), &old); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(EncodeTemplate(got)), &now); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(now, old) {
		t.Errorf("EncodeTemplate wrote %v, want the row's %v", now, old)
	}
}
