package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/group"
)

// TestPrintGroupCloudID: a cloud group's table has each server's cloud ID
// beside its instance; a group of processes keeps its columns.
func TestPrintGroupCloudID(t *testing.T) {
	var b strings.Builder
	printGroup(&b, group.Status{Name: "web", Instances: []group.InstanceStatus{
		{Name: "web-001", CloudID: "113301705264", Addr: "127.0.0.1:4001", State: group.InService, Health: "UP"},
		{Name: "web-002", Addr: "", State: group.Starting, Health: "-"},
	}})
	lines := strings.Split(b.String(), "\n")
	if len(lines) < 5 || !strings.HasPrefix(strings.TrimSpace(lines[2]), "NAME") {
		t.Fatalf("table:\n%s", b.String())
	}
	if f := strings.Fields(lines[2]); f[1] != "CLOUD-ID" {
		t.Errorf("header %q: want CLOUD-ID second", lines[2])
	}
	if f := strings.Fields(lines[3]); f[0] != "web-001" || f[1] != "113301705264" || f[2] != "127.0.0.1:4001" {
		t.Errorf("row %q: want the server's cloud ID after its name", lines[3])
	}
	if f := strings.Fields(lines[4]); f[0] != "web-002" || f[1] != "-" {
		t.Errorf("row %q: want - for a server not created yet", lines[4])
	}

	b.Reset()
	printGroup(&b, group.Status{Name: "web", Instances: []group.InstanceStatus{{Name: "web-001", Addr: "127.0.0.1:4001", State: group.InService}}})
	if strings.Contains(b.String(), "CLOUD-ID") {
		t.Errorf("a group of processes shows a CLOUD-ID column:\n%s", b.String())
	}
}

// TestPrintGroupProviders: a group across providers shows each provider's
// instances, hours and cost today, and a skipped one's back-off, and each
// instance's provider.
func TestPrintGroupProviders(t *testing.T) {
	var b strings.Builder
	printGroup(&b, group.Status{Name: "web", InstanceHoursToday: 3, CostToday: 0.05, Providers: []group.ProviderUsage{
		{Name: "rack", Instances: 2, InstanceHoursToday: 2},
		{Name: "sakura", Instances: 1, Max: 20, CostPerHour: 0.05, InstanceHoursToday: 1, CostToday: 0.05, SkippedUntil: time.Now().Add(time.Minute), SkipReason: "API refused\x1b[2J"},
	}, Instances: []group.InstanceStatus{
		{Name: "web-001", Provider: "rack", Addr: "10.0.0.2:20001", State: group.InService},
		{Name: "web-003", Provider: "sakura", CloudID: "1133", Addr: "192.0.2.7:80", State: group.InService},
	}})
	out := b.String()
	for _, want := range []string{"cost today 0.05", "PROVIDER  INSTANCES", "rack      2          -    2.00", "sakura    1          20   1.00         0.05       0.05", "API refused", "NAME     PROVIDER  CLOUD-ID"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("a control character reached the terminal:\n%q", out)
	}
	lines := strings.Split(out, "\n")
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 2 && f[0] == "web-003" && (f[1] != "sakura" || f[2] != "1133") {
			t.Errorf("row %q: want its provider, then its cloud ID", l)
		}
	}
}
