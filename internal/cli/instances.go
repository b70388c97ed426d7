package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shoal-lb/shoal/internal/group"
)

func instancesCmd(o *options) *cobra.Command {
	var state, output string
	cmd := &cobra.Command{
		Use:   "instances GROUP | instances ACT NAME...",
		Short: "print a group's instance addresses (for deploy tools), or act on named ones: drain, replace, protect, standby",
		Example: `  shoal instances web --state in-service
  shoal instances web -o json`,
		Long: `Prints HOST:PORT of each instance of GROUP, one per line, or with -o json
the instances as the status shows them. --state keeps only instances in that
state, such as in-service for a deploy tool's targets.

The subcommands act on named instances (day-two operations), each as a job:
drain/undrain, replace, protect/unprotect, standby/resume.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "plain" && output != "json" {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("-o must be plain or json, got %q", output)}
			}
			if state != "" && !slices.Contains(group.States, group.State(state)) {
				names := make([]string, len(group.States))
				for i, s := range group.States {
					names[i] = string(s)
				}
				return &exitError{code: exitUsage, msg: fmt.Sprintf("--state must be one of %s, got %q", strings.Join(names, ", "), state)}
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			g, err := c.Group(cmd.Context(), args[0])
			if err != nil {
				return apiExit(err)
			}
			list := []group.InstanceStatus{}
			for _, in := range g.Instances {
				if state == "" || in.State == group.State(state) {
					list = append(list, in)
				}
			}
			if output == "json" {
				return printJSON(o.stdout, list)
			}
			for _, in := range list {
				fmt.Fprintln(o.stdout, in.Addr)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&state, "state", "", "only instances in this state (starting, in-service, unhealthy, drained, standby, draining, stopping, failed)")
	cmd.Flags().StringVarP(&output, "output", "o", "plain", "output format: plain (one address per line) or json")
	cmd.AddCommand(dayOps(o)...)
	return cmd
}
