package core

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/testdep"
)

func loadConfig(t *testing.T, text string) *config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "shoal.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// sshProvider is a providers section with one host, whose key files are
// config's test data.
func sshProvider() string {
	dir, _ := filepath.Abs("../config/testdata/ssh")
	return "providers: [{name: rack, type: ssh, hosts: [{address: 10.0.0.2, user: deploy, key_file: " + dir + "/id_ed25519, known_hosts: " + dir + "/known_hosts}]}]\n"
}

// TestPreflight: the machine-dependent checks report at the field that caused
// them: a missing program, a missing haproxy.binary, and HAProxy's own
// refusal of a line mapped back to the YAML value it came from.
func TestPreflight(t *testing.T) {
	const base = "listen: 127.0.0.1:18080\nstate_dir: state\n"
	const group = "groups:\n  - name: web\n    min_size: 1\n    max_size: 1\n    template: {command: [%s]}\n"
	// A cloud's servers run their image: its group has no template.
	const cloudGroup = "groups:\n  - name: web\n    min_size: 1\n    max_size: 1\n    provider: cli\n"
	for _, tc := range []struct {
		name, text, want string
		needHAProxy      bool
	}{
		{"program on PATH", base + strings.Replace(group, "%s", "sh", 1), "", false},
		// A group on an ssh provider runs its program on the hosts, which
		// validate does not touch.
		{"program on hosts not sought here", base + sshProvider() + strings.Replace(group, "%s", "/opt/app/bin/nope", 1) + "    provider: rack\n", "", false},
		{"program missing", base + strings.Replace(group, "%s", "./nope", 1),
			`shoal.yaml:7:26: groups[0].template.command[0]: program "./nope" not found`, false},
		// An exec provider's commands run here: their programs are looked
		// for (a path relative to the config file), and nothing is run.
		{"exec programs found", base + "providers: [{name: cli, type: exec, port: 80, start: [sh, -c, 'exit 1'], stop: [true], list: [echo, '[]']}]\n" +
			cloudGroup, "", false},
		{"exec program missing", base + "providers: [{name: cli, type: exec, port: 80, start: [./mycloud, create], stop: [true], list: [echo, '[]']}]\n" +
			cloudGroup,
			`shoal.yaml:3:55: providers[0].start[0]: program "`, false},
		{"binary missing", base + "haproxy: {binary: /nonexistent/haproxy}\n" + strings.Replace(group, "%s", "sh", 1),
			`shoal.yaml:3:19: haproxy.binary: exec: "/nonexistent/haproxy"`, false},
		{"haproxy refuses a defaults line", base + "haproxy: {defaults: [\"timeout client forever\"]}\n" + strings.Replace(group, "%s", "sh", 1),
			`shoal.yaml:3:22: haproxy.defaults[0]: HAProxy (`, true},
		// Go's regexp/syntax takes [\d-z]; HAProxy's PCRE2 does not.
		{"haproxy refuses a route's regex", "state_dir: state\nfrontends: [{name: edge, bind: [127.0.0.1:18080], routes: [{path_regex: '[\\d-z]', group: web}, {group: web}]}]\n" + strings.Replace(group, "%s", "sh", 1),
			`shoal.yaml:2:73: frontends[0].routes[0].path_regex: HAProxy (`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.needHAProxy {
				testdep.Command(t, "haproxy", "haproxy")
			}
			cfg := loadConfig(t, tc.text)
			_, err := Preflight(context.Background(), cfg)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			got := ""
			if err != nil {
				got = strings.TrimPrefix(err.Error(), filepath.Dir(cfg.Path)+"/")
			}
			// One of the lines: HAProxy reports what follows from its
			// refusal too (a rule naming the refused ACL).
			if !strings.HasPrefix(got, tc.want) && !strings.Contains(got, "/"+tc.want) {
				t.Fatalf("Preflight error:\n got: %s\nwant: %s...", got, tc.want)
			}
		})
	}
}

// TestPreflightVIPListeners: a listener on ha.vip's address is refused, at its
// field, where the kernel binds only local addresses (a standby could not
// start), and accepted where it binds any; a listener on every address is
// accepted either way. On this machine, Preflight says what the kernel does:
// if it refuses, listening on the address fails.
func TestPreflightVIPListeners(t *testing.T) {
	const text = `frontends:
  - name: edge
    bind: ["0.0.0.0:18080", 192.0.2.100:18443]
    routes: [{group: web}]
metrics: {listen: 127.0.0.1:19100}
ha:
  node: a
  priority: 100
  etcd: {endpoints: [http://127.0.0.1:2379]}
  vip: {address: 192.0.2.100/24, interface: eth0}
groups:
  - {name: web, min_size: 1, max_size: 1, template: {command: [sh]}}
`
	cfg := loadConfig(t, text)
	const want = `/shoal.yaml:3:29: frontends[0].bind[1]: 192.0.2.100:18443 is ha.vip.address, which a node has only while it leads, and net.ipv4.ip_nonlocal_bind is 0 here: a standby could not listen on it; listen on every address (0.0.0.0:18443) or set net.ipv4.ip_nonlocal_bind=1`
	if errs := checkVIPListeners(cfg, func(bool) bool { return false }); len(errs) != 1 || !strings.HasSuffix(errs[0].Error(), want) {
		t.Errorf("local binds only: %v\nwant %s", errs, want)
	}
	if errs := checkVIPListeners(cfg, func(bool) bool { return true }); len(errs) != 0 {
		t.Errorf("non-local binds allowed: %v, want none", errs)
	}

	_, err := Preflight(context.Background(), cfg)
	l, lerr := net.Listen("tcp", "192.0.2.100:0")
	if lerr == nil {
		l.Close()
	}
	if refused := err != nil && strings.Contains(err.Error(), want); refused != (lerr != nil) {
		t.Errorf("Preflight refuses %t (%v), the kernel refuses %t (%v)", refused, err, lerr != nil, lerr)
	}
}

// TestPreflightContainerRuntime: a local container group's runtime must be
// on this machine's PATH; its absence is reported at the template (at
// runtime when the file sets it).
func TestPreflightContainerRuntime(t *testing.T) {
	const text = "listen: 127.0.0.1:18080\nstate_dir: state\ngroups:\n  - name: web\n    min_size: 1\n    max_size: 1\n    template: {image: \"registry.example.com/app:1.4\", port: 8080%s}\n"
	t.Setenv("PATH", t.TempDir())
	for _, tc := range []struct{ extra, want string }{
		{"", `shoal.yaml:7:15: groups[0].template.runtime: container runtime podman not found on this machine's PATH (template.image registry.example.com/app:1.4 runs with it)`},
		{", runtime: docker", `shoal.yaml:7:76: groups[0].template.runtime: container runtime docker not found on this machine's PATH`},
	} {
		cfg := loadConfig(t, fmt.Sprintf(text, tc.extra))
		_, err := Preflight(context.Background(), cfg)
		got := ""
		if err != nil {
			got = strings.TrimPrefix(err.Error(), filepath.Dir(cfg.Path)+"/")
		}
		if !strings.HasPrefix(got, tc.want) {
			t.Fatalf("Preflight error:\n got: %s\nwant: %s...", got, tc.want)
		}
	}
}
