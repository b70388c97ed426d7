package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
		{"source's on_missing", "command: [q]}", "command: [q], on_missing: later}", "on_missing"},
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

// TestDocsYAMLValidate fails when a YAML block of the docs (every ```yaml
// block of docs/*.md and README.md) does not validate against
// docs/shoal.schema.json or does not load with the real loader (Parse, as
// serve and validate read a file). A block is a whole shoal.yaml or some of
// its top-level sections: a group is added to one without groups (and
// without gslb, which needs none), and listen to one without a frontend. The
// files a block names (certificates, keys, known_hosts, secrets) are the
// operator's and need not exist here: a load error is forgiven only when it
// says that a path the block itself names does not exist; every other check
// of the loader applies.
func TestDocsYAMLValidate(t *testing.T) {
	schema := committedSchema(t)
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md")
	total := 0
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, b := range yamlBlocks(string(data)) {
			total++
			t.Run(fmt.Sprintf("%s_block%d", filepath.Base(file), i+1), func(t *testing.T) {
				b = docsConfig(b)
				inst, err := yamlInstance([]byte(b))
				if err != nil {
					t.Fatal(err)
				}
				if err := schema.Validate(inst); err != nil {
					t.Errorf("does not validate against the schema: %v\n%s", err, b)
				}
				// A short directory: t.TempDir's name holds the test's, and
				// the sockets under state_dir must fit HAProxy's 97 bytes.
				dir, err := os.MkdirTemp("", "docs")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.RemoveAll(dir) })
				_, err = Parse(filepath.Join(dir, "shoal.yaml"), []byte(b))
				var list ErrorList
				if err != nil && !errors.As(err, &list) {
					t.Fatalf("does not load: %v", err)
				}
				for _, e := range list {
					if !namesMissingPath(b, e.Msg) {
						t.Errorf("does not load: %v\n%s", e, b)
						continue
					}
					t.Logf("a file it names is the operator's: %v", e)
				}
			})
		}
	}
	// The docs show the config in many places; a change of the fence's
	// spelling must not leave a test that checks none of them.
	if total < 10 {
		t.Errorf("found %d yaml blocks in docs/ and README.md, want the dozen and more the guides have", total)
	}
}

// docsConfig completes a docs block into a config file: a group when it has
// none (unless it only answers DNS), and listen when it has no frontend.
func docsConfig(b string) string {
	top := func(key string) bool {
		return strings.HasPrefix(b, key+":") || strings.Contains(b, "\n"+key+":")
	}
	if !top("groups") && !top("gslb") {
		b += "groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]\n"
	}
	if !top("listen") && !top("frontends") {
		b += "listen: 127.0.0.1:8080\n"
	}
	return b
}

// namesMissingPath says whether msg is a loader error saying that a file
// whose path is a value in block (not a key) does not exist.
func namesMissingPath(block, msg string) bool {
	if !strings.Contains(msg, "no such file or directory") {
		return false
	}
	var doc yaml.Node
	if yaml.Unmarshal([]byte(block), &doc) != nil {
		return false
	}
	home, _ := os.UserHomeDir()
	var named func(n *yaml.Node) bool
	named = func(n *yaml.Node) bool {
		switch n.Kind {
		case yaml.ScalarNode:
			v := n.Value
			if rest, ok := strings.CutPrefix(v, "~/"); ok {
				v = filepath.Join(home, rest)
			}
			// "stat PATH: …", PATH absolute or resolved against the
			// config's directory.
			return v != "" && (strings.Contains(msg, "stat "+v+": ") || strings.Contains(msg, "/"+v+": "))
		case yaml.MappingNode:
			for i := 1; i < len(n.Content); i += 2 {
				if named(n.Content[i]) {
					return true
				}
			}
			return false
		}
		return slices.ContainsFunc(n.Content, named)
	}
	return named(&doc)
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
