package group

import (
	"log/slog"
	"testing"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/store"
)

func varsTemplate(cmd string) config.Template {
	return config.Template{Command: []string{cmd, "{{.Vars.tag}}", "{{.Vars.mode}}"}, Vars: map[string]string{"tag": "v1", "mode": "a"}}
}

// TestDeployStateNew: a new group serves its configured template; a stored
// one serves what is stored, with its deployed variables on the configured
// template for the next deploy; an unreadable stored template or variables
// fall back to the configured ones.
func TestDeployStateNew(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	base := varsTemplate("app")

	d := newDeployState("web", base, nil, log)
	if d.version != base.Version("web") || d.configured() != "" || d.vars != nil {
		t.Fatalf("new group: serving %s, configured %q, vars %v; want the configured %s", d.version, d.configured(), d.vars, base.Version("web"))
	}

	served, err := varsTemplate("old").WithVars("web", map[string]string{"tag": "v0"})
	if err != nil {
		t.Fatal(err)
	}
	d = newDeployState("web", base, &store.GroupState{ServingTemplate: config.EncodeTemplate(served), TemplateVars: `{"tag":"v2"}`}, log)
	if d.version != served.Version("web") || d.tmpl.Command[0] != "old" {
		t.Fatalf("stored: serving %s %v, want the stored %s", d.version, d.tmpl.Command, served.Version("web"))
	}
	if d.next.Vars["tag"] != "v2" || d.next.Command[0] != "app" || d.configured() != d.nextVersion {
		t.Fatalf("stored: next %v %v, configured %q; want the configured template with tag v2", d.next.Command, d.next.Vars, d.configured())
	}

	d = newDeployState("web", base, &store.GroupState{ServingTemplate: "{broken", TemplateVars: "[broken"}, log)
	if d.version != base.Version("web") || d.vars != nil {
		t.Fatalf("unreadable: serving %s, vars %v; want the configured %s without vars", d.version, d.vars, base.Version("web"))
	}
}

// TestDeployStateSetBase: a reload changes what the next deploy rolls out,
// keeping the deployed variables the new template still declares, never
// the serving template.
func TestDeployStateSetBase(t *testing.T) {
	d := newDeployState("web", varsTemplate("app"), &store.GroupState{TemplateVars: `{"tag":"v2","mode":"b"}`}, slog.New(slog.DiscardHandler))
	serving := d.version
	reloaded := config.Template{Command: []string{"app2", "{{.Vars.mode}}"}, Vars: map[string]string{"mode": "a"}}
	d.setBase(reloaded)
	if d.version != serving || d.tmpl.Command[0] != "app" {
		t.Fatalf("a reload changed the serving template to %s %v", d.version, d.tmpl.Command)
	}
	if d.next.Command[0] != "app2" || d.next.Vars["mode"] != "b" || len(d.vars) != 1 || d.vars["mode"] != "b" {
		t.Fatalf("next %v %v with vars %v; want app2 with mode b kept and tag dropped", d.next.Command, d.next.Vars, d.vars)
	}
	if d.configured() != d.nextVersion || d.nextVersion == serving {
		t.Fatalf("configured %q, want the reloaded %s", d.configured(), d.nextVersion)
	}
	// Without variables left, vars is nil (stored as "").
	d.setBase(config.Template{Command: []string{"app3"}})
	if d.vars != nil {
		t.Fatalf("vars %v, want none", d.vars)
	}
	if _, vars := d.stored(false); vars != "" {
		t.Fatalf("stored vars %q, want none", vars)
	}
}

// TestDeployStateRoll: during a roll launches start what it rolls, an
// instance of it is judged by the deploy's check, and nothing rejoins
// without a start; after it, the serving template again, or the rolled one
// once serve made it serving, with its overrides as the next deploy's vars.
func TestDeployStateRoll(t *testing.T) {
	d := newDeployState("web", varsTemplate("app"), nil, slog.New(slog.DiscardHandler))
	serving := d.version
	target, err := d.targetWith(map[string]string{"tag": "v2"})
	if err != nil {
		t.Fatal(err)
	}
	v2 := target.Version("web")
	if _, err := d.targetWith(map[string]string{"colour": "x"}); err == nil {
		t.Fatal("targetWith an undeclared variable: no error")
	}
	if d.rolls(serving) || !d.takesBack(serving) || d.takesBack(v2) {
		t.Fatalf("before the roll: rolls(serving) %v, takesBack(serving) %v, takesBack(v2) %v", d.rolls(serving), d.takesBack(serving), d.takesBack(v2))
	}

	d.begin(v2, target)
	d.surge = 1
	if tmpl, v := d.launching(0); v != v2 || tmpl.Vars["tag"] != "v2" {
		t.Fatalf("during the roll launches start %s, want %s", v, v2)
	}
	if !d.rolls(v2) || d.rolls(serving) || d.takesBack(serving) {
		t.Fatalf("during the roll: rolls(v2) %v, rolls(serving) %v, takesBack(serving) %v", d.rolls(v2), d.rolls(serving), d.takesBack(serving))
	}
	d.end()
	if _, v := d.launching(0); v != serving || d.surge != 0 || d.rolls(v2) {
		t.Fatalf("after a failed roll launches start %s with surge %d, want %s without", v, d.surge, serving)
	}

	// A canary of two instances: launches start v2 until two are active,
	// then the serving version (a stable one's replacement, a scale-up);
	// it ends with the roll.
	d.begin(v2, target)
	d.canary, d.surge = 2, 2
	for rolled, want := range []string{v2, v2, serving, serving} {
		if _, v := d.launching(rolled); v != want {
			t.Fatalf("canary of 2 with %d of v2 active: launches start %s, want %s", rolled, v, want)
		}
	}
	d.end()
	if _, v := d.launching(0); v != serving || d.canary != 0 {
		t.Fatalf("after a canary launches start %s (canary %d), want %s", v, d.canary, serving)
	}

	d.begin(v2, target)
	d.end()
	d.serve(target, v2)
	if _, v := d.launching(0); v != v2 || d.version != v2 || d.vars["tag"] != "v2" || d.configured() != "" {
		t.Fatalf("after a deploy: launching %s, serving %s, vars %v, configured %q; want %s everywhere", v, d.version, d.vars, d.configured(), v2)
	}
	tmpl, vars := d.stored(false)
	if back, err := config.DecodeTemplate("web", tmpl); err != nil || back.Version("web") != v2 || vars != `{"tag":"v2"}` {
		t.Fatalf("stored %s (%v) with vars %q, want %s with tag v2", back.Version("web"), err, vars, v2)
	}
	if tmpl, _ := d.stored(true); tmpl != "" {
		t.Fatal("a removed group stored its serving template")
	}
}
