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
	if len(command) == 0 {
		return Template{}, errors.New("command: must not be empty")
	}
	// The group is not known here; any valid name serves for the trial run.
	data := sampleData("web", vars)
	t := Template{Command: command, Env: env, Vars: vars}
	t.program.Command = make(template.Argv, len(command))
	for i, s := range command {
		a, out, err := template.Compile(s, data)
		if err == nil && i == 0 && out == "" {
			err = errors.New("expands to an empty program name")
		}
		if err != nil {
			return Template{}, fmt.Errorf("command[%d]: %w", i, err)
		}
		t.program.Command[i] = a
	}
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
// command element to exactly one argument, and env as sorted KEY=VALUE
// strings. A Template built as a literal rather than by Load or NewTemplate
// is compiled on each call.
func (t *Template) Expand(d TemplateData) (argv []string, env []string, err error) {
	p := t.program
	if len(p.Command) != len(t.Command) || len(p.Env) != len(t.Env) || len(t.Command) == 0 {
		c, err := compileTemplate(t.Command, t.Env, t.Vars)
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
