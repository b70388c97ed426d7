package cli

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/group"
)

// deployActCmds are `shoal deploy pause|resume|promote|abort|rollback
// GROUP` and `shoal deploy status GROUP`: a canary's checkpoints, a
// blue/green deploy's rollback, and what they show.
func deployActCmds(o *options) []*cobra.Command {
	what := map[string]string{
		group.CanaryPause:   "pause the group's canary: its step's clock stops, the analysis goes on (and still rolls back)",
		group.CanaryResume:  "resume a paused canary, or one a step's pause: true holds",
		group.CanaryPromote: "promote the group's canary now (its version replaces the stable one as a rolling deploy), or a blue/green deploy's green set (switch now; once switched, stop blue now)",
		group.CanaryAbort:   "abort the group's canary or blue/green deploy: every request back to the serving version, the new version's instances drained and stopped",
		group.BlueGreenRollback: "switch a blue/green deploy back to blue at once (kept running until keep_old has passed): green is drained and stopped; " +
			"a canary's rollback is its abort",
	}
	var cmds []*cobra.Command
	for _, act := range group.DeployActions {
		cmds = append(cmds, &cobra.Command{
			Use:     act + " GROUP",
			Short:   what[act],
			Example: "  shoal deploy " + act + " web",
			Long: what[act] + `.
Exit status: 0 done, 3 when the group runs no canary or blue/green deploy, 2 for
an unknown group or a command the deploy has no use for.`,
			Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, err := o.client()
				if err != nil {
					return err
				}
				d, err := c.DeployAct(cmd.Context(), args[0], act)
				var ae *api.Error
				if errors.As(err, &ae) && ae.Status == http.StatusConflict {
					return &exitError{code: exitIgnored, msg: ae.ErrorResponse.Error}
				}
				if err != nil {
					return apiExit(err)
				}
				fmt.Fprintf(o.stdout, "%s: %s\n", args[0], act)
				printCanaryStatus(o.stdout, d)
				return nil
			},
		})
	}
	cmds = append(cmds, &cobra.Command{
		Use:     "status GROUP",
		Short:   "show a running canary (its step, the weights, both versions' figures, the time left) or a blue/green deploy (its phase, both sets and their figures)",
		Example: "  shoal deploy status web",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			d, err := c.DeployStatus(cmd.Context(), args[0])
			if err != nil {
				return apiExit(err)
			}
			printCanaryStatus(o.stdout, d)
			return nil
		},
	})
	return cmds
}

func printCanaryStatus(w io.Writer, d api.DeployStatus) {
	fmt.Fprintf(w, "group %s  version %s  strategy %s\n", d.Group, d.Version, d.Strategy)
	if b := d.BlueGreen; b != nil {
		printBlueGreen(w, *b)
		return
	}
	if d.Strategy == config.StrategyBlueGreen {
		fmt.Fprintln(w, "  no blue/green deploy has run")
		return
	}
	c := d.Canary
	if c == nil {
		if d.Deploying != "" {
			fmt.Fprintf(w, "  deploying %s (rolling)\n", d.Deploying)
		} else {
			fmt.Fprintln(w, "  no canary running")
		}
		return
	}
	share := fmt.Sprintf("weight %g%%", c.Weight)
	if c.Instances > 0 {
		share = fmt.Sprintf("instances %g%% (weight %g%%)", c.Instances, c.Weight)
	}
	fmt.Fprintf(w, "  canary %s  step %d/%d  %s  %s  time left %s\n", c.Version, c.Step, c.Steps, share, c.Phase, c.TimeLeft.Round(100*time.Millisecond))
	fmt.Fprintf(w, "  weights: canary %d on %d instance(s), stable %d on %d instance(s)\n", c.CanaryWeight, c.CanaryInstances, c.StableWeight, c.StableInstances)
	line := func(name string, f group.VersionFigure) { figureLine(w, name, f) }
	line("canary", c.Canary)
	line("stable", c.StableFigures)
	if c.AnalysisVerdict != "" {
		fmt.Fprintf(w, "  analysis (every %s): %s\n", c.AnalysisInterval, c.AnalysisVerdict)
	}
}

func figureLine(w io.Writer, name string, f group.VersionFigure) {
	p99 := "p99 unknown"
	if f.P99 > 0 {
		p99 = "p99 " + f.P99.Round(100*time.Microsecond).String()
	}
	fmt.Fprintf(w, "  %-7s %d requests, %d 5xx (%.2f%%), %s (%d samples)\n", name+":", f.Requests, f.Errors, 100*f.ErrorRate, p99, f.Samples)
}

// printBlueGreen shows a blue/green deploy: its phase (with when blue is
// stopped, once switched), both sets, their weights and figures.
func printBlueGreen(w io.Writer, b group.BlueGreenStatus) {
	phase := b.Phase
	if b.Phase == "switched" && b.KeepUntil != nil {
		phase = fmt.Sprintf("switched, keeping blue until %s (%s left)", b.KeepUntil.Local().Format(time.TimeOnly),
			max(0, time.Until(*b.KeepUntil)).Round(time.Second))
	}
	fmt.Fprintf(w, "  blue/green %s  phase: %s\n", b.Version, phase)
	if b.Reason != "" {
		fmt.Fprintf(w, "  why: %s\n", b.Reason)
	}
	fmt.Fprintf(w, "  green %s: %d/%d instance(s) in service at weight %d\n", b.Version, b.GreenInstances, b.GreenWant, b.GreenWeight)
	fmt.Fprintf(w, "  blue  %s: %d instance(s) in service at weight %d\n", b.Blue, b.BlueInstances, b.BlueWeight)
	figureLine(w, "green", b.Green)
	figureLine(w, "blue", b.BlueFigures)
	if b.AnalysisVerdict != "" {
		fmt.Fprintf(w, "  analysis at %g%% (every %s): %s\n", b.AnalysisWeight, b.AnalysisInterval, b.AnalysisVerdict)
	}
}
