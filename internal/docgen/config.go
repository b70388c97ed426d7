package docgen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

// docs/shoal.schema.json and docs/config.md are generated from the config's
// Go types: the keys and required keys from their tags, the defaults from
// config.DefaultsTree, the descriptions from the doc comments of the types
// and fields, and the values a decoder takes from a fixed list from
// config.KeyValues. The few keys whose form is not their Go type's (a
// duration, "auto", one string or a list) are in schemaForms.

// durationRE is what time.ParseDuration reads; an integer is seconds.
const durationRE = `^[-+]?([0-9]*(\.[0-9]*)?(ns|us|µs|ms|s|m|h))+$|^0$`

var (
	durationSchema = obj{"anyOf": []any{
		obj{"type": "string", "pattern": durationRE},
		obj{"type": "integer", "minimum": 0},
	}, "x-form": "duration (\"30s\", \"5m\") or seconds"}
	sizeSchema = obj{"anyOf": []any{
		obj{"type": "integer", "minimum": 0},
		obj{"type": "string", "pattern": `^\s*[0-9]+\s*(B|KB|KiB|MB|MiB|GB|GiB)?\s*$`},
	}, "x-form": "size (\"10MiB\") or bytes"}
	oneOrMoreSchema = obj{"anyOf": []any{
		obj{"type": "string"},
		obj{"type": "array", "items": obj{"type": "string"}, "minItems": 1},
	}, "x-form": "string or list of strings"}
	// scalarSchema is what decoder.str and decoder.value take: env and
	// vars values ("PORT: 8080"), where "KEY:" is the empty string.
	scalarSchema = obj{"type": []any{"string", "number", "boolean", "null"}}
)

// schemaForms are the schemas of types, and of keys ("Type.key"), that the
// file writes in another form than their Go type's.
var schemaForms = map[string]obj{
	"time.Duration": durationSchema,
	"config.StatusRange": {"anyOf": []any{
		obj{"type": "integer", "minimum": 100, "maximum": 599},
		obj{"type": "string", "pattern": `^\s*[0-9]{3}\s*(-\s*[0-9]{3}\s*)?$`},
	}, "x-form": "status code or range (\"200-399\")"},
	"ssh.PortRange": {"anyOf": []any{
		obj{"type": "integer", "minimum": 1, "maximum": 65535},
		obj{"type": "string", "pattern": `^\s*[0-9]+\s*(-\s*[0-9]+\s*)?$`},
	}, "x-form": "port range (\"20000-29999\")"},
	"config.Step": {"anyOf": []any{
		obj{"type": "number", "exclusiveMinimum": 0},
		obj{"type": "string", "pattern": `^[0-9.]+%$`},
	}, "x-form": "instances, or percent (\"100%\")"},
	"config.Action": {"anyOf": []any{
		obj{"enum": []any{string(config.ActionUp), string(config.ActionDown)}},
		obj{"type": "object", "minProperties": 1, "maxProperties": 1, "additionalProperties": false,
			"properties": obj{
				string(config.ActionAdd):     obj{"type": "integer", "minimum": 1},
				string(config.ActionRemove):  obj{"type": "integer", "minimum": 1},
				string(config.ActionSize):    obj{"type": "integer", "minimum": 0},
				string(config.ActionPlan):    obj{"type": "string"},
				string(config.ActionPercent): obj{"type": "number"},
			}},
	}, "x-form": "up, down, or {add|remove|size: N}, {plan: NAME}, {percent: P}"},
	"[]config.Weight": {"type": "object", "additionalProperties": obj{"type": "integer", "minimum": 0},
		"x-form": "mapping of group to weight"},
	"map[string]string": {"type": "object", "additionalProperties": scalarSchema},

	"Group.plans": {"anyOf": []any{nil, obj{"type": "object", "additionalProperties": obj{"type": "integer", "minimum": 0}}},
		"x-form": "list of {name, size}, or mapping of name to size"},
	"Outliers.max_ejected": {"anyOf": []any{
		obj{"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 100},
		obj{"type": "string", "pattern": `^\s*[0-9.]+\s*%$`},
	}, "x-form": "percent (\"30%\")"},
	"LatencyOutlier.vs_group": {"anyOf": []any{
		obj{"type": "number", "exclusiveMinimum": 1},
		obj{"type": "string", "pattern": `^\s*[0-9.]+x$`},
	}, "x-form": "multiple (\"3x\")"},
	"CanaryStep.weight": {"anyOf": []any{
		obj{"type": "number", "exclusiveMinimum": 0, "maximum": 100},
		obj{"type": "string", "pattern": `^\s*[0-9.]+\s*%$`},
	}, "x-form": "percent (\"5%\")"},
	"BlueGreen.weight": {"anyOf": []any{
		obj{"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 100},
		obj{"type": "string", "pattern": `^\s*[0-9.]+\s*%$`},
	}, "x-form": "percent (\"5%\")"},
	"CanaryStep.instances": {"anyOf": []any{
		obj{"type": "number", "exclusiveMinimum": 0, "maximum": 100},
		obj{"type": "string", "pattern": `^\s*[0-9.]+\s*%$`},
	}, "x-form": "percent (\"25%\")"},
	"CanaryErrorRate.above": {"anyOf": []any{
		obj{"type": "number", "minimum": 0, "exclusiveMaximum": 100},
		obj{"type": "string", "pattern": `^\s*[0-9.]+\s*%$`},
	}, "x-form": "percent (\"1%\")"},
	"CanaryErrorRate.vs_stable": vsStableSchema,
	"CanaryP99.vs_stable":       vsStableSchema,
	"Predictive.lookback":       {"type": "string", "pattern": `^[0-9]+d$|^[0-9]+h(0m(0s)?)?$`, "x-form": "days (\"7d\")"},
	"Group.cooldown":            {"anyOf": []any{durationSchema, nil}, "x-form": "duration or mapping"}, // nil: the type's
	"AccessLog.sample": {"anyOf": []any{
		obj{"const": "auto"},
		obj{"type": "integer", "minimum": 0},
	}, "x-form": "auto or integer"},
	"Target.start_delay":         {"anyOf": []any{obj{"const": "auto"}, durationSchema}, "x-form": "auto or duration"},
	"AccessLog.max_size":         sizeSchema,
	"InstanceLogs.max_size":      sizeSchema,
	"Admin.token_file":           {"type": "string"},
	"NotifyTarget.secret_file":   {"type": "string"},
	"NotifyTarget.secret_env":    {"type": "string"},
	"NotifyTarget.password_file": {"type": "string"},
	"NotifyTarget.password_env":  {"type": "string"},
	"sacloud.Edit.password":      {"type": "string"},
	"sacloud.Edit.password_file": {"type": "string"},
	"sacloud.Edit.password_env":  {"type": "string"},
	"SacloudAutoscaler.socket_mode": {"anyOf": []any{
		obj{"type": "integer", "minimum": 0, "maximum": 0o777},
		obj{"type": "string", "pattern": `^0?[0-7]{1,3}$`},
	}, "x-form": "file mode (\"0660\")"},
	"sacloud.NIC.upstream": {"anyOf": []any{obj{"const": "shared"}, "sacloud.Selector"},
		"x-form": "shared or a switch selector"},
	"Disruption.max_unavailable": {"anyOf": []any{
		obj{"type": "integer", "minimum": 1},
		obj{"type": "string", "pattern": `^\s*([0-9]+|[0-9]+%)\s*$`},
	}, "x-form": "instances, or percent (\"10%\")"},
	"ec2.Config.instance_types": {"type": "object", "additionalProperties": oneOrMoreSchema},
	"Frontend.bind":             oneOrMoreSchema,
	"Route.host":                oneOrMoreSchema,
	"Route.path_prefix":         oneOrMoreSchema,
	"Route.method":              oneOrMoreSchema,
}

type obj = map[string]any

// vsStableSchema is a canary's multiple of the stable version's figure.
var vsStableSchema = obj{"anyOf": []any{
	obj{"type": "number", "minimum": 1},
	obj{"type": "string", "pattern": `^\s*[0-9.]+x$`},
}, "x-form": "multiple (\"2x\")"}

// refRow is one key of docs/config.md.
type refRow struct {
	path, form, def, doc string
}

// schemaGen builds the schema of Config and the rows of its reference.
type schemaGen struct {
	docs map[string]string // "Type" and "Type.Field" → doc comment
	rows []refRow
	seen map[string]bool // a key two provider types share is one row
	// values and intValues are config's fixed lists of values; read when
	// the schema is made, as the provider types register in init.
	values    map[string][]string
	intValues map[string][]int
}

// goDocs reads the doc comments of config's types and fields, and of the
// packages of provider types that hold their own keys, from the source
// under root (the repository). A field without one takes its predecessor's
// when that names it ("MaxSize is ...; MaxFiles is ...").
func goDocs(root string) (map[string]string, error) {
	docs := map[string]string{}
	cfgPkg := reflect.TypeFor[config.Config]().PkgPath()
	if err := pkgDocs(pkgDir(root, cfgPkg), "", docs); err != nil {
		return nil, err
	}
	done := map[string]bool{}
	for _, pt := range config.ProviderTypes() {
		for _, kt := range pt.KeyTypes() {
			if pkg := kt.PkgPath(); pkg != cfgPkg && !done[pkg] {
				done[pkg] = true
				if err := pkgDocs(pkgDir(root, pkg), path.Base(pkg)+".", docs); err != nil {
					return nil, err
				}
			}
		}
	}
	return docs, nil
}

// pkgDir is where the source of package pkg, of this module, is under root.
func pkgDir(root, pkg string) string {
	module := path.Dir(path.Dir(reflect.TypeFor[config.Config]().PkgPath())) // …/internal/config
	return filepath.Join(root, filepath.FromSlash(strings.TrimPrefix(pkg, module+"/")))
}

// docName names type t in docs: its name, qualified by its package's
// outside config.
func docName(t reflect.Type) string {
	if t.PkgPath() == reflect.TypeFor[config.Config]().PkgPath() || t.PkgPath() == "" {
		return t.Name()
	}
	return path.Base(t.PkgPath()) + "." + t.Name()
}

// pkgDocs adds the doc comments of the package in dir to docs, its types
// named with prefix.
func pkgDocs(dir, prefix string, docs map[string]string) error {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	if err != nil {
		return fmt.Errorf("parse the package in %s: %w", dir, err)
	}
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.TYPE {
					continue
				}
				for _, spec := range gd.Specs {
					ts := spec.(*ast.TypeSpec)
					doc := ts.Doc
					if doc == nil && len(gd.Specs) == 1 {
						doc = gd.Doc
					}
					docs[prefix+ts.Name.Name] = paragraph(doc.Text())
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						continue
					}
					prev := ""
					for _, fld := range st.Fields.List {
						text := paragraph(fld.Doc.Text() + " " + fld.Comment.Text())
						for _, name := range fld.Names {
							field := name.Name
							if field == "_" && fld.Tag != nil {
								field = blankField(reflect.StructTag(strings.Trim(fld.Tag.Value, "`")))
							}
							switch {
							case text != "":
								docs[prefix+ts.Name.Name+"."+field] = text
							case prev != "" && strings.Contains(prev, strings.TrimPrefix(field, "_")):
								docs[prefix+ts.Name.Name+"."+field] = prev
							}
						}
						if text != "" {
							prev = text
						}
					}
				}
			}
		}
	}
	return nil
}

// blankField names a blank field (read into another) by its key, "_key",
// since a type has several.
func blankField(tag reflect.StructTag) string {
	key, _, _ := strings.Cut(tag.Get("yaml"), ",")
	return "_" + key
}

// paragraph joins a comment's lines into one.
func paragraph(s string) string { return strings.Join(strings.Fields(s), " ") }

// configSchema returns the JSON Schema of shoal.yaml and its reference rows.
func configSchema(root string) (obj, []refRow, error) {
	docs, err := goDocs(root)
	if err != nil {
		return nil, nil, err
	}
	g := &schemaGen{docs: docs, seen: map[string]bool{}, values: config.KeyValues(), intValues: config.IntKeyValues()}
	tree := config.DefaultsTree()
	s := g.section(reflect.TypeFor[config.Config](), reflect.ValueOf(tree), "")
	s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	s["$id"] = config.SchemaID
	s["title"] = "shoal.yaml"
	s["description"] = "The configuration of shoal, an autoscaling load balancer; generated from its Go types."
	return s, g.rows, nil
}

// section returns the schema of struct type t, whose defaults are v.
func (g *schemaGen) section(t reflect.Type, v reflect.Value, path string) obj {
	props, required := obj{}, []any{}
	var allOf []any
	for i := range t.NumField() {
		f := t.Field(i)
		if config.IsInline(f) {
			continue // a provider's type-specific keys: below
		}
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if key == "" || key == "-" {
			continue
		}
		props[key] = g.key(t, f, v.Field(i), joinKey(path, key))
		if f.Tag.Get("required") == "true" {
			required = append(required, key)
		}
	}
	s := obj{"type": "object", "properties": props}
	if d := g.docs[docName(t)]; d != "" {
		s["description"] = d
	}
	if len(required) > 0 {
		s["required"] = required
	}
	if t == reflect.TypeFor[config.Provider]() {
		// The type decides which other keys an entry may have.
		for _, pt := range config.ProviderTypes() {
			tprops, treq := obj{}, []any{}
			for _, kt := range pt.KeyTypes() {
				dv := config.ProviderKeyDefaults(v, kt, pt)
				ks := g.section(kt, dv, path)
				maps.Copy(tprops, ks["properties"].(obj))
				if r, ok := ks["required"].([]any); ok {
					treq = append(treq, r...)
				}
			}
			treq = append(treq, toAny(pt.Required)...)
			then := obj{"properties": tprops}
			if len(treq) > 0 {
				then["required"] = treq
			}
			allOf = append(allOf, obj{
				"if":   obj{"properties": obj{"type": obj{"const": pt.Name}}, "required": []any{"type"}},
				"then": then,
			})
		}
		s["allOf"] = allOf
		s["unevaluatedProperties"] = false
		return s
	}
	if t == reflect.TypeFor[config.NotifyTarget]() {
		s["allOf"] = notifyTypeSchemas()
	}
	s["additionalProperties"] = false
	return s
}

// notifyTypeSchemas say, per type of notification target, which keys it
// requires and which of the other types' keys it refuses.
func notifyTypeSchemas() []any {
	var allOf []any
	types := config.NotifyTypes()
	for _, nt := range types {
		refused := obj{}
		for _, other := range types {
			for _, k := range other.Keys {
				if !slices.Contains(nt.Keys, k) {
					refused[k] = false
				}
			}
		}
		then := obj{"required": toAny(nt.Required), "properties": refused}
		if nt.Name == config.NotifyWebhook {
			then["oneOf"] = []any{obj{"required": []any{"secret_file"}}, obj{"required": []any{"secret_env"}}}
		}
		allOf = append(allOf, obj{
			"if":   obj{"properties": obj{"type": obj{"const": nt.Name}}, "required": []any{"type"}},
			"then": then,
		})
	}
	return allOf
}

// key returns the schema of field f of section t, whose default is v, and
// adds its reference row.
func (g *schemaGen) key(t reflect.Type, f reflect.StructField, v reflect.Value, path string) obj {
	name := docName(t) + "." + strings.Split(f.Tag.Get("yaml"), ",")[0]
	s := g.form(name, f.Type, v, path)
	field := f.Name
	if field == "_" {
		field = blankField(f.Tag)
	}
	doc := g.docs[docName(t)+"."+field]
	if doc == "" && f.Name != "_" {
		doc = g.docs[docName(elem(f.Type))] // a section: its type's doc
	}
	if doc != "" {
		s["description"] = doc
	}
	if vals := g.values[name]; vals != nil {
		s["enum"] = toAny(vals)
	}
	if vals, ok := g.intValues[name]; ok {
		s["enum"] = toAny(vals)
	}
	if f.Tag.Get("required") != "true" && f.Name != "_" {
		if d, ok := jsonDefault(name, v); ok {
			s["default"] = d
		}
	}
	if _, formed := schemaForms[name]; config.IsSection(elem(f.Type)) && !formed {
		return s // its keys are rows; the section is not
	}
	row := strings.ReplaceAll(path, "[0]", "[]")
	if !g.seen[row] {
		g.seen[row] = true
		def := formatDefault(f, v)
		if w := writtenAs[row]; w != "" {
			def = w
		}
		if note := defaultNotes[row]; note != "" {
			def += " (" + note + ")"
		}
		g.rows = append(g.rows, refRow{path: row, form: formOf(s), def: def, doc: doc})
	}
	return s
}

// elem is t without pointers and slices: what a section's key holds.
func elem(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	return t
}

// form returns the schema of a value of type t named name ("Type.key"),
// whose default is v.
func (g *schemaGen) form(name string, t reflect.Type, v reflect.Value, path string) obj {
	for _, k := range []string{name, t.String()} {
		if s, ok := schemaForms[k]; ok {
			return g.expand(s, t, v, path)
		}
	}
	return g.plain(name, t, v, path)
}

// plain returns the schema of type t as Go has it.
func (g *schemaGen) plain(name string, t reflect.Type, v reflect.Value, path string) obj {
	switch t.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v = reflect.Zero(t.Elem())
		} else {
			v = v.Elem()
		}
		return g.form(name, t.Elem(), v, path)
	case reflect.Struct:
		if config.IsSection(t) {
			return g.section(t, v, path)
		}
		return obj{}
	case reflect.Slice:
		iv := reflect.Zero(t.Elem())
		if v.Len() > 0 {
			iv = v.Index(0)
		}
		return obj{"type": "array", "items": g.form("", t.Elem(), iv, path+"[0]")}
	case reflect.Map:
		return obj{"type": "object", "additionalProperties": g.form("", t.Elem(), reflect.Zero(t.Elem()), path+".<name>")}
	case reflect.String:
		return obj{"type": "string"}
	case reflect.Bool:
		return obj{"type": "boolean"}
	case reflect.Int, reflect.Int64, reflect.Uint32:
		return obj{"type": "integer"}
	case reflect.Float64:
		return obj{"type": "number"}
	}
	return obj{} // a blank field read into another: any value
}

// expand copies form s, putting in the schema of t (its Go type's) where s says nil and
// of the named type where it names one.
func (g *schemaGen) expand(s obj, t reflect.Type, v reflect.Value, path string) obj {
	out := maps.Clone(s)
	if alts, ok := s["anyOf"].([]any); ok {
		var any2 []any
		for _, a := range alts {
			switch a := a.(type) {
			case nil:
				any2 = append(any2, g.plain("", t, v, path))
			case string:
				named := namedType(a)
				any2 = append(any2, g.section(named, reflect.Zero(named), path))
			default:
				any2 = append(any2, a)
			}
		}
		out["anyOf"] = any2
	}
	return out
}

// namedType finds the type schemaForms names name (as docName names it)
// among the registered provider types' keys: those types live in their
// providers' packages.
func namedType(name string) reflect.Type {
	seen := map[reflect.Type]bool{}
	var find func(t reflect.Type) reflect.Type
	find = func(t reflect.Type) reflect.Type {
		t = elem(t)
		if t.Kind() == reflect.Map {
			t = elem(t.Elem())
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return nil
		}
		seen[t] = true
		if docName(t) == name {
			return t
		}
		for i := range t.NumField() {
			if found := find(t.Field(i).Type); found != nil {
				return found
			}
		}
		return nil
	}
	for _, pt := range config.ProviderTypes() {
		for _, kt := range pt.KeyTypes() {
			if t := find(kt); t != nil {
				return t
			}
		}
	}
	panic("schemaForms names " + name + ", which no provider type's keys have")
}

// jsonDefault is v as the file writes it, when the schema should say it.
func jsonDefault(name string, v reflect.Value) (any, bool) {
	switch name {
	case "AccessLog.sample":
		return "auto", true
	case "AccessLog.enabled":
		return nil, false // unset: on when needed
	}
	if v.Kind() == reflect.Pointer || v.IsZero() && v.Kind() != reflect.Bool {
		return nil, false
	}
	switch x := v.Interface().(type) {
	case time.Duration:
		return formatDuration(x), true
	case int64:
		return formatSize(x), true
	case uint32:
		return fmt.Sprintf("%#o", x), true
	case config.Step:
		if x.Percent {
			return x.String(), true
		}
		return x.N, true
	case fmt.Stringer:
		return x.String(), true
	case string, bool, int, float64, []string:
		return x, true
	}
	return nil, false
}

func toAny[T any](xs []T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

// formOf names what a key's schema takes, for the reference.
func formOf(s obj) string {
	if f, ok := s["x-form"].(string); ok {
		return f
	}
	if e, ok := s["enum"].([]any); ok {
		vals := make([]string, len(e))
		for i, v := range e {
			vals[i] = fmt.Sprint(v)
		}
		return "one of " + strings.Join(vals, ", ")
	}
	switch s["type"] {
	case "array":
		return "list of " + formOf(s["items"].(obj)) + "s"
	case "object":
		if _, ok := s["properties"]; ok {
			return "mapping"
		}
		return "mapping of string to " + formOf(s["additionalProperties"].(obj))
	case nil:
		return "any"
	}
	if _, ok := s["type"].([]any); ok {
		return "scalar"
	}
	return fmt.Sprint(s["type"])
}

// renderSchema writes the schema as docs/shoal.schema.json holds it.
func renderSchema(s obj) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(stripForms(s)); err != nil {
		return nil, fmt.Errorf("encode the schema: %w", err)
	}
	return b.Bytes(), nil
}

// stripForms drops the x-form notes, which are for the reference only.
func stripForms(v any) any {
	switch v := v.(type) {
	case obj:
		out := obj{}
		for k, x := range v {
			if k != "x-form" {
				out[k] = stripForms(x)
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = stripForms(x)
		}
		return out
	}
	return v
}

// renderReference writes docs/config.md.
func renderReference(rows []refRow) string {
	var b strings.Builder
	b.WriteString(`# Configuration reference

<!-- Generated from the config's Go types in internal/config by make docs.
     Do not edit; TestDocsUpToDate fails when this file is stale. -->

Every key of shoal.yaml, in the order the file's sections are read. ` + "`[]`" + `
marks the items of a list; the keys of an optional section apply when the
section is there. Editors validate and complete shoal.yaml with
[shoal.schema.json](shoal.schema.json): with the YAML language server, put
` + "`# yaml-language-server: $schema=" + config.SchemaID + "`" + ` on the file's first line.
`)
	top := ""
	for _, r := range rows {
		head, _, _ := strings.Cut(r.path, ".")
		head, _, _ = strings.Cut(head, "[")
		if head != top {
			top = head
			fmt.Fprintf(&b, "\n## %s\n\n| key | takes | default | meaning |\n| --- | --- | --- | --- |\n", top)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.path, cell(r.form), r.def, cell(r.doc))
	}
	return b.String()
}

// joinKey is key's path below the section at path.
func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// cell escapes what would end a table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
