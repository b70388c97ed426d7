package cli

import "github.com/spf13/cobra"

func policyCmd(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "policy",
		Short:   "try autoscaling policies without scaling anything",
		Example: `  shoal policy test web --time 6h --policy candidate.yaml`,
		Args:    cobra.NoArgs,
	}
	cmd.AddCommand(policyTestCmd(o))
	cmd.AddCommand(simulateCmd(o))
	return cmd
}
