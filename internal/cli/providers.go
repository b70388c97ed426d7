package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/provider"
)

func providersCmd(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "providers",
		Short:   "look at the providers that run instances on other servers",
		Example: `  shoal providers check`,
		Args:    cobra.NoArgs,
	}
	check := &cobra.Command{
		Use:     "check",
		Short:   "connect to every provider's hosts and check what the groups need there",
		Example: `  shoal providers check -c shoal.yaml`,
		Long: `Connects to every host of every provider (the running core does, with its
config) and checks it: reachable, host key in known_hosts (the file as it is
now), key accepted, commands run, a free port in its range, and every
template's program present there. Prints OK or each
problem per host. Exit status 0 when every host is OK, 1 when any has a
problem; it gives up on a host that does not answer within the connect
timeout and on the whole check after ` + api.PreflightTimeout.String() + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := show(cmd, o, (*api.Client).PreflightProviders, func(w io.Writer, resp api.PreflightResponse) {
				printPreflight(w, resp.Results)
			})
			if err != nil {
				return err
			}
			if !resp.OK {
				return &exitError{code: exitFailed, msg: "some hosts have problems"}
			}
			return nil
		},
	}
	addOutputFlag(check, o)
	cmd.AddCommand(check)
	return cmd
}

func printPreflight(w io.Writer, results []provider.PreflightResult) {
	if len(results) == 0 {
		fmt.Fprintln(w, "no provider with hosts to check (every group runs on this machine)")
		return
	}
	for _, r := range results {
		if r.OK {
			fmt.Fprintf(w, "%s %s: OK", r.Provider, r.Host)
			if len(r.Notes) > 0 {
				fmt.Fprintf(w, " (%s)", printable(strings.Join(r.Notes, "; ")))
			}
			fmt.Fprintln(w)
			continue
		}
		fmt.Fprintf(w, "%s %s: %d problem(s)\n", r.Provider, r.Host, len(r.Problems))
		for _, p := range r.Problems {
			fmt.Fprintf(w, "  - %s\n", printable(p))
		}
	}
}

// printHosts writes the hosts table of `shoal status`.
func printHosts(w io.Writer, hosts []provider.HostStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROVIDER\tHOST\tSTATE\tSINCE\tINSTANCES\tUSED\tLABELS\tLAST ERROR")
	for _, h := range hosts {
		state := h.State
		if h.Cordoned {
			state += ",cordoned"
		}
		if h.State == provider.HostHeldOff && !h.HeldOffUntil.IsZero() {
			state += " until " + h.HeldOffUntil.Local().Format(time.TimeOnly)
		}
		since := "-"
		if !h.Since.IsZero() {
			since = time.Since(h.Since).Round(time.Second).String() + " ago"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", h.Provider, h.Name, state, since, h.Instances, capacityUsed(h),
			labelsText(h.Labels), printable(h.LastError))
	}
	tw.Flush()
}

// capacityUsed writes how much of a host's capacity is used: "5/10",
// "2.5/4 cores", both, or "-" when it is unbounded.
func capacityUsed(h provider.HostStatus) string {
	var parts []string
	if h.CapacityInstances > 0 {
		parts = append(parts, fmt.Sprintf("%d/%d", h.Instances, h.CapacityInstances))
	}
	if h.CapacityCores > 0 {
		parts = append(parts, strconv.FormatFloat(h.Cores, 'g', 4, 64)+"/"+strconv.FormatFloat(h.CapacityCores, 'g', 4, 64)+" cores")
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func labelsText(l map[string]string) string {
	if len(l) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(l))
	for _, k := range slices.Sorted(maps.Keys(l)) {
		parts = append(parts, k+"="+l[k])
	}
	return printable(strings.Join(parts, ","))
}

func logsCmd(o *options) *cobra.Command {
	var (
		follow bool
		lines  int
	)
	cmd := &cobra.Command{
		Use:   "logs INSTANCE",
		Short: "print an instance's output log, from its host; -f follows it",
		Example: `  shoal logs web-3 -n 50
  shoal logs web-3 -f`,
		Long: `Prints the newest lines of an instance's log (stdout and stderr, and its
hooks' output), read where the instance runs: STATE_DIR/logs on this machine,
the provider's remote_dir on an ssh host. -f keeps printing what is appended,
across rotations, until interrupted. Exit status 2 for an unknown instance, 1
when the log cannot be read (its host is down, say).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if lines < 0 || lines > api.MaxLogLines {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("-n must be from 0 (all kept) to %d, got %d", api.MaxLogLines, lines)}
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			err = c.Logs(cmd.Context(), args[0], provider.LogOptions{Lines: lines, Follow: follow}, o.stdout)
			if err != nil {
				return apiExit(err)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing what is appended until interrupted")
	cmd.Flags().IntVarP(&lines, "lines", "n", 100, "how many of the newest lines to print first (0: all kept)")
	return cmd
}
