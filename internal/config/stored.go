package config

import (
	"encoding/json"
	"fmt"

	"github.com/shoal-lb/shoal/internal/template"
)

// storedTemplate is a Template as the store keeps it: its source (the
// fields with json tags) and the variables a deploy set, not its compiled
// form.
type storedTemplate struct {
	Template
	Overrides map[string]string `json:"overrides,omitempty"`
}

// EncodeTemplate returns t as JSON for the store: a group's serving
// template must outlive the config file it came from (a reload or an edit
// before a restart replaces that), so that replacements keep starting it.
func EncodeTemplate(t Template) string {
	b, _ := json.Marshal(storedTemplate{t, t.overrides}) // strings, maps of strings and numbers always encode
	return string(b)
}

// DecodeTemplate reads what EncodeTemplate wrote for the named group and
// compiles it as Load would, so that a stored template that no longer
// compiles is an error here rather than at an instance's start.
func DecodeTemplate(group, data string) (Template, error) {
	var s storedTemplate
	if err := json.Unmarshal([]byte(data), &s); err != nil {
		return Template{}, fmt.Errorf("stored template: %w", err)
	}
	t, err := compile(Template{Command: s.Command, Env: s.Env, Vars: s.Vars,
		Image: s.Image, Port: s.Port, Args: s.Args, Volumes: s.Volumes, Runtime: s.Runtime,
		RegistryAuth: s.RegistryAuth, InsecureRegistry: s.InsecureRegistry})
	if err != nil {
		return Template{}, fmt.Errorf("stored template: %w", err)
	}
	t.Dir, t.StopTimeout, t.CPUs, t.Label = s.Dir, s.StopTimeout, s.CPUs, s.Label
	if len(s.Overrides) > 0 {
		t.overrides = s.Overrides
	}
	sample := sampleData(group, s.Vars)
	hook := func(sh *Hook, name string) (*Hook, error) {
		if sh == nil {
			return nil, nil
		}
		h := &Hook{Command: sh.Command, Timeout: sh.Timeout}
		for i, a := range sh.Command {
			tt, _, err := template.Compile(a, sample)
			if err != nil {
				return nil, fmt.Errorf("stored template: %s.command[%d]: %w", name, i, err)
			}
			h.command = append(h.command, tt)
		}
		return h, nil
	}
	if t.PreStart, err = hook(s.PreStart, "pre_start"); err != nil {
		return Template{}, err
	}
	if t.PreStop, err = hook(s.PreStop, "pre_stop"); err != nil {
		return Template{}, err
	}
	return t, nil
}
