package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/loadgen"
)

// TestSimulateMeasuresCapacity: `shoal policy simulate --capacity measured`
// takes an instance's capacity from how the live group's CPU grew with the
// requests it served, and prints where it came from; an idle group is
// refused with why instead of a made-up number.
func TestSimulateMeasuresCapacity(t *testing.T) {
	exclusive(t)
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
	// The endpoint simulate asks: bad input is a JSON error.
	for path, want := range map[string]int{
		"/v1/groups/web/capacity?window=5x":    http.StatusBadRequest,
		"/v1/groups/web/capacity?window=-1m":   http.StatusBadRequest,
		"/v1/groups/nosuch/capacity?window=1m": http.StatusNotFound,
	} {
		if code, body := httpGetUnix(t, e, path); code != want || !strings.Contains(body, `"error"`) {
			t.Errorf("GET %s: %d %s, want %d and a JSON error", path, code, body, want)
		}
	}
	if _, stderr, code := simulate("3s"); code != 2 || !strings.Contains(stderr, "cannot estimate an instance's capacity: ") ||
		!strings.Contains(stderr, "or pass --capacity RPS") {
		t.Fatalf("idle group: exit %d, stderr %q; want exit 2 and why", code, stderr)
	}

	// Requests of 4 ms CPU at 20, 60 and 100 a second: the instance's CPU
	// climbs by about 0.4 % per req/s of them. An instance can serve at most
	// 1 s / 4 ms = 250 a second, less by what HTTP itself costs.
	res, err := loadgen.RunOpen(context.Background(), loadgen.OpenOptions{
		URL: "http://" + e.listen + "/work?ms=4", Timeout: 10 * time.Second,
		Schedule: []loadgen.Segment{{Rate: 20, Duration: 6 * time.Second}, {Rate: 60, Duration: 6 * time.Second}, {Rate: 100, Duration: 6 * time.Second}},
	})
	if err != nil {
		t.Fatal(err)
	}
	out, stderr, code := simulate("17s")
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
	if doc.Capacity < 100 || doc.Capacity > 275 || !strings.Contains(doc.Source, "measured by shoal: group web over the last 17s: ") ||
		!strings.Contains(doc.Source, "% CPU per req/s, fitted over ") || len(doc.Policies) != 1 {
		t.Fatalf("capacity %.1f req/s (%s), %d policies; want 100-275 req/s measured by shoal, one policy", doc.Capacity, doc.Source, len(doc.Policies))
	}
	if res.Errors != 0 {
		t.Fatalf("%d of %d requests failed: %v", res.Errors, res.Completed, res.FailureSamples)
	}
	t.Logf("measured capacity %.1f req/s (%s); load %d requests", doc.Capacity, doc.Source, res.Completed)
}
