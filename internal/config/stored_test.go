package config

import (
	"strings"
	"testing"
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
