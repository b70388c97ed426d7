package cli

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shoal-lb/shoal/internal/api"
)

func sourcesCmd(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sources",
		Short: "The metrics sources (metrics.sources): last value, last read, errors",
		Long: `Lists metrics.sources as shoal last read them: the value (or "per
instance" for a source whose values are its groups' averages), when it last
gave one ("stale" past its max_age), its failed reads since shoal started
and the latest read's error.
A policy treats a source older than its max_age as missing and does what its
on_missing says. Credentials are never shown.`,
		Example: `  shoal sources
  shoal sources -o json | jq '.[] | select(.last_error != null)'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := show(cmd, o, (*api.Client).Sources, func(w io.Writer, srcs []api.SourceStatus) {
				printSources(w, srcs, time.Now())
			})
			return err
		},
	}
	addOutputFlag(cmd, o)
	return cmd
}

func printSources(w io.Writer, srcs []api.SourceStatus, now time.Time) {
	if len(srcs) == 0 {
		fmt.Fprintln(w, "no metrics source")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tVALUE\tREAD\tMAX AGE\tON MISSING\tERRORS\tLAST ERROR\t")
	for _, s := range srcs {
		value, read := "-", "never"
		switch {
		case s.PerInstance:
			value = "per instance"
		case s.Value != nil:
			value = strconv.FormatFloat(*s.Value, 'g', 6, 64)
		}
		if s.Last != nil {
			read = now.Sub(*s.Last).Round(time.Second).String() + " ago"
		}
		if s.Stale {
			read += " (stale)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t\n", s.Name, s.Kind, value, read, s.MaxAge, s.OnMissing, s.Errors, printable(s.LastError))
	}
	tw.Flush()
}
