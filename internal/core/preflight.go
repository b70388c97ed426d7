package core

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/certstore"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy"
	cloudexec "github.com/shoal-lb/shoal/internal/provider/cloud/exec"
)

// haproxyCheckTimeout bounds `haproxy -c`, which reads only the rendered file.
const haproxyCheckTimeout = 30 * time.Second

// Preflight runs the checks that need this machine rather than the file alone,
// for `shoal validate` and `shoal serve` alike: every local group's program
// (a container's runtime) can be found, and the HAProxy configuration shoal renders passes `haproxy
// -c`. A group on another provider runs its program on that provider's
// hosts: RemoteGroups names them, for `shoal providers check`.
// Problems are a config.ErrorList pointing at the most relevant field.
// haproxyChecked is false when HAProxy is not installed, so only the first
// check ran.
func Preflight(ctx context.Context, cfg *config.Config) (haproxyChecked bool, err error) {
	var errs config.ErrorList
	for i, g := range cfg.Groups {
		if !g.UsesProvider(config.ProviderLocal) {
			// Its program lives on the provider's hosts, which validate
			// does not touch: `shoal providers check` looks there.
			continue
		}
		if g.Template.IsContainer() {
			// The runtime runs the image's own program.
			if _, err := exec.LookPath(g.Template.Runtime); err != nil {
				errs = append(errs, cfg.FieldError(fmt.Sprintf("groups[%d].template.runtime", i),
					"container runtime %s not found on this machine's PATH (template.image %s runs with it): install it, or set template.runtime: %v",
					g.Template.Runtime, g.Template.Image, err))
			}
			continue
		}
		// The first instance's argv: enough to find the program, which
		// templates rarely vary.
		argv, _, err := g.Template.Expand(config.TemplateData{Name: g.Name + "-001", Host: "127.0.0.1", Port: 10001, Index: 1, Group: g.Name})
		if err != nil {
			errs = append(errs, cfg.FieldError(fmt.Sprintf("groups[%d].template", i), "%v", err))
			continue
		}
		if _, err := config.ResolveCommand(argv[0], g.Template.Dir); err != nil {
			errs = append(errs, cfg.FieldError(fmt.Sprintf("groups[%d].template.command[0]", i),
				"program %q not found (a bare name is looked up on PATH, a name with a slash relative to template.dir %s): %v",
				argv[0], g.Template.Dir, err))
		}
	}

	errs = append(errs, checkExecPrograms(cfg)...)
	errs = append(errs, checkSources(ctx, cfg)...)
	errs = append(errs, checkVIPListeners(cfg, nonlocalBind)...)

	paths := haproxy.PathsFor(cfg.StateDir)
	text, err := haproxy.Render(cfg, paths)
	if err != nil {
		errs = append(errs, cfg.FieldError("", "cannot render haproxy.cfg: %v", err))
		return false, errs
	}
	name := cmp.Or(cfg.HAProxy.Binary, "haproxy")
	bin, lookErr := exec.LookPath(name)
	switch {
	case lookErr == nil:
		errs = append(errs, haproxyCheck(ctx, cfg, bin, text)...)
	case strings.ContainsRune(name, filepath.Separator):
		// A binary named by path must be there; only a missing HAProxy on
		// PATH (a machine where shoal is not run) skips the check.
		errs = append(errs, cfg.FieldError("haproxy.binary", "%v", lookErr))
	}
	if len(errs) > 0 {
		slices.SortStableFunc(errs, func(a, b *config.Error) int {
			return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Col, b.Col))
		})
		return lookErr == nil, errs
	}
	return lookErr == nil, nil
}

// alertLine finds the line of the checked file an HAProxy alert is about.
var alertLine = regexp.MustCompile(`\[[^\]]*haproxy\.cfg:(\d+)\]`)

// haproxyCheck runs `haproxy -c` on text, written to a private temporary
// file, and maps each alert to the config field its line came from.
func haproxyCheck(ctx context.Context, cfg *config.Config, bin, text string) config.ErrorList {
	dir, err := os.MkdirTemp("", "shoal-check-")
	if err != nil {
		return config.ErrorList{cfg.FieldError("", "check haproxy.cfg: %v", err)}
	}
	defer os.RemoveAll(dir)
	// The Lua script lives in STATE_DIR, which validate must not write:
	// check with a copy beside the file (same number of lines, same fields).
	lua := filepath.Join(dir, "hold.lua")
	if err := os.WriteFile(lua, haproxy.HoldScript(), 0o600); err != nil {
		return config.ErrorList{cfg.FieldError("", "check haproxy.cfg: %v", err)}
	}
	text = strings.Replace(text, "lua-load "+haproxy.PathsFor(cfg.StateDir).Lua+"\n", "lua-load "+lua+"\n", 1)
	// So does the list of ACME tokens: an empty one.
	tokens := filepath.Join(dir, "acme-tokens.acl")
	if err := os.WriteFile(tokens, nil, 0o600); err != nil {
		return config.ErrorList{cfg.FieldError("", "check haproxy.cfg: %v", err)}
	}
	text = strings.ReplaceAll(text, " -f "+haproxy.PathsFor(cfg.StateDir).ACMETokens+"\n", " -f "+tokens+"\n")
	// So do the certificates' crt-lists and ticket keys: check with the
	// files the store would write, written beside it.
	certs := filepath.Join(dir, "state")
	if err := certstore.New(certs, nil, nil).Write(cfg.Frontends); err != nil {
		return config.ErrorList{cfg.FieldError("frontends", "%v", err)}
	}
	for _, fe := range cfg.Frontends {
		if fe.TLS != nil {
			text = strings.ReplaceAll(text, certstore.CrtList(cfg.StateDir, fe.Name), certstore.CrtList(certs, fe.Name))
			text = strings.ReplaceAll(text, certstore.TicketKeys(cfg.StateDir, fe.Name), certstore.TicketKeys(certs, fe.Name))
		}
	}
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		return config.ErrorList{cfg.FieldError("", "check haproxy.cfg: %v", err)}
	}
	cctx, cancel := context.WithTimeout(ctx, haproxyCheckTimeout)
	defer cancel()
	out, err := exec.CommandContext(cctx, bin, "-c", "-f", path).CombinedOutput()
	if err == nil {
		return nil
	}
	lines := strings.Split(text, "\n")
	var errs config.ErrorList
	for _, l := range strings.Split(string(out), "\n") {
		_, msg, ok := strings.Cut(l, "[ALERT]")
		if !ok {
			continue
		}
		// "(PID) : config : parsing [FILE:LINE] : what"
		if i := strings.Index(msg, ": config : "); i >= 0 {
			msg = msg[i+len(": config : "):]
		}
		m := alertLine.FindStringSubmatch(msg)
		if m == nil {
			if strings.Contains(msg, "rror(s) found in configuration file") || strings.Contains(msg, "Fatal errors found") {
				continue
			}
			errs = append(errs, cfg.FieldError("haproxy", "HAProxy (%s) rejected the rendered configuration: %s", bin, strings.TrimSpace(msg)))
			continue
		}
		n, _ := strconv.Atoi(m[1])
		what := strings.TrimLeft(strings.TrimPrefix(strings.TrimSpace(msg[:strings.Index(msg, m[0])]), "parsing"), " :")
		what = strings.TrimSpace(what + " " + strings.TrimLeft(msg[strings.Index(msg, m[0])+len(m[0]):], " :"))
		rendered := ""
		if n >= 1 && n <= len(lines) {
			rendered = strings.TrimSpace(lines[n-1])
		}
		errs = append(errs, cfg.FieldError(fieldOf(cfg, lines, n), "HAProxy (%s) rejected %q: %s", bin, rendered, what))
	}
	if len(errs) == 0 {
		errs = append(errs, cfg.FieldError("haproxy", "HAProxy (%s) rejected the rendered configuration (%v): %s", bin, err, strings.TrimSpace(string(out))))
	}
	return errs
}

// fieldOf names the config field that line n (1-based) of the rendered
// haproxy.cfg came from, or "haproxy" when shoal wrote it on its own.
func fieldOf(cfg *config.Config, lines []string, n int) string {
	section, backend := "", ""
	for _, l := range lines[:min(n-1, len(lines))] {
		if l != "" && l[0] != ' ' && l[0] != '\t' {
			f := strings.Fields(l)
			section, backend = f[0], ""
			if len(f) > 1 {
				backend = f[1]
			}
		}
	}
	if n < 1 || n > len(lines) {
		return "haproxy"
	}
	line := strings.TrimSpace(lines[n-1])
	words := strings.Fields(line)
	if len(words) == 0 {
		return "haproxy"
	}
	group := func(name string) int {
		for i, g := range cfg.Groups {
			if g.Name == name {
				return i
			}
		}
		return -1
	}
	switch section {
	case "global", "defaults":
		list, key := cfg.HAProxy.Global, "haproxy.global"
		if section == "defaults" {
			list, key = cfg.HAProxy.Defaults, "haproxy.defaults"
		}
		for i, v := range list {
			if strings.TrimSpace(v) == line {
				return fmt.Sprintf("%s[%d]", key, i)
			}
		}
		if section == "defaults" && words[0] == "timeout" {
			return "haproxy.timeouts"
		}
	case "frontend":
		return frontendField(cfg, backend, words, group)
	case "backend":
		i := group(backend)
		if i < 0 {
			break
		}
		switch words[0] {
		case "balance":
			return fmt.Sprintf("groups[%d].balance", i)
		case "http-check", "tcp-check":
			return fmt.Sprintf("groups[%d].health.%s", i, healthField(words))
		case "timeout":
			return fmt.Sprintf("groups[%d].health.timeout", i)
		}
		return fmt.Sprintf("groups[%d]", i)
	}
	return "haproxy"
}

// routeKeys are the route keys of the ACLs render names rN_KIND.
var routeKeys = map[string]string{"host": "host", "path": "path_prefix", "regex": "path_regex", "method": "method"}

// frontendField names the config field a line of frontend name came from.
// The shorthand's lines are its top-level keys' and the groups'.
func frontendField(cfg *config.Config, name string, words []string, group func(string) int) string {
	fi := slices.IndexFunc(cfg.Frontends, func(fe config.Frontend) bool { return fe.Name == name })
	if fi < 0 {
		return "haproxy"
	}
	fe := cfg.Frontends[fi]
	shorthand := cfg.Listen != ""
	path := fmt.Sprintf("frontends[%d]", fi)
	// route returns the route an "rN_KIND" ACL belongs to, and its KIND.
	route := func(acl string) (int, string) {
		num, kind, _ := strings.Cut(strings.TrimPrefix(acl, "r"), "_")
		n, err := strconv.Atoi(num)
		if err != nil || n < 1 || n > len(fe.Routes) {
			return -1, ""
		}
		return n - 1, kind
	}
	switch {
	case words[0] == "bind":
		if shorthand {
			return "listen"
		}
		return path + ".bind"
	case words[0] == "compression":
		if shorthand {
			return "compression.types"
		}
		return path + ".compression.types"
	case words[0] == "acl" && len(words) > 1:
		r, kind := route(words[1])
		if r < 0 {
			break
		}
		if shorthand {
			if i := group(fe.Routes[r].Group); i >= 0 {
				if kind == "host" {
					return fmt.Sprintf("groups[%d].hosts", i)
				}
				return fmt.Sprintf("groups[%d].path_prefixes", i)
			}
			break
		}
		if key, ok := routeKeys[kind]; ok {
			return fmt.Sprintf("%s.routes[%d].%s", path, r, key)
		}
		return fmt.Sprintf("%s.routes[%d].header", path, r)
	case (words[0] == "use_backend" || words[0] == "default_backend") && len(words) > 1:
		if i := group(words[1]); i >= 0 && shorthand {
			return fmt.Sprintf("groups[%d]", i)
		}
	}
	if shorthand {
		return "haproxy"
	}
	return path
}

// nonlocalBind reports whether this machine lets a socket bind an address
// it does not have (net.ipv4.ip_nonlocal_bind, or IPv6's).
func nonlocalBind(v6 bool) bool {
	family := "ipv4"
	if v6 {
		family = "ipv6"
	}
	b, err := os.ReadFile("/proc/sys/net/" + family + "/ip_nonlocal_bind")
	return err == nil && strings.TrimSpace(string(b)) == "1"
}

// checkVIPListeners refuses a listener on ha.vip's address where the
// kernel binds only local addresses: a node has the VIP only while it
// leads, so HAProxy (or shoal) would fail to start on a standby, and on
// the leader after a failover. nonlocal reads the machine's setting.
func checkVIPListeners(cfg *config.Config, nonlocal func(v6 bool) bool) config.ErrorList {
	if cfg.HA == nil || cfg.HA.VIP == nil {
		return nil
	}
	p, err := netip.ParsePrefix(cfg.HA.VIP.Address)
	if err != nil {
		return nil // reported by Load
	}
	vip := p.Addr().Unmap()
	var errs config.ErrorList
	for _, l := range cfg.Listeners() {
		ip, err := netip.ParseAddr(l.Host)
		if err != nil || ip.Unmap() != vip || nonlocal(vip.Is6()) {
			continue
		}
		sysctl, every := "net.ipv4.ip_nonlocal_bind", "0.0.0.0"
		if vip.Is6() {
			sysctl, every = "net.ipv6.ip_nonlocal_bind", "::"
		}
		errs = append(errs, cfg.FieldError(l.Field, "%s is ha.vip.address, which a node has only while it leads, and %s is 0 here: a standby could not listen on it; listen on every address (%s) or set %s=1",
			net.JoinHostPort(l.Host, l.Port), sysctl, net.JoinHostPort(every, l.Port), sysctl))
	}
	return errs
}

// RemoteGroups names the groups whose instances run on a provider's hosts,
// whose programs Preflight does not look for on this machine.
func RemoteGroups(cfg *config.Config) []string {
	var out []string
	for _, g := range cfg.Groups {
		if slices.ContainsFunc(g.ProviderList(), func(p config.GroupProvider) bool { return p.Name != config.ProviderLocal }) {
			out = append(out, g.Name)
		}
	}
	return out
}

// checkExecPrograms makes sure the programs of exec providers' commands
// are on this machine, where they run; nothing is run.
func checkExecPrograms(cfg *config.Config) config.ErrorList {
	var errs config.ErrorList
	for i, p := range cfg.Providers {
		e := cloudexec.Of(p)
		if e == nil {
			continue
		}
		for _, c := range []struct {
			key  string
			argv []string
		}{{"start", e.Start}, {"stop", e.Stop}, {"list", e.List}} {
			cmd, err := cloudexec.CompileCommand(c.argv)
			if err != nil {
				continue // reported by Load
			}
			argv, err := cmd.Expand(cloudexec.Data{ID: "id-1", Name: "web-001", Group: "web", Index: 1, Port: p.Cloud.Port})
			if err != nil {
				continue
			}
			if _, err := config.ResolveCommand(argv[0], ""); err != nil {
				errs = append(errs, cfg.FieldError(fmt.Sprintf("providers[%d].%s[0]", i, c.key),
					"program %q not found (a bare name is looked up on PATH, a path is relative to the config file): %v", argv[0], err))
			}
		}
	}
	return errs
}
