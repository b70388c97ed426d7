package cli

import (
	"testing"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/policy"
)

// TestOutcomeColumn: shoal events names the job an accepted decision asked
// for, and the job a held-back one waits for beside its code.
func TestOutcomeColumn(t *testing.T) {
	for _, c := range []struct {
		e    api.Event
		want string
	}{
		{api.Event{Outcome: decision.Accepted, Code: "scale", JobID: "3"}, "accepted (job 3)"},
		{api.Event{Outcome: decision.Nothing, Code: policy.CodeJobRunning, JobID: "4"}, "nothing: job_running (job 4)"},
		{api.Event{Outcome: decision.Nothing, Code: policy.CodeCooldown}, "nothing: cooldown"},
	} {
		if got := outcome(c.e); got != c.want {
			t.Errorf("outcome(%+v) = %q, want %q", c.e, got, c.want)
		}
	}
}
