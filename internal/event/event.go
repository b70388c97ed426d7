// Package event names what shoal tells operators about: every event is
// derived from what the store records (a decision.Record in the group's
// event log, or a job's change of state), so `shoal events`, the dashboard
// and the notifications see one history. It sits below the store, which
// derives an event in the same transaction that records its source and
// queues it for the notification targets that want it.
package event

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/job"
)

// Type is a stable name of a kind of event, as targets filter on it.
type Type string

// Event types. Instance, host and HAProxy events are recorded in the
// group's event log with outcome decision.Event (see Record);
// scale events come from jobs, deploy and policy events from their records.
const (
	InstanceLaunched        Type = "instance.launched"
	InstanceLaunchFailed    Type = "instance.launch_failed"
	InstanceTerminated      Type = "instance.terminated"
	InstanceTerminateFailed Type = "instance.terminate_failed"
	InstanceUnhealthy       Type = "instance.unhealthy"
	InstanceReplaced        Type = "instance.replaced"
	ScaleStarted            Type = "scale.started"
	ScaleFinished           Type = "scale.finished"
	ScaleFailed             Type = "scale.failed"
	ScaleIgnored            Type = "scale.ignored"
	HostDown                Type = "host.down"
	HostUp                  Type = "host.up"
	DeployFinished          Type = "deploy.finished"
	DeployRolledBack        Type = "deploy.rolled_back"
	DeployIgnored           Type = "deploy.ignored"
	HAProxyRestarted        Type = "haproxy.restarted"
	GSLBRestarted           Type = "gslb.restarted"
	LeaderChanged           Type = "leader.changed"
	CertificateExpiring     Type = "certificate.expiring"
	PolicyDecision          Type = "policy.decision"
)

// Day-two acts on instances (shoal instances drain, standby, protect, ...).
const (
	InstanceDrained     Type = "instance.drained"
	InstanceUndrained   Type = "instance.undrained"
	InstanceStandby     Type = "instance.standby"
	InstanceResumed     Type = "instance.resumed"
	InstanceProtected   Type = "instance.protected"
	InstanceUnprotected Type = "instance.unprotected"
	// InstanceActFailed and InstanceActIgnored are a day-two act's job
	// (drain, replace, ...) that failed or was refused; what the act did
	// is told by the instance events above.
	InstanceActFailed  Type = "instance.act_failed"
	InstanceActIgnored Type = "instance.act_ignored"
)

// Recycling and host maintenance (issue 39): a voluntary replacement that
// started, waits for the disruption budget, or failed; a host cordoned or
// uncordoned, and a host drain's end.
const (
	RecycleStarted  Type = "recycle.started"
	RecycleWaiting  Type = "recycle.waiting"
	RecycleFailed   Type = "recycle.failed"
	HostCordoned    Type = "host.cordoned"
	HostUncordoned  Type = "host.uncordoned"
	HostDrained     Type = "host.drained"
	HostDrainFailed Type = "host.drain_failed"
)

// Host consolidation (a pack-placed group's placement.consolidation): a
// part-used host being emptied, emptied (it can be powered off), a move
// that waits for the disruption budget, a consolidation that ended with
// instances left, and a scale-in after which no host could be emptied
// (each host's reason).
const (
	HostConsolidating        Type = "host.consolidating"
	HostConsolidated         Type = "host.consolidated"
	HostConsolidationWaiting Type = "host.consolidation_waiting"
	HostConsolidationFailed  Type = "host.consolidation_failed"
	HostConsolidationSkipped Type = "host.consolidation_skipped"
)

// Outlier ejection (a group's outliers): an instance taken out of rotation
// and put back, with the numbers that decided it, and a group whose
// instances fail together (no outlier: max_ejected holds them in).
const (
	InstanceEjected  Type = "instance.ejected"
	InstanceReturned Type = "instance.returned"
	GroupFailing     Type = "group.failing"
)

// A group across providers (issue 42): a provider whose start failed is
// skipped for a back-off, the next one in the group's list is used.
const ProviderSkipped Type = "provider.skipped"

// Canary deploys (a group's deploy.strategy canary): each step with its
// weights, a pause and a resume, the promotion, and a rollback with the
// figures that decided it.
const (
	CanaryStep       Type = "canary.step"
	CanaryPaused     Type = "canary.paused"
	CanaryResumed    Type = "canary.resumed"
	CanaryPromoted   Type = "canary.promoted"
	CanaryRolledBack Type = "canary.rolled_back"
)

// Blue/green deploys (a group's deploy.strategy blue_green): the green set
// starting, its analysis at a small weight, the switch, the end (the old
// set stopped) and a rollback, each with its figures.
const (
	BlueGreenStarted    Type = "blue_green.started"
	BlueGreenAnalysing  Type = "blue_green.analysing"
	BlueGreenSwitched   Type = "blue_green.switched"
	BlueGreenDone       Type = "blue_green.done"
	BlueGreenRolledBack Type = "blue_green.rolled_back"
)

// Types lists every event type, for config checks and docs.
var Types = []Type{
	InstanceLaunched, InstanceLaunchFailed, InstanceTerminated, InstanceTerminateFailed,
	InstanceUnhealthy, InstanceReplaced,
	InstanceDrained, InstanceUndrained, InstanceStandby, InstanceResumed, InstanceProtected, InstanceUnprotected,
	InstanceActFailed, InstanceActIgnored, InstanceEjected, InstanceReturned, GroupFailing,
	ScaleStarted, ScaleFinished, ScaleFailed, ScaleIgnored,
	HostDown, HostUp, DeployFinished, DeployRolledBack, DeployIgnored,
	HAProxyRestarted, GSLBRestarted, LeaderChanged, CertificateExpiring, PolicyDecision,
	RecycleStarted, RecycleWaiting, RecycleFailed, HostCordoned, HostUncordoned, HostDrained, HostDrainFailed,
	HostConsolidating, HostConsolidated, HostConsolidationWaiting, HostConsolidationFailed, HostConsolidationSkipped,
	ProviderSkipped,
	CanaryStep, CanaryPaused, CanaryResumed, CanaryPromoted, CanaryRolledBack,
	BlueGreenStarted, BlueGreenAnalysing, BlueGreenSwitched, BlueGreenDone, BlueGreenRolledBack,
}

// Known reports whether t is one of Types.
func Known(t Type) bool { return slices.Contains(Types, t) }

// Event is one notification's payload: its JSON is what a webhook receives
// and a command reads on stdin (docs/notify.md), a public contract.
type Event struct {
	Type  Type      `json:"type"`
	Time  time.Time `json:"time"`
	Group string    `json:"group,omitempty"`
	// Subject is what the event is about: an instance, a host, a job id.
	Subject string `json:"subject,omitempty"`
	JobID   string `json:"job_id,omitempty"`
	// Message is one line for people (a Slack text, a mail subject).
	Message string `json:"message"`
	// Decision or Job is the record the event was derived from.
	Decision *decision.Record `json:"decision,omitempty"`
	Job      *job.Job         `json:"job,omitempty"`
}

// Record is the group's event-log entry for an event of type t about
// subject: the group records it with the store's InsertDecision like any
// decision, and FromDecision turns it back into the event. The type's
// family is the rule and the rest the code ("instance", "launched"), so
// that `shoal events` shows them in its columns.
func Record(group string, t Type, at time.Time, subject, reason string) decision.Record {
	family, what, _ := strings.Cut(string(t), ".")
	return decision.Record{Group: group, Time: at, Rule: family, Sources: []string{subject},
		Outcome: decision.Event, Code: decision.Code(what), Reason: reason}
}

// FromDecision derives the event a recorded decision is, if any.
func FromDecision(d decision.Record) (Event, bool) {
	e := Event{Time: d.Time, Group: d.Group, JobID: d.JobID, Message: d.Reason, Decision: &d}
	switch d.Outcome {
	case decision.Event:
		e.Type = Type(d.Rule + "." + string(d.Code))
		if len(d.Sources) > 0 {
			e.Subject = d.Sources[0]
		}
	case decision.Deploy:
		switch job.State(d.Code) {
		case job.Done:
			e.Type = DeployFinished
		case job.Failed:
			e.Type = DeployRolledBack
		case job.Ignored:
			e.Type = DeployIgnored
		default:
			return Event{}, false
		}
	case decision.Nothing, decision.Requested, decision.Accepted, decision.Ignored, decision.Error, decision.ForecastOnly:
		e.Type = PolicyDecision
		e.Subject = d.Rule
	default:
		return Event{}, false
	}
	if e.Message == "" {
		e.Message = string(e.Type)
	}
	return e, true
}

// FromJob derives the event of a scaling job entering state j.State from
// was ("" for a new job). Deploys are told by their own records.
func FromJob(was job.State, j job.Job) (Event, bool) {
	if j.State == was || j.Kind == job.Deploy {
		return Event{}, false
	}
	if j.Kind.OnInstances() {
		return fromInstanceJob(j)
	}
	var t Type
	switch j.State {
	case job.Running:
		t = ScaleStarted
	case job.Done:
		t = ScaleFinished
	case job.Failed:
		t = ScaleFailed
	case job.Ignored:
		t = ScaleIgnored
	default:
		return Event{}, false
	}
	msg := fmt.Sprintf("%s: scale %s %d → %d (job %s, %s)", j.Group, j.Kind, j.From, j.Target, j.ID, j.State)
	if j.Reason != "" {
		msg += ": " + j.Reason
	}
	at := j.CreatedAt
	switch {
	case j.FinishedAt != nil:
		at = *j.FinishedAt
	case j.StartedAt != nil:
		at = *j.StartedAt
	}
	return Event{Type: t, Time: at, Group: j.Group, Subject: j.ID, JobID: j.ID, Message: msg, Job: &j}, true
}

// fromInstanceJob is the event of a day-two act's job that failed or was
// refused; its progress and success are the group's instance events.
func fromInstanceJob(j job.Job) (Event, bool) {
	var t Type
	switch j.State {
	case job.Failed:
		t = InstanceActFailed
	case job.Ignored:
		t = InstanceActIgnored
	default:
		return Event{}, false
	}
	subject := strings.Join(j.Instances, ",")
	msg := fmt.Sprintf("%s: %s %s (job %s, %s)", j.Group, j.Kind, subject, j.ID, j.State)
	if j.Reason != "" {
		msg += ": " + j.Reason
	}
	at := j.CreatedAt
	if j.FinishedAt != nil {
		at = *j.FinishedAt
	}
	return Event{Type: t, Time: at, Group: j.Group, Subject: subject, JobID: j.ID, Message: msg, Job: &j}, true
}
