package config

import (
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// WarmPool is a group's pool of servers created ahead of need, out of
// rotation: a scale-out takes one (boots it if stopped) instead of waiting
// for a create and a first boot. Pool servers count toward cost, not
// toward the group's size. On an ssh provider the pool is instances
// started and health-checked on the hosts (state running only), which
// count toward the hosts' capacity.
type WarmPool struct {
	// Size is how many servers the pool keeps (at most the group's
	// max_size).
	Size int `yaml:"size" required:"true"`
	// State is how pool servers wait: WarmStopped (shut down: the cloud
	// bills their disks only; a take boots them) or WarmRunning (running
	// out of rotation: a take only health-checks them; on an ssh provider,
	// checked already, it goes in service at once).
	State string `yaml:"state"`
	// ReuseOnScaleIn returns a server a scale-in retires to the pool
	// instead of deleting it, while the pool has room and the server runs
	// the group's current template.
	ReuseOnScaleIn bool `yaml:"reuse_on_scale_in"`
	// Provider is the entry of the group's providers that keeps the pool
	// (its cloud provider, else its provider with hosts), set by the
	// loader.
	Provider string `yaml:"-" json:"-"`
}

// The warm pool states.
const (
	WarmStopped = "stopped"
	WarmRunning = "running"
)

// WarmStates lists the valid warm pool states.
var WarmStates = []string{WarmStopped, WarmRunning}

var defaultWarmPool = WarmPool{State: WarmStopped}

// warmPool decodes a group's warm_pool (nil when it has none); its
// provider is checked by link (checkWarmPool).
func (d *decoder) warmPool(n *yaml.Node, path string, g *Group) *WarmPool {
	if n == nil {
		return nil
	}
	f := section[WarmPool](d, n, path)
	if f.node == nil {
		return nil
	}
	w := new(defaultWarmPool)
	if v, vn := f.integer("size", 0); vn != nil {
		switch {
		case v < 1:
			d.errorf(vn, f.field("size"), "must be at least 1 (to keep no pool, leave warm_pool out), got %d", v)
		case g.MaxSize > 0 && v > g.MaxSize:
			d.errorf(vn, f.field("size"), "must be at most the group's max_size (%d), got %d: a pool larger than the group could ever take from holds servers that never serve", g.MaxSize, v)
		default:
			w.Size = v
		}
	}
	if s, sn := f.str("state", w.State); sn != nil {
		if !slices.Contains(WarmStates, s) {
			d.errorf(sn, f.field("state"), "must be one of %s (pool servers shut down, or running out of rotation), got %q", strings.Join(WarmStates, ", "), s)
			w.State = "" // refused already: not checked against the provider
		} else {
			w.State = s
		}
	}
	w.ReuseOnScaleIn, _ = f.boolean("reuse_on_scale_in", false)
	return w
}

// checkWarmPool refuses a warm pool its group's provider cannot keep: not
// a cloud's nor one with hosts, or a state the provider's type (or entry)
// cannot hold. It sets the pool's Provider.
func (d *decoder) checkWarmPool(g *Group, n *yaml.Node, f *fields, provs map[string]providerLabels) {
	if g.WarmPool == nil || n == nil {
		return
	}
	path := f.field("warm_pool")
	// The pool is kept by the group's cloud provider: in a group across
	// providers, the one its scale-outs rent. Without one, by its provider
	// with hosts (ssh: a running pool).
	var clouds, hosts []string
	for _, p := range g.ProviderList() {
		pl, ok := provs[p.Name]
		switch {
		case ok && pl.cloud:
			clouds = append(clouds, p.Name)
		case ok && len(pl.warmStates) > 0:
			hosts = append(hosts, p.Name)
		}
	}
	if len(clouds) == 0 {
		clouds = hosts
	}
	switch len(clouds) {
	case 0:
		d.errorf(n, path, "provider %s cannot keep a warm pool: only a cloud provider's servers (exec, ec2, sacloud), created ahead of need, or an ssh provider's instances, running out of rotation, can", g.ProviderList()[0].Name)
		return
	case 1:
	default:
		d.errorf(n, path, "the group has %d providers that could keep its warm pool (%s): a warm pool is kept by one, so the group may name only one", len(clouds), strings.Join(clouds, ", "))
		return
	}
	name := clouds[0]
	pl := provs[name]
	g.WarmPool.Provider = name
	if !pl.cloud && g.Template.IsContainer() {
		d.errorf(n, path, "a warm pool on provider %s (type %s) runs commands: a template with an image cannot keep one there", name, pl.typ)
		return
	}
	if pl.broken || g.WarmPool.State == "" || slices.Contains(pl.warmStates, g.WarmPool.State) {
		return
	}
	if len(pl.warmStates) == 0 {
		d.errorf(n, path, "provider %s (type %s) cannot keep a warm pool", name, pl.typ)
		return
	}
	d.errorf(n, path+".state", "provider %s (type %s) can keep pool servers only %s, not %s%s", name, pl.typ,
		strings.Join(pl.warmStates, " or "), g.WarmPool.State, pl.warmHint)
}
