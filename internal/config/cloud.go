package config

import (
	"reflect"
	"slices"
	"time"

	"gopkg.in/yaml.v3"
)

// Bounds of a cloud provider's durations.
const (
	minCloudInterval = 100 * time.Millisecond
	maxCloudInterval = 10 * time.Minute
	minCloudTimeout  = time.Second
	maxCloudTimeout  = 24 * time.Hour
)

// cloudProvider decodes the keys every cloud provider type has.
func (d *decoder) cloudProvider(f *fields) *CloudProvider {
	def := DefaultCloud
	c := &CloudProvider{}
	if v, n := f.integer("port", 0); n != nil {
		if v < 1 || v > 65535 {
			d.errorf(n, f.field("port"), "must be a port from 1 to 65535 (where every server serves), got %d", v)
		}
		c.Port = v
	}
	c.Interval = d.within(f, "interval", def.Interval, minCloudInterval, maxCloudInterval)
	c.BootTimeout = d.within(f, "boot_timeout", def.BootTimeout, minCloudTimeout, maxCloudTimeout)
	c.CreateTimeout = d.within(f, "create_timeout", def.CreateTimeout, minCloudTimeout, maxCloudTimeout)
	c.DeleteTimeout = d.within(f, "delete_timeout", def.DeleteTimeout, minCloudTimeout, maxCloudTimeout)
	if n := f.get("emulator"); n != nil {
		c.Emulator = d.emulator(n, f.field("emulator"))
	}
	return c
}

// emulator decodes the stand-ins of a provider that talks to an emulator.
func (d *decoder) emulator(n *yaml.Node, path string) *Emulator {
	f := section[Emulator](d, n, path)
	if f.node == nil {
		return nil
	}
	e := &Emulator{}
	sn := f.get("stand_in")
	if sn == nil {
		return e
	}
	e.StandIn, _ = d.argv(sn, f.field("stand_in"), sampleData("web", nil), nil)
	return e
}

// cloudGroup checks a group of a cloud provider. Its servers run their
// image, never the group's template, so of a template only version means
// anything (a deploy of a new version replaces every server); the other
// keys are refused rather than silently ignored: an operator who writes a
// command, env or hooks expects them to run.
func (d *decoder) cloudGroup(f *fields, prov, typ string) {
	tn := f.get("template")
	if tn == nil || resolve(tn).Kind != yaml.MappingNode {
		return // reported by the template's decoding
	}
	tn = resolve(tn)
	pt, _ := LookupProvider(typ)
	source := pt.Source
	for i := 0; i+1 < len(tn.Content); i += 2 {
		k := resolve(tn.Content[i])
		switch {
		case k.Value == "version":
		case k.Value == "pre_start" || k.Value == "pre_stop":
			d.errorf(k, join(f.field("template"), k.Value), "provider %s runs no hooks: shoal does not log in to cloud servers (a server's image prepares itself at boot; shoal shuts it down before deleting it)", prov)
		case slices.ContainsFunc(schemaOf(reflect.TypeFor[Template]()), func(sk schemaKey) bool { return sk.name == k.Value }):
			d.errorf(k, join(f.field("template"), k.Value), "provider %s (%s) never uses it: each server runs %s, not the group's template; a cloud group's template may have only version (a deploy of a new one replaces every server), or be left out", prov, typ, source)
		}
	}
}
