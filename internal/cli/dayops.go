package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/shoal-lb/shoal/internal/api"
)

// dayOps are the day-two acts on named instances, subcommands of
// `shoal instances`: each submits a job (POST /v1/instances/{act}).
func dayOps(o *options) []*cobra.Command {
	type flags struct{ noReplace, terminateFirst, decrement bool }
	acts := []struct {
		use, short, long string
		many             bool
		flags            func(*cobra.Command, *flags)
	}{
		{use: "drain NAME", short: "take an instance out of rotation, kept running, after its replacement serves",
			long: `A replacement is launched and in service first, then NAME leaves HAProxy's
rotation: the requests it holds finish, no new ones come; it keeps running
(state drained) and no longer counts towards the group's size. With
--no-replace nothing is launched and the group serves one fewer (refused below
min_size). shoal instances undrain NAME puts it back.`,
			flags: func(c *cobra.Command, f *flags) {
				c.Flags().BoolVar(&f.noReplace, "no-replace", false, "start no replacement (refused if fewer than min_size would serve)")
				c.Flags().BoolVar(&f.terminateFirst, "terminate-first", false, "take it out before its replacement serves")
			}},
		{use: "undrain NAME", short: "put a drained instance back in rotation",
			long: `A replaced instance is then surplus: the group's scale-in (its scale_in order,
protection respected) retires one.`},
		{use: "replace NAME...", short: "replace instances, launching each replacement before the old one goes", many: true,
			long: `Each instance's replacement is started and in service before the instance
drains and stops (within max_size plus a surge of one). --terminate-first, or a
group at max_size whose provider has no room, takes the old one out first; the
job's note says which. A replacement that fails its health gate fails the job
with the reason and leaves the old instance serving.`,
			flags: func(c *cobra.Command, f *flags) {
				c.Flags().BoolVar(&f.terminateFirst, "terminate-first", false, "take each out before its replacement serves")
			}},
		{use: "protect NAME...", short: "never choose these instances for scale-in", many: true,
			long: `A scale-in (a job or the policy's) that could take only protected instances
stops at them and its job fails saying so. A protected instance that fails is
still replaced.`},
		{use: "unprotect NAME...", short: "let scale-in choose these instances again", many: true},
		{use: "standby NAME", short: "take an instance out of rotation for maintenance, kept running",
			long: `Like drain (state standby), the group keeps its size by starting another
first; with --decrement the desired size is lowered by one instead (refused
below min_size). shoal instances resume NAME puts it back (and raises the
desired size again if it was lowered).`,
			flags: func(c *cobra.Command, f *flags) {
				c.Flags().BoolVar(&f.decrement, "decrement", false, "lower the desired size instead of starting another")
				c.Flags().BoolVar(&f.terminateFirst, "terminate-first", false, "take it out before its replacement serves")
			}},
		{use: "resume NAME", short: "put a standby instance back in rotation"},
	}
	var cmds []*cobra.Command
	for _, a := range acts {
		var (
			f      flags
			sync   bool
			source string
		)
		args := cobra.ExactArgs(1)
		if a.many {
			args = cobra.MinimumNArgs(1)
		}
		long := a.long
		if long != "" {
			long += "\n\n"
		}
		long += `It is a job that takes the group's lock. Exit status with --sync: 0 done,
1 failed, 3 ignored (refused: the reason is printed); 2 for an unknown instance.`
		cmd := &cobra.Command{
			Use:   a.use,
			Short: a.short,
			Long:  long,
			Args:  args,
			RunE: func(cmd *cobra.Command, names []string) error {
				c, err := o.client()
				if err != nil {
					return err
				}
				job, err := c.Instances(cmd.Context(), cmd.Name(), api.InstancesRequest{Instances: names, Source: source,
					NoReplace: f.noReplace, TerminateFirst: f.terminateFirst, Decrement: f.decrement})
				if err != nil {
					return apiExit(err)
				}
				printJob(o.stdout, job)
				if sync && !job.State.Terminal() {
					if job, err = follow(cmd.Context(), c, o.stdout, job); err != nil {
						return apiExit(err)
					}
				}
				return jobExit(job)
			},
		}
		if a.flags != nil {
			a.flags(cmd, &f)
		}
		cmd.Flags().BoolVar(&sync, "sync", false, "wait for the job to end, showing progress")
		cmd.Flags().StringVar(&source, "source", "cli", "recorded on the job as its source")
		cmd.Example = fmt.Sprintf("  shoal instances %s --sync", exampleArgs(cmd.Name()))
		cmds = append(cmds, cmd)
	}
	return cmds
}

func exampleArgs(act string) string {
	if act == "replace" {
		return "replace web-001 web-002"
	}
	return act + " web-001"
}
