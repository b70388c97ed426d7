package core

import (
	"context"
	"errors"
	"fmt"

	"github.com/shoal-lb/shoal/internal/jobrun"
)

// replaceTurns bounds how many other jobs one replacement waits behind.
const replaceTurns = 10

// jobReplacer replaces an instance through the job manager's one job path
// (a replace job: launch before terminate) and waits for its end: what the
// groups' recycling and host drains move instances with. A replace refused
// because another job of the group runs (a scaling, a recycle beside a
// host drain) waits for that job to end and asks again; an instance gone
// meanwhile (that job replaced it) needs nothing more.
type jobReplacer struct {
	jm     *jobrun.Manager
	source string
}

func (r jobReplacer) Replace(ctx context.Context, group, instance string) error {
	for turn := 0; ; turn++ {
		running := r.jm.Running(group)
		j, err := r.jm.SubmitInstances(ctx, jobrun.InstanceRequest{Kind: jobrun.Replace, Instances: []string{instance}, Source: r.source})
		if errors.Is(err, jobrun.ErrUnknownInstance) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("replace %s: %w", instance, err)
		}
		if j.State == jobrun.Ignored {
			if running == "" {
				running = r.jm.Running(group)
			}
			if running == "" || turn >= replaceTurns {
				return fmt.Errorf("replace %s: job %s ignored: %s", instance, j.ID, j.Reason)
			}
			if _, err := r.jm.Wait(ctx, running); err != nil {
				return fmt.Errorf("replace %s: waiting for job %s: %w", instance, running, err)
			}
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("replace %s: %w", instance, err)
			}
			continue
		}
		if j, err = r.jm.Wait(ctx, j.ID); err != nil {
			return fmt.Errorf("replace %s: job %s: %w", instance, j.ID, err)
		}
		if j.State != jobrun.Done {
			return fmt.Errorf("replace %s: job %s %s: %s", instance, j.ID, j.State, j.Reason)
		}
		return nil
	}
}
