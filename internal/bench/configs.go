package bench

import (
	"fmt"
	"strings"
)

// BenchConfig renders a shoal config for a benchmark: the frontend on
// 127.0.0.1:port, state in stateDir, a metrics section (YAML lines without
// indentation, may be empty) and the groups (from GroupYAML).
func BenchConfig(port int, stateDir, metrics string, groups ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: 127.0.0.1:%d\nstate_dir: %s\n", port, stateDir)
	if metrics != "" {
		b.WriteString("metrics:\n" + indent(metrics, "  "))
	}
	b.WriteString("groups:\n")
	for _, g := range groups {
		b.WriteString(g)
	}
	return b.String()
}

// GroupYAML renders a group of demo-backend instances, one core each
// (GOMAXPROCS=1 and cpus: 1, so that more instances are more capacity even
// on a small machine), health-checked every check (rise 2). extra holds
// more fields of the group (cooldown, autoscale) as YAML without indentation.
func GroupYAML(name, backend string, minSize, maxSize int, check, extra string) string {
	return GroupYAMLArgs(name, backend, nil, minSize, maxSize, check, extra)
}

// GroupYAMLArgs is GroupYAML with more arguments for the demo-backend
// (--workers N, say).
func GroupYAMLArgs(name, backend string, args []string, minSize, maxSize int, check, extra string) string {
	more := ""
	for _, a := range args {
		more += fmt.Sprintf(", %q", a)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `  - name: %s
    min_size: %d
    max_size: %d
    drain_timeout: 10s
    health:
      path: /healthz
      interval: %s
      rise: 2
      fall: 3
      timeout: 1s
      grace: 60s
    template:
      command: [%q, "--listen", "127.0.0.1:{{.Port}}", "--name", "{{.Name}}"%s]
      env: {GOMAXPROCS: "1"}
      cpus: 1
      stop_timeout: 5s
`, name, minSize, maxSize, check, backend, more)
	b.WriteString(indent(extra, "    "))
	return b.String()
}

// indent prefixes every non-empty line of s.
func indent(s, prefix string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(strings.TrimRight(s, "\n"), "\n") {
		if line != "" {
			b.WriteString(prefix + line)
		}
		b.WriteString("\n")
	}
	if s == "" {
		return ""
	}
	return b.String()
}

// GroupCap is the most instances one group of the benchmarks that spread
// instances over groups has (shoal's config accepts up to 1,000; these
// benchmarks were measured with groups of 100).
const GroupCap = 100
