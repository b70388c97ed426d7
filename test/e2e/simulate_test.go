package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSimulateMeasuresCapacity: `shoal policy simulate --capacity measured`
// takes an instance's capacity from what the live group served and at what
// CPU, and prints where it came from; an idle group is refused with what it
// measured instead of a made-up number.
func TestSimulateMeasuresCapacity(t *testing.T) {
	g := groupSpec{Name: "web", Min: 1, Max: 1, Extra: `    autoscale:
      target: {metric: cpu.p90, value: 60}
`}
	e := newEnv(t, "metrics: {warmup: 1s}\n", g)
	e.start()
	e.waitInService("web", 1)

	var b strings.Builder
	b.WriteString("timestamp_utc,requests\n")
	for m := range 60 {
		fmt.Fprintf(&b, "1998-06-30T08:%02d:00Z,%d\n", m, 3000+100*m)
	}
	tracePath := filepath.Join(e.dir, "trace.csv")
	if err := os.WriteFile(tracePath, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	simulate := func(window string) (string, string, int) {
		return e.cli("policy", "simulate", "--trace", tracePath, "--from", "1998-06-30T08:00", "--to", "1998-06-30T09:00",
			"--capacity", "measured", "--measure-window", window, "-o", "json")
	}

	time.Sleep(3 * time.Second)
	if _, stderr, code := simulate("3s"); code != 2 || !strings.Contains(stderr, "need at least 10 % CPU to measure, or pass --capacity RPS") {
		t.Fatalf("idle group: exit %d, stderr %q; want exit 2 and why", code, stderr)
	}

	// One closed-loop client of 4 ms CPU requests keeps the instance well
	// above 10 % of its core; an instance can serve at most 1 s / 4 ms = 250
	// of them a second, less by what HTTP itself costs.
	stop := workLoad(t, e, "/work?ms=4", 1)
	time.Sleep(8 * time.Second)
	out, stderr, code := simulate("6s")
	res := stop()
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var doc struct {
		Capacity float64 `json:"capacity_rps"`
		Source   string  `json:"capacity_source"`
		Policies []struct {
			InstanceSeconds float64 `json:"instance_seconds"`
		} `json:"policies"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if doc.Capacity < 100 || doc.Capacity > 275 || !strings.Contains(doc.Source, "measured by shoal: group web served") || len(doc.Policies) != 1 {
		t.Fatalf("capacity %.1f req/s (%s), %d policies; want 100-275 req/s measured by shoal, one policy", doc.Capacity, doc.Source, len(doc.Policies))
	}
	if res.Failures != 0 {
		t.Fatalf("%d of %d requests failed", res.Failures, res.Requests)
	}
	t.Logf("measured capacity %.1f req/s (%s); load %d requests", doc.Capacity, doc.Source, res.Requests)
}
