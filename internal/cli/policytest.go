package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/shoal-lb/shoal/internal/api"
)

func policyTestCmd(o *options) *cobra.Command {
	var window, file, output string
	cmd := &cobra.Command{
		Use:   "test GROUP",
		Short: "replay a group's stored metrics through its policy (or a candidate) and print the decisions it would have made",
		Example: `  shoal policy test web --time 6h
  shoal policy test web --policy candidate.yaml -o json`,
		Long: `A dry run: replays GROUP's stored metrics over the last --time (default 1h)
through its autoscale policy, or through the candidate in --policy FILE, with
the same code as the live autoscaler and an injected clock, and prints every
decision it would have made. Nothing is scaled and nothing is recorded.

FILE holds what goes under the group's autoscale: (interval, rules, target,
schedule), or a mapping with the one key autoscale. It is validated like the
config: problems print as FILE:LINE:COL: field: message, exit status 2.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "table" && output != "json" {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("-o must be table or json, got %q", output)}
			}
			w, err := api.ParseWindow(window)
			if err != nil {
				return &exitError{code: exitUsage, msg: "--time: " + err.Error()}
			}
			var candidate []byte
			if file != "" {
				if candidate, err = os.ReadFile(file); err != nil {
					return &exitError{code: exitUsage, msg: fmt.Sprintf("--policy: %v", err)}
				}
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			evs, err := c.PolicyTestFile(cmd.Context(), args[0], w, file, candidate)
			if err != nil {
				return apiExit(err)
			}
			p := &eventPrinter{w: o.stdout, json: output == "json"}
			p.print(evs)
			if output == "table" {
				scaled := 0
				for _, e := range evs {
					if e.Request != nil {
						scaled++
					}
				}
				fmt.Fprintf(o.stdout, "%d decision(s) over the last %s; %d would have requested a job\n", len(evs), w, scaled)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&window, "time", "1h", `how far back to replay: a duration such as "30m" or "1h"`)
	f.StringVar(&file, "policy", "", "a candidate policy (YAML) instead of the group's own")
	f.StringVarP(&output, "output", "o", "table", "output format: table or json (one object per line)")
	return cmd
}
