package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/source"
	"github.com/shoal-lb/shoal/internal/testprom"
)

// promOutage is how long Prometheus is down in TestScaleOnPrometheus: the
// issue's 30 s, which SHOAL_E2E_PROM_OUTAGE may shorten (the source's
// max_age is 3 s, so any outage over a few seconds proves the same).
func promOutage(t *testing.T) time.Duration {
	if s := os.Getenv("SHOAL_E2E_PROM_OUTAGE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 10*time.Second {
			t.Fatalf("SHOAL_E2E_PROM_OUTAGE=%q: want a duration of at least 10s", s)
		}
		return d
	}
	return 30 * time.Second
}

// TestScaleOnPrometheus: a group scales on a real Prometheus's query of an
// exporter's queue length plus a command's backlog, a formula over both:
// out when the queue grows past the target per instance, in when it drains;
// while Prometheus is down the policy holds the size (on_missing: hold) and
// says why, the command source and the instances go on unaffected; a policy
// test replaying Prometheus's history makes the decisions the live loop
// made.
func TestScaleOnPrometheus(t *testing.T) {
	parallel(t)
	exp := testprom.NewExporter(t)
	exp.Set("jobs_queued", 0)
	prom := testprom.Start(t, []string{exp.Addr}, time.Second)
	backlog := filepath.Join(t.TempDir(), "backlog")
	setBacklog := func(n int) {
		if err := os.WriteFile(backlog, []byte(strconv.Itoa(n)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	setBacklog(0)

	top := fmt.Sprintf(`metrics:
  warmup: 1s
  sources:
    - {name: queue_depth, prometheus: {url: %q, query: "sum(jobs_queued)"}, interval: 1s, timeout: 1s, on_missing: hold}
    - {name: backlog, command: [cat, %q], interval: 1s, timeout: 1s}
`, prom.URL, backlog)
	g := groupSpec{Name: "web", Min: 1, Max: 4, Extra: `    autoscale:
      interval: 1s
      target: {metric: "queue_depth + backlog", value: 10, scale_in_stabilization: 3s, max_step: {up: 10, down: 10}, period: 1s}
`}
	e := newEnv(t, top, g)
	e.start()
	e.waitInService("web", 1)
	c := e.client()
	ctx := context.Background()
	began := time.Now()

	size := func(want int, within time.Duration) {
		t.Helper()
		e.eventually(fmt.Sprintf("web at %d instances in service", want), within, func() error {
			for _, gs := range e.status().Groups {
				if gs.Name != "web" {
					continue
				}
				n := 0
				for _, in := range gs.Instances {
					if in.State == "in-service" {
						n++
					}
				}
				if gs.Desired != want || n != want {
					return fmt.Errorf("desired %d, %d in service", gs.Desired, n)
				}
				return nil
			}
			return errors.New("no group web")
		})
	}

	// The queue grows past the target (10 per instance): 35 → 4.
	exp.Set("jobs_queued", 35)
	size(4, 60*time.Second)
	// It drains: back to 1.
	exp.Set("jobs_queued", 0)
	size(1, 60*time.Second)
	// At 1 for longer than the scale-in stabilization (3 s) and a few
	// intervals: a dip of a second or two, as a loaded machine made it,
	// is one the simulator's steps may not land in.
	time.Sleep(5 * time.Second)
	// The command's backlog, through the same formula: 25 → 3.
	setBacklog(25)
	size(3, 60*time.Second)

	// Prometheus goes down. The formula reads queue_depth, whose newest
	// value is soon older than its max_age (3 s): the target holds the size
	// and the decision says why; requests are served all along, and the
	// command source is read as before.
	tr := startTrickle(t, e)
	lastEvent := int64(0)
	if evs := e.events(api.EventsQuery{Group: "web"}); len(evs) > 0 {
		lastEvent = evs[len(evs)-1].ID
	}
	outage := promOutage(t)
	prom.Stop()
	down := time.Now()
	missing := e.waitEvent("a decision that queue_depth is missing", 15*time.Second, lastEvent, func(ev api.Event) bool {
		return ev.Code == "missing"
	})
	for _, want := range []string{"source queue_depth has no value newer than max_age 3s", "on_missing: hold", "the size holds"} {
		if !strings.Contains(missing.Reason, want) {
			t.Errorf("the missing decision's reason %q does not say %q", missing.Reason, want)
		}
	}
	srcs, err := c.Sources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := srcs[1].Last
	time.Sleep(time.Until(down.Add(outage)))
	srcs, err = c.Sources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if srcs[0].Errors == 0 || !strings.Contains(srcs[0].LastError, "connection refused") {
		t.Errorf("queue_depth while Prometheus is down: %+v; want its errors counted, the reason given", srcs[0])
	}
	if srcs[1].LastError != "" || srcs[1].Last == nil || before == nil || !srcs[1].Last.After(before.Add(outage/2)) {
		t.Errorf("backlog while Prometheus is down: %+v; want it read as before", srcs[1])
	}
	for _, ev := range e.events(api.EventsQuery{Group: "web", After: lastEvent}) {
		if ev.Request != nil {
			t.Errorf("a decision during the outage asked for a job: %s %s", ev.Code, ev.Reason)
		}
	}
	if code, body := httpGetUnix(t, e, "/metrics"); code != 200 || !regexp.MustCompile(`shoal_source_errors_total\{source="queue_depth"\} [1-9]`).MatchString(body) {
		t.Errorf("/metrics: HTTP %d, no error count of queue_depth", code)
	}
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	tr.end()
	if tr.failed.Load() > 0 || tr.ok.Load() == 0 {
		t.Errorf("requests during the outage: %d ok, %d failed (%v)", tr.ok.Load(), tr.failed.Load(), tr.samples)
	}
	// Prometheus answers again and the policy acts again: the backlog
	// drains, back to 1.
	setBacklog(0)
	size(1, 60*time.Second)

	// The live loop's scaling decisions, and a policy test's over the same
	// time: the same sizes, in the same order.
	var live []int
	for _, ev := range e.events(api.EventsQuery{Group: "web"}) {
		if ev.Outcome == "accepted" && ev.Request != nil {
			live = append(live, ev.Recommendation)
		}
	}
	// The replay steps from the window's start every interval; it reaches
	// the live loop's last decision once the window ends past it by more
	// than an interval and the stabilization window.
	time.Sleep(5 * time.Second)
	window := time.Since(began).Round(time.Second) + 10*time.Second
	replayed, err := c.PolicyTest(ctx, "web", window, nil)
	if err != nil {
		t.Fatalf("policy test: %v", err)
	}
	// The replay reads the group's size from its recorded series, which
	// follows a job by the time its instances take to start or drain, and
	// steps at its own phase of the interval: it may ask for a size once
	// more, or find the group at it already where the live loop, a fraction
	// of a second earlier, asked for it. So the sizes it asked for or found
	// the group at (min_size, max_size, steady), in order, are what must be
	// the live loop's.
	var again []int
	for _, d := range replayed {
		switch {
		case d.Time.Before(began):
		case d.Request != nil:
			again = append(again, d.Recommendation)
		case d.Code == "min_size" || d.Code == "max_size" || d.Code == "steady":
			again = append(again, d.Current)
		}
	}
	t.Logf("live scaling: %v; replayed over Prometheus's history: %v", live, again)
	if !slices.Equal(live, []int{4, 1, 3, 1}) {
		t.Errorf("live scaling %v, want [4 1 3 1]", live)
	}
	again = slices.Compact(again)
	if !slices.Equal(again, live) {
		t.Errorf("policy test %v, want the live loop's %v", again, live)
		for _, ev := range e.events(api.EventsQuery{Group: "web"}) {
			t.Logf("live %s %s %s → %d: %s", ev.Time.Format("15:04:05.000"), ev.Outcome, ev.Code, ev.Recommendation, ev.Reason)
		}
		for _, d := range replayed {
			t.Logf("replayed %s %s %s → %d: %s", d.Time.Format("15:04:05.000"), d.Outcome, d.Code, d.Recommendation, d.Reason)
		}
	}

	// policy simulate over the same minutes, on the sources' recorded
	// values (Prometheus's history, the command's as shoal read it) and a
	// trace of the trickle's load: the scalings the live loop made.
	from, to := began.UTC().Truncate(time.Minute), time.Now().UTC().Truncate(time.Minute).Add(time.Minute)
	trace := "timestamp_utc,requests\n"
	for m := from; m.Before(to); m = m.Add(time.Minute) {
		trace += m.Format(time.RFC3339) + ",60\n"
	}
	tracePath := filepath.Join(t.TempDir(), "trickle.csv")
	if err := os.WriteFile(tracePath, []byte(trace), 0o600); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := e.cli("policy", "simulate", "--trace", tracePath, "--from", from.Format(time.RFC3339), "--to", to.Format(time.RFC3339),
		"--capacity", "100", "--start-delay", "3s", "-o", "json")
	var sim struct {
		Policies []struct {
			Scalings []struct {
				Time time.Time `json:"time"`
				To   int       `json:"to"`
			} `json:"scalings"`
		} `json:"policies"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &sim) != nil || len(sim.Policies) != 1 {
		t.Fatalf("policy simulate: exit %d: %s%s", code, out, stderr)
	}
	var simulated []int
	for _, sc := range sim.Policies[0].Scalings {
		simulated = append(simulated, sc.To)
	}
	t.Logf("simulated on the recorded sources: %v", simulated)
	if !slices.Equal(simulated, live) {
		t.Errorf("policy simulate %v, want the live loop's %v:\n%s", simulated, live, out)
	}
}

// TestSourceBadInput: a PromQL syntax error is refused at validate by
// Prometheus's parser; a formula naming an unknown source at validate with
// FILE:LINE:COL; a query giving several series, and a command printing
// junk, are read as errors that the source's status and the decision say.
func TestSourceBadInput(t *testing.T) {
	parallel(t)
	exp := testprom.NewExporter(t)
	exp.Set(`jobs_queued{queue="a"}`, 1)
	exp.Set(`jobs_queued{queue="b"}`, 2)
	prom := testprom.Start(t, []string{exp.Addr}, time.Second)
	junk := filepath.Join(t.TempDir(), "junk.sh")
	if err := os.WriteFile(junk, []byte("#!/bin/sh\necho lots of jobs\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	top := func(query, metric string) (string, groupSpec) {
		return fmt.Sprintf(`metrics:
  sources:
    - {name: queue_depth, prometheus: {url: %q, query: %q}, interval: 1s, timeout: 1s}
    - {name: backlog, command: [%q], interval: 1s, timeout: 1s}
`, prom.URL, query, junk), groupSpec{Name: "web", Min: 1, Max: 3, Extra: fmt.Sprintf(`    autoscale:
      target: {metric: %q, value: 10}
`, metric)}
	}

	extra, g := top("sum(jobs_queued", "queue_depth")
	e := newEnv(t, extra, g)
	_, stderr, code := e.cli("validate")
	if code == 0 || !strings.Contains(stderr, "metrics.sources[0].prometheus.query: prometheus refused the query \"sum(jobs_queued\": bad_data") {
		t.Errorf("validate of a PromQL syntax error: exit %d, %s", code, stderr)
	}

	extra, g = top("sum(jobs_queued)", "queue_depth / max(sise, 1)")
	e.writeConfig(extra, g)
	_, stderr, code = e.cli("validate")
	if code == 0 || !regexp.MustCompile(`shoal\.yaml:\d+:\d+: groups\[0\]\.autoscale\.target\.metric: metric "queue_depth / max\(sise, 1\)": unknown name sise`).MatchString(stderr) {
		t.Errorf("validate of a formula naming an unknown source: exit %d, %s", code, stderr)
	}
	// A schedule's guard and the predictive floor take sources and
	// formulas too, and name an unknown one at FILE:LINE:COL.
	extra, g = top("sum(jobs_queued)", "queue_depth")
	g.Extra += `      schedule: [{cron: "0 8 * * *", duration: 1h, min_size: 2, when: {metric: "backlog / max(size, 1)", above: 5}}]
      predictive: {metric: queue_dept, per_instance: 20}
`
	e.writeConfig(extra, g)
	_, stderr, code = e.cli("validate")
	if code == 0 || !regexp.MustCompile(`shoal\.yaml:\d+:\d+: groups\[0\]\.autoscale\.predictive\.metric: unknown metric "queue_dept"; known: queue_depth, backlog,`).MatchString(stderr) ||
		strings.Contains(stderr, "schedule") {
		t.Errorf("validate of a predictive metric naming an unknown source (and a good guard): exit %d, %s", code, stderr)
	}

	// A query of two series (no instance of shoal's among them), and a
	// command printing junk: read as errors, which the policy says.
	extra, g = top("jobs_queued", "queue_depth + backlog")
	e.writeConfig(extra, g)
	e.eventually("Prometheus's first scrape", 30*time.Second, func() error {
		_, err := source.Read(context.Background(), config.Source{Name: "q", Timeout: time.Second,
			Prometheus: &config.PromSource{URL: prom.URL, Query: "count(jobs_queued) == 2"}})
		return err
	})
	e.start()
	e.waitInService("web", 1)
	c := e.client()
	e.eventually("both sources' errors", 30*time.Second, func() error {
		srcs, err := c.Sources(context.Background())
		if err != nil {
			return err
		}
		if len(srcs) != 2 || !strings.Contains(srcs[0].LastError, "aggregate it to one") || !strings.Contains(srcs[1].LastError, `printed "lots of jobs"; want a number`) {
			return fmt.Errorf("%+v", srcs)
		}
		return nil
	})
	if out, stderr, code := e.cli("sources"); code != 0 || !strings.Contains(out, "queue_depth") || !strings.Contains(out, "aggregate it to one") || !strings.Contains(out, `printed "lots of jobs"`) {
		t.Errorf("shoal sources: exit %d, %s%s", code, out, stderr)
	}
	ev := e.waitEvent("the target's missing decision", 30*time.Second, 0, func(ev api.Event) bool { return ev.Code == "missing" })
	if !strings.Contains(ev.Reason, "source queue_depth has no value") || !strings.Contains(ev.Reason, "several for instance") {
		t.Errorf("missing decision: %q; want the source and its error", ev.Reason)
	}
}
