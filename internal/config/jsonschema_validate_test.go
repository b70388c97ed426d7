package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"
)

// compileSchema compiles a schema as an editor would read it.
func compileSchema(b []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("read the schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource(SchemaID, doc); err != nil {
		return nil, fmt.Errorf("add the schema: %w", err)
	}
	return c.Compile(SchemaID)
}

// committedSchema is docs/shoal.schema.json, compiled.
func committedSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	b, err := os.ReadFile("../../docs/shoal.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	s, err := compileSchema(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// yamlInstance is a YAML document as the JSON value a validator checks.
func yamlInstance(data []byte) (any, error) {
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("parse YAML: %w", err)
	}
	j, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("as JSON: %w", err)
	}
	return jsonschema.UnmarshalJSON(bytes.NewReader(j))
}

// TestExamplesValidate fails when an example config does not validate
// against docs/shoal.schema.json or does not load.
func TestExamplesValidate(t *testing.T) {
	schema := committedSchema(t)
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob("../../examples/*/*.yaml")
	files = append(files, more...)
	if len(files) < 7 {
		t.Fatalf("found %d examples: %v", len(files), files)
	}
	for _, file := range files {
		t.Run(strings.TrimPrefix(file, "../../"), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			inst, err := yamlInstance(data)
			if err != nil {
				t.Fatal(err)
			}
			if err := schema.Validate(inst); err != nil {
				t.Errorf("does not validate: %v", err)
			}
			if _, err := Load(withFixtures(t, file, data)); err != nil {
				t.Errorf("does not load: %v", err)
			}
		})
	}
}

// The schema takes every section with the defaults Load applies to it,
// and refuses what Load refuses for its form: an unknown key, a value not
// in a decoder's list, a missing required key, another provider type's key.
func TestSchemaAcceptsAndRefuses(t *testing.T) {
	schema := committedSchema(t)
	inst, err := yamlInstance([]byte(everySection))
	if err != nil {
		t.Fatal(err)
	}
	if err := schema.Validate(inst); err != nil {
		t.Errorf("everySection does not validate: %v", err)
	}
	for _, tc := range []struct{ name, from, to, want string }{
		{"unknown key", "admin: {}", "admin: {bogus: 1}", "bogus"},
		{"enum", "    max_size: 2\n", "    max_size: 2\n    scale_in: random\n", "scale_in"},
		{"required", "    max_size: 2\n", "", "max_size"},
		{"provider type's keys", "    type: exec\n", "    type: exec\n    hosts: []\n", "hosts"},
		{"duration", "cooldown: {}", "cooldown: {up: soon}", "up"},
		{"metric", "metric: cpu.avg, above", "metric: cpu.mean, above", "metric"},
		{"notify type", "type: command, command", "type: pigeon, command", "type"},
		{"notify type's required keys", "type: command, command: [page]", "type: command", "command"},
		{"notify type's keys", "command: [page]}", "command: [page], url: \"http://127.0.0.1:1/\"}", "url"},
		{"webhook secret", "type: command, command: [page]", "type: webhook, url: \"http://127.0.0.1:1/\"", "secret"},
		{"secret file's form", "type: command, command: [page]", "type: webhook, url: \"http://127.0.0.1:1/\", secret_file: [a]", "secret_file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			edited := strings.Replace(everySection, tc.from, tc.to, 1)
			if edited == everySection {
				t.Fatalf("%q is not in everySection", tc.from)
			}
			if _, err := Parse("conf/shoal.yaml", []byte(edited)); err == nil {
				t.Fatalf("Parse accepts the edit; the case proves nothing")
			}
			inst, err := yamlInstance([]byte(edited))
			if err != nil {
				t.Fatal(err)
			}
			err = schema.Validate(inst)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

// TestDocsYAMLValidate fails when a YAML block of the docs that show the
// config (docs/notify.md) does not validate against docs/shoal.schema.json.
// The blocks are sections, not whole configs: a group is added to those
// without one, and the files they name need not exist.
func TestDocsYAMLValidate(t *testing.T) {
	schema := committedSchema(t)
	for _, file := range []string{"../../docs/notify.md"} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		blocks := yamlBlocks(string(data))
		if len(blocks) == 0 {
			t.Fatalf("%s: no yaml block", file)
		}
		for i, b := range blocks {
			if !strings.HasPrefix(b, "groups:") && !strings.Contains(b, "\ngroups:") {
				b += "groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]\n" // the one a config needs
			}
			inst, err := yamlInstance([]byte(b))
			if err != nil {
				t.Errorf("%s: yaml block %d: %v", file, i+1, err)
				continue
			}
			if err := schema.Validate(inst); err != nil {
				t.Errorf("%s: yaml block %d does not validate: %v", file, i+1, err)
			}
		}
	}
}

// yamlBlocks returns the bodies of a Markdown text's ```yaml blocks.
func yamlBlocks(md string) []string {
	var out []string
	for {
		_, rest, ok := strings.Cut(md, "```yaml\n")
		if !ok {
			return out
		}
		body, after, _ := strings.Cut(rest, "```")
		out = append(out, body)
		md = after
	}
}

// exampleFiles are the files examples name that are the operator's to
// make (keys, tokens), stood in for by test data, by the name the example
// gives them.
var exampleFiles = map[string]map[string]func(t *testing.T) []byte{
	"ssh-hosts.yaml": {
		"ssh/id_ed25519": testdata("testdata/ssh/id_ed25519"),
		// The test key, for the example's hosts.
		"ssh/known_hosts": func(t *testing.T) []byte {
			line := strings.Fields(string(testdata("testdata/ssh/known_hosts")(t)))
			return []byte("10.0.1.11,10.0.1.12,[10.0.2.11]:2222 " + line[1] + " " + line[2] + "\n")
		},
	},
	"prometheus/shoal.yaml": {
		"/etc/prometheus/shoal.token": func(*testing.T) []byte { return []byte("example-token-0123456789abcdef0123456789\n") },
	},
}

func testdata(file string) func(t *testing.T) []byte {
	return func(t *testing.T) []byte {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

// withFixtures returns where a copy of example file (data) is, beside the
// stand-ins for the files it names; an example without such files is
// loaded where it is.
func withFixtures(t *testing.T, file string, data []byte) string {
	t.Helper()
	rel := strings.TrimPrefix(filepath.ToSlash(file), "../../examples/")
	fixtures := exampleFiles[rel]
	if fixtures == nil {
		return file
	}
	dir := t.TempDir()
	text := string(data)
	for name, content := range fixtures {
		at := filepath.Join(dir, name)
		if filepath.IsAbs(name) {
			at = filepath.Join(dir, filepath.Base(name))
			text = strings.ReplaceAll(text, name, at)
		}
		if err := os.MkdirAll(filepath.Dir(at), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(at, content(t), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	copied := filepath.Join(dir, filepath.Base(file))
	if err := os.WriteFile(copied, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return copied
}
