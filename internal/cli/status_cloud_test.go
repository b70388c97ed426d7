package cli

import (
	"strings"
	"testing"

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
