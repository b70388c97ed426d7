// Package tour drives the dashboard in headless Chromium as an operator
// would: the login page, the login, a group's live view filling with data,
// a click on "Scale up" until the new job and instance show on the table
// and the chart and, when asked, a scaling the policy decides, followed
// from its marker to its job. The end-to-end test asserts on its Result,
// which reads the chart by what it shows (its panels, lines and markers,
// named by their data attributes), not by its pixels; shoal-bench keeps
// its screenshots.
package tour

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// ErrNoBrowser is returned when no Chromium is installed.
var ErrNoBrowser = errors.New("chromium is not installed (Debian package chromium; make test-deps installs it)")

// Browser returns the path of the Chromium to drive.
func Browser() (string, error) {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", ErrNoBrowser
}

// Options say where the dashboard is and what to do there.
type Options struct {
	// URL is the admin listener's base, e.g. http://127.0.0.1:9000.
	URL   string
	Token string
	// Group is the group to open and scale up.
	Group string
	// Shot, when set, receives each screenshot (PNG) with a name such as
	// "1-login".
	Shot func(name string, png []byte) error
	// Timeout bounds each wait (default 60 s).
	Timeout time.Duration
	// Provoke, when set, is called once the scale-up shows: it makes the
	// group's policy scale it (load past a rule's threshold), and the tour
	// waits for the decision's marker, then follows the timeline's link to
	// its job.
	Provoke func(ctx context.Context) error
}

// Chart is what the group chart shows, read from its SVG.
type Chart struct {
	// From and To are the time axis' ends, Unix seconds; PlotLeft and
	// PlotRight the plot area's edges and FirstX where the instance
	// count's line starts, in pixels.
	From, To                    float64
	PlotLeft, PlotRight, FirstX float64
	Panels                      []Panel
	Series                      []Series
	Lines                       []Line
	Markers                     []Marker
	// TimeAxis is the time axis' label.
	TimeAxis string
}

// Panel is one of the chart's panels: its unit and its y axis' label.
type Panel struct {
	Unit, Axis string
	Metrics    []string
}

// Series is one metric's line: "step" or "line", with its values.
type Series struct {
	Metric, Shape, Unit string
	Values              []*float64
}

// String shows a series by its values' count and last one: the values
// are pointers (nil where the chart has a gap), which %v prints as
// addresses.
func (s Series) String() string {
	last := "none"
	for i := len(s.Values) - 1; i >= 0; i-- {
		if v := s.Values[i]; v != nil {
			last = strconv.FormatFloat(*v, 'g', 4, 64)
			break
		}
	}
	return fmt.Sprintf("{%s %s %s: %d values, last %s}", s.Metric, s.Shape, s.Unit, len(s.Values), last)
}

// Line is a horizontal line: the policy's target ("target") or a
// threshold ("above", "below") on the panel of Unit, or the group's "min"
// or "max" size.
type Line struct {
	Metric, Kind, Rule, Unit string
	Value                    float64
}

// Marker is a decision's or a job's marker and the name it shows ("" when
// it had no room to).
type Marker struct {
	Kind, ID, Job, Text string
}

// EventRow is a row of the decisions timeline: its outcome, as shown, the
// class that paints it, and the job it links to.
type EventRow struct {
	Rule, Outcome, Class, Job string
}

// SourceRow is a row of the sources panel.
type SourceRow struct {
	Name, Kind, Value, Age, State, Errors, LastError string
	Stale                                            bool
}

// Result is what the browser saw.
type Result struct {
	// LoginForm: the dashboard asked for the token before the login.
	LoginForm bool
	// Live is from the login's submission to the group's chart holding
	// data and its instance table filled.
	Live time.Duration
	// ChartPoints are the chart's steps with an instance count; Instances
	// the table's rows; Overview the overview's cells, by column, for the
	// group; Decisions the timeline's rows, Ungrouped those of its rows
	// that are events of no group (HAProxy restarted).
	ChartPoints int
	Instances   int
	Overview    map[string]string
	Decisions   int
	Ungrouped   []string
	// Sources are the sources panel's rows, each its cells by column and
	// whether the page marks it stale.
	Sources []SourceRow
	// MessagesPerSecond is the rate of the stream's messages the page
	// rendered over 5 s.
	MessagesPerSecond float64
	// Job is the job "Scale up" answered, with its state and, if ignored,
	// reason, as the page shows it.
	Job, JobState, Answer string
	// JobListed: the job appeared in the group's job table.
	JobListed bool
	// InstancesAfter are the table's rows once the new instance showed;
	// ScaleShown is from the click to then.
	InstancesAfter int
	ScaleShown     time.Duration
	// Scaled is the chart once the scale-up showed on it; Timeline the
	// decisions' rows then.
	Scaled   Chart
	Timeline []EventRow
	// With Provoke: Decided is the chart once the policy's decision and
	// its job showed; Decision the marker's, PolicyJob the job it links
	// to; Highlighted, the jobs table's highlighted row after a click on
	// the timeline's link.
	Decided     Chart
	Decision    Marker
	PolicyJob   string
	Highlighted string
	// Zoomed is the chart's time span after a drag across the middle half
	// of its plot; Unzoomed after a double-click, which resets it.
	Zoomed, Unzoomed float64
	// PageErrors are the page's uncaught script errors.
	PageErrors []string
}

// readChart is the script that reads the chart into a Chart.
const readChart = `(() => {
  const svg = document.querySelector("#chart svg");
  if (!svg) return null;
  const num = (e, a) => Number(e.getAttribute(a));
  const unitOf = (e) => e.closest(".panel").dataset.unit;
  const size = svg.querySelector('path.series[data-metric="size"]');
  const m = size && /^M([\d.]+)/.exec(size.getAttribute("d"));
  return {
    From: num(svg, "data-from"), To: num(svg, "data-to"),
    PlotLeft: num(svg, "data-plot-left"), PlotRight: num(svg, "data-plot-right"), FirstX: m ? Number(m[1]) : -1,
    Panels: Array.from(svg.querySelectorAll(".panel"), (p) => ({
      Unit: p.dataset.unit, Axis: p.querySelector(".axis-label").textContent, Metrics: p.dataset.metrics.split(" ") })),
    Series: Array.from(svg.querySelectorAll("path.series"), (p) => ({
      Metric: p.dataset.metric, Shape: p.dataset.shape, Unit: unitOf(p), Values: JSON.parse(p.dataset.values) })),
    Lines: Array.from(svg.querySelectorAll("line.policy, line.limit"), (l) => ({
      Metric: l.dataset.metric || "", Kind: l.dataset.kind, Rule: l.dataset.rule || "", Unit: unitOf(l), Value: Number(l.dataset.value) })),
    Markers: Array.from(svg.querySelectorAll("g.marker"), (g) => ({
      Kind: g.dataset.kind, ID: g.dataset.id, Job: g.dataset.job, Text: (g.querySelector(".marker-label") || {}).textContent || "" })),
    TimeAxis: svg.querySelector('.axis-label[data-unit="time"]').textContent,
  };
})()`

// readSources is the script that reads the sources panel's rows.
const readSources = `Array.from(document.querySelectorAll("#source-table tbody tr"), (tr) => {
  const td = Array.from(tr.querySelectorAll("td"), (c) => c.textContent);
  return { Name: td[0], Kind: td[1], Value: td[2], Age: td[3], State: td[4], Errors: td[5], LastError: td[6], Stale: tr.dataset.stale === "true" };
})`

// readTimeline is the script that reads the decisions' rows.
const readTimeline = `Array.from(document.querySelectorAll("#events tbody tr"), (tr) => {
  const td = tr.querySelectorAll("td"), a = tr.querySelector("a.job-link");
  return { Rule: td[1].textContent, Outcome: td[2].textContent, Class: td[2].className, Job: a ? a.dataset.job : "" };
})`

// Run drives a fresh headless browser through the dashboard at o.URL.
func Run(ctx context.Context, o Options) (res Result, err error) {
	if o.Timeout <= 0 {
		o.Timeout = 60 * time.Second
	}
	bctx, pageErrors, closeBrowser, err := startBrowser(ctx)
	if err != nil {
		return res, err
	}
	defer closeBrowser()
	defer func() { res.PageErrors = pageErrors() }()

	poll := func(what, expr string) chromedp.Action {
		return chromedp.ActionFunc(func(ctx context.Context) error {
			var ok bool
			err := chromedp.Poll(expr, &ok, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(o.Timeout)).Do(ctx)
			if err != nil {
				return fmt.Errorf("wait until %s: %w", what, err)
			}
			return nil
		})
	}
	shot := func(name string) chromedp.Action {
		return chromedp.ActionFunc(func(ctx context.Context) error {
			if o.Shot == nil {
				return nil
			}
			var png []byte
			if err := chromedp.FullScreenshot(&png, 100).Do(ctx); err != nil {
				return fmt.Errorf("screenshot %s: %w", name, err)
			}
			return o.Shot(name, png)
		})
	}
	count := func(sel string, n *int) chromedp.Action {
		return chromedp.Evaluate(fmt.Sprintf(`document.querySelectorAll(%s).length`, strconv.Quote(sel)), n)
	}
	js := strconv.Quote
	groupRow := `#overview tbody tr[data-group=` + js(o.Group) + `]`
	run := func(what string, actions ...chromedp.Action) error {
		tctx, cancel := context.WithTimeout(bctx, 2*o.Timeout)
		defer cancel()
		if err := chromedp.Run(tctx, actions...); err != nil {
			// What the page showed when a step failed says why.
			sctx, cancel := context.WithTimeout(bctx, 10*time.Second)
			defer cancel()
			_ = chromedp.Run(sctx, shot("failed"))
			return fmt.Errorf("dashboard tour: %s: %w", what, err)
		}
		return nil
	}

	if err := run("open the login page",
		chromedp.Navigate(o.URL+"/ui/"),
		chromedp.WaitVisible(`#token`, chromedp.ByQuery),
		shot("1-login"),
	); err != nil {
		return res, err
	}
	res.LoginForm = true
	submitted := time.Now()
	if err := run("log in",
		chromedp.SendKeys(`#token`, o.Token, chromedp.ByQuery),
		chromedp.Submit(`#token`, chromedp.ByQuery),
		chromedp.WaitVisible(groupRow, chromedp.ByQuery),
		clickWhenThere(groupRow),
		poll("the chart and the instance table fill",
			`Number(document.querySelector("#chart").dataset.points) > 0 && document.querySelector("#chart svg") !== null && document.querySelectorAll("#instances tbody tr").length > 0`),
	); err != nil {
		return res, err
	}
	res.Live = time.Since(submitted)

	var ticks0, ticks1 float64
	var cells []string
	if err := run("watch the stream",
		// The overview's requests per second need a few samples.
		poll("the overview shows requests per second", `(() => { const c = document.querySelector(`+js(groupRow+` td:nth-child(5)`)+`); return c && c.textContent !== "–" && Number(c.textContent) > 0; })()`),
		chromedp.Evaluate(`state.ticks`, &ticks0),
		chromedp.Sleep(5*time.Second),
		chromedp.Evaluate(`state.ticks`, &ticks1),
		chromedp.Evaluate(`Array.from(document.querySelectorAll(`+js(groupRow+` td`)+`), (td) => td.textContent)`, &cells),
		chromedp.Evaluate(`Number(document.querySelector("#chart").dataset.points)`, &res.ChartPoints),
		count(`#instances tbody tr`, &res.Instances),
		count(`#events tbody tr`, &res.Decisions),
		chromedp.Evaluate(`Array.from(document.querySelectorAll('#events tbody tr[data-group=""]'), (tr) => tr.textContent)`, &res.Ungrouped),
		chromedp.Evaluate(readSources, &res.Sources),
		shot("2-group"),
	); err != nil {
		return res, err
	}
	res.MessagesPerSecond = (ticks1 - ticks0) / 5
	res.Overview = map[string]string{}
	for i, col := range []string{"group", "desired", "in service", "CPU p90", "req/s", "p99", "last decision"} {
		if i < len(cells) {
			res.Overview[col] = cells[i]
		}
	}

	clicked := time.Now()
	if err := run("scale up",
		chromedp.Click(`#scale-up`, chromedp.ByQuery),
		poll("the page shows the job", `document.querySelector("#result").dataset.job !== undefined`),
		chromedp.Evaluate(`document.querySelector("#result").dataset.job`, &res.Job),
		chromedp.Evaluate(`document.querySelector("#result").dataset.state`, &res.JobState),
		chromedp.Text(`#result`, &res.Answer, chromedp.ByQuery),
	); err != nil {
		return res, err
	}
	if res.JobState == "ignored" {
		return res, nil
	}
	jobRow := `#jobs tbody tr[data-job=` + js(res.Job) + `]`
	if err := run("see the job and the new instance",
		poll("the job is listed", `document.querySelector(`+js(jobRow)+`) !== null`),
		chromedp.ActionFunc(func(context.Context) error { res.JobListed = true; return nil }),
		poll("a new instance is listed", fmt.Sprintf(`document.querySelectorAll("#instances tbody tr").length > %d`, res.Instances)),
		chromedp.ActionFunc(func(context.Context) error { res.ScaleShown = time.Since(clicked); return nil }),
		count(`#instances tbody tr`, &res.InstancesAfter),
		// Once it serves and the chart shows it, for the screenshot.
		poll("the new instance is in service", `Array.from(document.querySelectorAll("#instances tbody tr td:nth-child(2)")).every((td) => td.textContent === "in-service")`),
		// Built when it runs: InstancesAfter is read by the step before.
		chromedp.ActionFunc(func(ctx context.Context) error {
			return poll("the chart shows the job and the new count", fmt.Sprintf(`document.querySelector('#chart g.marker[data-kind="job"][data-job=%s]') !== null && JSON.parse(document.querySelector('#chart path[data-metric="size"]').dataset.values).filter((v) => v !== null).pop() === %d`, js(res.Job), res.InstancesAfter)).Do(ctx)
		}),
		chromedp.Evaluate(readChart, &res.Scaled),
		chromedp.Evaluate(readTimeline, &res.Timeline),
		shot("3-scaled-up"),
	); err != nil {
		return res, err
	}
	if o.Provoke == nil {
		return res, zoom(&res, run, poll)
	}
	if err := o.Provoke(ctx); err != nil {
		return res, fmt.Errorf("dashboard tour: provoke a scaling: %w", err)
	}
	decision := `#chart g.marker[data-kind="decision"]:not([data-job=""])`
	if err := run("see the policy's decision and follow it to its job",
		poll("the chart marks a decision that started a job", `(() => {
			const d = document.querySelector(`+js(decision)+`);
			return d !== null && document.querySelector('#chart g.marker[data-kind="job"][data-job="' + d.dataset.job + '"]') !== null;
		})()`),
		chromedp.ActionFunc(func(ctx context.Context) error {
			return poll("the policy's instance is in service and counted on the chart", fmt.Sprintf(`(() => {
				const states = Array.from(document.querySelectorAll("#instances tbody tr td:nth-child(2)"), (td) => td.textContent);
				const size = JSON.parse(document.querySelector('#chart path[data-metric="size"]').dataset.values).filter((v) => v !== null).pop();
				return states.length > %d && states.every((s) => s === "in-service") && size === states.length;
			})()`, res.InstancesAfter)).Do(ctx)
		}),
		chromedp.Evaluate(readChart, &res.Decided),
		chromedp.Evaluate(`(() => { const d = document.querySelector(`+js(decision)+`); return { Kind: d.dataset.kind, ID: d.dataset.id, Job: d.dataset.job, Text: (d.querySelector(".marker-label") || {}).textContent || "" }; })()`, &res.Decision),
		chromedp.ActionFunc(func(ctx context.Context) error {
			res.PolicyJob = res.Decision.Job
			return clickWhenThere(`#events tbody a.job-link[data-job=` + js(res.PolicyJob) + `]`).Do(ctx)
		}),
		poll("the job's row is highlighted", `document.querySelector("#jobs tbody tr.hl") !== null`),
		chromedp.Evaluate(`document.querySelector("#jobs tbody tr.hl").dataset.job`, &res.Highlighted),
		chromedp.Evaluate(readTimeline, &res.Timeline),
		shot("4-policy-scaled"),
	); err != nil {
		return res, err
	}
	return res, zoom(&res, run, poll)
}

// startBrowser starts a fresh headless Chromium, which lives until close
// is called or ctx ends; pageErrs returns the page's uncaught script errors
// so far.
func startBrowser(ctx context.Context) (bctx context.Context, pageErrs func() []string, close func(), err error) {
	bin, err := Browser()
	if err != nil {
		return nil, nil, nil, err
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.WindowSize(1280, 1100),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	if os.Geteuid() == 0 {
		// Chromium refuses to run as root inside its sandbox.
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	close = func() { cancelBrowser(); cancelAlloc() }
	var (
		mu         sync.Mutex
		pageErrors []string
	)
	chromedp.ListenTarget(bctx, func(ev any) {
		if e, ok := ev.(*runtime.EventExceptionThrown); ok {
			msg := e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				msg += " " + e.ExceptionDetails.Exception.Description
			}
			mu.Lock()
			pageErrors = append(pageErrors, msg)
			mu.Unlock()
		}
	})
	// The first Run starts the browser, which lives as long as the context
	// it was given: bctx, not a step's.
	if err := chromedp.Run(bctx); err != nil {
		close()
		return nil, nil, nil, fmt.Errorf("dashboard tour: start %s: %w", bin, err)
	}
	pageErrs = func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(pageErrors)
	}
	return bctx, pageErrs, close, nil
}

// zoom drags across the middle half of the chart's plot, which zooms to
// it, and double-clicks, which resets.
func zoom(res *Result, run func(string, ...chromedp.Action) error, poll func(what, expr string) chromedp.Action) error {
	const span = `(() => { const s = document.querySelector("#chart svg"); return s.dataset.to - s.dataset.from; })()`
	var full float64
	var at struct{ X0, X1, Y float64 }
	return run("zoom the chart and reset it",
		// In the page, at once: the chart's SVG is redrawn every second, and
		// a node looked up first may be gone by the scroll.
		chromedp.Evaluate(`document.querySelector("#chart svg").scrollIntoView({block: "center"})`, nil),
		chromedp.Evaluate(span, &full),
		chromedp.Evaluate(`(() => {
			const s = document.querySelector("#chart svg"), r = s.getBoundingClientRect();
			const l = Number(s.dataset.plotLeft), w = Number(s.dataset.plotRight) - l;
			const p = s.querySelector(".panel .plot").getBoundingClientRect();
			return { X0: r.left + l + w / 4, X1: r.left + l + 3 * w / 4, Y: p.top + p.height / 2 };
		})()`, &at),
		chromedp.ActionFunc(func(ctx context.Context) error {
			return chromedp.Run(ctx,
				chromedp.MouseEvent(input.MousePressed, at.X0, at.Y, chromedp.ButtonLeft),
				chromedp.MouseEvent(input.MouseMoved, (at.X0+at.X1)/2, at.Y, chromedp.ButtonLeft),
				chromedp.MouseEvent(input.MouseMoved, at.X1, at.Y, chromedp.ButtonLeft),
				chromedp.MouseEvent(input.MouseReleased, at.X1, at.Y, chromedp.ButtonLeft),
				poll("the chart zooms in", fmt.Sprintf(`%s < %g`, span, 0.75*full)),
				chromedp.Evaluate(span, &res.Zoomed),
				// Where the drag was, by coordinates too: not a node of the
				// SVG, which may be redrawn in between.
				chromedp.MouseClickXY((at.X0+at.X1)/2, at.Y, chromedp.ClickCount(2)),
				poll("the chart zooms out", fmt.Sprintf(`%s >= %g`, span, full)),
				chromedp.Evaluate(span, &res.Unzoomed),
			)
		}),
	)
}
