package config

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/shoal-lb/shoal/internal/template"
)

// An instance template's strings are compiled, bounded and expanded by
// package template; config compiles and trial-runs them as it loads them,
// so that a misspelt field fails then rather than at the first scale-up.

// NewTemplate compiles command and env the way Load does, so that other
// packages can build a Template without a file. Dir and StopTimeout are left
// for the caller to set.
func NewTemplate(command []string, env map[string]string) (Template, error) {
	return compileTemplate(command, env, nil)
}

func compileTemplate(command []string, env, vars map[string]string) (Template, error) {
	return compile(Template{Command: command, Env: env, Vars: vars})
}

// compile compiles src's argv (Command, or a container's Args) and Env
// into a copy of src.
func compile(src Template) (Template, error) {
	field, argv := "command", src.Command
	if src.IsContainer() {
		field, argv = "args", src.Args
	} else if len(argv) == 0 {
		return Template{}, errors.New("command: must not be empty")
	}
	// The group is not known here; any valid name serves for the trial run.
	data := sampleData("web", src.Vars)
	t := src
	t.program = template.Program{Command: make(template.Argv, len(argv))}
	for i, s := range argv {
		a, out, err := template.Compile(s, data)
		if err == nil && i == 0 && out == "" && !src.IsContainer() {
			err = errors.New("expands to an empty program name")
		}
		if err != nil {
			return Template{}, fmt.Errorf("%s[%d]: %w", field, i, err)
		}
		t.program.Command[i] = a
	}
	env := src.Env
	t.program.Env = make(map[string]*template.Arg, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if err := template.CheckEnvName(k); err != nil {
			return Template{}, fmt.Errorf("env.%s: %w", k, err)
		}
		a, _, err := template.Compile(env[k], data)
		if err != nil {
			return Template{}, fmt.Errorf("env.%s: %w", k, err)
		}
		t.program.Env[k] = a
	}
	return t, nil
}

// Expand expands the template for one instance, with t's variables: each
// command element (a container's args) to exactly one argument, and env as
// sorted KEY=VALUE strings. A Template built as a literal rather than by
// Load or NewTemplate is compiled on each call.
func (t *Template) Expand(d TemplateData) (argv []string, env []string, err error) {
	p := t.program
	src := t.Command
	if t.IsContainer() {
		src = t.Args
	}
	if len(p.Command) != len(src) || len(p.Env) != len(t.Env) || (len(src) == 0 && !t.IsContainer()) {
		c, err := compile(*t)
		if err != nil {
			return nil, nil, err
		}
		p = c.program
	}
	d.Vars = t.Vars
	return p.Expand(d)
}

// sampleData is what templates are trial-run with at load time.
func sampleData(group string, vars map[string]string) TemplateData {
	return TemplateData{Name: group + "-001", Host: "127.0.0.1", Port: 10001, Index: 1, Group: group, Vars: vars}
}

// TemplateFields names the fields a template may use, for errors.
func (TemplateData) TemplateFields() string { return ".Name, .Port, .Index, .Group, .Vars" }
