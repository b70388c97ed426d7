package sacloud

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/template"

	"github.com/sacloud/iaas-api-go/ostype"
	"github.com/sacloud/iaas-api-go/types"
	"gopkg.in/yaml.v3"

	"github.com/shoal-lb/shoal/internal/config"
)

// Type is the type name of sacloud entries of providers: Sakura Cloud
// server groups.
const Type = "sacloud"

// ProviderType is sacloud's entry type (registered by provider/all).
var ProviderType = config.ProviderType{
	Name: Type, Cloud: true, Keys: []any{keyDefaults()}, Required: []string{"port"},
	Source: "the provider's template",
	Decode: decode,
	Plans: func(p *config.Provider) (string, []string) {
		return "server_plans", slices.Sorted(maps.Keys(Of(*p).ServerPlans))
	},
	Check: checkProviders,
	// Shut down and booted again through the server API.
	WarmStates: func(*config.Provider) ([]string, string) { return config.WarmStates, "" },
}

// Of returns the sacloud keys of entry p (nil when p is not a sacloud
// entry).
func Of(p config.Provider) *Config {
	c, _ := p.Spec.(*Config)
	return c
}

// keyDefaults are the keys with their defaults, every optional section
// present (for the reference).
func keyDefaults() Config {
	s := Defaults
	disk := defaultDisk
	disk.SourceArchive = &Selector{}
	s.Template.Disks = []Disk{disk}
	s.Template.EditParameter = &Edit{}
	s.Template.NetworkInterfaces = []NIC{{Expose: &Expose{}}}
	return s
}

// Config is a Sakura Cloud server group as sacloud/autoscaler's
// ServerGroup resource defines it (zone, shutdown_force, a server template),
// minus what shoal owns: the group's name, sizes and plans are the group's,
// and shoal is the load balancer (no expose). Each server is named after its
// instance (GROUP-NNN, the autoscaler's default server_name_format) and
// carries shoal's marker tags besides the template's.
type Config struct {
	Zone string `yaml:"zone" required:"true"`
	// ShutdownForce powers servers off instead of an ACPI shutdown on
	// scale-in.
	ShutdownForce bool `yaml:"shutdown_force"`
	// ServerPlans maps the group's plan names (its plans' names) to a
	// server size; a plan not listed, or no plan, takes Template.Plan.
	ServerPlans map[string]Plan `yaml:"server_plans"`
	Template    Template        `yaml:"template" required:"true"`
	// CredentialsFile is a usacloud profile (config.json, with
	// AccessToken and AccessTokenSecret); without it the API keys come
	// from SAKURACLOUD_ACCESS_TOKEN and SAKURACLOUD_ACCESS_TOKEN_SECRET.
	// Neither is kept in the config: the driver reads them when built.
	CredentialsFile string `yaml:"credentials_file"`
	// FakeMode runs every sacloud call against iaas-api-go's in-process
	// fake of the API, an emulator: no account, no server, no address
	// anyone can reach. FakeStorePath keeps the fake's state in a JSON
	// file, so that a restarted shoal (or a test) sees the same servers.
	FakeMode bool `yaml:"fake_mode"`
	// APIRootURL replaces the API's root URL
	// (https://secure.sakura.ad.jp/cloud/zone): a proxy, or a fake API
	// another process serves. Only this provider's calls go there.
	APIRootURL    string `yaml:"api_root_url"`
	FakeStorePath string `yaml:"fake_store_path"`
}

// Template is what every server of the group is created from.
type Template struct {
	// Tags are the servers' own tags, besides shoal's markers.
	Tags        []string `yaml:"tags"`
	Description string   `yaml:"description"`
	// InterfaceDriver is virtio or e1000.
	InterfaceDriver string `yaml:"interface_driver"`
	Plan            Plan   `yaml:"plan" required:"true"`
	// Disks are created in order; the first is the boot disk and gets
	// EditParameter.
	Disks         []Disk `yaml:"disks"`
	EditParameter *Edit  `yaml:"edit_parameter"`
	// NetworkInterfaces: the first one's address is the instance's.
	NetworkInterfaces []NIC `yaml:"network_interfaces"`
}

// Plan is a server size: cores and memory in GB.
type Plan struct {
	Core         int  `yaml:"core" required:"true"`
	Memory       int  `yaml:"memory" required:"true"`
	DedicatedCPU bool `yaml:"dedicated_cpu"`
}

// Disk is one disk of a server: from an OS type's latest public
// archive, from a chosen archive, or blank when it names neither.
type Disk struct {
	OSType        string    `yaml:"os_type"`
	SourceArchive *Selector `yaml:"source_archive"`
	// Plan is ssd or hdd; Connection virtio or ide; Size in GB.
	Plan       string `yaml:"plan"`
	Connection string `yaml:"connection"`
	Size       int    `yaml:"size"`
}

// Selector finds one resource (an archive, a switch): by ID, or by
// names (each a part of the name) and tags (all of them).
type Selector struct {
	ID    string   `yaml:"id"`
	Names []string `yaml:"names"`
	Tags  []string `yaml:"tags"`
}

// Edit is the boot disk's "edit parameter": what the cloud writes
// into the OS before its first boot.
type Edit struct {
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
	// StartupScripts are Go templates of ScriptData (.Name, .Group,
	// .Index, .Zone), run at first boot.
	StartupScripts []string `yaml:"startup_scripts"`
}

// ScriptData is what a startup script's template sees: {{.Name}} is
// the server's name, as in the seed's scripts.
type ScriptData struct {
	Name  string
	Group string
	Index int
	Zone  string
}

// Scripts renders the startup scripts for one server. (They are parsed
// here, not kept parsed: the config stays plain data, which reloads
// compare.)
func (e *Edit) Scripts(d ScriptData) ([]string, error) {
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

func renderScript(s string, d ScriptData) (string, error) {
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

// NIC is one network interface: on the shared segment (Shared), or
// on the switch Switch selects, with addresses from AssignCIDRBlock (the
// server with index i takes the block's address plus i, as the autoscaler
// assigns them).
type NIC struct {
	// Upstream is "shared" or a selector of a switch.
	Shared           bool      `yaml:"-"`
	Switch           *Selector `yaml:"-"`
	_                struct{}  `yaml:"upstream" required:"true"`
	AssignCIDRBlock  string    `yaml:"assign_cidr_block"`
	AssignNetmaskLen int       `yaml:"assign_netmask_len"`
	DefaultRoute     string    `yaml:"default_route"`
	// Expose is how sacloud/autoscaler put the server behind its ELB;
	// HAProxy is shoal's balancer, so only its ports are checked: they
	// must include the provider's port, where every server serves.
	Expose *Expose `yaml:"expose"`
}

// Expose is a NIC's expose section of sacloud/autoscaler.
type Expose struct {
	Ports []int `yaml:"ports"`
	// ServerGroupName was the ELB's server group; the group's HAProxy
	// backend takes its place.
	ServerGroupName string `yaml:"server_group_name"`
}

// Sakura Cloud limits the driver checks before calling the API.
// (Tags: maxTags and maxTagLen.)
const (
	maxDisks = 4
	maxNICs  = 10
)

// Defaults holds the defaults of a sacloud provider's keys (the
// autoscaler's); defaultDisk a disk's (the seed's).
var (
	Defaults    = Config{Template: Template{InterfaceDriver: "virtio"}}
	defaultDisk = Disk{Plan: "ssd", Connection: "virtio", Size: 20}
)

// decode decodes a sacloud provider's own keys; p.Cloud holds its cloud
// keys, whose emulator goes with fake_mode: the fake's servers cannot
// serve, and real servers need no stand-ins.
func decode(f *config.ProviderEntry, p *config.Provider) {
	c := p.Cloud
	def := Defaults
	s := &Config{}
	if z, n := f.String("zone", ""); n != nil {
		// The SDK's list of zones is the one sacloud/autoscaler checks
		// against: a zone outside it fails every call.
		if !slices.Contains(types.ZoneNames, z) {
			f.Errorf(n, f.Field("zone"), "must be a Sakura Cloud zone (one of %s), got %q", strings.Join(types.ZoneNames, ", "), z)
		}
		s.Zone = z
	}
	s.ShutdownForce, _ = f.Bool("shutdown_force", def.ShutdownForce)
	if n := f.Node("template"); n != nil {
		s.Template = decodeTemplate(f, n, f.Field("template"), c.Port)
	}
	if n := f.Node("server_plans"); n != nil {
		entries, _ := f.Entries(n, f.Field("server_plans"))
		s.ServerPlans = make(map[string]Plan, len(entries))
		for _, e := range entries {
			s.ServerPlans[e.Key] = decodePlan(f, e.V, config.Join(f.Field("server_plans"), e.Key))
		}
	}
	if path, n := f.String("credentials_file", ""); n != nil {
		s.CredentialsFile = f.Path(path)
		if _, _, err := ReadCredentials(s.CredentialsFile); err != nil {
			f.Errorf(n, f.Field("credentials_file"), "%v", err)
		}
	}
	var fn *yaml.Node
	s.FakeMode, fn = f.Bool("fake_mode", def.FakeMode)
	switch en := f.Node("emulator"); {
	case s.FakeMode && c.Emulator == nil:
		f.Errorf(fn, f.Field("fake_mode"), "the fake API's servers cannot serve: give emulator.stand_in, a local process to stand in for each")
	case !s.FakeMode && en != nil:
		f.Errorf(en, f.Field("emulator"), "stands in for the fake API's servers: set fake_mode: true, or leave emulator out to use real servers")
	}
	if r, n := f.String("api_root_url", ""); n != nil {
		u, err := url.Parse(r)
		switch {
		case err == nil && u.User != nil:
			// Not echoed: the userinfo may be a password.
			f.Errorf(n, f.Field("api_root_url"), "must not hold credentials (user:password@); the API keys come from credentials_file or the environment")
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "":
			f.Errorf(n, f.Field("api_root_url"), "must be an http:// or https:// URL without credentials or query, such as https://secure.sakura.ad.jp/cloud/zone, got %q", r)
		case s.FakeMode:
			f.Errorf(n, f.Field("api_root_url"), "the fake API (fake_mode) runs in shoal's process and has no URL: use one or the other")
		}
		s.APIRootURL = strings.TrimSuffix(r, "/")
	}
	if path, n := f.String("fake_store_path", ""); n != nil {
		s.FakeStorePath = f.Path(path)
		switch fi, err := os.Stat(filepath.Dir(s.FakeStorePath)); {
		case !s.FakeMode:
			f.Errorf(n, f.Field("fake_store_path"), "is the fake API's store: set fake_mode: true, or leave it out")
		case err != nil || !fi.IsDir():
			f.Errorf(n, f.Field("fake_store_path"), "directory %s does not exist", filepath.Dir(s.FakeStorePath))
		}
	}
	p.Spec = s
}

// checkProviders checks what only the whole list shows: the fake is
// one per process (iaas-api-go switches every client to it), so a config
// with it has no real sacloud provider and one store.
func checkProviders(e *config.ProviderEntries, ps []config.Provider) {
	var fake, real, store string
	for _, p := range ps {
		s := Of(p)
		if s == nil {
			continue
		}
		switch {
		case !s.FakeMode:
			real = p.Name
		case fake == "":
			fake, store = p.Name, s.FakeStorePath
		case s.FakeStorePath != store:
			e.Errorf(p, "fake_store_path", "providers %s and %s both use the fake sacloud API, which is one per process: give them the same fake_store_path", fake, p.Name)
		}
	}
	if fake != "" && real != "" {
		e.Errorf(config.Provider{Name: fake}, "fake_mode", "the fake sacloud API replaces the real one for the whole process, and provider %s uses the real one: use one or the other", real)
	}
}

func decodeTemplate(e *config.ProviderEntry, n *yaml.Node, path string, port int) Template {
	f := e.Section(n, path, Template{})
	t := Template{InterfaceDriver: Defaults.Template.InterfaceDriver}
	t.Tags = decodeTags(f, "tags")
	t.Description, _ = f.String("description", "")
	if len(t.Description) > 512 {
		f.Errorf(f.Node("description"), f.Field("description"), "at most 512 characters, got %d", len(t.Description))
	}
	if v, n := f.String("interface_driver", t.InterfaceDriver); n != nil {
		if v != "virtio" && v != "e1000" {
			f.Errorf(n, f.Field("interface_driver"), "must be virtio or e1000, got %q", v)
		}
		t.InterfaceDriver = v
	}
	if n := f.Node("plan"); n != nil {
		t.Plan = decodePlan(f, n, f.Field("plan"))
	}
	if n := f.Node("disks"); n != nil {
		items, _ := f.Sequence(n, f.Field("disks"), "a list of disks")
		if len(items) > maxDisks {
			f.Errorf(n, f.Field("disks"), "at most %d disks, got %d", maxDisks, len(items))
		}
		for i, it := range items {
			t.Disks = append(t.Disks, decodeDisk(f, it, fmt.Sprintf("%s[%d]", f.Field("disks"), i)))
		}
	}
	if n := f.Node("edit_parameter"); n != nil {
		t.EditParameter = decodeEdit(f, n, f.Field("edit_parameter"))
		if len(t.Disks) == 0 || t.Disks[0].OSType == "" && t.Disks[0].SourceArchive == nil {
			f.Errorf(n, f.Field("edit_parameter"), "edits the first disk's OS, so the first disk needs os_type or source_archive")
		}
	}
	if n := f.Node("network_interfaces"); n != nil {
		items, _ := f.Sequence(n, f.Field("network_interfaces"), "a list of network interfaces")
		if len(items) > maxNICs {
			f.Errorf(n, f.Field("network_interfaces"), "at most %d network interfaces, got %d", maxNICs, len(items))
		}
		for i, it := range items {
			nic := decodeNIC(f, it, fmt.Sprintf("%s[%d]", f.Field("network_interfaces"), i), port)
			if i > 0 && nic.Shared {
				f.Errorf(it, fmt.Sprintf("%s[%d].upstream", f.Field("network_interfaces"), i), "only the first network interface can be on the shared segment")
			}
			t.NetworkInterfaces = append(t.NetworkInterfaces, nic)
		}
	}
	return t
}

// decodeTags reads a list of tags, within the cloud's limits; shoal's
// marker keys are its own.
func decodeTags(f *config.ProviderEntry, key string) []string {
	items := f.Strings(key)
	if len(items) > maxTags-2 {
		f.Errorf(f.Node(key), f.Field(key), "at most %d tags (the API takes %d, shoal's markers are 2), got %d", maxTags-2, maxTags, len(items))
	}
	return f.CheckEach(items, func(tag string) error {
		switch {
		case tag == "" || len(tag) > maxTagLen:
			return fmt.Errorf("a tag has 1 to %d characters, got %q", maxTagLen, tag)
		case strings.HasPrefix(tag, "shoal-"):
			return fmt.Errorf("tags starting with shoal- are shoal's markers, got %q", tag)
		}
		return nil
	})
}

func decodePlan(e *config.ProviderEntry, n *yaml.Node, path string) Plan {
	f := e.Section(n, path, Plan{})
	var p Plan
	if v, n := f.Int("core", 0); n != nil {
		if v < 1 || v > 512 {
			f.Errorf(n, f.Field("core"), "must be from 1 to 512, got %d", v)
		}
		p.Core = v
	}
	if v, n := f.Int("memory", 0); n != nil {
		if v < 1 || v > 2048 {
			f.Errorf(n, f.Field("memory"), "must be from 1 to 2048 (GB), got %d", v)
		}
		p.Memory = v
	}
	p.DedicatedCPU, _ = f.Bool("dedicated_cpu", false)
	return p
}

func decodeDisk(e *config.ProviderEntry, n *yaml.Node, path string) Disk {
	f := e.Section(n, path, Disk{})
	def := defaultDisk
	disk := def
	if v, n := f.String("os_type", ""); n != nil {
		if !slices.Contains(ostype.OSTypeShortNames, v) {
			f.Errorf(n, f.Field("os_type"), "unknown os_type %q; known: %s", v, strings.Join(ostype.OSTypeShortNames, ", "))
		}
		disk.OSType = v
	}
	if n := f.Node("source_archive"); n != nil {
		disk.SourceArchive = decodeSelector(f, n, f.Field("source_archive"))
		if disk.OSType != "" {
			f.Errorf(n, f.Field("source_archive"), "only one of os_type and source_archive can be given")
		}
	}
	if v, n := f.String("plan", def.Plan); n != nil {
		if v != "ssd" && v != "hdd" {
			f.Errorf(n, f.Field("plan"), "must be ssd or hdd, got %q", v)
		}
		disk.Plan = v
	}
	if v, n := f.String("connection", def.Connection); n != nil {
		if v != "virtio" && v != "ide" {
			f.Errorf(n, f.Field("connection"), "must be virtio or ide, got %q", v)
		}
		disk.Connection = v
	}
	if v, n := f.Int("size", def.Size); n != nil {
		if v < 1 {
			f.Errorf(n, f.Field("size"), "must be a size in GB, got %d", v)
		}
		disk.Size = v
	}
	return disk
}

func decodeSelector(e *config.ProviderEntry, n *yaml.Node, path string) *Selector {
	f := e.Section(n, path, Selector{})
	s := &Selector{}
	if v, n := f.String("id", ""); n != nil {
		if v == "" || strings.Trim(v, "0123456789") != "" {
			f.Errorf(n, f.Field("id"), "must be a resource ID (digits), got %q", v)
		}
		s.ID = v
	}
	for _, it := range f.Strings("names") {
		s.Names = append(s.Names, it.Val)
	}
	for _, it := range f.Strings("tags") {
		s.Tags = append(s.Tags, it.Val)
	}
	if f.Root() != nil && s.ID == "" && len(s.Names) == 0 && len(s.Tags) == 0 {
		f.Errorf(n, path, "must select by id, names or tags")
	}
	if s.ID != "" && len(s.Names)+len(s.Tags) > 0 {
		f.Errorf(n, path, "selects by id or by names and tags, not both")
	}
	return s
}

func decodeEdit(pe *config.ProviderEntry, n *yaml.Node, path string) *Edit {
	f := pe.Section(n, path, Edit{})
	e := &Edit{}
	e.Disabled, _ = f.Bool("disabled", false)
	e.DisablePasswordAuth, _ = f.Bool("disable_pw_auth", false)
	e.EnableDHCP, _ = f.Bool("enable_dhcp", false)
	e.ChangePartitionUUID, _ = f.Bool("change_partition_uuid", false)
	e.Password = decodePassword(f)
	e.SSHKeys = f.CheckEach(f.Strings("ssh_keys"), func(k string) error {
		if len(strings.Fields(k)) < 2 {
			return fmt.Errorf("must be a public key (TYPE BASE64 [COMMENT]), got %q", config.Truncate(k))
		}
		return nil
	})
	for _, it := range f.Strings("startup_scripts") {
		if _, err := renderScript(it.Val, ScriptData{Name: "web-001", Group: "web", Index: 1, Zone: "tk1b"}); err != nil {
			f.Errorf(it.Node, it.Field, "template fails on a sample server (fields: .Name .Group .Index .Zone): %v", err)
			continue
		}
		e.StartupScripts = append(e.StartupScripts, it.Val)
	}
	if e.Disabled && (len(e.SSHKeys) > 0 || len(e.StartupScripts) > 0 || e.Password != "") {
		f.Errorf(n, path, "disabled: true but password, ssh_keys or startup_scripts are given")
	}
	return e
}

// decodePassword reads the administrator password from password (as the
// autoscaler's config writes it; "" is none), password_file or
// password_env. Messages never show it.
func decodePassword(f *config.ProviderEntry) string {
	pn := f.Node("password")
	if pn == nil {
		return f.Secret("password", false)
	}
	for _, k := range []string{"password_file", "password_env"} {
		if kn := f.Node(k); kn != nil {
			f.Errorf(kn, f.Field(k), "conflicts with %s; set only one", f.Field("password"))
		}
	}
	if pn.Kind != yaml.ScalarNode || pn.ShortTag() != "!!str" {
		f.Errorf(pn, f.Field("password"), "must be a string (quote it), got %s", pn.ShortTag())
		return ""
	}
	return pn.Value // "" sets none, as in the autoscaler
}

func decodeExpose(e *config.ProviderEntry, n *yaml.Node, path string, port int) *Expose {
	f := e.Section(n, path, Expose{})
	x := &Expose{}
	if pn := f.Node("ports"); pn != nil {
		items, _ := f.Sequence(pn, f.Field("ports"), "a list of ports")
		for i, it := range items {
			v, ok := f.Integer(it, fmt.Sprintf("%s[%d]", f.Field("ports"), i))
			if ok {
				x.Ports = append(x.Ports, v)
			}
		}
		if port > 0 && len(x.Ports) > 0 && !slices.Contains(x.Ports, port) {
			f.Errorf(pn, f.Field("ports"), "every server serves on the provider's port %d, which the list lacks (HAProxy connects there); got %v", port, x.Ports)
		}
	}
	x.ServerGroupName, _ = f.String("server_group_name", "")
	return x
}

func decodeNIC(e *config.ProviderEntry, n *yaml.Node, path string, port int) NIC {
	f := e.Section(n, path, NIC{})
	var nic NIC
	if en := f.Node("expose"); en != nil {
		nic.Expose = decodeExpose(f, en, f.Field("expose"), port)
	}
	if up := f.Node("upstream"); up != nil {
		if up.Kind == yaml.ScalarNode {
			if up.Value != "shared" {
				f.Errorf(up, f.Field("upstream"), `must be "shared" or a selector of a switch ({id: ...} or {names: [...]}), got %q`, up.Value)
			}
			nic.Shared = true
		} else {
			nic.Switch = decodeSelector(f, up, f.Field("upstream"))
		}
	}
	cidr, cn := f.String("assign_cidr_block", "")
	nic.AssignNetmaskLen, _ = f.Int("assign_netmask_len", 0)
	route, rn := f.String("default_route", "")
	if nic.Shared {
		for _, k := range []string{"assign_cidr_block", "assign_netmask_len", "default_route"} {
			if kn := f.Node(k); kn != nil {
				f.Errorf(kn, f.Field(k), "the shared segment assigns addresses itself: leave %s out, or use a switch", k)
			}
		}
		return nic
	}
	if cn != nil {
		ip, ipnet, err := net.ParseCIDR(cidr)
		if err != nil || ip.To4() == nil {
			f.Errorf(cn, f.Field("assign_cidr_block"), "must be an IPv4 CIDR block such as 192.168.0.0/24, got %q", cidr)
		} else {
			nic.AssignCIDRBlock = cidr
			if route != "" && !ipnet.Contains(net.ParseIP(route)) {
				f.Errorf(rn, f.Field("default_route"), "must be in %s, got %q", cidr, route)
			}
		}
	}
	if n := f.Node("assign_netmask_len"); n != nil && (nic.AssignNetmaskLen < 1 || nic.AssignNetmaskLen > 32) {
		f.Errorf(n, f.Field("assign_netmask_len"), "must be from 1 to 32, got %d", nic.AssignNetmaskLen)
	}
	if rn != nil {
		if ip := net.ParseIP(route); ip == nil || ip.To4() == nil {
			f.Errorf(rn, f.Field("default_route"), "must be an IPv4 address, got %q", route)
		}
		nic.DefaultRoute = route
	}
	return nic
}

// PlanFor returns the server size of a group's plan ("" for none).
func (s *Config) PlanFor(plan string) Plan {
	if p, ok := s.ServerPlans[plan]; ok && plan != "" {
		return p
	}
	return s.Template.Plan
}

// ReadCredentials reads the API keys from a usacloud profile
// (config.json). Errors name the file, never its contents.
func ReadCredentials(path string) (token, secret string, err error) {
	b, err := config.ReadRegular(path, config.MaxKeyFile)
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
