package cli

import "github.com/spf13/cobra"

// policyCmd is the parent of the commands that try policies out.
func policyCmd(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "try autoscale policies: simulate them on a recorded trace",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(simulateCmd(o))
	return cmd
}
