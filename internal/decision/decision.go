// Package decision is the one shape of an explained autoscaling decision,
// and so of an entry in a group's event log: the policy makes a Record, the
// store keeps it, and the API and `shoal events` show it as it is (a deploy,
// a scale-in, a placement or, with outcome Event, something that happened to
// the fleet is logged as one too). It sits below the store so that every
// layer can share it (the store persists it; the policy, the job runner, the
// group and the waker write it). Package event derives the notification
// about an entry.
package decision

import (
	"encoding/json"
	"time"

	"github.com/shoal-lb/shoal/internal/job"
)

// Outcome is what came of a decision.
type Outcome string

// Outcomes. The policy's Evaluate decides Nothing or Requested; the Runner
// (and the waker) turn Requested into Accepted, Ignored or Error once the job
// manager has answered. The job manager writes Deploy and ScaleIn events.
const (
	// Nothing: nothing to do, and the reason says why.
	Nothing Outcome = "nothing"
	// Requested: the job in Request is wanted. A policy test leaves it so
	// (it does nothing).
	Requested Outcome = "request"
	Accepted  Outcome = "accepted"
	Ignored   Outcome = "ignored"
	Error     Outcome = "error"
	// ForecastOnly: a predictive policy in mode forecast_only would have
	// raised the floor.
	ForecastOnly Outcome = "forecast only"
	// Deploy marks a deploy's start and end, beside the autoscaler's
	// decisions, so `shoal events` shows why the policy waited.
	Deploy Outcome = "deploy"
	// ScaleIn marks which instances a job's scale-in retires and why (the
	// group's scale_in policy is the code).
	ScaleIn Outcome = "scale_in"
	// Placement marks where a provider with several hosts put a new
	// instance and why (the group's placement strategy is the code).
	Placement Outcome = "placement"
	// Event marks something that happened to the group's fleet (an
	// instance launched, a host down, ...); the rule and the code name
	// its event.Type ("instance", "launched").
	Event Outcome = "event"
)

// Code is a stable word for the reason of a decision, for filtering and
// tests. The package that decides defines its codes (policy.CodeScale, …).
type Code string

// SourcePrefix starts the source of every job a decision requests: the rule
// follows it. The store keeps the rule, not the source, so a recorded
// request's source is always SourcePrefix and the rule.
const SourcePrefix = "policy:"

// Record is one explained decision, as GET /v1/events and a policy test
// list it (docs/api.md): its json tags are a public contract.
type Record struct {
	// ID orders recorded decisions; 0 for one not stored (a policy test's).
	ID    int64     `json:"id"`
	Time  time.Time `json:"time"`
	Group string    `json:"group"`
	// Rule is what decided: a rule's name, "target", or a schedule's name.
	Rule string `json:"rule"`
	// Sources are every rule, target or schedule that fired or would have.
	Sources []string `json:"sources"`
	// Values are the metric values the evaluation saw, by path (the newest
	// sample).
	Values         map[string]float64 `json:"values"`
	Current        int                `json:"current"`
	Recommendation int                `json:"recommendation"`
	// Request is the job asked for; nil (null) when nothing was to be done.
	Request *Request `json:"request"`
	Outcome Outcome  `json:"outcome"`
	Code    Code     `json:"code"`
	Reason  string   `json:"reason"`
	JobID   string   `json:"job_id"`
}

// Request is the job a decision asks for, in the job manager's words
// (jobrun.Request without the group, which is the record's).
type Request struct {
	Kind   job.Kind `json:"kind"`
	Plan   string   `json:"plan"`
	Size   int      `json:"size"`
	Source string   `json:"source"`
}

// MarshalJSON writes no sources as [] and no values as {}, so that clients
// need not tell null from empty.
func (r Record) MarshalJSON() ([]byte, error) {
	type plain Record // without this method
	if r.Sources == nil {
		r.Sources = []string{}
	}
	if r.Values == nil {
		r.Values = map[string]float64{}
	}
	return json.Marshal(plain(r))
}
