package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/policy"
)

// followWait is how long one long-poll of `shoal events -f` waits.
const followWait = 30 * time.Second

func eventsCmd(o *options) *cobra.Command {
	var (
		since, output string
		follow        bool
	)
	cmd := &cobra.Command{
		Use:   "events [GROUP]",
		Short: "show the autoscaler's decisions, each with the values it saw and why it did what it did",
		Example: `  shoal events web --since 1h
  shoal events -f -o json`,
		Long: `Lists the autoscaling decisions of GROUP (or of every group) since --since
(default 10m; a duration or an RFC 3339 time), oldest first: the rule that
decided, the size and the recommendation, the outcome (a job id, or why
nothing happened) and the reason. -f keeps following new decisions, like
tail -f, until interrupted. -o json prints one JSON object per decision and
line.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "table" && output != "json" {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("-o must be table or json, got %q", output)}
			}
			q := api.EventsQuery{}
			if len(args) == 1 {
				q.Group = args[0]
			}
			if since != "" {
				t, err := sinceTime(since, time.Now())
				if err != nil {
					return &exitError{code: exitUsage, msg: "--since: " + err.Error()}
				}
				q.Since = t
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			p := &eventPrinter{w: o.stdout, json: output == "json"}
			evs, err := c.Events(ctx, q)
			if err != nil {
				return apiExit(err)
			}
			p.print(evs)
			if !follow {
				if len(evs) == 0 && !p.json {
					fmt.Fprintln(o.stderr, "no decisions in that time")
				}
				return nil
			}
			for _, e := range evs {
				q.After = max(q.After, e.ID)
			}
			q.Wait = followWait
			for {
				evs, err := c.Events(ctx, q)
				if ctx.Err() != nil {
					return nil
				}
				if err != nil {
					return apiExit(err)
				}
				p.print(evs)
				for _, e := range evs {
					q.After = max(q.After, e.ID)
				}
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&since, "since", "10m", `decisions since: a duration such as "10m" or an RFC 3339 time`)
	f.BoolVarP(&follow, "follow", "f", false, "keep printing new decisions until interrupted")
	f.StringVarP(&output, "output", "o", "table", "output format: table or json (one object per line)")
	return cmd
}

// sinceTime reads --since: a duration back from now or an RFC 3339 time.
func sinceTime(v string, now time.Time) (time.Time, error) {
	if d, err := api.ParseWindow(v); err == nil {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf(`must be a duration such as "10m" or an RFC 3339 time, got %q`, v)
	}
	return t, nil
}

// eventPrinter prints events as a table (its header once) or JSON lines.
type eventPrinter struct {
	w      io.Writer
	json   bool
	header bool
}

func (p *eventPrinter) print(evs []api.Event) {
	if p.json {
		for _, e := range evs {
			b, _ := json.Marshal(e)
			fmt.Fprintln(p.w, string(b))
		}
		return
	}
	if len(evs) == 0 {
		return
	}
	// Fixed widths rather than a tabwriter: with -f, lines arriving later
	// must line up with the first ones.
	const row = "%-19s  %-12s  %-12s  %-7s  %-22s  %s\n"
	if !p.header {
		fmt.Fprintf(p.w, row, "TIME", "GROUP", "RULE", "SIZE", "OUTCOME", "REASON")
		p.header = true
	}
	for _, e := range evs {
		fmt.Fprintf(p.w, row, e.Time.Local().Format("2006-01-02 15:04:05"), e.Group, e.Rule,
			fmt.Sprintf("%d→%d", e.Current, e.Recommendation), outcome(e), oneLine(e.Reason))
	}
}

// outcome is the OUTCOME column: the job for an accepted one, else the
// outcome and its code (and the job a held-back one waits for).
func outcome(e api.Event) string {
	switch {
	case e.JobID != "" && e.Code == policy.CodeJobRunning:
		return fmt.Sprintf("%s: %s (job %s)", e.Outcome, e.Code, e.JobID)
	case e.JobID != "":
		return fmt.Sprintf("%s (job %s)", e.Outcome, e.JobID)
	case e.Code != "":
		return fmt.Sprintf("%s: %s", e.Outcome, e.Code)
	}
	return string(e.Outcome)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
