package config

import (
	"reflect"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"
)

// The config's schema is written once, in its Go types, which map 1:1 to the
// file: a field that a key fills carries the key as its yaml tag, and
// `required:"true"` when the file must give it. The order of the fields is
// the order in which "unknown field" messages list the keys. Fields without
// a tag are derived by Load (SacloudAutoscaler.Network, Rule.HasAbove); a
// key read into another field is a blank field with its tag (token_file).
//
// Defaults are written once too, in one table per type (DefaultHealth,
// defaultGroup, ...): a decoder starts its section from its table.
// TestLoadAppliesDefaults checks that Load applies what the tables say, and
// docs/config-defaults.md is generated from them.
//
// A new key is a tagged field, its default (if any) a line of its type's
// table, and its checks a few lines in the type's decoder; a new optional
// section's table also goes into DefaultsTree (TestDefaultsTreeComplete
// fails until it does).

// schemaKey is one key a section accepts.
type schemaKey struct {
	name     string
	required bool
}

// schemas caches schemaOf by type; types are few, and fixed.
var schemas sync.Map // reflect.Type → []schemaKey

// schemaOf returns the keys of struct type t, in field order.
func schemaOf(t reflect.Type) []schemaKey {
	if keys, ok := schemas.Load(t); ok {
		return keys.([]schemaKey)
	}
	var keys []schemaKey
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		keys = append(keys, schemaKey{name: name, required: f.Tag.Get("required") == "true"})
	}
	schemas.Store(t, keys)
	return keys
}

// section checks that n is a mapping of T's keys and reports its required
// keys that are absent; see decoder.mapping for a nil or malformed n.
func section[T any](d *decoder, n *yaml.Node, path string) *fields {
	return sectionOf(d, reflect.TypeFor[T](), n, path)
}

// sectionOf is section of the keys of type t.
func sectionOf(d *decoder, t reflect.Type, n *yaml.Node, path string) *fields {
	keys := schemaOf(t)
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.name
	}
	f := d.mapping(n, path, names...)
	for _, k := range keys {
		if k.required {
			f.require(k.name)
		}
	}
	return f
}
