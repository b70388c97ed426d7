package config

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// maxKeyFile bounds a private key or known_hosts file read at load.
const maxKeyFile = 1 << 20

// providerLabels is what a group's checks need of a decoded provider.
type providerLabels struct {
	hosts []map[string]string
	// broken is an entry with errors of its own: groups are not checked
	// against it, which would only repeat them.
	broken bool
	// cloud is a provider of cloud servers (exec, sacloud, ec2).
	cloud bool
	// typ is its type.
	typ string
	// warmStates are the warm pool states its servers can wait in (none:
	// it keeps no warm pool); warmHint says how to have the others.
	warmStates []string
	warmHint   string
	// grace is its health_grace (0: none).
	grace time.Duration
	// node and path are the entry's, for errors about it found later.
	node *yaml.Node
	path string
}

// providers decodes the providers list, and returns with it what the
// groups' checks need of each entry, by name. Each entry is {name, type}
// plus the type's keys at the same level.
func (d *decoder) providers(n *yaml.Node) ([]Provider, map[string]providerLabels) {
	provs := map[string]providerLabels{}
	if n == nil {
		return nil, provs
	}
	items, ok := d.sequence(n, "providers", "a list of providers")
	if !ok {
		return nil, provs
	}
	var out []Provider
	names := map[string]*yaml.Node{}
	for i, item := range items {
		path := fmt.Sprintf("providers[%d]", i)
		errs := len(d.errs)
		p, nameNode, ok := d.provider(item, path)
		if !ok {
			continue
		}
		if nameNode != nil {
			if first, dup := names[p.Name]; dup {
				d.errorf(nameNode, path+".name", "duplicate provider name %q (first at line %d)", p.Name, first.Line)
				continue
			}
			names[p.Name] = nameNode
		}
		out = append(out, p)
		if p.Name != "" {
			pl := providerLabels{broken: len(d.errs) > errs, cloud: p.Cloud != nil, typ: p.Type, grace: p.HealthGrace, node: item, path: path}
			if pt, ok := LookupProvider(p.Type); ok && pt.Hosts != nil {
				pl.hosts = pt.Hosts(&p)
			}
			if pt, ok := LookupProvider(p.Type); ok && pt.WarmStates != nil {
				pl.warmStates, pl.warmHint = pt.WarmStates(&p)
			}
			provs[p.Name] = pl
		}
	}
	for _, pt := range providerTypes {
		if pt.Check != nil {
			pt.Check(&ProviderEntries{d: d, provs: provs}, out)
		}
	}
	return out, provs
}

// ProviderType is one type of provider entry: its keys, their defaults,
// decoding and checks. Each type registers itself once (RegisterProvider);
// the decoder, the generated schema and reference, and the core find a
// type only here.
type ProviderType struct {
	// Name is the value of the entry's type key.
	Name string
	// Keys are the structs holding the entry's keys besides name, type,
	// health_grace and a cloud's common keys, each as its defaults (for
	// the schema and the reference).
	Keys []any
	// Required are keys of the structs it shares with other types that
	// this type needs too (the port of the clouds whose listings have none).
	Required []string
	// Cloud marks a type whose provider creates a server per instance: its
	// entries have the common cloud keys (CloudProvider, decoded into
	// Provider.Cloud before Decode runs), a health_grace of
	// DefaultCloudHealthGrace, and its groups run no template.
	Cloud bool
	// Source is, for a cloud type, what each server runs instead of a
	// group's template (in the error refusing a template's keys).
	Source string
	// Decode decodes the type's own keys of the entry into p, reporting
	// errors through e.
	Decode func(e *ProviderEntry, p *Provider)
	// Hosts, when set, lists the labels of p's hosts, which groups'
	// placement labels are checked against.
	Hosts func(p *Provider) []map[string]string
	// Plans, when set, returns p's map of plan names (its key and names),
	// whose names groups on p must have as plans.
	Plans func(p *Provider) (key string, names []string)
	// Check, when set, checks all entries together once each is decoded
	// (what no one entry shows).
	Check func(e *ProviderEntries, ps []Provider)
	// WarmStates, when set, returns the warm pool states (WarmStopped,
	// WarmRunning) p's servers can wait in, and for the others what p
	// lacks (", since it has no power_off and power_on commands"). A type
	// without it keeps no warm pool.
	WarmStates func(p *Provider) (states []string, hint string)
}

// providerTypes are the registered types, in the order they registered:
// the order of the error naming them and of the reference.
var providerTypes []ProviderType

// RegisterProvider adds a type of provider entry. It panics on a type
// registered twice or without a name or decoder: a programming error,
// found at start.
func RegisterProvider(pt ProviderType) {
	if pt.Name == "" || pt.Decode == nil {
		panic("config: RegisterProvider: a type needs a name and a decoder")
	}
	if _, ok := LookupProvider(pt.Name); ok {
		panic("config: RegisterProvider: type " + pt.Name + " registered twice")
	}
	providerTypes = append(providerTypes, pt)
}

// LookupProvider returns the registered type named name.
func LookupProvider(name string) (ProviderType, bool) {
	for _, pt := range providerTypes {
		if pt.Name == name {
			return pt, true
		}
	}
	return ProviderType{}, false
}

// ProviderTypes returns the registered types, in registration order.
func ProviderTypes() []ProviderType { return slices.Clone(providerTypes) }

// KeyTypes are the types of the structs holding pt's keys.
func (pt ProviderType) KeyTypes() []reflect.Type {
	var ts []reflect.Type
	if pt.Cloud {
		ts = append(ts, reflect.TypeFor[CloudProvider]())
	}
	for _, k := range pt.Keys {
		ts = append(ts, reflect.TypeOf(k))
	}
	return ts
}

// requiredKeys are the keys an entry of type pt must have besides name
// and type: its types' required keys and its own.
func (pt ProviderType) requiredKeys() []string {
	var keys []string
	for _, t := range pt.KeyTypes() {
		for _, k := range schemaOf(t) {
			if k.required {
				keys = append(keys, k.name)
			}
		}
	}
	return append(keys, pt.Required...)
}

// providerKeys are the keys of an entry of providers of type typ.
func providerKeys(typ string) []string {
	var keys []string
	for _, k := range schemaOf(reflect.TypeFor[Provider]()) {
		keys = append(keys, k.name)
	}
	// An unknown type is reported as such, not each of its keys.
	_, known := LookupProvider(typ)
	for _, pt := range providerTypes {
		if typ == pt.Name || typ != "" && !known {
			for _, t := range pt.KeyTypes() {
				for _, k := range schemaOf(t) {
					if !slices.Contains(keys, k.name) {
						keys = append(keys, k.name)
					}
				}
			}
		}
	}
	return keys
}

// ProviderEntry is one entry of providers being decoded, for its type's
// Decode: its keys, with errors reported at their FILE:LINE:COL.
type ProviderEntry struct {
	d *decoder
	f *fields
}

// Node returns the value of key, nil when absent or null.
func (e *ProviderEntry) Node(key string) *yaml.Node { return e.f.get(key) }

// Field is key's path in errors ("providers[0].key").
func (e *ProviderEntry) Field(key string) string { return e.f.field(key) }

// Errorf reports an error at n about field.
func (e *ProviderEntry) Errorf(n *yaml.Node, field, format string, args ...any) {
	e.d.errorf(n, field, format, args...)
}

// String decodes key as a string, def when absent; the node is nil then,
// or when the value is not a string (reported).
func (e *ProviderEntry) String(key, def string) (string, *yaml.Node) { return e.f.str(key, def) }

// Int decodes key as an integer, as String.
func (e *ProviderEntry) Int(key string, def int) (int, *yaml.Node) { return e.f.integer(key, def) }

// Bool decodes key as true or false, as String.
func (e *ProviderEntry) Bool(key string, def bool) (bool, *yaml.Node) { return e.f.boolean(key, def) }

// Secret reads the secret key names from KEY_file or KEY_env (never from
// the config itself); required reports neither given.
func (e *ProviderEntry) Secret(key string, required bool) string {
	return e.d.secret(e.f, key, required)
}

// CheckEach reports the items that check rejects and returns all their
// values.
func (e *ProviderEntry) CheckEach(items []StringItem, check func(string) error) []string {
	its := make([]item, len(items))
	for i, it := range items {
		its[i] = item{val: it.Val, node: it.Node, field: it.Field}
	}
	return e.d.checkEach(its, check)
}

// Duration decodes key as a duration from least to most, def when absent.
func (e *ProviderEntry) Duration(key string, def, least, most time.Duration) time.Duration {
	return e.d.within(e.f, key, def, least, most)
}

// Sequence checks that n is a list (of what, for the error) and returns
// its items.
func (e *ProviderEntry) Sequence(n *yaml.Node, field, what string) ([]*yaml.Node, bool) {
	return e.d.sequence(n, field, what)
}

// Integer decodes n as an integer.
func (e *ProviderEntry) Integer(n *yaml.Node, field string) (int, bool) { return e.d.integer(n, field) }

// Number decodes n as a number.
func (e *ProviderEntry) Number(n *yaml.Node, field string) (float64, bool) {
	return e.d.number(n, field)
}

// Labels decodes n as a mapping of label names to values (as a group's
// placement.labels, which are matched against them).
func (e *ProviderEntry) Labels(n *yaml.Node, field string) map[string]string {
	return e.d.labels(n, field)
}

// Str decodes n as a string.
func (e *ProviderEntry) Str(n *yaml.Node, field string) (string, bool) { return e.d.str(n, field) }

// FromConfigDir resolves path p relative to the config file's directory.
func (e *ProviderEntry) FromConfigDir(p string) string { return abs(e.d.dir, p) }

// Root is the entry's mapping node (nil when it is not a mapping).
func (e *ProviderEntry) Root() *yaml.Node { return e.f.node }

// Section checks that n, at field, is a mapping of the keys of keysOf's
// type (a struct with yaml tags), reporting its required keys that are
// absent, and returns it as an entry to decode.
func (e *ProviderEntry) Section(n *yaml.Node, field string, keysOf any) *ProviderEntry {
	return &ProviderEntry{d: e.d, f: sectionOf(e.d, reflect.TypeOf(keysOf), n, field)}
}

// StringItem is one string of a list, with its node and field.
type StringItem struct {
	Node  *yaml.Node
	Field string
	Val   string
}

// Strings decodes key as one string or a list of strings.
func (e *ProviderEntry) Strings(key string) []StringItem {
	var out []StringItem
	for _, it := range e.f.strings(key) {
		out = append(out, StringItem{Node: it.node, Field: it.field, Val: it.val})
	}
	return out
}

// Entry is one key and value of a mapping.
type Entry struct {
	Key  string
	K, V *yaml.Node
}

// Entries checks that n, at field, is a mapping and returns its entries.
func (e *ProviderEntry) Entries(n *yaml.Node, field string) ([]Entry, bool) {
	list, ok := e.d.entries(n, field)
	out := make([]Entry, len(list))
	for i, it := range list {
		out[i] = Entry{Key: it.key, K: it.k, V: it.v}
	}
	return out, ok
}

// Value decodes n as a scalar written as a string.
func (e *ProviderEntry) Value(n *yaml.Node, field string) (string, bool) { return e.d.value(n, field) }

// Path resolves a file path of the config: ~ is the home of the user
// running shoal, a relative path is relative to the config file.
func (e *ProviderEntry) Path(p string) string { return e.d.path(p) }

// Describe writes n's value or kind for an error message.
func Describe(n *yaml.Node) string { return describe(n) }

// CheckHostName accepts a DNS host name.
func CheckHostName(name string) error { return checkHostName(name) }

// MaxTimeout bounds the config's timeouts.
const MaxTimeout = maxTimeout

// maxTimeout bounds grace, drain and stop timeouts: the job timeout adds them
// up, and anything longer than a day is a typo.
const maxTimeout = 24 * time.Hour

// maxCooldown bounds cooldowns, which are added to the current time.
const maxCooldown = 30 * 24 * time.Hour

// Truncate shortens s for an error message.
func Truncate(s string) string { return truncate(s) }

// Join is the path of key under path in errors.
func Join(path, key string) string { return join(path, key) }

// MaxKeyFile bounds a key or credentials file read at load.
const MaxKeyFile = maxKeyFile

// ReadRegular reads a regular file of at most max bytes (see readRegular).
func ReadRegular(path string, max int64) ([]byte, error) { return readRegular(path, max) }

// ProviderEntries reports the errors a type's Check finds.
type ProviderEntries struct {
	d     *decoder
	provs map[string]providerLabels
}

// Errorf reports an error at key of entry p (at the entry when p has no
// such key).
func (e *ProviderEntries) Errorf(p Provider, key, format string, args ...any) {
	pl, ok := e.provs[p.Name]
	if !ok {
		return
	}
	e.d.errorf(keyNode(pl.node, key), pl.path+"."+key, format, args...)
}

func (d *decoder) provider(item *yaml.Node, path string) (p Provider, nameNode *yaml.Node, ok bool) {
	// The type decides which other keys the entry may have.
	typ := ""
	if item.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(item.Content); i += 2 {
			if k, v := resolve(item.Content[i]), resolve(item.Content[i+1]); k.Value == "type" && v.Kind == yaml.ScalarNode {
				typ = v.Value
			}
		}
	}
	f := d.mapping(item, path, providerKeys(typ)...)
	if f.node == nil {
		return p, nil, false
	}
	f.require("name", "type")
	if name, n := f.str("name", ""); n != nil {
		switch {
		case name == ProviderLocal:
			d.errorf(n, f.field("name"), "%q is the built-in provider (this machine); choose another name", ProviderLocal)
		case !nameRE.MatchString(name):
			d.errorf(n, f.field("name"), "must match %s, got %q", namePattern, name)
		default:
			p.Name, nameNode = name, n
		}
	}
	t, tn := f.str("type", "")
	if tn == nil {
		return p, nameNode, true
	}
	p.Type = t
	pt, known := LookupProvider(t)
	graceDef := DefaultCloudHealthGrace
	if known && !pt.Cloud {
		graceDef = 0
	}
	p.HealthGrace = d.within(f, "health_grace", graceDef, time.Second, maxTimeout)
	if !known {
		names := make([]string, len(providerTypes))
		for i, pt := range providerTypes {
			names[i] = pt.Name
		}
		d.errorf(tn, f.field("type"), "unknown provider type %q; known: %s", t, strings.Join(names, ", "))
		return p, nameNode, true
	}
	f.require(pt.requiredKeys()...)
	if pt.Cloud {
		p.Cloud = d.cloudProvider(f)
	}
	pt.Decode(&ProviderEntry{d: d, f: f}, &p)
	return p, nameNode, true
}

// labelRE is what a label name may be.
var labelRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// path resolves a file path of the config: ~ or ~/ is the home of the
// user running shoal, a relative path is relative to the config file.
func (d *decoder) path(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, p[1:])
		}
	}
	return abs(d.dir, p)
}

// readRegular reads a regular file of at most max bytes, refusing anything
// else so that a mistaken path such as a FIFO or /dev/zero cannot hang or
// exhaust the load.
func readRegular(path string, max int64) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, max)
	}
	return b, nil
}

// labels decodes a mapping of label names to values.
func (d *decoder) labels(n *yaml.Node, path string) map[string]string {
	entries, _ := d.entries(n, path)
	out := make(map[string]string, len(entries))
	for _, e := range entries {
		field := join(path, e.key)
		if !labelRE.MatchString(e.key) {
			d.errorf(e.k, field, "a label name must match %s, got %q", labelRE, e.key)
			continue
		}
		v, ok := d.str(e.v, field)
		if !ok {
			continue
		}
		out[e.key] = v
	}
	return out
}

// groupProvider checks a group's providers (g.Providers, from the file at
// r's nodes when it names them) against the providers, and decodes its
// placement, which only a provider with hosts has: r.keys are the group's
// keys. A group only on clouds has no template keys but version; its
// providers may lend their health_grace (the longest).
func (d *decoder) groupProvider(g *Group, r groupRef, provs map[string]providerLabels) {
	f, def := r.keys, defaultGroup
	nodes, field := r.providers, func(i int) string { return f.field("providers") + fmt.Sprintf("[%d].name", i) }
	if nodes == nil {
		nodes, field = []*yaml.Node{r.provider}, func(int) string { return f.field("provider") }
	}
	var hosted []string // the providers with hosts, for placement
	grace, unknown := time.Duration(0), false
	for i, p := range g.ProviderList() {
		pl, known := provs[p.Name]
		if p.Name != ProviderLocal && !known {
			unknown = true // reported once, not again by placement
			if i < len(nodes) && nodes[i] != nil {
				names := append([]string{ProviderLocal}, slices.Sorted(maps.Keys(provs))...)
				d.errorf(nodes[i], field(i), "unknown provider %q; the config has %s", p.Name, strings.Join(names, ", "))
			}
		}
		if known && !pl.cloud {
			hosted = append(hosted, p.Name)
		}
		if known {
			grace = max(grace, pl.grace)
		}
	}
	name := g.ProviderList()[0].Name
	g.Placement = def.Placement
	d.checkWarmPool(g, f.get("warm_pool"), f, provs)
	if allCloud(provs, g) {
		d.cloudGroup(f, name, provs[name].typ)
	} else {
		f.require("template") // a process needs its command
	}
	if grace > 0 && !hasKey(f.get("health"), "grace") {
		g.Health.Grace = grace
	}
	n := f.get("placement")
	if n == nil {
		return
	}
	pf := section[Placement](d, n, f.field("placement"))
	if len(hosted) == 0 && !unknown {
		if isCloud(provs, name) {
			d.errorf(n, f.field("placement"), "provider %s creates a server for each instance, so there is no host to place it on; leave placement out", name)
		} else {
			d.errorf(n, f.field("placement"), "the local provider runs every instance on this machine, so there is nothing to place; set provider to a provider with hosts, or leave placement out")
		}
		return
	}
	if s, sn := pf.str("strategy", def.Placement.Strategy); sn != nil {
		if s != PlaceSpread && s != PlacePack {
			d.errorf(sn, pf.field("strategy"), "must be %s or %s, got %q", PlaceSpread, PlacePack, s)
		} else {
			g.Placement.Strategy = s
		}
	}
	if cn := pf.get("consolidation"); cn != nil {
		g.Placement.Consolidation = d.consolidation(cn, pf.field("consolidation"), g.Placement.Strategy)
	}
	ln := pf.get("labels")
	if ln == nil {
		return
	}
	g.Placement.Labels = d.labels(ln, pf.field("labels"))
	if unknown {
		return
	}
	for _, h := range hosted {
		pl := provs[h]
		if pl.broken {
			return
		}
		for _, labels := range pl.hosts {
			if hasLabels(labels, g.Placement.Labels) {
				return
			}
		}
	}
	d.errorf(ln, pf.field("labels"), "no host of provider %s carries all of %s, so no instance could be placed", strings.Join(hosted, " or "), formatLabels(g.Placement.Labels))
}

// isCloud reports whether provider name is a cloud's.
func isCloud(provs map[string]providerLabels, name string) bool {
	pl, ok := provs[name]
	return ok && pl.cloud
}

// hasKey reports whether n is a mapping with key.
func hasKey(n *yaml.Node, key string) bool {
	if n == nil {
		return false
	}
	if n = resolve(n); n.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if resolve(n.Content[i]).Value == key {
			return true
		}
	}
	return false
}

// hasLabels reports whether labels include every one of want.
func hasLabels(labels, want map[string]string) bool {
	for k, v := range want {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// formatLabels writes labels as {k: v, ...}, sorted.
func formatLabels(l map[string]string) string {
	parts := make([]string, 0, len(l))
	for _, k := range slices.Sorted(maps.Keys(l)) {
		parts = append(parts, k+": "+l[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// checkPlanMaps reports the keys of a provider's plan map (sacloud's
// server_plans, ec2's instance_types) that no group on the provider has as
// a plan: a typo would silently size servers by the default.
func (d *decoder) checkPlanMaps(ps []Provider, groups []Group, provs map[string]providerLabels) {
	for _, p := range ps {
		pt, ok := LookupProvider(p.Type)
		if !ok || pt.Plans == nil {
			continue
		}
		key, names := pt.Plans(&p)
		if len(names) == 0 {
			continue
		}
		known := map[string]bool{}
		for _, g := range groups {
			if g.UsesProvider(p.Name) {
				for _, pl := range g.Plans {
					known[pl.Name] = true
				}
			}
		}
		for _, name := range names {
			if !known[name] {
				pl := provs[p.Name]
				d.errorf(keyNode(pl.node, key, name), join(pl.path+"."+key, name), "no group on provider %s has a plan %q; plans: %s", p.Name, name, strings.Join(slices.Sorted(maps.Keys(known)), ", "))
			}
		}
	}
}

// keyNode returns the key node at keys below mapping n, or the deepest
// one found on the way (n itself when the first is absent).
func keyNode(n *yaml.Node, keys ...string) *yaml.Node {
	at := n
	for _, k := range keys {
		if n == nil || n.Kind != yaml.MappingNode {
			return at
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				at, next = n.Content[i], resolve(n.Content[i+1])
			}
		}
		if next == nil {
			return at
		}
		n = next
	}
	return at
}

// consolidation decodes placement.consolidation, which needs strategy pack:
// spread placement would put instances back on the emptied host.
func (d *decoder) consolidation(n *yaml.Node, path, strategy string) *Consolidation {
	f := section[Consolidation](d, n, path)
	c := new(defaultConsolidation)
	if strategy != PlacePack {
		d.errorf(n, path, "consolidation empties hosts that pack placement then leaves empty; it needs placement.strategy %s, got %s", PlacePack, strategy)
	}
	if v, vn := f.integer("max_moves", c.MaxMoves); vn != nil && (v < 1 || v > maxConsolidationMoves) {
		d.errorf(vn, f.field("max_moves"), "must be from 1 to %d (the most instances moved to empty one host), got %d", maxConsolidationMoves, v)
	} else {
		c.MaxMoves = v
	}
	if v, vn := f.duration("after", c.After); vn != nil && v > maxConsolidationAfter {
		d.errorf(vn, f.field("after"), "must be at most %s, got %s", maxConsolidationAfter, v)
	} else {
		c.After = v
	}
	return c
}

// groupProviders decodes a group's providers list: each entry's keys, and
// max and cost_per_hour at least 0. Whether each name is a provider is
// link's check (groupProvider); nodes are the entries' name nodes.
func (d *decoder) groupProviders(n *yaml.Node, path string) (out []GroupProvider, nodes []*yaml.Node) {
	items, ok := d.sequence(n, path, "a list of {name, max, cost_per_hour}")
	if !ok {
		return nil, nil
	}
	if len(items) == 0 {
		d.errorf(n, path, "must name at least one provider")
		return []GroupProvider{{}}, nil // an unknown one: nothing more is reported of it
	}
	seen := map[string]*yaml.Node{}
	for i, item := range items {
		f := section[GroupProvider](d, item, fmt.Sprintf("%s[%d]", path, i))
		if f.node == nil {
			continue
		}
		name, nn := f.str("name", "")
		if nn == nil {
			continue
		}
		if first, dup := seen[name]; dup {
			d.errorf(nn, f.field("name"), "provider %s is in the list twice (first at line %d): each provider is one entry, with its max", name, first.Line)
			continue
		}
		seen[name] = nn
		p := GroupProvider{Name: name}
		if v, vn := f.integer("max", 0); vn != nil {
			if v < 0 {
				d.errorf(vn, f.field("max"), "must be >= 0 (0: the provider's hosts' capacity, or no bound), got %d", v)
			} else {
				p.Max = v
			}
		}
		if v, vn := f.number("cost_per_hour"); vn != nil {
			if v < 0 {
				d.errorf(vn, f.field("cost_per_hour"), "must be >= 0, got %v", v)
			} else {
				p.CostPerHour = v
			}
		}
		out, nodes = append(out, p), append(nodes, nn)
	}
	return out, nodes
}

// allCloud reports whether every provider of g creates cloud servers
// (then the group's template has no command: each server runs the
// cloud's).
func allCloud(provs map[string]providerLabels, g *Group) bool {
	for _, p := range g.ProviderList() {
		if !isCloud(provs, p.Name) {
			return false
		}
	}
	return true
}
