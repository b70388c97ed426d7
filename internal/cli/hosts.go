package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shoal-lb/shoal/internal/api"
)

func hostsCmd(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "hosts",
		Short: "list the providers' hosts; cordon, uncordon or drain one",
		Long: `Lists the hosts of the providers that place instances on several (ssh), with
their state, load and whether they are cordoned. A cordoned host takes no new
instances (a scale-out that finds no uncordoned room fails saying so); its
instances keep running. drain cordons the host, then replaces its instances
elsewhere one at a time within each group's disruption budget. Cordons and
running drains are kept in the store: a restart of shoal and an HA failover keep
a cordon, and resume a drain (even after a kill -9 of shoal, or of the leader).`,
		Example: `  shoal hosts
  shoal hosts cordon web2
  shoal hosts drain web2 && shoal hosts drains
  shoal hosts uncordon web2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := show(cmd, o, (*api.Client).Hosts, func(w io.Writer, resp api.HostsResponse) {
				if len(resp.Hosts) == 0 {
					fmt.Fprintln(w, "no provider with hosts (every group runs on this machine or a cloud)")
					return
				}
				printHosts(w, resp.Hosts)
			})
			return err
		},
	}
	addOutputFlag(cmd, o)
	act := func(name, short string) *cobra.Command {
		var prov string
		c := &cobra.Command{
			Use:     name + " HOST",
			Short:   short,
			Example: "  shoal hosts " + name + " web2\n  shoal hosts " + name + " web2 --provider lab",
			Args:    cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				hostAct := func(c *api.Client, ctx context.Context) (api.HostResponse, error) {
					return c.HostAct(ctx, name, args[0], prov)
				}
				_, err := show(cmd, o, hostAct, func(w io.Writer, resp api.HostResponse) {
					fmt.Fprintln(w, printable(resp.Message))
				})
				return err
			},
		}
		c.Flags().StringVar(&prov, "provider", "", "the host's provider, when several have a host of that name")
		addOutputFlag(c, o)
		return c
	}
	drains := &cobra.Command{
		Use:     "drains",
		Short:   "show the host drains of this run of shoal: moved, left and why",
		Example: "  shoal hosts drains -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			hostDrains := func(c *api.Client, ctx context.Context) (api.HostDrainsResponse, error) {
				ds, err := c.HostDrains(ctx)
				return api.HostDrainsResponse{Drains: ds}, err
			}
			_, err := show(cmd, o, hostDrains, func(w io.Writer, resp api.HostDrainsResponse) {
				printDrains(w, resp.Drains)
			})
			return err
		},
	}
	addOutputFlag(drains, o)
	cmd.AddCommand(
		act("cordon", "place no new instances on a host (its own keep running)"),
		act("uncordon", "place new instances on a cordoned host again"),
		act("drain", "cordon a host, then move its instances elsewhere (launch before terminate)"),
		drains)
	return cmd
}

func printDrains(w io.Writer, ds []api.HostDrain) {
	if len(ds) == 0 {
		fmt.Fprintln(w, "no host drains since shoal started")
		return
	}
	for _, d := range ds {
		fmt.Fprintf(w, "%s %s: %s, %d of %d moved", d.Provider, d.Host, d.State, len(d.Moved), len(d.Instances))
		if d.Progress != "" {
			fmt.Fprintf(w, " (%s)", printable(d.Progress))
		}
		fmt.Fprintln(w)
		if len(d.Moved) > 0 {
			fmt.Fprintf(w, "  moved: %s\n", strings.Join(d.Moved, ", "))
		}
		for _, l := range d.Left {
			fmt.Fprintf(w, "  left: %s (%s): %s\n", l.Instance, l.Group, printable(l.Reason))
		}
	}
}
