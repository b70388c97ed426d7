package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/policy"
	"github.com/shoal-lb/shoal/internal/sim"
	"github.com/shoal-lb/shoal/internal/source"
	"github.com/shoal-lb/shoal/internal/trace"
)

// simulation is one policy's result, as printed with -o json.
type simulation struct {
	Policy           string  `json:"policy"`
	Group            string  `json:"group"`
	InstanceSeconds  float64 `json:"instance_seconds"`
	VsStatic         float64 `json:"instance_seconds_vs_static,omitempty"`
	ViolationSeconds float64 `json:"slo_violation_seconds"`
	ScaleEvents      int     `json:"scale_events"`
	Ups              int     `json:"scale_ups"`
	Downs            int     `json:"scale_downs"`
	MaxSize          int     `json:"max_size"`
	Decisions        int     `json:"decisions"`
	// ProviderSeconds are the instance-seconds by provider (a group
	// across providers).
	ProviderSeconds map[string]float64 `json:"provider_seconds,omitempty"`
	// Scalings are the jobs the policy asked for, in order.
	Scalings []scaling `json:"scalings"`
}

// scaling is one simulated job: when, and from what size to what.
type scaling struct {
	Time   time.Time `json:"time"`
	From   int       `json:"from"`
	To     int       `json:"to"`
	Rule   string    `json:"rule"`
	Reason string    `json:"reason"`
}

func simulateCmd(o *options) *cobra.Command {
	var (
		tracePath, from, to, group, svg string
		sourcesFrom                     string
		policies                        []string
		capacityFlag                    string
		scale                           float64
		measureWindow                   time.Duration
		startDelay, slo, baseP99        time.Duration
		serviceCV, saturatedCPU         float64
		resolution, history             time.Duration
		static                          bool
		providerFlags                   []string
	)
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "run policies over a recorded request trace with a capacity model, a day in seconds",
		Example: `  shoal simulate -c shoal.yaml --capacity 120 --svg day.svg
  shoal simulate --policy a.yaml --policy b.yaml --static`,
		Long: `Simulates each --policy (a shoal config; its first group with an autoscale
section, or --group) on the requests per minute of a trace window, with the
same policy code as the live loop: every metrics.interval the simulated
collector samples the group (instances in warmup excluded, as live) and the
policy is evaluated through an injected clock; its jobs start instances that
enter service after --start-delay (default: the group's measured one, the
median time from start to in service of its newest instances, asked of the
running core; else 4.2s, a local instance's), one job at a time, with the group's
cooldowns, min/max and plans. Each instance serves up to --capacity req/s;
CPU is the utilisation (at most --saturated-cpu), p99 latency an M/M/c (Erlang C) estimate (its wait
scaled by (1 + --service-cv²)/2) plus the wait for any queue an overload left.

--capacity measured asks the running core (--config or --socket) what the
group's ready instances served over the last --measure-window and at what CPU:
the line of CPU against requests per instance, extended to 100 % CPU (the
rule predictive scaling uses). A window whose load did not vary enough to
show the slope is refused.

A group across providers fills them in order: --provider NAME=CAPACITY/DELAY
(repeat, in the group's order; CAPACITY 0: no bound) gives each one's capacity
and start delay, the policy's look-ahead taking the delay of the provider the
next instance comes from. Without it, a group with several providers takes each
entry's max and the running core's measured delay there (else --start-delay).

A policy reading metrics.sources (a source, or a formula over one) runs on
the sources' recorded values, which the running shoal (--config or --socket)
gives (GET /v1/sources/history): a Prometheus source's asked of Prometheus
(query_range), a command's or an HTTP endpoint's what that shoal read since
it started (metrics.retention.ring, at least an hour). They are replayed at the times
they were read, from --sources-from (default --from) on, beside the load of
the trace; the policy's names must be the running shoal's sources.

Prints per policy the instance-seconds (by provider too), the seconds the p99 exceeded --slo,
and the scale events; --svg plots load, capacity and instances over time.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bad := func(format string, a ...any) error {
				return &exitError{code: exitUsage, msg: fmt.Sprintf(format, a...)}
			}
			if o.output != "text" && o.output != "json" {
				return bad("-o must be text or json, got %q", o.output)
			}
			capacity, err := parseCapacity(capacityFlag)
			if err != nil {
				return bad("%v", err)
			}
			if slo <= 0 {
				return bad("--slo %v: want > 0", slo)
			}
			for _, d := range []struct {
				flag  string
				value time.Duration
			}{{"--start-delay", startDelay}, {"--base-p99", baseP99}, {"--resolution", resolution}, {"--history", history}} {
				if d.value < 0 {
					return bad("%s %v: want >= 0", d.flag, d.value)
				}
			}
			if !(scale >= 0) || math.IsInf(scale, 1) {
				return bad("--scale %v: want >= 0 and finite", scale)
			}
			// 0 would read as the model's default (100); on the command line it is a mistake.
			if !(saturatedCPU > 0 && saturatedCPU <= 100) {
				return bad("--saturated-cpu %v: want a CPU %% above 0, at most 100", saturatedCPU)
			}
			if measureWindow <= 0 {
				return bad("--measure-window must be > 0")
			}
			fromT, err := trace.ParseTime(from)
			if err != nil {
				return bad("--from: %v", err)
			}
			toT, err := trace.ParseTime(to)
			if err != nil {
				return bad("--to: %v", err)
			}
			if tracePath == "" {
				if tracePath = trace.WorldCup98Path(); tracePath == "" {
					return bad("--trace: no trace given and ../shared/traces/worldcup98_requests_per_minute.csv not found")
				}
			}
			if len(policies) == 0 {
				policies = []string{o.configFile()}
			}
			var pols []sim.Policy
			for _, path := range policies {
				p, err := sim.LoadPolicy(path, group)
				var el config.ErrorList
				if errors.As(err, &el) {
					fmt.Fprintln(o.stderr, err)
					return bad("%s: %d error(s) in config", path, len(el))
				}
				if err != nil {
					return bad("%v", err)
				}
				pols = append(pols, p)
			}
			capacitySource := "--capacity"
			if capacity == 0 {
				if capacity, capacitySource, err = o.measuredCapacity(cmd.Context(), pols[0].Group.Name, measureWindow); err != nil {
					return err
				}
			}
			delaySource := "--start-delay"
			if !cmd.Flags().Changed("start-delay") {
				startDelay, delaySource = o.measuredStartDelay(cmd.Context(), pols[0].Group.Name)
			}
			provs, err := parseSimProviders(providerFlags)
			if err != nil {
				return bad("%v", err)
			}
			if len(provs) == 0 && len(pols[0].Group.ProviderList()) > 1 {
				provs = o.simProviders(cmd.Context(), pols[0].Group, startDelay)
			}
			series, err := trace.ReadFile(tracePath)
			if err != nil {
				return bad("%v", err)
			}
			model := sim.Model{Capacity: capacity, BaseP99: baseP99, ServiceCV: serviceCV, SaturatedCPU: saturatedCPU}
			if err := model.Validate(); err != nil {
				return bad("%v", err)
			}
			w, err := series.Window(fromT, toT)
			if err != nil {
				return bad("--from/--to: %v", err)
			}
			scaleNote := ""
			if scale == 0 {
				if scale, err = sim.DefaultScale(w, capacity); err != nil {
					return bad("%v", err)
				}
				scaleNote = fmt.Sprintf(" (the peak needs %d instances)", sim.PeakInstances)
			}
			_, rates, hist, err := sim.Window(series, fromT, toT, scale, history)
			if err != nil {
				return bad("%v", err)
			}
			staticN, err := model.StaticFor(rates, slo)
			if err != nil {
				return bad("%v", err)
			}
			if static {
				pols = append([]sim.Policy{sim.Static(pols[0], staticN)}, pols...)
			}

			var (
				out   []simulation
				plots []sim.Series
			)
			staticSecs := float64(staticN) * toT.Sub(fromT).Seconds()
			for _, p := range pols {
				run := sim.Run{Group: p.Group, Model: model, SLO: slo, StartDelay: startDelay, Providers: provs,
					Interval: p.Interval, Warmup: p.Warmup, Resolution: resolution, Initial: p.Group.MinSize,
					Start: fromT, Rates: rates, History: hist}
				if p.ReadsSources() {
					if run.Sources, err = o.recordedSources(cmd.Context(), p, sourcesFrom, fromT, toT); err != nil {
						return err
					}
				}
				res, err := sim.Simulate(run)
				if err != nil {
					return bad("%s: %v", p.Name, err)
				}
				scalings := []scaling{}
				for _, d := range res.Decisions {
					if d.Request != nil {
						scalings = append(scalings, scaling{Time: d.Time, From: d.Current, To: d.Recommendation, Rule: d.Rule, Reason: d.Reason})
					}
				}
				out = append(out, simulation{Policy: p.Name, Group: p.Group.Name, InstanceSeconds: res.InstanceSeconds,
					VsStatic: res.InstanceSeconds / staticSecs, ViolationSeconds: res.ViolationSeconds, ScaleEvents: res.ScaleEvents,
					Ups: res.Ups, Downs: res.Downs, MaxSize: res.MaxSize, Decisions: len(res.Decisions), ProviderSeconds: res.ProviderSeconds, Scalings: scalings})
				plots = append(plots, sim.Series{Name: p.Name, Minutes: res.Minutes})
			}
			if svg != "" {
				f, err := os.Create(svg)
				if err != nil {
					return &exitError{code: exitFailed, msg: err.Error()}
				}
				title := fmt.Sprintf("%s to %s, scale %.4g, capacity %.0f req/s/instance, start delay %s", fromT.Format("2006-01-02 15:04"), toT.Format("2006-01-02 15:04 UTC"), scale, capacity, startDelay)
				err = errors.Join(sim.WriteSVG(f, title, plots), f.Close())
				if err != nil {
					return &exitError{code: exitFailed, msg: fmt.Sprintf("--svg: %v", err)}
				}
			}
			if o.output == "json" {
				enc := json.NewEncoder(o.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"trace": tracePath, "from": fromT, "to": toT, "scale": scale,
					"capacity_rps": capacity, "capacity_source": capacitySource, "start_delay": startDelay.String(), "start_delay_source": delaySource, "slo": slo.String(), "static_at_peak": staticN,
					"providers": provs, "policies": out})
			}
			fmt.Fprintf(o.stdout, "%s to %s, scale %.4g%s; capacity %.1f req/s per instance (%s), base p99 %s, SLO p99 %s, start delay %s (%s); static at peak: %d instances\n\n",
				fromT.Format("2006-01-02 15:04"), toT.Format("2006-01-02 15:04 UTC"), scale, scaleNote, capacity, capacitySource, baseP99, slo, startDelay, delaySource, staticN)
			tw := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "POLICY\tINSTANCE-SECONDS\tVS STATIC\tSLO-VIOLATION SECONDS\tSCALE EVENTS (UP/DOWN)\tMAX SIZE")
			for _, s := range out {
				fmt.Fprintf(tw, "%s\t%.0f\t%.3f\t%.0f\t%d (%d/%d)\t%d\n", s.Policy, s.InstanceSeconds, s.VsStatic, s.ViolationSeconds, s.ScaleEvents, s.Ups, s.Downs, s.MaxSize)
			}
			if err := tw.Flush(); err != nil || len(provs) == 0 {
				return err
			}
			// A group across providers: where the instance-seconds ran.
			fmt.Fprintln(o.stdout)
			for _, s := range out {
				var parts []string
				for _, p := range provs {
					parts = append(parts, fmt.Sprintf("%s %.0f", p.Name, s.ProviderSeconds[p.Name]))
				}
				fmt.Fprintf(o.stdout, "%s instance-seconds by provider: %s\n", s.Policy, strings.Join(parts, ", "))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&tracePath, "trace", "", "per-minute trace CSV (default: ../shared/traces/worldcup98_requests_per_minute.csv)")
	f.StringVar(&from, "from", "1998-06-30T08:00", "window start, UTC")
	f.StringVar(&to, "to", "1998-07-01T08:00", "window end, UTC")
	f.StringArrayVar(&policies, "policy", nil, "shoal config with the policy (repeat to compare; default: --config)")
	f.StringVar(&group, "group", "", "the group to simulate (default: the first with an autoscale section)")
	f.StringVar(&capacityFlag, "capacity", "100", `requests/s one instance serves at 100% CPU (a demo-backend --workers 1 serving /work?ms=1&wait=9 calibrates at about 93), or "measured": from the running core`)
	f.DurationVar(&measureWindow, "measure-window", time.Hour, "with --capacity measured: how far back to measure")
	f.Float64Var(&scale, "scale", 0, "requests per trace minute × scale / 60 = req/s (default: the peak needs 5 instances)")
	f.DurationVar(&startDelay, "start-delay", sim.LocalStartDelay, "time from a scale-out to the new instance in service (default: the group's measured median, from the running core; without one 4.2s; the seeds' cloud: 3m30s)")
	f.DurationVar(&slo, "slo", 100*time.Millisecond, "p99 latency SLO")
	f.DurationVar(&baseP99, "base-p99", 20*time.Millisecond, "the backend's p99 without queueing")
	f.Float64Var(&saturatedCPU, "saturated-cpu", 100, "the CPU % an instance shows when requests queue for it (servers often spend less per request then)")
	f.Float64Var(&serviceCV, "service-cv", 1, "coefficient of variation of a request's service time (1: exponential, M/M/c; 0: every request costs the same)")
	f.DurationVar(&resolution, "resolution", 0, "load metrics as averages over this period (a cloud API's 1m or 5m; default: every metrics.interval)")
	f.DurationVar(&history, "history", 7*24*time.Hour, "trace before --from fed as history (for predictive)")
	f.BoolVar(&static, "static", false, "also simulate the group fixed at the size the peak needs")
	f.StringVar(&svg, "svg", "", "write a plot of load, capacity and instances to this SVG file")
	f.StringVar(&sourcesFrom, "sources-from", "", "for a policy reading metrics.sources: where their recorded values start, RFC 3339 or a duration ago such as 2h (default: --from)")
	f.StringArrayVar(&providerFlags, "provider", nil, "a provider of a group across providers, NAME=CAPACITY/DELAY (e.g. rack=4/5s, sakura=0/3m30s); repeat in the group's order")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	return cmd
}

// parseSimProviders reads --provider NAME=CAPACITY/DELAY flags.
func parseSimProviders(flags []string) ([]sim.Provider, error) {
	var out []sim.Provider
	for _, f := range flags {
		name, rest, ok1 := strings.Cut(f, "=")
		c, d, ok2 := strings.Cut(rest, "/")
		n, err1 := strconv.Atoi(c)
		delay, err2 := time.ParseDuration(d)
		if !ok1 || !ok2 || name == "" || err1 != nil || err2 != nil || n < 0 || delay < 0 {
			return nil, fmt.Errorf("--provider %q: want NAME=CAPACITY/DELAY, e.g. rack=4/5s (capacity >= 0, 0: no bound)", f)
		}
		out = append(out, sim.Provider{Name: name, Capacity: n, StartDelay: delay})
	}
	return out, nil
}

// simProviders is g's providers for the simulator: each entry's max as
// its capacity, and the start delay the running core measured there, or
// fallback.
func (o *options) simProviders(ctx context.Context, g config.Group, fallback time.Duration) []sim.Provider {
	measured := map[string]time.Duration{}
	if c, _, err := o.coreClient(); err == nil {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if st, err := c.Group(ctx, g.Name); err == nil {
			for _, p := range st.Providers {
				if p.StartDelay != nil {
					measured[p.Name] = p.StartDelay.Median
				}
			}
		}
	}
	var out []sim.Provider
	for _, gp := range g.ProviderList() {
		d, ok := measured[gp.Name]
		if !ok {
			d = fallback
		}
		out = append(out, sim.Provider{Name: gp.Name, Capacity: gp.Max, StartDelay: d})
	}
	return out
}

// measuredStartDelay asks the running core for group's measured start
// delay (the median time from an instance's start to in service), and
// says where the delay it returns came from: without a core to ask, or
// before an instance of the group went into service, it is a local
// instance's.
func (o *options) measuredStartDelay(ctx context.Context, group string) (time.Duration, string) {
	fallback := func(why string) (time.Duration, string) {
		return sim.LocalStartDelay, "a local instance's; no measured one: " + why
	}
	c, _, err := o.coreClient()
	if err != nil {
		return fallback("no running shoal to ask")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	g, err := c.Group(ctx, group)
	if err != nil {
		return fallback(fmt.Sprintf("asking the running shoal: %v", err))
	}
	if g.StartDelay == nil {
		return fallback(fmt.Sprintf("no instance of group %s went into service yet", group))
	}
	return g.StartDelay.Median, fmt.Sprintf("measured by shoal: median of group %s's last %d starts", group, g.StartDelay.Samples)
}

// capacityMeasured is the --capacity value that measures it on the running core.
const capacityMeasured = "measured"

// parseCapacity reads --capacity: requests/s > 0, or 0 for "measured".
func parseCapacity(v string) (float64, error) {
	if v == capacityMeasured {
		return 0, nil
	}
	c, err := strconv.ParseFloat(v, 64)
	if err != nil || !(c > 0) || math.IsInf(c, 0) {
		return 0, fmt.Errorf("--capacity %q: want requests/s > 0 or %q", v, capacityMeasured)
	}
	return c, nil
}

// measuredCapacity asks the running core what one of group's instances
// serves at 100 % CPU, measured over window by the rule predictive scaling
// uses (policy.MeasuredCapacity: the slope of CPU against load); a window
// whose load did not vary enough is refused with why.
func (o *options) measuredCapacity(ctx context.Context, group string, window time.Duration) (float64, string, error) {
	c, err := o.client()
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Capacity(ctx, group, window)
	if err != nil {
		return 0, "", apiExit(err)
	}
	if resp.CapacityRPS == nil {
		return 0, "", &exitError{code: exitUsage, msg: fmt.Sprintf("--capacity measured: group %s over the last %s: cannot estimate an instance's capacity: %s; measure over a window whose load varied, or pass --capacity RPS",
			group, window, resp.Explanation)}
	}
	return *resp.CapacityRPS, fmt.Sprintf("measured by shoal: group %s over the last %s: %s", group, window, resp.Explanation), nil
}

// recordedSources asks the running shoal for the values of the sources p
// reads, over the window [from, to] shifted to start at sourcesFrom ("":
// from itself), and returns them for the simulator at the simulation's
// times.
func (o *options) recordedSources(ctx context.Context, p sim.Policy, sourcesFrom string, from, to time.Time) (func(*sim.History) policy.Metrics, error) {
	at := from
	if sourcesFrom != "" {
		if d, err := time.ParseDuration(sourcesFrom); err == nil && d > 0 {
			at = time.Now().Add(-d)
		} else if at, err = time.Parse(time.RFC3339Nano, sourcesFrom); err != nil {
			return nil, &exitError{code: exitUsage, msg: fmt.Sprintf("--sources-from %q: want an RFC 3339 time or a duration ago such as 2h", sourcesFrom)}
		}
	}
	c, _, err := o.coreClient()
	if err != nil {
		return nil, &exitError{code: exitUsage, msg: fmt.Sprintf("%s: the policy reads metrics.sources, whose recorded values come from the running shoal: %v", p.Name, err)}
	}
	// The policy reads back up to a source's max_age before the window's
	// first evaluation, a predictive floor on a source its lookback.
	lead := policy.SourceHistory(p.Group)
	for _, s := range p.Sources {
		lead = max(lead, s.MaxAgeOf())
	}
	shift := from.Sub(at)
	pts := map[string][]policy.Point{}
	per := map[string]bool{}
	// In windows the API takes (a day at most), oldest first.
	for lo, end := at.Add(-lead), at.Add(to.Sub(from)); lo.Before(end); lo = lo.Add(api.MaxPolicyTestWindow) {
		hi := minTime(lo.Add(api.MaxPolicyTestWindow), end)
		r, err := c.SourcesHistory(ctx, p.Group.Name, lo, hi)
		if err != nil {
			return nil, apiExit(err)
		}
		for _, sh := range r.Sources {
			for _, pt := range sh.Points {
				// Each window holds both its ends: a point on the edge once.
				if n := len(pts[sh.Name]); n > 0 && !pt.T.Add(shift).After(pts[sh.Name][n-1].T) {
					continue
				}
				pts[sh.Name] = append(pts[sh.Name], policy.Point{T: pt.T.Add(shift), V: pt.V})
			}
			if _, ok := pts[sh.Name]; !ok {
				pts[sh.Name] = nil
			}
			per[sh.Name] = sh.PerInstance
		}
	}
	for _, s := range p.Sources {
		if _, ok := pts[s.Name]; !ok {
			return nil, &exitError{code: exitUsage, msg: fmt.Sprintf("%s: source %s is not one of the running shoal's sources, which record what the simulator replays", p.Name, s.Name)}
		}
	}
	return func(h *sim.History) policy.Metrics {
		return source.Recorded(p.Group.Name, h, p.Sources, pts, per)
	}, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
