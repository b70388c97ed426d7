package cli

import (
	"context"
	"fmt"
	"io"
	"math"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/group"
)

const (
	// topWindow is what each refresh's metrics average over: short enough
	// to follow the load, long enough for a p99 of the access log's samples.
	topWindow = 10 * time.Second
	// topHistory is how many refreshes a sparkline keeps: 5 minutes at 1 s.
	topHistory = 300
	// topDecisions is how many of the last decisions the view shows.
	topDecisions = 6
)

func topCmd(o *options) *cobra.Command {
	var (
		interval   time.Duration
		iterations int
	)
	cmd := &cobra.Command{
		Use:   "top [GROUP]",
		Short: "a live view of the groups: size, CPU p90, requests/s, p99, a sparkline and the last decisions",
		Example: `  shoal top
  shoal top web --interval 2s
  shoal top web -n 5 > top.log   # plain lines when not on a terminal`,
		Long: `top refreshes every --interval (default 1s) until interrupted (or after -n
refreshes): each group (or GROUP) with its plan, size (in service / desired,
and min-max), CPU p90 across its instances, requests/s and p99 latency over
the last 10 seconds, sparklines of requests/s and size since top started
(the last 5 minutes), and the autoscaler's last decisions. On a terminal the
view is redrawn in place; otherwise each refresh prints a line per group and
each new decision a line, for logs and scripts. p99 comes from the access
log, which is on while a feature reads latency (a latency_ms policy, a
max_p99 analysis, outliers.latency) or with access_log.sample: auto; "-"
otherwise.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if interval < 100*time.Millisecond {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("--interval must be at least 100ms, got %s", interval)}
			}
			if iterations < 0 {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("-n must not be negative, got %d", iterations)}
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			only := ""
			if len(args) == 1 {
				only = args[0]
			}
			err = runTop(ctx, c, o.stdout, only, interval, iterations)
			if err != nil && ctx.Err() == nil {
				return apiExit(err)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "time between refreshes")
	cmd.Flags().IntVarP(&iterations, "iterations", "n", 0, "stop after this many refreshes (0: until interrupted)")
	return cmd
}

// topGroup is one group in a refresh of top.
type topGroup struct {
	group.Status
	CPUP90, RPS, P99 *float64
	// RPSHistory and SizeHistory are the last refreshes' values, oldest
	// first; NaN where there was none.
	RPSHistory, SizeHistory []float64
}

// topView is what one refresh of top shows.
type topView struct {
	Time      time.Time
	Interval  time.Duration
	Groups    []topGroup
	Decisions []api.Event // the last ones, oldest first
}

// runTop refreshes the view every interval until ctx ends or after
// iterations refreshes (0: no limit).
func runTop(ctx context.Context, c *api.Client, w io.Writer, only string, interval time.Duration, iterations int) error {
	width, live := terminal(w)
	if live {
		// The alternate screen, without a cursor, given back on the way out.
		fmt.Fprint(w, "\x1b[?1049h\x1b[?25l")
		defer fmt.Fprint(w, "\x1b[?25h\x1b[?1049l")
	}
	rows := 0
	if live {
		rows = terminalRows(w)
	}
	hist := map[string]*topGroup{} // the groups' histories, by name
	var decisions []api.Event
	q := api.EventsQuery{Group: only, Since: time.Now().Add(-time.Hour), Limit: topDecisions}
	printed := int64(-1) // plain: the newest decision printed; -1 before the first refresh
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for n := 1; ; n++ {
		v, err := topRefresh(ctx, c, only, hist)
		if err != nil {
			return err
		}
		v.Interval = interval
		evs, err := c.Events(ctx, q)
		if err != nil {
			return err
		}
		decisions = lastDecisions(decisions, evs, topDecisions)
		if len(evs) > 0 {
			q = api.EventsQuery{Group: only, After: evs[len(evs)-1].ID}
		}
		v.Decisions = decisions
		if live {
			fmt.Fprint(w, renderTop(v, width, rows))
		} else {
			var lines []string
			lines, printed = plainTop(v, printed)
			for _, l := range lines {
				fmt.Fprintln(w, l)
			}
		}
		if iterations > 0 && n >= iterations {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// terminalRows is the height of terminal w (24 when it does not say).
func terminalRows(w io.Writer) int {
	if ws, ok := winsize(w); ok && ws.Row > 0 {
		return int(ws.Row)
	}
	return 24
}

// topRefresh reads the groups' status and metrics, adding this refresh to
// the histories in hist.
func topRefresh(ctx context.Context, c *api.Client, only string, hist map[string]*topGroup) (topView, error) {
	v := topView{Time: time.Now()}
	var groups []group.Status
	if only != "" {
		g, err := c.Group(ctx, only)
		if err != nil {
			return v, err
		}
		groups = []group.Status{g}
	} else {
		st, err := c.Status(ctx)
		if err != nil {
			return v, err
		}
		groups = st.Groups
	}
	for _, g := range groups {
		tg := topGroup{Status: g}
		doc, err := c.Metrics(ctx, g.Name, topWindow, "")
		if err != nil && ctx.Err() != nil {
			return v, err
		}
		if err == nil { // a group just reloaded in may have none yet
			tg.CPUP90, tg.RPS, tg.P99 = doc.CPU.P90, doc.RequestsPerSecond, doc.Latency.P99
		}
		h := hist[g.Name]
		if h == nil {
			h = &topGroup{}
			hist[g.Name] = h
		}
		h.RPSHistory = appendHistory(h.RPSHistory, tg.RPS)
		in := float64(g.InService)
		h.SizeHistory = appendHistory(h.SizeHistory, &in)
		tg.RPSHistory, tg.SizeHistory = h.RPSHistory, h.SizeHistory
		v.Groups = append(v.Groups, tg)
	}
	return v, nil
}

// appendHistory adds x (NaN when nil) and keeps the last topHistory values.
func appendHistory(h []float64, x *float64) []float64 {
	v := math.NaN()
	if x != nil {
		v = *x
	}
	h = append(h, v)
	if len(h) > topHistory {
		h = h[len(h)-topHistory:]
	}
	return h
}

// lastDecisions adds the new events to the last ones, keeping n.
func lastDecisions(last, evs []api.Event, n int) []api.Event {
	last = append(last, evs...)
	if len(last) > n {
		last = last[len(last)-n:]
	}
	return last
}

// sparkBars are the eighths of a cell, lowest first.
var sparkBars = []rune("▁▂▃▄▅▆▇█")

// sparkline draws the last width values of vals, scaled from 0 to their
// maximum; a missing value (NaN) is a blank.
func sparkline(vals []float64, width int) string {
	if width <= 0 {
		return ""
	}
	if len(vals) > width {
		vals = vals[len(vals)-width:]
	}
	top := 0.0
	for _, x := range vals {
		if !math.IsNaN(x) {
			top = max(top, x)
		}
	}
	var b strings.Builder
	for _, x := range vals {
		switch {
		case math.IsNaN(x):
			b.WriteRune(' ')
		case top == 0:
			b.WriteRune(sparkBars[0])
		default:
			i := int(math.Round(x / top * float64(len(sparkBars)-1)))
			b.WriteRune(sparkBars[min(max(i, 0), len(sparkBars)-1)])
		}
	}
	return b.String()
}

// orDash formats x with format, or "-" when there is none.
func orDash(format string, x *float64) string {
	if x == nil {
		return "-"
	}
	return fmt.Sprintf(format, *x)
}

// topRow is a group's line: the same columns live and plain.
func topRow(g topGroup) string {
	size := fmt.Sprintf("%d/%d (%d-%d)", g.InService, g.Desired, g.MinSize, g.MaxSize)
	plan := g.Plan
	if plan == "" {
		plan = "-"
	}
	return fmt.Sprintf("%-14s %-10s %-13s %8s %9s %9s", g.Name, plan, size,
		orDash("%.1f%%", g.CPUP90), orDash("%.1f", g.RPS), orDash("%.0fms", g.P99))
}

const topHeader = "GROUP          PLAN       SIZE           CPU p90     REQ/S       p99"

// decisionLine is one decision as top shows it.
func decisionLine(e api.Event) string {
	return fmt.Sprintf("%s  %-12s %-12s %-7s %s  %s", e.Time.Local().Format(time.TimeOnly), e.Group, e.Rule,
		fmt.Sprintf("%d→%d", e.Current, e.Recommendation), outcome(e), oneLine(e.Reason))
}

// renderTop draws view v on a terminal width columns by height rows: from
// the top left, each line erased to its end, the rest of the screen
// cleared; lines are cut to the width and the screen's height.
func renderTop(v topView, width, height int) string {
	lines := []string{
		fmt.Sprintf("shoal top  %s  every %s  (Ctrl-C quits)", v.Time.Local().Format(time.TimeOnly), v.Interval),
		"",
		topHeader,
	}
	spark := max(width-26, 10) / 2
	for _, g := range v.Groups {
		lines = append(lines, topRow(g),
			fmt.Sprintf("  req/s %s  size %s", pad(sparkline(g.RPSHistory, spark), spark), sparkline(g.SizeHistory, spark)))
	}
	lines = append(lines, "", "LAST DECISIONS")
	if len(v.Decisions) == 0 {
		lines = append(lines, "  (none in the last hour)")
	}
	for _, e := range v.Decisions {
		lines = append(lines, decisionLine(e))
	}
	if height > 0 && len(lines) > height {
		lines = lines[:height]
	}
	var b strings.Builder
	b.WriteString("\x1b[H")
	for i, l := range lines {
		if r := []rune(l); width > 0 && len(r) > width {
			l = string(r[:width])
		}
		b.WriteString(l + "\x1b[K")
		if i < len(lines)-1 {
			b.WriteString("\r\n")
		}
	}
	b.WriteString("\x1b[J")
	return b.String()
}

// pad fills s with spaces to width runes.
func pad(s string, width int) string {
	if n := len([]rune(s)); n < width {
		return s + strings.Repeat(" ", width-n)
	}
	return s
}

// plainTop is view v as plain lines: one per group, and one per decision
// newer than printed (the newest decision printed before, -1 at the first
// refresh, which prints those it has); it returns the new newest.
func plainTop(v topView, printed int64) ([]string, int64) {
	var lines []string
	at := v.Time.Local().Format(time.TimeOnly)
	for _, g := range v.Groups {
		lines = append(lines, at+"  "+strings.TrimRight(topRow(g), " "))
	}
	for _, e := range v.Decisions {
		if e.ID > printed {
			lines = append(lines, at+"  decision "+decisionLine(e))
			printed = e.ID
		}
	}
	if printed < 0 {
		printed = 0
	}
	return lines, printed
}
