package config

import (
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// A section's keys are its type's yaml tags in field order, required ones
// marked; untagged fields and "-" are not keys, blank fields are.
func TestSchemaOf(t *testing.T) {
	type sample struct {
		Name    string   `yaml:"name" required:"true"`
		derived int      // not a key: no tag
		Skipped string   `yaml:"-"`
		_       struct{} `yaml:"read_elsewhere"`
		Count   int      `yaml:"count,omitempty"`
	}
	got := schemaOf(reflect.TypeFor[sample]())
	want := []schemaKey{{"name", true}, {"read_elsewhere", false}, {"count", false}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("schemaOf = %+v, want %+v", got, want)
	}
}

// section reports unknown keys with the accepted ones in field order, and
// required keys that are absent, each where the file has them.
func TestSectionFromTags(t *testing.T) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte("grace: 5s\nmethod: GET\nbogus: 1\n"), &doc); err != nil {
		t.Fatal(err)
	}
	d := &decoder{file: "f.yaml", budget: 100}
	f := section[Hook](d, doc.Content[0], "pre_stop")
	var msgs []string
	for _, e := range d.errs {
		msgs = append(msgs, e.Error())
	}
	want := []string{
		"f.yaml:1:1: pre_stop.grace: unknown field; allowed: command, timeout",
		"f.yaml:2:1: pre_stop.method: unknown field; allowed: command, timeout",
		"f.yaml:3:1: pre_stop.bogus: unknown field; allowed: command, timeout",
		"f.yaml:1:1: pre_stop.command: required",
	}
	if strings.Join(msgs, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(msgs, "\n"), strings.Join(want, "\n"))
	}
	if f.node == nil || len(f.vals) != 0 {
		t.Errorf("fields = %+v, want the mapping with no accepted keys", f)
	}
}
