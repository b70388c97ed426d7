package config

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// decoder walks a yaml.Node tree rather than unmarshalling into structs so
// that every problem can be reported with its position, and so that one pass
// finds all of them.
type decoder struct {
	file string // as given, for messages
	dir  string // absolute directory of file, for relative paths
	errs ErrorList

	// budget is how many more values the walk may visit. Aliases let a small
	// document name the same list many times over; the budget keeps the
	// work (each visited string may be a template to compile and run)
	// proportional to the document's size.
	budget int

	// pos records where every value is, by field path, so that checks run
	// after loading (see Config.FieldError) can point at the file too.
	pos map[string]Pos

	// windows are the policies' windows, which link checks against the
	// metrics section once every section is decoded.
	windows []windowRef
	// listeners are the addresses the file has shoal or HAProxy listen
	// on, compared once it is read (see checkListeners).
	listeners []listenerAt
	// sourceList are metrics.sources, which policies' metrics may name.
	sourceList []Source
}

func (d *decoder) at(field string, n *yaml.Node) {
	if d.pos == nil {
		d.pos = make(map[string]Pos)
	}
	d.pos[field] = Pos{n.Line, n.Column}
}

// spend charges n visited values to the budget, reporting once when it runs
// out; the walk then sees every further mapping and list as empty.
func (d *decoder) spend(n *yaml.Node, path string) bool {
	if d.budget < 0 {
		return false
	}
	d.budget -= len(n.Content)
	if d.budget < 0 {
		d.errorf(n, path, "aliases expand the document too far")
		return false
	}
	return true
}

func (d *decoder) errorf(n *yaml.Node, field, format string, args ...any) {
	d.errs = append(d.errs, &Error{
		File:  d.file,
		Line:  n.Line,
		Col:   n.Column,
		Field: field,
		Msg:   fmt.Sprintf(format, args...),
	})
}

// abs resolves p against base, which is absolute.
func abs(base, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(base, p)
}

// resolve follows an alias to its anchored node. Anchors cannot be placed on
// aliases, so one step suffices. Nodes are resolved as they are taken from
// their parent's Content; every other function sees only resolved nodes.
func resolve(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names what a node is for "got ..." in messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.ShortTag() {
	case "!!null":
		return "null"
	case "!!str":
		return strconv.Quote(truncate(n.Value))
	}
	return truncate(n.Value)
}

// truncate keeps long values (block scalars, mostly) from swamping a message.
func truncate(s string) string {
	const max = 60
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	return string([]rune(s)[:max]) + "..."
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// entry is one key/value pair of a mapping; v is resolved.
type entry struct {
	key  string
	k, v *yaml.Node
}

// entries returns the pairs of mapping n, reporting (and dropping) keys that
// are not strings and keys that repeat. ok is false if n is not a mapping.
func (d *decoder) entries(n *yaml.Node, path string) (list []entry, ok bool) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "must be a mapping, got %s", describe(n))
		return nil, false
	}
	if !d.spend(n, path) {
		return nil, false
	}
	first := make(map[string]*yaml.Node)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, path, "keys must be strings, got %s", describe(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			d.errorf(k, path, "merge keys (<<) are not supported")
			continue
		}
		field := join(path, k.Value)
		if f, dup := first[k.Value]; dup {
			d.errorf(k, field, "duplicate key (first at line %d)", f.Line)
			continue
		}
		first[k.Value] = k
		d.at(field, v)
		list = append(list, entry{key: k.Value, k: k, v: v})
	}
	return list, true
}

// fields is a mapping with a fixed set of keys.
type fields struct {
	d    *decoder
	node *yaml.Node // nil when the mapping is absent or not a mapping
	path string
	vals map[string]*yaml.Node
}

// mapping checks that n is a mapping whose keys are all in allowed. A nil n
// (an absent section) yields empty fields, so that every key takes its default.
func (d *decoder) mapping(n *yaml.Node, path string, allowed ...string) *fields {
	f := &fields{d: d, path: path, vals: make(map[string]*yaml.Node)}
	if n == nil {
		return f
	}
	list, ok := d.entries(n, path)
	if !ok {
		return f
	}
	f.node = n
	for _, e := range list {
		if !slices.Contains(allowed, e.key) {
			d.errorf(e.k, join(path, e.key), "unknown field; allowed: %s", strings.Join(allowed, ", "))
			continue
		}
		f.vals[e.key] = e.v
	}
	return f
}

// has reports whether key is present, even with a null value.
func (f *fields) has(key string) bool {
	_, ok := f.vals[key]
	return ok
}

// get returns the value of key, or nil if it is absent or null: YAML users
// write "key:" with nothing after it to mean "the default".
func (f *fields) get(key string) *yaml.Node {
	n := f.vals[key]
	if n == nil || isNull(n) {
		return nil
	}
	return n
}

func (f *fields) field(key string) string { return join(f.path, key) }

// require reports each key that is absent or null. A missing or malformed
// mapping has been reported already, so it reports nothing more.
func (f *fields) require(keys ...string) {
	if f.node == nil {
		return
	}
	for _, k := range keys {
		if f.get(k) == nil {
			f.d.errorf(f.node, f.field(k), "required")
		}
	}
}

// The getters below return def and a nil node when key is absent or invalid
// (after reporting it), and the decoded value and its node otherwise, so that
// callers validate values only when they came from the file.

func (f *fields) str(key, def string) (string, *yaml.Node) {
	n := f.get(key)
	if n == nil {
		return def, nil
	}
	s, ok := f.d.str(n, f.field(key))
	if !ok {
		return def, nil
	}
	return s, n
}

func (f *fields) integer(key string, def int) (int, *yaml.Node) {
	n := f.get(key)
	if n == nil {
		return def, nil
	}
	v, ok := f.d.integer(n, f.field(key))
	if !ok {
		return def, nil
	}
	return v, n
}

// number decodes key as a number, 0 and a nil node when absent or not a
// number (reported).
func (f *fields) number(key string) (float64, *yaml.Node) {
	n := f.get(key)
	if n == nil {
		return 0, nil
	}
	v, ok := f.d.number(n, f.field(key))
	if !ok {
		return 0, nil
	}
	return v, n
}

func (f *fields) boolean(key string, def bool) (bool, *yaml.Node) {
	n := f.get(key)
	if n == nil {
		return def, nil
	}
	var v bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&v) != nil {
		f.d.errorf(n, f.field(key), "must be true or false, got %s", describe(n))
		return def, nil
	}
	return v, n
}

func (f *fields) duration(key string, def time.Duration) (time.Duration, *yaml.Node) {
	n := f.get(key)
	if n == nil {
		return def, nil
	}
	v, ok := f.d.duration(n, f.field(key))
	if !ok {
		return def, nil
	}
	return v, n
}

// item is one element of a list of strings.
type item struct {
	val   string
	node  *yaml.Node
	field string
}

// strings returns the valid elements of a list of strings.
func (f *fields) strings(key string) []item {
	n := f.get(key)
	if n == nil {
		return nil
	}
	nodes, ok := f.d.sequence(n, f.field(key), "a list of strings")
	if !ok {
		return nil
	}
	var items []item
	for i, n := range nodes {
		field := fmt.Sprintf("%s[%d]", f.field(key), i)
		if s, ok := f.d.str(n, field); ok {
			items = append(items, item{s, n, field})
		}
	}
	return items
}

// checkEach reports the items that check rejects and returns all their values.
func (d *decoder) checkEach(items []item, check func(string) error) []string {
	var vals []string
	for _, it := range items {
		if err := check(it.val); err != nil {
			d.errorf(it.node, it.field, "%v", err)
		}
		vals = append(vals, it.val)
	}
	return vals
}

// sequence returns the resolved items of list n; what names the expected type.
func (d *decoder) sequence(n *yaml.Node, path, what string) ([]*yaml.Node, bool) {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "must be %s, got %s", what, describe(n))
		return nil, false
	}
	if !d.spend(n, path) {
		return nil, false
	}
	items := make([]*yaml.Node, len(n.Content))
	for i, c := range n.Content {
		items[i] = resolve(c)
		d.at(fmt.Sprintf("%s[%d]", path, i), c)
	}
	return items, true
}

// str accepts any non-null scalar, so that "token: 1234" means the string.
func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode || isNull(n) {
		d.errorf(n, path, "must be a string, got %s", describe(n))
		return "", false
	}
	return n.Value, true
}

// value reads the string value of an env or vars entry: "KEY:" with no
// value is the empty string, not an error.
func (d *decoder) value(n *yaml.Node, path string) (string, bool) {
	if isNull(n) {
		return "", true
	}
	return d.str(n, path)
}

func (d *decoder) integer(n *yaml.Node, path string) (int, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		d.errorf(n, path, "must be an integer, got %s", describe(n))
		return 0, false
	}
	var v int
	if err := n.Decode(&v); err != nil {
		d.errorf(n, path, "integer out of range: %s", truncate(n.Value))
		return 0, false
	}
	return v, true
}

// duration accepts a Go duration string or an integer number of seconds, the
// form the seed's configuration used.
func (d *decoder) duration(n *yaml.Node, path string) (time.Duration, bool) {
	v, ok := parseDuration(n)
	if !ok {
		d.errorf(n, path, `must be a duration such as "30s" or "3m", or a whole number of seconds; got %s`, describe(n))
		return 0, false
	}
	if v < 0 {
		d.errorf(n, path, "must not be negative, got %s", v)
		return 0, false
	}
	return v, true
}

func parseDuration(n *yaml.Node) (time.Duration, bool) {
	if n.Kind != yaml.ScalarNode {
		return 0, false
	}
	switch n.ShortTag() {
	case "!!int":
		const maxSeconds = int64(1<<63-1) / int64(time.Second)
		var secs int64
		if n.Decode(&secs) != nil || secs > maxSeconds || secs < -maxSeconds {
			return 0, false
		}
		return time.Duration(secs) * time.Second, true
	case "!!str":
		v, err := time.ParseDuration(n.Value)
		return v, err == nil
	}
	return 0, false
}
