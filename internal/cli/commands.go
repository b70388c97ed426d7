package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/jobrun"
)

func addOutputFlag(cmd *cobra.Command, o *options) {
	cmd.Flags().StringVarP(&o.output, "output", "o", "text", "output format: text or json")
}

func (o *options) checkOutput() error {
	if o.output != "text" && o.output != "json" {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("-o must be text or json, got %q", o.output)}
	}
	return nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// show is a read command's run with -o text|json: check -o, reach the core,
// ask it (get, a method expression such as (*api.Client).HA fits), then print
// the answer as JSON or, with text, for a person. The answer is returned for
// a command whose exit status depends on it.
func show[T any](cmd *cobra.Command, o *options, get func(*api.Client, context.Context) (T, error), text func(io.Writer, T)) (T, error) {
	var v T
	if err := o.checkOutput(); err != nil {
		return v, err
	}
	c, err := o.client()
	if err != nil {
		return v, err
	}
	v, err = get(c, cmd.Context())
	if err != nil {
		return v, apiExit(err)
	}
	if o.output == "json" {
		return v, printJSON(o.stdout, v)
	}
	text(o.stdout, v)
	return v, nil
}

func statusCmd(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "show every group: plan, desired size and instances with their last check",
		Example: `  shoal status
  shoal status -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkStatusOutput(o.output); err != nil {
				return err
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			st, err := c.Status(cmd.Context())
			if err != nil {
				return apiExit(err)
			}
			if o.output != "text" {
				return api.WriteStatus(o.stdout, o.output, st, time.Now())
			}
			for i, g := range st.Groups {
				if i > 0 {
					fmt.Fprintln(o.stdout)
				}
				printGroup(o.stdout, g)
			}
			if len(st.Hosts) > 0 {
				fmt.Fprintln(o.stdout)
				printHosts(o.stdout, st.Hosts)
			}
			if len(st.RateLimited) > 0 {
				fmt.Fprintln(o.stdout)
				printLimited(o.stdout, st.RateLimited)
			}
			printHAOf(cmd.Context(), o.stdout, c)
			printLimits(o.stdout, st)
			return nil
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "text", "output format: text (a table), html, csv or json")
	return cmd
}

// printLimits says how large a fleet shoal was measured at and what each
// figure was, and whether this one is larger.
func printLimits(w io.Writer, st api.StatusResponse) {
	l := st.MeasuredLimits
	if l == nil {
		return
	}
	n := 0
	for _, g := range st.Groups {
		n += len(g.Instances)
	}
	fmt.Fprintf(w, "\nmeasured at %d instances in %d groups (%s):", l.Instances, l.Groups, l.Report)
	for i, f := range l.Figures {
		sep := ","
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(w, "%s %s %s (goal %s)", sep, f.Name, f.Value, f.Goal)
	}
	fmt.Fprintln(w)
	if n > l.Instances || len(st.Groups) > l.Groups {
		fmt.Fprintf(w, "this shoal runs %d instances in %d groups: beyond what it was measured at\n", n, len(st.Groups))
	}
}

func printGroup(w io.Writer, g group.Status) {
	plan := g.Plan
	if plan == "" {
		plan = "-"
	}
	fmt.Fprintf(w, "group %s  plan %s  desired %d  in service %d  (min %d, max %d)  version %s\n", g.Name, plan, g.Desired, g.InService, g.MinSize, g.MaxSize, g.Version)
	if g.Deploying != "" {
		fmt.Fprintf(w, "  deploying %s\n", g.Deploying)
	}
	if g.Configured != "" {
		fmt.Fprintf(w, "  configured %s, not deployed (`shoal deploy %s` rolls it out)\n", g.Configured, g.Name)
	}
	if g.UpCooldown != nil {
		fmt.Fprintf(w, "  scale-up cooldown until %s\n", g.UpCooldown.Local().Format(time.TimeOnly))
	}
	if g.DownCooldown != nil {
		fmt.Fprintf(w, "  scale-down cooldown until %s\n", g.DownCooldown.Local().Format(time.TimeOnly))
	}
	if g.HAProxyError != "" {
		fmt.Fprintf(w, "  haproxy: %s\n", g.HAProxyError)
	}
	if q := g.Queue; q != nil && (q.MaxConn > 0 || q.Max > 0) {
		fmt.Fprintf(w, "  queue %d now, %d at most, %d ms average wait  (max_conn %d per instance)\n", q.Current, q.Max, q.TimeMS, q.MaxConn)
	}
	fmt.Fprintf(w, "  instance-hours today %.2f", g.InstanceHoursToday)
	if g.CostToday > 0 || slices.ContainsFunc(g.Providers, func(p group.ProviderUsage) bool { return p.CostPerHour > 0 }) {
		fmt.Fprintf(w, "  cost today %.2f", g.CostToday)
	}
	fmt.Fprintln(w)
	if len(g.WarmPool) > 0 {
		// Out of rotation and outside the group's size: each server's
		// state in the pool (warm: waiting to be taken).
		var ws []string
		for _, s := range g.WarmPool {
			ws = append(ws, fmt.Sprintf("%s %s %s", s.Name, s.ID, s.State))
		}
		fmt.Fprintf(w, "  warm pool %d: %s\n", len(g.WarmPool), strings.Join(ws, ", "))
	}
	multi := len(g.Providers) > 1
	if multi {
		printProviders(w, g.Providers)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	// A cloud's instances show their servers' IDs, what the cloud's
	// console lists them by.
	cloud := slices.ContainsFunc(g.Instances, func(in group.InstanceStatus) bool { return in.CloudID != "" })
	head := "  NAME\t"
	if multi {
		head += "PROVIDER\t" // a group across providers: where each runs
	}
	if cloud {
		head += "CLOUD-ID\t"
	}
	fmt.Fprintln(tw, head+"ADDR\tSTATE\tHEALTH\tSESSIONS\tREQUESTS\tPID\tUPTIME\tVERSION\tCHECK\tCHANGED\tREASON")
	for _, in := range g.Instances {
		up := "-"
		if !in.StartedAt.IsZero() {
			up = time.Since(in.StartedAt).Round(time.Second).String()
		}
		name := in.Name
		if multi {
			name += "\t" + in.Provider
		}
		if cloud {
			id := in.CloudID
			if id == "" {
				id = "-"
			}
			name += "\t" + id
		}
		version := in.Version
		if in.Drifted {
			// Started from another template than the serving one.
			version += " (drifted)"
		}
		state := string(in.State)
		if in.Protected {
			state += ",protected" // never chosen for scale-in
		}
		if in.EjectedUntil != nil {
			state += ",ejected" // an outlier, out of rotation until then
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", name, in.Addr, state, in.Health, in.Sessions, in.Requests, in.PID, up, version, checkColumns(in))
	}
	tw.Flush()
	for _, in := range g.Instances {
		if in.EjectedUntil != nil {
			fmt.Fprintf(w, "  ejected %s as an outlier, out of rotation until %s (shoal events says why)\n", in.Name, in.EjectedUntil.Local().Format(time.TimeOnly))
		}
		if in.Waiting != "" {
			fmt.Fprintf(w, "  retiring %s, still in service: %s\n", in.Name, in.Waiting)
		}
	}
	for _, f := range g.LastFailures {
		fmt.Fprintf(w, "  failed %s at %s: %s\n", f.Instance, f.At.Local().Format(time.TimeOnly), f.Reason)
	}
}

// printProviders writes a group's providers in its order: its instances
// on each, their instance-hours and cost today, and a provider's back-off
// after a failed start.
func printProviders(w io.Writer, ps []group.ProviderUsage) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  PROVIDER\tINSTANCES\tMAX\tHOURS-TODAY\tCOST/HOUR\tCOST-TODAY\tSKIPPED")
	for _, p := range ps {
		limit, cost, today, skipped := "-", "-", "-", "-"
		if p.Max > 0 {
			limit = fmt.Sprint(p.Max)
		}
		if p.CostPerHour > 0 {
			cost, today = fmt.Sprintf("%g", p.CostPerHour), fmt.Sprintf("%.2f", p.CostToday)
		}
		if !p.SkippedUntil.IsZero() {
			skipped = fmt.Sprintf("until %s: %s", p.SkippedUntil.Local().Format(time.TimeOnly), printable(oneLine(p.SkipReason)))
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%.2f\t%s\t%s\t%s\n", p.Name, p.Instances, limit, p.InstanceHoursToday, cost, today, skipped)
	}
	tw.Flush()
}

func scaleCmd(o *options) *cobra.Command {
	var (
		plan   string
		size   int
		sync   bool
		source string
	)
	cmd := &cobra.Command{
		Use:   "scale GROUP [up|down|keep]",
		Short: "move a group one plan up or down, or jump with --plan or --size",
		Example: `  shoal scale web up
  shoal scale web --plan large --sync
  shoal scale web --size 4 --source cron`,
		Long: `Every request becomes a job: accepted → running → done | failed, or ignored
(cooldown, already at max/min, another job running). A job that raises the
size is done when the group has that many in service; one that lowers it,
once nothing starts or retires (instances still owed to an earlier size, say
from a provider that refuses, are the reconciler's). Exit status with --sync:
0 done, 1 failed, 3 ignored; 2 for an unknown group or plan.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := api.ScaleRequest{Source: source}
			n := 0
			if len(args) == 2 {
				n++
				req.Direction = args[1]
				if req.Direction != "up" && req.Direction != "down" && req.Direction != "keep" {
					return &exitError{code: exitUsage, msg: fmt.Sprintf("direction must be up, down or keep, got %q", args[1])}
				}
			}
			if cmd.Flags().Changed("plan") {
				n++
				req.Plan = plan
			}
			if cmd.Flags().Changed("size") {
				n++
				req.Size = &size
			}
			if n != 1 {
				return &exitError{code: exitUsage, msg: "give exactly one of up, down, keep, --plan NAME or --size N"}
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			job, err := c.Scale(cmd.Context(), args[0], req)
			if err != nil {
				return apiExit(err)
			}
			printJob(o.stdout, job)
			if sync && !job.State.Terminal() {
				job, err = follow(cmd.Context(), c, o.stdout, job)
				if err != nil {
					return apiExit(err)
				}
			}
			return jobExit(job)
		},
	}
	cmd.Flags().StringVar(&plan, "plan", "", "jump to this plan")
	cmd.Flags().IntVar(&size, "size", 0, "jump to this size")
	cmd.Flags().BoolVar(&sync, "sync", false, "wait for the job to end, showing progress")
	cmd.Flags().StringVar(&source, "source", "cli", "recorded on the job as its source")
	return cmd
}

func jobExit(j jobrun.Job) error {
	switch j.State {
	case jobrun.Failed:
		return &exitError{code: exitFailed}
	case jobrun.Ignored:
		return &exitError{code: exitIgnored}
	}
	return nil
}

func printJob(w io.Writer, j jobrun.Job) {
	what := string(j.Kind)
	if j.Plan != "" {
		what += " " + j.Plan
	}
	if len(j.Instances) > 0 {
		what += " " + strings.Join(j.Instances, " ")
	}
	if j.Kind == jobrun.Deploy {
		fmt.Fprintf(w, "job %s %s: group %s deploy of version %s, %d instances (source %s)", j.ID, j.State, j.Group, j.Version, j.Target, j.Source)
	} else {
		fmt.Fprintf(w, "job %s %s: group %s %s, %d → %d (source %s)", j.ID, j.State, j.Group, what, j.From, j.Target, j.Source)
	}
	if j.Noop {
		fmt.Fprint(w, ", nothing to change")
	}
	if j.Note != "" {
		fmt.Fprintf(w, "; %s", j.Note)
	}
	if j.Reason != "" {
		fmt.Fprintf(w, ": %s", j.Reason)
	}
	fmt.Fprintln(w)
}

func jobsCmd(o *options) *cobra.Command {
	var (
		groupName string
		limit     int
	)
	cmd := &cobra.Command{
		Use:   "jobs [ID]",
		Short: "list recent jobs, or show one",
		Example: `  shoal jobs --group web --limit 5
  shoal jobs 42`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.checkOutput(); err != nil {
				return err
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			if len(args) == 1 {
				j, err := c.Job(cmd.Context(), args[0], 0)
				if err != nil {
					return apiExit(err)
				}
				if o.output == "json" {
					return printJSON(o.stdout, j)
				}
				printJobDetail(o.stdout, j)
				b, w := progressNotes(cmd.Context(), c, j)
				if b != "" {
					fmt.Fprintf(o.stdout, "%-9s %s\n", "booting:", b)
				}
				if w != "" {
					fmt.Fprintf(o.stdout, "%-9s %s\n", "waiting:", w)
				}
				return nil
			}
			list, err := c.Jobs(cmd.Context(), groupName, limit)
			if err != nil {
				return apiExit(err)
			}
			if o.output == "json" {
				return printJSON(o.stdout, api.JobsResponse{Jobs: list})
			}
			tw := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tGROUP\tKIND\tFROM\tTO\tSTATE\tSOURCE\tCREATED\tREASON")
			for _, j := range list {
				kind := string(j.Kind)
				if j.Plan != "" {
					kind += ":" + j.Plan
				}
				if len(j.Instances) > 0 {
					kind += ":" + strings.Join(j.Instances, ",")
				}
				state := string(j.State)
				if j.Noop {
					state += " (noop)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", j.ID, j.Group, kind, j.From, j.Target, state, j.Source,
					j.CreatedAt.Local().Format(time.DateTime), j.Reason)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, j := range list {
				b, w := progressNotes(cmd.Context(), c, j)
				if b != "" {
					fmt.Fprintf(o.stdout, "job %s booting: %s\n", j.ID, b)
				}
				if w != "" {
					fmt.Fprintf(o.stdout, "job %s waiting: %s\n", j.ID, w)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&groupName, "group", "", "only this group's jobs")
	cmd.Flags().IntVar(&limit, "limit", 20, "how many jobs")
	addOutputFlag(cmd, o)
	return cmd
}

// progressNotes names the instances of a running job's group that are
// still starting, and for how long ("web-004 for 2m13s, web-005 for
// 2m13s"): a cloud server takes minutes to boot, and that is the job's
// progress; and those retiring but still in service, and why ("web-003:
// waiting for the cloud API: ..."). Both are "" for other jobs, and when
// the group cannot be read.
func progressNotes(ctx context.Context, c *api.Client, j jobrun.Job) (booting, waiting string) {
	if j.State != jobrun.Running {
		return "", ""
	}
	g, err := c.Group(ctx, j.Group)
	if err != nil {
		return "", ""
	}
	var boot, wait []string
	for _, in := range g.Instances {
		if in.State == group.Starting && !in.Since.IsZero() {
			boot = append(boot, in.Name+" for "+time.Since(in.Since).Round(time.Second).String())
		}
		if in.Waiting != "" {
			wait = append(wait, in.Name+": "+in.Waiting)
		}
	}
	return strings.Join(boot, ", "), strings.Join(wait, "; ")
}

func printJobDetail(w io.Writer, j jobrun.Job) {
	line := func(k, v string) { fmt.Fprintf(w, "%-9s %s\n", k+":", v) }
	line("job", j.ID)
	line("group", j.Group)
	kind := string(j.Kind)
	if j.Plan != "" {
		kind += " " + j.Plan
	}
	line("kind", kind)
	line("size", strconv.Itoa(j.From)+" → "+strconv.Itoa(j.Target))
	if j.Version != "" {
		line("version", j.Version)
	}
	if len(j.Instances) > 0 {
		line("instances", strings.Join(j.Instances, ", "))
	}
	if j.Note != "" {
		line("note", j.Note)
	}
	state := string(j.State)
	if j.Noop {
		state += " (nothing to change)"
	}
	line("state", state)
	line("source", j.Source)
	if j.Reason != "" {
		line("reason", j.Reason)
	}
	line("created", j.CreatedAt.Local().Format(time.RFC3339))
	if j.StartedAt != nil {
		line("started", j.StartedAt.Local().Format(time.RFC3339))
	}
	if j.FinishedAt != nil {
		line("finished", j.FinishedAt.Local().Format(time.RFC3339))
	}
}
