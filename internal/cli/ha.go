package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shoal-lb/shoal/internal/api"
)

func haCmd(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ha",
		Short: "the HA pair: its leader, its nodes, a handover, keepalived's check",
		Long: `A node of an HA pair (the ha: section) elects the leader through etcd; only the
leader scales, deploys and runs the policies, the standby mirrors its servers.`,
		Example: `  shoal ha status
  shoal ha step-down
  shoal ha check --leader --socket /var/lib/shoal/shoal.sock`,
	}
	cmd.AddCommand(haStatusCmd(o), haStepDownCmd(o), haCheckCmd(o))
	return cmd
}

func haStatusCmd(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "show the leader, the lease and every node's HAProxy sync state",
		Example: `  shoal ha status
  shoal ha status -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := show(cmd, o, (*api.Client).HA, printHA)
			return err
		},
	}
	addOutputFlag(cmd, o)
	return cmd
}

func haStepDownCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:     "step-down",
		Short:   "hand the leadership (and the VIP) to another node; this node does not campaign for two leases",
		Example: `  shoal ha step-down`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			resp, err := c.StepDown(cmd.Context())
			if err != nil {
				return apiExit(err)
			}
			if resp.Leader == "" {
				fmt.Fprint(o.stdout, "stepped down; no other node has taken over yet")
			} else {
				fmt.Fprintf(o.stdout, "stepped down; the leader is %s", resp.Leader)
			}
			if resp.VIPMoved {
				fmt.Fprintf(o.stdout, "; the VIP left this node after %.1fs", resp.VIPMovedAfter)
			}
			fmt.Fprintln(o.stdout)
			return nil
		},
	}
}

// haCheckTimeout bounds shoal ha check: keepalived runs it every advert.
const haCheckTimeout = time.Second

func haCheckCmd(o *options) *cobra.Command {
	var leader bool
	cmd := &cobra.Command{
		Use:   "check",
		Short: "exit 0 if the core answers within 1 s and its HAProxy runs (--leader: and it leads), 1 otherwise",
		Long: `keepalived's track scripts run it: a node whose core or HAProxy does not
answer gives the virtual IP up, and the leader's --leader check raises its
priority so that the VIP follows the etcd leader.`,
		Example: `  shoal ha check --socket /var/lib/shoal/shoal.sock
  shoal ha check --leader --socket /var/lib/shoal/shoal.sock`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), haCheckTimeout)
			defer cancel()
			st, err := c.HA(ctx)
			switch {
			case err != nil:
				return &exitError{code: exitFailed, msg: fmt.Sprintf("core: %v", err)}
			case !st.HAProxyRunning:
				return &exitError{code: exitFailed, msg: "HAProxy does not answer"}
			case leader && st.Role != "leader":
				return &exitError{code: exitFailed, msg: fmt.Sprintf("not the leader (the leader is %q)", st.Leader)}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&leader, "leader", false, "succeed only on the leader")
	return cmd
}

// printHA writes the pair's state, as shoal ha status and shoal status do.
func printHA(w io.Writer, st api.HAStatus) {
	leader := st.Leader
	if leader == "" {
		leader = "none"
	}
	fmt.Fprintf(w, "HA  node %s (%s)  leader %s", st.Node, st.Role, leader)
	if st.LeaderSince != nil {
		fmt.Fprintf(w, " for %s", time.Since(*st.LeaderSince).Round(time.Second))
	}
	fmt.Fprintf(w, "  lease ttl %.0fs\n", st.LeaseTTL)
	if st.VIP != nil {
		state := st.VIP.State
		if state == "" {
			state = "-"
		}
		fmt.Fprintf(w, "  vip %s  %s\n", st.VIP.Address, state)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tPRIORITY\tVIP\tHAPROXY\tSERVERS\tUPDATED")
	for _, n := range st.Nodes {
		vip, synced := n.VIP, "synced"
		if vip == "" {
			vip = "-"
		}
		if !n.HAProxySynced {
			synced = "NOT SYNCED"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s ago\n", printable(n.Name), n.Priority, printable(vip), synced, n.Servers, time.Since(n.UpdatedAt).Round(time.Second))
	}
	tw.Flush()
}

// printHAOf adds the HA block to shoal status on a node of a pair; a
// single node (no /v1/ha) prints nothing.
func printHAOf(ctx context.Context, w io.Writer, c *api.Client) {
	st, err := c.HA(ctx)
	var ae *api.Error
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return
	}
	fmt.Fprintln(w)
	if err != nil {
		fmt.Fprintf(w, "HA  unknown: %v\n", err)
		return
	}
	printHA(w, st)
}
