package config

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/template"

	"github.com/sacloud/iaas-api-go/ostype"
	"github.com/sacloud/iaas-api-go/types"
	"gopkg.in/yaml.v3"
)

// SacloudDriver is a Sakura Cloud server group as sacloud/autoscaler's
// ServerGroup resource defines it (zone, shutdown_force, a server template),
// minus what shoal owns: the group's name, sizes and plans are the group's,
// and shoal is the load balancer (no expose). Each server is named after its
// instance (GROUP-NNN, the autoscaler's default server_name_format) and
// carries shoal's marker tags besides the template's.
type SacloudDriver struct {
	Zone string `yaml:"zone" required:"true"`
	// ShutdownForce powers servers off instead of an ACPI shutdown on
	// scale-in.
	ShutdownForce bool `yaml:"shutdown_force"`
	// ServerPlans maps the group's plan names (its plans' names) to a
	// server size; a plan not listed, or no plan, takes Template.Plan.
	ServerPlans map[string]SacloudPlan `yaml:"server_plans"`
	Template    SacloudTemplate        `yaml:"template" required:"true"`
	// CredentialsFile is a usacloud profile (config.json, with
	// AccessToken and AccessTokenSecret); without it the API keys come
	// from SAKURACLOUD_ACCESS_TOKEN and SAKURACLOUD_ACCESS_TOKEN_SECRET.
	// Neither is kept in the config: the driver reads them when built.
	CredentialsFile string `yaml:"credentials_file"`
	// FakeMode runs every sacloud call against iaas-api-go's in-process
	// fake of the API, an emulator: no account, no server, no address
	// anyone can reach. FakeStorePath keeps the fake's state in a JSON
	// file, so that a restarted shoal (or a test) sees the same servers.
	FakeMode      bool   `yaml:"fake_mode"`
	FakeStorePath string `yaml:"fake_store_path"`
}

// SacloudTemplate is what every server of the group is created from.
type SacloudTemplate struct {
	// Tags are the servers' own tags, besides shoal's markers.
	Tags        []string `yaml:"tags"`
	Description string   `yaml:"description"`
	// InterfaceDriver is virtio or e1000.
	InterfaceDriver string      `yaml:"interface_driver"`
	Plan            SacloudPlan `yaml:"plan" required:"true"`
	// Disks are created in order; the first is the boot disk and gets
	// EditParameter.
	Disks         []SacloudDisk `yaml:"disks"`
	EditParameter *SacloudEdit  `yaml:"edit_parameter"`
	// NetworkInterfaces: the first one's address is the instance's.
	NetworkInterfaces []SacloudNIC `yaml:"network_interfaces"`
}

// SacloudPlan is a server size: cores and memory in GB.
type SacloudPlan struct {
	Core         int  `yaml:"core" required:"true"`
	Memory       int  `yaml:"memory" required:"true"`
	DedicatedCPU bool `yaml:"dedicated_cpu"`
}

// SacloudDisk is one disk of a server: from an OS type's latest public
// archive, from a chosen archive, or blank when it names neither.
type SacloudDisk struct {
	OSType        string           `yaml:"os_type"`
	SourceArchive *SacloudSelector `yaml:"source_archive"`
	// Plan is ssd or hdd; Connection virtio or ide; Size in GB.
	Plan       string `yaml:"plan"`
	Connection string `yaml:"connection"`
	Size       int    `yaml:"size"`
}

// SacloudSelector finds one resource (an archive, a switch): by ID, or by
// names (each a part of the name) and tags (all of them).
type SacloudSelector struct {
	ID    string   `yaml:"id"`
	Names []string `yaml:"names"`
	Tags  []string `yaml:"tags"`
}

// SacloudEdit is the boot disk's "edit parameter": what the cloud writes
// into the OS before its first boot.
type SacloudEdit struct {
	Disabled            bool `yaml:"disabled"`
	DisablePasswordAuth bool `yaml:"disable_pw_auth"`
	EnableDHCP          bool `yaml:"enable_dhcp"`
	ChangePartitionUUID bool `yaml:"change_partition_uuid"`
	// Password is the OS's administrator password, from password (as
	// sacloud/autoscaler writes it; "" sets none), password_file or
	// password_env. It is never logged or shown.
	Password string
	_        struct{} `yaml:"password"`
	// password_file is a file that holds the administrator password.
	_ struct{} `yaml:"password_file"`
	// password_env is an environment variable that holds the
	// administrator password.
	_ struct{} `yaml:"password_env"`
	// SSHKeys are public keys.
	SSHKeys []string `yaml:"ssh_keys"`
	// StartupScripts are Go templates of SacloudScriptData, run at first
	// boot.
	StartupScripts []string `yaml:"startup_scripts"`
}

// SacloudScriptData is what a startup script's template sees: {{.Name}} is
// the server's name, as in the seed's scripts.
type SacloudScriptData struct {
	Name  string
	Group string
	Index int
	Zone  string
}

// Scripts renders the startup scripts for one server. (They are parsed
// here, not kept parsed: the config stays plain data, which reloads
// compare.)
func (e *SacloudEdit) Scripts(d SacloudScriptData) ([]string, error) {
	out := make([]string, 0, len(e.StartupScripts))
	for i, s := range e.StartupScripts {
		text, err := renderScript(s, d)
		if err != nil {
			return nil, fmt.Errorf("startup_scripts[%d]: %w", i, err)
		}
		out = append(out, text)
	}
	return out, nil
}

func renderScript(s string, d SacloudScriptData) (string, error) {
	t, err := template.New("startup_script").Option("missingkey=error").Parse(s)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if err := t.Execute(&b, d); err != nil {
		return "", err
	}
	return b.String(), nil
}

// SacloudNIC is one network interface: on the shared segment (Shared), or
// on the switch Switch selects, with addresses from AssignCIDRBlock (the
// server with index i takes the block's address plus i, as the autoscaler
// assigns them).
type SacloudNIC struct {
	// Upstream is "shared" or a selector of a switch.
	Shared           bool             `yaml:"-"`
	Switch           *SacloudSelector `yaml:"-"`
	_                struct{}         `yaml:"upstream" required:"true"`
	AssignCIDRBlock  string           `yaml:"assign_cidr_block"`
	AssignNetmaskLen int              `yaml:"assign_netmask_len"`
	DefaultRoute     string           `yaml:"default_route"`
	// Expose is how sacloud/autoscaler put the server behind its ELB;
	// HAProxy is shoal's balancer, so only its ports are checked: they
	// must include the provider's port, where every server serves.
	Expose *SacloudExpose `yaml:"expose"`
}

// SacloudExpose is a NIC's expose section of sacloud/autoscaler.
type SacloudExpose struct {
	Ports []int `yaml:"ports"`
	// ServerGroupName was the ELB's server group; the group's HAProxy
	// backend takes its place.
	ServerGroupName string `yaml:"server_group_name"`
}

// Provider type of Sakura Cloud server groups.
const ProviderSacloud = "sacloud"

// Sakura Cloud limits the driver checks before calling the API.
const (
	maxSacloudTags  = 10
	maxSacloudTag   = 32
	maxSacloudDisks = 4
	maxSacloudNICs  = 10
)

// defaultSacloudDriver and defaultSacloudDisk hold the defaults of their
// keys (the autoscaler's, and the seed's disk).
var (
	defaultSacloudDriver = SacloudDriver{Template: SacloudTemplate{InterfaceDriver: "virtio"}}
	defaultSacloudDisk   = SacloudDisk{Plan: "ssd", Connection: "virtio", Size: 20}
)

// sacloudDriver decodes a sacloud provider's own keys; c holds its cloud
// keys, whose emulator goes with fake_mode: the fake's servers cannot
// serve, and real servers need no stand-ins.
func (d *decoder) sacloudDriver(f *fields, c *CloudProvider) *SacloudDriver {
	def := defaultSacloudDriver
	s := &SacloudDriver{}
	if z, n := f.str("zone", ""); n != nil {
		// The SDK's list of zones is the one sacloud/autoscaler checks
		// against: a zone outside it fails every call.
		if !slices.Contains(types.ZoneNames, z) {
			d.errorf(n, f.field("zone"), "must be a Sakura Cloud zone (one of %s), got %q", strings.Join(types.ZoneNames, ", "), z)
		}
		s.Zone = z
	}
	s.ShutdownForce, _ = f.boolean("shutdown_force", def.ShutdownForce)
	if n := f.get("template"); n != nil {
		s.Template = d.sacloudTemplate(n, f.field("template"), c.Port)
	}
	if n := f.get("server_plans"); n != nil {
		entries, _ := d.entries(n, f.field("server_plans"))
		s.ServerPlans = make(map[string]SacloudPlan, len(entries))
		for _, e := range entries {
			s.ServerPlans[e.key] = d.sacloudPlan(e.v, join(f.field("server_plans"), e.key))
		}
	}
	if p, n := f.str("credentials_file", ""); n != nil {
		s.CredentialsFile = d.path(p)
		if _, _, err := ReadSacloudCredentials(s.CredentialsFile); err != nil {
			d.errorf(n, f.field("credentials_file"), "%v", err)
		}
	}
	var fn *yaml.Node
	s.FakeMode, fn = f.boolean("fake_mode", def.FakeMode)
	switch en := f.get("emulator"); {
	case s.FakeMode && c.Emulator == nil:
		d.errorf(fn, f.field("fake_mode"), "the fake API's servers cannot serve: give emulator.stand_in, a local process to stand in for each")
	case !s.FakeMode && en != nil:
		d.errorf(en, f.field("emulator"), "stands in for the fake API's servers: set fake_mode: true, or leave emulator out to use real servers")
	}
	if p, n := f.str("fake_store_path", ""); n != nil {
		s.FakeStorePath = d.path(p)
		switch fi, err := os.Stat(filepath.Dir(s.FakeStorePath)); {
		case !s.FakeMode:
			d.errorf(n, f.field("fake_store_path"), "is the fake API's store: set fake_mode: true, or leave it out")
		case err != nil || !fi.IsDir():
			d.errorf(n, f.field("fake_store_path"), "directory %s does not exist", filepath.Dir(s.FakeStorePath))
		}
	}
	return s
}

// checkSacloudProviders checks what only the whole list shows: the fake is
// one per process (iaas-api-go switches every client to it), so a config
// with it has no real sacloud provider and one store.
func checkSacloudProviders(e *ProviderEntries, ps []Provider) {
	var fake, real, store string
	for _, p := range ps {
		if p.Sacloud == nil {
			continue
		}
		switch {
		case !p.Sacloud.FakeMode:
			real = p.Name
		case fake == "":
			fake, store = p.Name, p.Sacloud.FakeStorePath
		case p.Sacloud.FakeStorePath != store:
			e.Errorf(p, "fake_store_path", "providers %s and %s both use the fake sacloud API, which is one per process: give them the same fake_store_path", fake, p.Name)
		}
	}
	if fake != "" && real != "" {
		e.Errorf(Provider{Name: fake}, "fake_mode", "the fake sacloud API replaces the real one for the whole process, and provider %s uses the real one: use one or the other", real)
	}
}

func (d *decoder) sacloudTemplate(n *yaml.Node, path string, port int) SacloudTemplate {
	f := section[SacloudTemplate](d, n, path)
	t := SacloudTemplate{InterfaceDriver: defaultSacloudDriver.Template.InterfaceDriver}
	t.Tags = d.sacloudTags(f, "tags")
	t.Description, _ = f.str("description", "")
	if len(t.Description) > 512 {
		d.errorf(f.get("description"), f.field("description"), "at most 512 characters, got %d", len(t.Description))
	}
	if v, n := f.str("interface_driver", t.InterfaceDriver); n != nil {
		if v != "virtio" && v != "e1000" {
			d.errorf(n, f.field("interface_driver"), "must be virtio or e1000, got %q", v)
		}
		t.InterfaceDriver = v
	}
	if n := f.get("plan"); n != nil {
		t.Plan = d.sacloudPlan(n, f.field("plan"))
	}
	if n := f.get("disks"); n != nil {
		items, _ := d.sequence(n, f.field("disks"), "a list of disks")
		if len(items) > maxSacloudDisks {
			d.errorf(n, f.field("disks"), "at most %d disks, got %d", maxSacloudDisks, len(items))
		}
		for i, it := range items {
			t.Disks = append(t.Disks, d.sacloudDisk(it, fmt.Sprintf("%s[%d]", f.field("disks"), i)))
		}
	}
	if n := f.get("edit_parameter"); n != nil {
		t.EditParameter = d.sacloudEdit(n, f.field("edit_parameter"))
		if len(t.Disks) == 0 || t.Disks[0].OSType == "" && t.Disks[0].SourceArchive == nil {
			d.errorf(n, f.field("edit_parameter"), "edits the first disk's OS, so the first disk needs os_type or source_archive")
		}
	}
	if n := f.get("network_interfaces"); n != nil {
		items, _ := d.sequence(n, f.field("network_interfaces"), "a list of network interfaces")
		if len(items) > maxSacloudNICs {
			d.errorf(n, f.field("network_interfaces"), "at most %d network interfaces, got %d", maxSacloudNICs, len(items))
		}
		for i, it := range items {
			nic := d.sacloudNIC(it, fmt.Sprintf("%s[%d]", f.field("network_interfaces"), i), port)
			if i > 0 && nic.Shared {
				d.errorf(it, fmt.Sprintf("%s[%d].upstream", f.field("network_interfaces"), i), "only the first network interface can be on the shared segment")
			}
			t.NetworkInterfaces = append(t.NetworkInterfaces, nic)
		}
	}
	return t
}

// sacloudTags reads a list of tags, within the cloud's limits; shoal's
// marker keys are its own.
func (d *decoder) sacloudTags(f *fields, key string) []string {
	items := f.strings(key)
	if len(items) > maxSacloudTags-2 {
		d.errorf(f.get(key), f.field(key), "at most %d tags (the API takes %d, shoal's markers are 2), got %d", maxSacloudTags-2, maxSacloudTags, len(items))
	}
	return d.checkEach(items, func(tag string) error {
		switch {
		case tag == "" || len(tag) > maxSacloudTag:
			return fmt.Errorf("a tag has 1 to %d characters, got %q", maxSacloudTag, tag)
		case strings.HasPrefix(tag, "shoal-"):
			return fmt.Errorf("tags starting with shoal- are shoal's markers, got %q", tag)
		}
		return nil
	})
}

func (d *decoder) sacloudPlan(n *yaml.Node, path string) SacloudPlan {
	f := section[SacloudPlan](d, n, path)
	var p SacloudPlan
	if v, n := f.integer("core", 0); n != nil {
		if v < 1 || v > 512 {
			d.errorf(n, f.field("core"), "must be from 1 to 512, got %d", v)
		}
		p.Core = v
	}
	if v, n := f.integer("memory", 0); n != nil {
		if v < 1 || v > 2048 {
			d.errorf(n, f.field("memory"), "must be from 1 to 2048 (GB), got %d", v)
		}
		p.Memory = v
	}
	p.DedicatedCPU, _ = f.boolean("dedicated_cpu", false)
	return p
}

func (d *decoder) sacloudDisk(n *yaml.Node, path string) SacloudDisk {
	f := section[SacloudDisk](d, n, path)
	def := defaultSacloudDisk
	disk := def
	if v, n := f.str("os_type", ""); n != nil {
		if !slices.Contains(ostype.OSTypeShortNames, v) {
			d.errorf(n, f.field("os_type"), "unknown os_type %q; known: %s", v, strings.Join(ostype.OSTypeShortNames, ", "))
		}
		disk.OSType = v
	}
	if n := f.get("source_archive"); n != nil {
		disk.SourceArchive = d.sacloudSelector(n, f.field("source_archive"))
		if disk.OSType != "" {
			d.errorf(n, f.field("source_archive"), "only one of os_type and source_archive can be given")
		}
	}
	if v, n := f.str("plan", def.Plan); n != nil {
		if v != "ssd" && v != "hdd" {
			d.errorf(n, f.field("plan"), "must be ssd or hdd, got %q", v)
		}
		disk.Plan = v
	}
	if v, n := f.str("connection", def.Connection); n != nil {
		if v != "virtio" && v != "ide" {
			d.errorf(n, f.field("connection"), "must be virtio or ide, got %q", v)
		}
		disk.Connection = v
	}
	if v, n := f.integer("size", def.Size); n != nil {
		if v < 1 {
			d.errorf(n, f.field("size"), "must be a size in GB, got %d", v)
		}
		disk.Size = v
	}
	return disk
}

func (d *decoder) sacloudSelector(n *yaml.Node, path string) *SacloudSelector {
	f := section[SacloudSelector](d, n, path)
	s := &SacloudSelector{}
	if v, n := f.str("id", ""); n != nil {
		if v == "" || strings.Trim(v, "0123456789") != "" {
			d.errorf(n, f.field("id"), "must be a resource ID (digits), got %q", v)
		}
		s.ID = v
	}
	for _, it := range f.strings("names") {
		s.Names = append(s.Names, it.val)
	}
	for _, it := range f.strings("tags") {
		s.Tags = append(s.Tags, it.val)
	}
	if f.node != nil && s.ID == "" && len(s.Names) == 0 && len(s.Tags) == 0 {
		d.errorf(n, path, "must select by id, names or tags")
	}
	if s.ID != "" && len(s.Names)+len(s.Tags) > 0 {
		d.errorf(n, path, "selects by id or by names and tags, not both")
	}
	return s
}

func (d *decoder) sacloudEdit(n *yaml.Node, path string) *SacloudEdit {
	f := section[SacloudEdit](d, n, path)
	e := &SacloudEdit{}
	e.Disabled, _ = f.boolean("disabled", false)
	e.DisablePasswordAuth, _ = f.boolean("disable_pw_auth", false)
	e.EnableDHCP, _ = f.boolean("enable_dhcp", false)
	e.ChangePartitionUUID, _ = f.boolean("change_partition_uuid", false)
	e.Password = d.sacloudPassword(f)
	e.SSHKeys = d.checkEach(f.strings("ssh_keys"), func(k string) error {
		if len(strings.Fields(k)) < 2 {
			return fmt.Errorf("must be a public key (TYPE BASE64 [COMMENT]), got %q", truncate(k))
		}
		return nil
	})
	for _, it := range f.strings("startup_scripts") {
		if _, err := renderScript(it.val, SacloudScriptData{Name: "web-001", Group: "web", Index: 1, Zone: "tk1b"}); err != nil {
			d.errorf(it.node, it.field, "template fails on a sample server (fields: .Name .Group .Index .Zone): %v", err)
			continue
		}
		e.StartupScripts = append(e.StartupScripts, it.val)
	}
	if e.Disabled && (len(e.SSHKeys) > 0 || len(e.StartupScripts) > 0 || e.Password != "") {
		d.errorf(n, path, "disabled: true but password, ssh_keys or startup_scripts are given")
	}
	return e
}

// sacloudPassword reads the administrator password from password (as the
// autoscaler's config writes it; "" is none), password_file or
// password_env. Messages never show it.
func (d *decoder) sacloudPassword(f *fields) string {
	pn := f.get("password")
	if pn == nil {
		return d.secret(f, "password", false)
	}
	for _, k := range []string{"password_file", "password_env"} {
		if kn := f.get(k); kn != nil {
			d.errorf(kn, f.field(k), "conflicts with %s; set only one", f.field("password"))
		}
	}
	if pn.Kind != yaml.ScalarNode || pn.ShortTag() != "!!str" {
		d.errorf(pn, f.field("password"), "must be a string (quote it), got %s", pn.ShortTag())
		return ""
	}
	return pn.Value // "" sets none, as in the autoscaler
}

func (d *decoder) sacloudExpose(n *yaml.Node, path string, port int) *SacloudExpose {
	f := section[SacloudExpose](d, n, path)
	e := &SacloudExpose{}
	if pn := f.get("ports"); pn != nil {
		items, _ := d.sequence(pn, f.field("ports"), "a list of ports")
		for i, it := range items {
			v, ok := d.integer(it, fmt.Sprintf("%s[%d]", f.field("ports"), i))
			if ok {
				e.Ports = append(e.Ports, v)
			}
		}
		if port > 0 && len(e.Ports) > 0 && !slices.Contains(e.Ports, port) {
			d.errorf(pn, f.field("ports"), "every server serves on the provider's port %d, which the list lacks (HAProxy connects there); got %v", port, e.Ports)
		}
	}
	e.ServerGroupName, _ = f.str("server_group_name", "")
	return e
}

func (d *decoder) sacloudNIC(n *yaml.Node, path string, port int) SacloudNIC {
	f := section[SacloudNIC](d, n, path)
	var nic SacloudNIC
	if en := f.get("expose"); en != nil {
		nic.Expose = d.sacloudExpose(en, f.field("expose"), port)
	}
	if up := f.get("upstream"); up != nil {
		if up.Kind == yaml.ScalarNode {
			if up.Value != "shared" {
				d.errorf(up, f.field("upstream"), `must be "shared" or a selector of a switch ({id: ...} or {names: [...]}), got %q`, up.Value)
			}
			nic.Shared = true
		} else {
			nic.Switch = d.sacloudSelector(up, f.field("upstream"))
		}
	}
	cidr, cn := f.str("assign_cidr_block", "")
	nic.AssignNetmaskLen, _ = f.integer("assign_netmask_len", 0)
	route, rn := f.str("default_route", "")
	if nic.Shared {
		for _, k := range []string{"assign_cidr_block", "assign_netmask_len", "default_route"} {
			if kn := f.get(k); kn != nil {
				d.errorf(kn, f.field(k), "the shared segment assigns addresses itself: leave %s out, or use a switch", k)
			}
		}
		return nic
	}
	if cn != nil {
		ip, ipnet, err := net.ParseCIDR(cidr)
		if err != nil || ip.To4() == nil {
			d.errorf(cn, f.field("assign_cidr_block"), "must be an IPv4 CIDR block such as 192.168.0.0/24, got %q", cidr)
		} else {
			nic.AssignCIDRBlock = cidr
			if route != "" && !ipnet.Contains(net.ParseIP(route)) {
				d.errorf(rn, f.field("default_route"), "must be in %s, got %q", cidr, route)
			}
		}
	}
	if n := f.get("assign_netmask_len"); n != nil && (nic.AssignNetmaskLen < 1 || nic.AssignNetmaskLen > 32) {
		d.errorf(n, f.field("assign_netmask_len"), "must be from 1 to 32, got %d", nic.AssignNetmaskLen)
	}
	if rn != nil {
		if ip := net.ParseIP(route); ip == nil || ip.To4() == nil {
			d.errorf(rn, f.field("default_route"), "must be an IPv4 address, got %q", route)
		}
		nic.DefaultRoute = route
	}
	return nic
}

// PlanFor returns the server size of a group's plan ("" for none).
func (s *SacloudDriver) PlanFor(plan string) SacloudPlan {
	if p, ok := s.ServerPlans[plan]; ok && plan != "" {
		return p
	}
	return s.Template.Plan
}

// checkPlanMaps reports the keys of a provider's plan map (sacloud's
// server_plans, ec2's instance_types) that no group on the provider has as
// a plan: a typo would silently size servers by the default.
func (d *decoder) checkPlanMaps(ps []Provider, groups []Group) {
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
			if g.Provider == p.Name {
				for _, pl := range g.Plans {
					known[pl.Name] = true
				}
			}
		}
		for _, name := range names {
			if !known[name] {
				pl := d.provs[p.Name]
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

// ReadSacloudCredentials reads the API keys from a usacloud profile
// (config.json). Errors name the file, never its contents.
func ReadSacloudCredentials(path string) (token, secret string, err error) {
	b, err := readRegular(path, maxKeyFile)
	if err != nil {
		return "", "", fmt.Errorf("credentials: %w", err)
	}
	var p struct{ AccessToken, AccessTokenSecret string }
	if err := json.Unmarshal(b, &p); err != nil {
		return "", "", fmt.Errorf("credentials file %s is not a usacloud profile (JSON with AccessToken and AccessTokenSecret)", path)
	}
	if p.AccessToken == "" || p.AccessTokenSecret == "" {
		return "", "", fmt.Errorf("credentials file %s lacks AccessToken or AccessTokenSecret", path)
	}
	return p.AccessToken, p.AccessTokenSecret, nil
}
