package group

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.json")

// TestStatusJSONGolden pins the JSON of a group's status, its instances
// included, byte for byte: the API serves Status as is (GET /v1/groups/NAME,
// GET /v1/status, shoal status -o json), a public contract (docs/api.md), so
// a change of an instance's internal shapes must leave it as it is.
func TestStatusJSONGolden(t *testing.T) {
	r := newReconciler(t, 1, nil)
	r.awaitStarts(1)
	r.awaitGate("web-001")
	r.lb.set("web-001", "UP", "L7OK")
	r.poll(healthPoll)
	r.awaitState("web-001", InService)
	got, err := json.MarshalIndent(r.g.Status(context.Background()), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", "status.golden.json")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("status JSON changed:\ngot:\n%s\nwant:\n%s", got, want)
	}
}
