package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSimulateTakesMeasuredStartDelay: shoal records how long each of a
// group's instances took from its start to in service; the group's status
// shows the median, and `shoal policy simulate` without --start-delay
// simulates with it, saying so. --start-delay still wins.
func TestSimulateTakesMeasuredStartDelay(t *testing.T) {
	parallel(t) // waits for instances; its bound (15 s) is loose, no load
	g := groupSpec{Name: "web", Min: 2, Max: 3, Extra: `    autoscale:
      target: {metric: cpu.p90, value: 60}
`}
	e := newEnv(t, "", g)
	e.start()
	e.waitInService("web", 2)

	var sd struct {
		Median  time.Duration `json:"median_ns"`
		Samples int           `json:"samples"`
	}
	e.eventually("a measured start delay", 10*time.Second, func() error {
		st, err := e.client().Group(context.Background(), "web")
		if err != nil {
			return err
		}
		if st.StartDelay == nil || st.StartDelay.Samples < 2 {
			return fmt.Errorf("start delay %+v", st.StartDelay)
		}
		sd.Median, sd.Samples = st.StartDelay.Median, st.StartDelay.Samples
		return nil
	})
	// The harness's checks: interval 300ms, rise 2.
	if sd.Median < 300*time.Millisecond || sd.Median > 15*time.Second {
		t.Fatalf("measured start delay %v, want what 2 checks at 300ms take, a few seconds at most", sd.Median)
	}

	var b strings.Builder
	b.WriteString("timestamp_utc,requests\n")
	for m := range 30 {
		fmt.Fprintf(&b, "1998-06-30T08:%02d:00Z,%d\n", m, 3000+200*m)
	}
	tracePath := filepath.Join(e.dir, "trace.csv")
	if err := os.WriteFile(tracePath, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	simulate := func(extra ...string) (delay, source string) {
		t.Helper()
		args := append([]string{"policy", "simulate", "--trace", tracePath, "--from", "1998-06-30T08:00", "--to", "1998-06-30T08:30",
			"--history", "0s", "-o", "json"}, extra...)
		out, stderr, code := e.cli(args...)
		if code != 0 {
			t.Fatalf("shoal %v: exit %d\n%s%s", args, code, out, stderr)
		}
		var res struct {
			StartDelay       string `json:"start_delay"`
			StartDelaySource string `json:"start_delay_source"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("simulate's JSON: %v\n%s", err, out)
		}
		return res.StartDelay, res.StartDelaySource
	}
	delay, source := simulate()
	if delay != sd.Median.String() || !strings.HasPrefix(source, "measured by shoal: median of group web's last ") {
		t.Fatalf("simulate without --start-delay: %s (%s), want the measured %v", delay, source, sd.Median)
	}
	t.Logf("simulated with the measured start delay %s (%s)", delay, source)
	if delay, source := simulate("--start-delay", "3m30s"); delay != "3m30s" || source != "--start-delay" {
		t.Fatalf("simulate --start-delay 3m30s: %s (%s)", delay, source)
	}
}
