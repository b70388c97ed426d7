package bench

import (
	"strings"
	"testing"
	"time"
)

func TestDescribeEvent(t *testing.T) {
	e := Event{Time: time.Date(2026, 11, 23, 10, 0, 5, 0, time.Local), Rule: "target", Current: 2, Recommendation: 3,
		Values: map[string]float64{"cpu.avg": 44.44, "ready": 2, "size": 2}, Outcome: "accepted", JobID: "j7"}
	if got := Describe(e); got != "10:00:05 target 2→3 cpu.avg=44.4: job j7" {
		t.Errorf("describe = %q", got)
	}
	e.JobID, e.Outcome, e.Code = "", "nothing", "cooldown"
	if got := Describe(e); !strings.HasSuffix(got, ": nothing (cooldown)") {
		t.Errorf("describe = %q", got)
	}
}
