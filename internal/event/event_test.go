package event

import (
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/job"
)

func TestFromDecision(t *testing.T) {
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		d           decision.Record
		want        Type
		wantSubject string
	}{
		{Record("web", HostDown, at, "10.0.0.2", "host 10.0.0.2 down"), HostDown, "10.0.0.2"},
		{decision.Record{Group: "web", Outcome: decision.Deploy, Code: decision.Code(job.Done)}, DeployFinished, ""},
		{decision.Record{Group: "web", Outcome: decision.Deploy, Code: decision.Code(job.Failed)}, DeployRolledBack, ""},
		{decision.Record{Group: "web", Outcome: decision.Deploy, Code: decision.Code(job.Ignored)}, DeployIgnored, ""},
		{decision.Record{Group: "web", Outcome: decision.Deploy, Code: decision.Code(job.Running)}, "", ""},
		{decision.Record{Group: "web", Rule: "cpu-high", Outcome: decision.Accepted}, PolicyDecision, "cpu-high"},
		{decision.Record{Group: "web", Rule: "target", Outcome: decision.Ignored}, PolicyDecision, "target"},
		{decision.Record{Group: "web", Outcome: decision.Placement}, "", ""},
		{decision.Record{Group: "web", Outcome: decision.ScaleIn}, "", ""},
	}
	for _, tt := range tests {
		ev, ok := FromDecision(tt.d)
		if ok != (tt.want != "") || ev.Type != tt.want || ev.Subject != tt.wantSubject {
			t.Errorf("%s/%s: %+v %v; want %q about %q", tt.d.Outcome, tt.d.Code, ev, ok, tt.want, tt.wantSubject)
		}
		if ok && (ev.Group != "web" || ev.Decision == nil || ev.Message == "") {
			t.Errorf("%s/%s: %+v", tt.d.Outcome, tt.d.Code, ev)
		}
	}
}

func TestFromJob(t *testing.T) {
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	j := job.Job{ID: "7", Group: "web", Kind: job.Up, From: 2, Target: 3, CreatedAt: at}
	tests := []struct {
		was, now job.State
		kind     job.Kind
		want     Type
	}{
		{"", job.Accepted, job.Up, ""},
		{"", job.Ignored, job.Up, ScaleIgnored},
		{job.Accepted, job.Running, job.Up, ScaleStarted},
		{job.Running, job.Running, job.Up, ""},
		{job.Running, job.Done, job.Size, ScaleFinished},
		{job.Running, job.Failed, job.Up, ScaleFailed},
		{job.Running, job.Done, job.Deploy, ""}, // told by the deploy's record
	}
	for _, tt := range tests {
		j.State, j.Kind = tt.now, tt.kind
		ev, ok := FromJob(tt.was, j)
		if ok != (tt.want != "") || ev.Type != tt.want {
			t.Errorf("%s %s → %s: %+v %v; want %q", tt.kind, tt.was, tt.now, ev, ok, tt.want)
		}
		if ok && (ev.JobID != "7" || ev.Subject != "7" || ev.Job == nil || ev.Group != "web") {
			t.Errorf("%s → %s: %+v", tt.was, tt.now, ev)
		}
	}
	if !Known(ScaleFailed) || Known("scale.exploded") {
		t.Error("Known")
	}
}
