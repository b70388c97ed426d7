// Package job is the one shape of a scaling job: the job runner (package
// jobrun) makes and runs a Job, the store keeps it, and the API and CLI show
// it as it is. It sits below the store so that the store can persist it;
// package jobrun re-exports its names for its users, as os does io/fs's.
package job

import (
	"slices"
	"time"
)

// State is a job's state:
//
//	accepted ──► running ──► done
//	    │                └─► failed
//	    └─ (refused at submission) ignored
//
// A job is recorded accepted or ignored; only an accepted one runs. Jobs
// left accepted or running by a restart of shoal are failed at start.
type State string

// Job states.
const (
	Accepted State = "accepted"
	Running  State = "running"
	Done     State = "done"
	Failed   State = "failed"
	Ignored  State = "ignored"
)

// Terminal reports whether a job in state s has ended.
func (s State) Terminal() bool { return s == Done || s == Failed || s == Ignored }

// Kind is what a request asks for.
type Kind string

// Request kinds.
const (
	Up   Kind = "up"   // one plan up the ladder (one instance without plans)
	Down Kind = "down" // one plan down
	Plan Kind = "plan" // jump to a named plan
	Size Kind = "size" // jump to a size
	Keep Kind = "keep" // restore the desired size; no size change
	// Deploy rolls out the group's template; see jobrun.Manager.SubmitDeploy.
	Deploy Kind = "deploy"
	// Wake starts a group at 0 instances (config.Group.WakeSize): requests
	// are held for it, so no cooldown delays it.
	Wake Kind = "wake"
	// Day-two acts on named instances (Job.Instances); see
	// jobs.Manager.SubmitInstances.
	Drain     Kind = "drain"
	Undrain   Kind = "undrain"
	Replace   Kind = "replace"
	Protect   Kind = "protect"
	Unprotect Kind = "unprotect"
	Standby   Kind = "standby"
	Resume    Kind = "resume"
)

// InstanceKinds are the kinds that act on named instances.
var InstanceKinds = []Kind{Drain, Undrain, Replace, Protect, Unprotect, Standby, Resume}

// OnInstances reports whether k acts on named instances.
func (k Kind) OnInstances() bool { return slices.Contains(InstanceKinds, k) }

// Job is a scaling job, as the store keeps it and the API and CLI show it
// (docs/api.md): its json tags are a public contract.
type Job struct {
	// ID is the store's id in decimal; "" until the job is recorded.
	ID     string `json:"id"`
	Group  string `json:"group"`
	Kind   Kind   `json:"kind"`
	Plan   string `json:"plan,omitempty"`
	Source string `json:"source"`
	// From is the group's desired size when the job was submitted, Target
	// the size it moves to.
	From   int    `json:"from"`
	Target int    `json:"target"`
	State  State  `json:"state"`
	Reason string `json:"reason,omitempty"`
	// Noop is set for a job that found nothing to do.
	Noop       bool       `json:"noop,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// Version is the template version a deploy rolls out.
	Version string `json:"version,omitempty"`
	// Instances are the instances a day-two act works on (Kind.OnInstances).
	Instances []string `json:"instances,omitempty"`
	// Note says how the job went about it where it had a choice: a
	// replace's order (launch before terminate, or terminate first and why).
	Note string `json:"note,omitempty"`
}
