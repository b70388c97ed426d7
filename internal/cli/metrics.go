package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"time"

	"github.com/spf13/cobra"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/metrics"
)

// formatSacloud prints sacloud-cpu-usage's JSON and log lines.
const formatSacloud = "sacloud-cpu-usage"

// cpuUsageStep is the period each "monitor" of the sacloud format averages:
// the cloud's activity graph had 5 minutes; shoal has every second, and one
// minute keeps `--time 1` to one monitor as in the seed.
const cpuUsageStep = time.Minute

func metricsCmd(o *options) *cobra.Command {
	var window, prefix, query, output, format string
	cmd := &cobra.Command{
		Use:   "metrics GROUP",
		Short: "print a group's metrics over a window (CPU, requests, errors, latency) as JSON or a table",
		Example: `  shoal metrics web --time 15m -o table
  shoal metrics web --query '.cpu.p90'`,
		Long: `Prints one document for GROUP over the last --time (default 5m): cpu (avg, min,
max, p75-p99 across the ready instances, in percent of their cores), each
instance with its own values and cores, requests_per_second,
errors_per_second, latency_ms {p50 p90 p99} with the access log's sample
rate (only while the access log is on: see access_log in the config
reference), size and window. --prefix keeps the instances whose names start with
it. --query runs a jq program over the document and prints each result as
JSON, one per line. --format sacloud-cpu-usage prints what sacloud-cpu-usage
printed (its JSON on stdout, its per-server lines on stderr) for the group's
instances, so its scripts work unchanged.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "json" && output != "table" {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("-o must be json or table, got %q", output)}
			}
			if format != "" && format != formatSacloud {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("--format must be %s, got %q", formatSacloud, format)}
			}
			if query != "" && output == "table" {
				return &exitError{code: exitUsage, msg: "--query prints JSON; it cannot be combined with -o table"}
			}
			if format != "" && output == "table" {
				return &exitError{code: exitUsage, msg: "--format sacloud-cpu-usage prints JSON; it cannot be combined with -o table"}
			}
			w, q, err := parseWindowQuery(window, query)
			if err != nil {
				return err
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if format == formatSacloud {
				var prefixes []string
				if prefix != "" {
					prefixes = []string{prefix}
				}
				return o.printCPUUsage(ctx, c, args[0], prefixes, w, q)
			}
			doc, err := c.Metrics(ctx, args[0], w, prefix)
			if err != nil {
				return apiExit(err)
			}
			if q != nil {
				return printQuery(ctx, o.stdout, q, doc)
			}
			if output == "table" {
				return doc.WriteTable(o.stdout)
			}
			return printJSON(o.stdout, doc)
		},
	}
	f := cmd.Flags()
	f.StringVar(&window, "time", "5m", `window: a duration such as "90s", "5m", "1h", or a number of minutes`)
	f.StringVar(&prefix, "prefix", "", "only instances whose names start with this")
	f.StringVar(&query, "query", "", "jq program run over the document (gojq), e.g. '.cpu.p90'")
	f.StringVarP(&output, "output", "o", "json", "output format: json or table")
	f.StringVar(&format, "format", "", "print another tool's format instead: sacloud-cpu-usage")
	return cmd
}

// parseQuery compiles a --query program; a bad one is bad input.
// parseWindowQuery reads --time and --query, each a usage error when bad.
func parseWindowQuery(window, query string) (time.Duration, *metrics.Query, error) {
	w, err := api.ParseWindow(window)
	if err != nil {
		return 0, nil, &exitError{code: exitUsage, msg: "--time: " + err.Error()}
	}
	if query == "" {
		return w, nil, nil
	}
	q, err := metrics.ParseQuery(query)
	if err != nil {
		return 0, nil, &exitError{code: exitUsage, msg: "--query: " + err.Error()}
	}
	return w, q, nil
}

// printQuery prints every value q emits over v as compact JSON, one a line,
// as jq -c does (a number prints bare: the seed's `--query '.avg|round'`).
func printQuery(ctx context.Context, w io.Writer, q *metrics.Query, v any) error {
	out, err := q.Run(ctx, v)
	if err != nil {
		return &exitError{code: exitUsage, msg: "--query: " + err.Error()}
	}
	for _, r := range out {
		b, err := json.Marshal(r)
		if err != nil {
			return &exitError{code: exitFailed, msg: fmt.Sprintf("--query: result: %v", err)}
		}
		fmt.Fprintln(w, string(b))
	}
	return nil
}

// printCPUUsage prints sacloud-cpu-usage's output for the ready instances of
// group ("" for every group) whose names start with one of prefixes: its
// per-sample and per-server log lines on stderr, then its JSON (or what q
// makes of it) on stdout.
func (o *options) printCPUUsage(ctx context.Context, c *api.Client, group string, prefixes []string, window time.Duration, q *metrics.Query) error {
	servers, err := c.CPUUsage(ctx, group, prefixes, window, cpuUsageStep)
	if err != nil {
		return apiExit(err)
	}
	logger := log.New(o.stderr, "", log.LstdFlags)
	usage := metrics.NewCPUUsage(servers, logger.Printf)
	if q != nil {
		return printQuery(ctx, o.stdout, q, usage)
	}
	b, err := json.Marshal(usage)
	if err != nil {
		return &exitError{code: exitFailed, msg: err.Error()}
	}
	fmt.Fprintln(o.stdout, string(b))
	return nil
}
