package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func cpuUsageCmd(o *options) *cobra.Command {
	var (
		prefixes                   []string
		window, query              string
		envFrom, zone, percentiles string
	)
	cmd := &cobra.Command{
		Use:     "cpu-usage --prefix NAME --time N",
		Short:   "sacloud-cpu-usage on shoal's metrics: CPU of the instances named NAME*, for the seed's cron scripts",
		Example: `  shoal cpu-usage --prefix web --time 3 --query '.avg|round'`,
		Long: `Prints what sacloud-cpu-usage printed, from shoal's own per-second metrics:
one log line per instance and minute and one per instance (on stderr), then
{"75pt","90pt","95pt","99pt","avg","max","min","servers":[{"avg","cores",
"monitors":[{"cpu_time","time"}],"name"}]} on stdout, or what --query (jq)
makes of it. CPU is in percent of each instance's cores (template.cpus).

--prefix selects instances by name prefix across every group, as the tool
selected servers: instances are named GROUP-NNN, so --prefix web takes the
instances of group web (and of a group named web-something, if there is
one). It may be given more than once. Only ready instances count (in service
and past metrics.warmup). --time N is N minutes (or a duration such as 90s);
each monitor is one minute's average. --env-from, --zone and --percentile-set are accepted (with a note on stderr) so
that scripts written for the cloud run unchanged; shoal needs neither.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(prefixes) == 0 {
				return &exitError{code: exitUsage, msg: "--prefix is required (the instances' name prefix, such as the group's name)"}
			}
			w, q, err := parseWindowQuery(window, query)
			if err != nil {
				return err
			}
			for _, f := range []struct{ name, v string }{{"--env-from", envFrom}, {"--zone", zone}, {"--percentile-set", percentiles}} {
				if f.v != "" {
					fmt.Fprintf(o.stderr, "shoal: note: %s %s ignored: shoal reads its own metrics\n", f.name, f.v)
				}
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			return o.printCPUUsage(cmd.Context(), c, "", prefixes, w, q)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&prefixes, "prefix", nil, "instance name prefix (repeatable)")
	f.StringVar(&window, "time", "3", "minutes of CPU to average (or a duration such as 90s)")
	f.StringVar(&query, "query", "", "jq program run over the JSON (gojq), e.g. '.avg|round'")
	f.StringVar(&envFrom, "env-from", "", "accepted for sacloud-cpu-usage compatibility; ignored")
	f.StringVar(&zone, "zone", "", "accepted for sacloud-cpu-usage compatibility; ignored")
	f.StringVar(&percentiles, "percentile-set", "", "accepted for sacloud-cpu-usage compatibility; ignored (75, 90, 95 and 99 are printed)")
	return cmd
}
