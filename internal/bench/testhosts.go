package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/testhost"
)

// TestHosts makes n test hosts under env's work directory: network
// namespaces with a real sshd each, reached over a veth (internal/testhost;
// needs root). The caller closes the lab.
func TestHosts(ctx context.Context, env *Env, n int) (*testhost.Lab, error) {
	dir := filepath.Join(env.Work, "hosts")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	lab, err := testhost.New(ctx, dir, n)
	if err != nil {
		return nil, fmt.Errorf("test hosts: %w", err)
	}
	return lab, nil
}

// SSHProviderYAML is a providers section with one ssh provider, rack, on
// every host of lab, with its host_down_after when downAfter is not 0.
func SSHProviderYAML(lab *testhost.Lab, remoteDir string, downAfter time.Duration) string {
	var b strings.Builder
	b.WriteString("providers:\n  - name: rack\n    type: ssh\n")
	if downAfter != 0 {
		fmt.Fprintf(&b, "    host_down_after: %s\n", downAfter)
	}
	fmt.Fprintf(&b, "    remote_dir: %s\n    hosts:\n", remoteDir)
	for _, h := range lab.Hosts {
		fmt.Fprintf(&b, "      - {address: %q, user: %s, key_file: %q, known_hosts: %q}\n", h.Addr, lab.User, lab.KeyFile, lab.KnownHosts)
	}
	return b.String()
}

// HostsConfig is the config of the benchmarks on test hosts: one group,
// web, of demo-backends listening on {{.Host}} (their host's address),
// health-checked every 500 ms with passive layer-4 checks, on providers (a
// section from SSHProviderYAML, or "" for the local provider alone). group
// holds the group's further fields (provider, placement) as YAML without
// indentation.
func HostsConfig(port int, stateDir, backend string, minSize, maxSize int, providers, group string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:%d
state_dir: %s
haproxy:
  timeouts: {connect: 500ms, server: 5s}
metrics: {interval: 1s}
%sgroups:
  - name: web
    min_size: %d
    max_size: %d
    cooldown: {up: 0s, down: 0s}
    drain_timeout: 5s
%s    health: {path: /healthz, interval: 500ms, fastinter: 500ms, downinter: 500ms, rise: 2, fall: 2, timeout: 500ms, grace: 30s,
      passive: {observe: layer4, error_limit: 1, on_error: mark-down}}
    template:
      command: [%q, "--listen", "{{.Host}}:{{.Port}}", "--name", "{{.Name}}"]
      env: {GOMAXPROCS: "1"}
      stop_timeout: 5s
`, port, stateDir, providers, minSize, maxSize, indent(group, "    "), backend)
}

// HostOf is the host of an instance's address (HOST:PORT).
func HostOf(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return h
}
