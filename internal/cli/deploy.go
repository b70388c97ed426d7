package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/group"
)

func deployCmd(o *options) *cobra.Command {
	var (
		sets   []string
		sync   bool
		status bool
		source string
	)
	cmd := &cobra.Command{
		Use:   "deploy GROUP [--set KEY=VALUE ...] [--sync] | deploy GROUP --status",
		Short: "roll the group's template out to every instance, or show how far a rollout is",
		Example: `  shoal deploy web --set version=1.4.2 --sync
  shoal deploy web --status`,
		Long: `A deploy replaces the group's instances with ones started from its current
template (after a config reload changed it), or from the template with variables
overridden: --set KEY=VALUE for a variable declared in template.vars (the values
stay set for later deploys and replacements), and --set template.image=REF for a
container template's image (pulled on every host first: a pull that fails fails
the deploy before it touches an instance). It is a job (kind deploy) that takes
the group's lock; its pace is the group's deploy section (max_surge,
max_unavailable, min_ready, failure_threshold). If new instances fail, it rolls
back and the job fails with the reason. With deploy.strategy canary the new
version first serves a growing share of the requests beside the stable one,
judged by its traffic (see shoal deploy status, pause, resume, promote, abort);
with blue_green a whole second set starts beside the serving one and takes every
request at once, the old set kept for keep_old (see shoal deploy rollback).
Exit status with --sync: 0 done, 1 failed (rolled back), 3 ignored; 2 for an
unknown group or variable.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			set, err := parseSets(sets)
			if err != nil {
				return err
			}
			if status && (len(set) > 0 || sync) {
				return &exitError{code: exitUsage, msg: "--status takes neither --set nor --sync"}
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			if status {
				g, err := c.Group(cmd.Context(), args[0])
				if err != nil {
					return apiExit(err)
				}
				printDeployStatus(o.stdout, g)
				return nil
			}
			job, err := c.Deploy(cmd.Context(), args[0], api.DeployRequest{Set: set, Source: source})
			if err != nil {
				return apiExit(err)
			}
			printJob(o.stdout, job)
			if sync && !job.State.Terminal() {
				if job, err = followDeploy(cmd.Context(), c, o.stdout, job); err != nil {
					return apiExit(err)
				}
			}
			return jobExit(job)
		},
	}
	cmd.Flags().StringArrayVar(&sets, "set", nil, "override a template variable, KEY=VALUE, or template.image=REF (repeatable)")
	cmd.Flags().BoolVar(&sync, "sync", false, "wait for the deploy to end, printing each instance's progress")
	cmd.Flags().BoolVar(&status, "status", false, "show how many instances run the template's version and how many others")
	cmd.Flags().StringVar(&source, "source", "cli", "recorded on the job as its source")
	cmd.AddCommand(deployActCmds(o)...)
	return cmd
}

// parseSets reads KEY=VALUE pairs; a key given twice is an error rather
// than a silent last-one-wins.
func parseSets(sets []string) (map[string]string, error) {
	out := map[string]string{}
	for _, s := range sets {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return nil, &exitError{code: exitUsage, msg: fmt.Sprintf("--set wants KEY=VALUE, got %q", s)}
		}
		if _, dup := out[k]; dup {
			return nil, &exitError{code: exitUsage, msg: fmt.Sprintf("--set %s is given twice", k)}
		}
		out[k] = v
	}
	return out, nil
}

// printDeployStatus counts the group's instances by version against the
// new one: the version a running deploy rolls out, else the configured one
// waiting for a deploy, else the serving one.
func printDeployStatus(w io.Writer, g group.Status) {
	newVersion := g.Version
	switch {
	case g.Deploying != "":
		newVersion = g.Deploying
	case g.Configured != "":
		newVersion = g.Configured
	}
	others := map[string]int{}
	current := 0
	for _, in := range g.Instances {
		if in.Version == newVersion {
			current++
		} else {
			others[in.Version]++
		}
	}
	fmt.Fprintf(w, "group %s  version %s  desired %d\n", g.Name, g.Version, g.Desired)
	if g.Deploying != "" {
		fmt.Fprintf(w, "  deploying %s\n", g.Deploying)
	}
	if g.Configured != "" {
		fmt.Fprintf(w, "  configured %s, not deployed\n", g.Configured)
	}
	fmt.Fprintf(w, "  new (%s): %d\n", newVersion, current)
	old := 0
	for _, v := range slices.Sorted(maps.Keys(others)) {
		old += others[v]
		fmt.Fprintf(w, "  old (%s): %d\n", v, others[v])
	}
	if old == 0 {
		fmt.Fprintln(w, "  old: 0")
	}
}
