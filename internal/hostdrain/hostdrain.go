// Package hostdrain moves every instance off a cordoned host: one at a
// time, each replaced (launch before terminate) when its group's
// disruption budget allows, reporting what moved and what could not and
// why. It knows nothing of providers or groups: the caller lists the
// instances, and gives the budget and the replacer.
//
//	for each instance, in order:
//	  ask the budget ──refused──► wait (Poll), ask again; past MaxWait: left, "waited ...: <why>"
//	      │ allowed
//	      ▼
//	  Replace ──error──► left, the error
//	      │ ok
//	      ▼
//	    moved
package hostdrain

import (
	"context"
	"fmt"
	"time"
)

// Instance is one instance on the host.
type Instance struct {
	Group string `json:"group"`
	Name  string `json:"name"`
}

// Left is an instance the drain could not move, and why.
type Left struct {
	Instance
	Reason string `json:"reason"`
}

// Report is a drain's progress: what moved, what could not, and what it
// does now (Progress; "" once it ended).
type Report struct {
	Moved    []Instance
	Left     []Left
	Progress string
}

// replacer replaces an instance by a new one placed by its group (never on
// the cordoned host), started and in service before the old one is drained
// and stopped, and returns once that is done.
type replacer interface {
	Replace(ctx context.Context, group, instance string) error
}

// Budget reports whether one more voluntary replacement in group may start
// now, and why not (disruption.Budget.Allowed over the group's counts).
type Budget func(group string) (ok bool, why string)

// Drain is one host's drain.
type Drain struct {
	Host      string
	Instances []Instance
	Replacer  replacer
	Budget    Budget
	// Poll is how often a refused budget is asked again; MaxWait how long
	// one instance waits for it before the drain leaves it.
	Poll, MaxWait time.Duration
	// Progress, if set, is told the report after each step.
	Progress func(Report)
}

// Run moves the instances one at a time and returns the final report. A
// cancelled ctx leaves the rest, saying so.
func (d Drain) Run(ctx context.Context) Report {
	var r Report
	tell := func(format string, a ...any) {
		r.Progress = fmt.Sprintf(format, a...)
		if d.Progress != nil {
			d.Progress(r)
		}
	}
	for i, in := range d.Instances {
		if err := ctx.Err(); err != nil {
			for _, rest := range d.Instances[i:] {
				r.Left = append(r.Left, Left{rest, "drain interrupted: " + context.Cause(ctx).Error()})
			}
			break
		}
		if why := d.await(ctx, in, func(why string) {
			tell("%d/%d: %s waits: %s", i+1, len(d.Instances), in.Name, why)
		}); why != "" {
			r.Left = append(r.Left, Left{in, why})
			continue
		}
		tell("%d/%d: replacing %s (group %s)", i+1, len(d.Instances), in.Name, in.Group)
		if err := d.Replacer.Replace(ctx, in.Group, in.Name); err != nil {
			r.Left = append(r.Left, Left{in, "replace failed: " + err.Error()})
			continue
		}
		r.Moved = append(r.Moved, in)
	}
	tell("")
	return r
}

// await waits until the budget allows replacing in; it returns "" then,
// or why it gave up.
func (d Drain) await(ctx context.Context, in Instance, waiting func(string)) string {
	start := time.Now()
	for {
		ok, why := d.Budget(in.Group)
		if ok {
			return ""
		}
		if time.Since(start) >= d.MaxWait {
			return fmt.Sprintf("waited %s for the disruption budget of group %s: %s", d.MaxWait, in.Group, why)
		}
		waiting(why)
		t := time.NewTimer(d.Poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return "drain interrupted while waiting for the disruption budget: " + why
		case <-t.C:
		}
	}
}
