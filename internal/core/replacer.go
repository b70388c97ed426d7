package core

import (
	"context"
	"fmt"

	"github.com/shoal-lb/shoal/internal/jobrun"
)

// jobReplacer replaces an instance through the job manager's one job path
// (a replace job: launch before terminate) and waits for its end: what the
// groups' recycling and host drains move instances with.
type jobReplacer struct {
	jm     *jobrun.Manager
	source string
}

func (r jobReplacer) Replace(ctx context.Context, group, instance string) error {
	j, err := r.jm.SubmitInstances(ctx, jobrun.InstanceRequest{Kind: jobrun.Replace, Instances: []string{instance}, Source: r.source})
	if err != nil {
		return fmt.Errorf("replace %s: %w", instance, err)
	}
	if j.State == jobrun.Ignored {
		return fmt.Errorf("replace %s: job %s ignored: %s", instance, j.ID, j.Reason)
	}
	if j, err = r.jm.Wait(ctx, j.ID); err != nil {
		return fmt.Errorf("replace %s: job %s: %w", instance, j.ID, err)
	}
	if j.State != jobrun.Done {
		return fmt.Errorf("replace %s: job %s %s: %s", instance, j.ID, j.State, j.Reason)
	}
	return nil
}
