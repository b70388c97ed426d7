package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/provider"
)

// TestPrintHosts: the hosts table of `shoal status` shows each host's
// state, instances, capacity used and labels, and its last error made safe
// for a terminal.
func TestPrintHosts(t *testing.T) {
	var b strings.Builder
	printHosts(&b, []provider.HostStatus{
		{Provider: "rack", Name: "10.0.0.2", State: provider.HostUp, Since: time.Now().Add(-time.Minute), Instances: 5, Cores: 2.5,
			CapacityInstances: 10, CapacityCores: 4, Labels: map[string]string{"zone": "a", "disk": "ssd"}},
		{Provider: "rack", Name: "10.0.0.3", State: provider.HostDown, Instances: 0, LastError: "dial tcp: connection refused\x1b[2J"},
	})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "PROVIDER") {
		t.Fatalf("table:\n%s", b.String())
	}
	for _, want := range []string{"10.0.0.2", "up", "1m0s ago", "5/10, 2.5/4 cores", "disk=ssd,zone=a"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("up host's row %q lacks %q", lines[1], want)
		}
	}
	for _, want := range []string{"10.0.0.3", "down", " - ", "dial tcp: connection refused?[2J"} {
		if !strings.Contains(lines[2], want) {
			t.Errorf("down host's row %q lacks %q", lines[2], want)
		}
	}
}

// TestPrintChecks: per host OK with what was checked, or each problem.
func TestPrintChecks(t *testing.T) {
	var b strings.Builder
	printPreflight(&b, []provider.PreflightResult{
		{Provider: "rack", Host: "10.0.0.2", OK: true, Notes: []string{"connected as deploy", "100 free ports"}},
		{Provider: "rack", Host: "10.0.0.3", Problems: []string{"program /opt/app not found", "no free port in 20000-20000"}},
	})
	want := "rack 10.0.0.2: OK (connected as deploy; 100 free ports)\n" +
		"rack 10.0.0.3: 2 problem(s)\n  - program /opt/app not found\n  - no free port in 20000-20000\n"
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}
