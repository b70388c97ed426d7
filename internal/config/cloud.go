package config

import (
	"fmt"
	"strings"
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

// execProvider decodes an exec provider's commands: each an argv of
// templates over ExecData, trial-run now.
func (d *decoder) execProvider(f *fields) *ExecProvider {
	def := DefaultExec
	e := &ExecProvider{}
	for _, c := range []struct {
		key string
		out *[]string
	}{{"start", &e.Start}, {"stop", &e.Stop}, {"list", &e.List}} {
		n := f.get(c.key)
		if n == nil {
			continue
		}
		items, ok := d.sequence(n, f.field(c.key), "a list of strings (an argv; there is no shell)")
		if ok && len(items) == 0 {
			d.errorf(n, f.field(c.key), "must not be empty")
		}
		for i, item := range items {
			field := fmt.Sprintf("%s[%d]", f.field(c.key), i)
			s, ok := d.str(item, field)
			if !ok {
				continue
			}
			_, out, err := compileArg(s, sampleExecData)
			if err == nil && i == 0 && out == "" {
				err = fmt.Errorf("expands to an empty program name")
			}
			if err != nil {
				d.errorf(item, field, "%v", err)
			}
			if i == 0 && strings.Contains(s, "/") && !strings.Contains(s, "{{") {
				// A program named by path is relative to the config file,
				// as instance templates' are to their dir.
				s = abs(d.dir, s)
			}
			*c.out = append(*c.out, s)
		}
	}
	e.Timeout = d.within(f, "timeout", def.Timeout, minCloudTimeout, time.Hour)
	return e
}

// cloudGroup checks a group of a cloud provider: hooks would have to run
// on the server, which shoal does not log in to.
func (d *decoder) cloudGroup(f *fields, prov string) {
	tn := f.get("template")
	if tn == nil || resolve(tn).Kind != yaml.MappingNode {
		return // reported by the template's decoding
	}
	tn = resolve(tn)
	for i := 0; i+1 < len(tn.Content); i += 2 {
		k := resolve(tn.Content[i])
		if k.Value == "pre_start" || k.Value == "pre_stop" {
			d.errorf(k, join(f.field("template"), k.Value), "provider %s runs no hooks: shoal does not log in to cloud servers (a server's image prepares itself at boot; shoal shuts it down before deleting it)", prov)
		}
	}
}
