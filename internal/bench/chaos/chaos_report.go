package chaos

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/bench"
)

// chaosDetails is the report's raw data.
type chaosDetails struct {
	Events string      `json:"events"`
	Rate   float64     `json:"rate"`
	Conns  int         `json:"conns"`
	Budget int64       `json:"requests_per_run_at_least"`
	Runs   []*chaosRun `json:"runs"`
}

// kindStats is what the requests overlapping one kind of event saw.
type kindStats struct {
	Kind          string         `json:"kind"`
	Label         string         `json:"label"`
	Count         int            `json:"count"`
	Skipped       string         `json:"skipped,omitempty"`
	Requests      int64          `json:"requests"`
	GETs          int64          `json:"gets"`
	POSTs         int64          `json:"posts"`
	FailedGETs    int64          `json:"failed_gets"`
	FailedPOSTs   int64          `json:"failed_posts"`
	Classes       map[string]int `json:"failure_classes,omitempty"`
	ClientRetries int64          `json:"client_resends"`
	P99ms         *float64       `json:"p99_ms"`
	MaxMs         *float64       `json:"max_ms"`
	// For kills and stops, over the occurrences: median and maximum.
	RemovedMedianMS     *float64 `json:"removed_median_ms,omitempty"`
	RemovedMaxMS        *float64 `json:"removed_max_ms,omitempty"`
	ReplacementMedianMS *float64 `json:"replacement_median_ms,omitempty"`
	ReplacementMaxMS    *float64 `json:"replacement_max_ms,omitempty"`
}

// postAudit compares what the client saw of each POST with how many times
// the instances logged it.
type postAudit struct {
	Sent     int64 `json:"sent"`
	Answered int64 `json:"answered_2xx"`
	Failed   int64 `json:"failed"`
	// Replayed POSTs reached an instance more than once: the goal is 0.
	Replayed int64 `json:"replayed"`
	// FailedButSeen reached an instance once although the client saw it
	// fail (the instance died after logging it): not a replay.
	FailedButSeen int64 `json:"failed_but_seen_once"`
	// AnsweredUnseen were answered 2xx but logged nowhere: must be 0, or
	// the audit itself is broken.
	AnsweredUnseen int64 `json:"answered_but_unseen"`
}

// failureRec is one failed request, for explaining a regression.
type failureRec struct {
	AtS    float64  `json:"at_s"`
	Ms     float64  `json:"ms"`
	Method string   `json:"method"`
	Class  string   `json:"class"`
	Events []string `json:"events,omitempty"`
	ID     string   `json:"id,omitempty"`
}

// maxFailureRecs bounds the failures kept in a report.
const maxFailureRecs = 200

// analyze fills run's statistics from the requests and the POST log counts.
func analyze(run *chaosRun, recs []reqRec, seen map[string]int) {
	secs := func(ns int64) float64 { return float64(ns) / 1e9 }
	overlaps := func(r reqRec, w chaosWindow) bool { return secs(r.start) < w.To && secs(r.end) > w.From }
	run.Requests = int64(len(recs))
	byKind := map[string]*kindStats{}
	lat := map[string][]float64{}
	var order []string
	for _, ev := range run.Events {
		k := byKind[ev.Kind]
		if k == nil {
			k = &kindStats{Kind: ev.Kind, Label: eventLabels[ev.Kind], Classes: map[string]int{}}
			byKind[ev.Kind] = k
			order = append(order, ev.Kind)
		}
		k.Count++
		if ev.Skipped != "" {
			k.Skipped = ev.Skipped
		}
	}
	total := &kindStats{Kind: "total", Label: "whole run", Classes: map[string]int{}}
	rest := &kindStats{Kind: "rest", Label: "at rest", Classes: map[string]int{}}
	add := func(k *kindStats, r reqRec) {
		k.Requests++
		if r.post {
			k.POSTs++
		} else {
			k.GETs++
		}
		if r.attempts > 1 {
			k.ClientRetries++
		}
		if r.fail != "" {
			if r.post {
				k.FailedPOSTs++
			} else {
				k.FailedGETs++
			}
			k.Classes[r.fail]++
		}
		lat[k.Kind] = append(lat[k.Kind], float64(r.end-r.start)/1e6)
	}
	for _, r := range recs {
		add(total, r)
		if secs(r.start) >= run.Rest.From && secs(r.end) <= run.Rest.To {
			add(rest, r)
		}
		var in []string
		counted := map[string]bool{}
		for _, ev := range run.Events {
			if ev.Skipped == "" && overlaps(r, ev.Window) {
				in = append(in, fmt.Sprintf("%s-%d", ev.Kind, ev.N))
				if !counted[ev.Kind] {
					counted[ev.Kind] = true
					add(byKind[ev.Kind], r)
				}
			}
		}
		if r.fail != "" && len(run.Failures) < maxFailureRecs {
			method := "GET"
			if r.post {
				method = "POST"
			}
			run.Failures = append(run.Failures, failureRec{AtS: secs(r.start), Ms: float64(r.end-r.start) / 1e6, Method: method, Class: r.fail, Events: in, ID: r.id})
		}
		if r.post {
			run.Posts.Sent++
			n := seen[r.id]
			switch {
			case n > 1:
				run.Posts.Replayed++
			case r.fail == "" && n == 0:
				run.Posts.AnsweredUnseen++
			case r.fail != "" && n == 1:
				run.Posts.FailedButSeen++
			}
			if r.fail == "" {
				run.Posts.Answered++
			} else {
				run.Posts.Failed++
			}
		}
	}
	slices.SortFunc(run.Failures, func(a, b failureRec) int {
		if a.AtS < b.AtS {
			return -1
		}
		return 1
	})
	finish := func(k *kindStats) {
		l := lat[k.Kind]
		k.P99ms, k.MaxMs = bench.Num(bench.Quantile(l, 0.99)), bench.Num(bench.Quantile(l, 1))
		var removed, replaced []float64
		for _, ev := range run.Events {
			if ev.Kind != k.Kind {
				continue
			}
			if ev.RemovedMS != nil {
				removed = append(removed, *ev.RemovedMS)
			}
			if ev.ReplacementMS != nil {
				replaced = append(replaced, *ev.ReplacementMS)
			}
		}
		if len(removed) > 0 {
			k.RemovedMedianMS, k.RemovedMaxMS = bench.Num(bench.Median(removed)), bench.Num(slices.Max(removed))
		}
		if len(replaced) > 0 {
			k.ReplacementMedianMS, k.ReplacementMaxMS = bench.Num(bench.Median(replaced)), bench.Num(slices.Max(replaced))
		}
	}
	finish(total)
	finish(rest)
	run.Total = *total
	run.Kinds = []kindStats{*rest}
	for _, kind := range order {
		finish(byKind[kind])
		run.Kinds = append(run.Kinds, *byKind[kind])
	}
}

func runLabel(r *chaosRun) string {
	if r.PostPercent == 0 {
		return "GET run"
	}
	return fmt.Sprintf("%d%% POST run", r.PostPercent)
}

// chaosFigures turns the runs into the report's figures and tables.
func chaosFigures(det *chaosDetails) ([]bench.Figure, string) {
	var figs []bench.Figure
	var md strings.Builder
	for _, run := range det.Runs {
		label := runLabel(run)
		rest := run.Kinds[0]
		for _, k := range run.Kinds[1:] {
			if k.Skipped != "" {
				continue
			}
			allowed, goal := 0.0, "0"
			if k.Kind == "kill" {
				allowed, goal = float64(k.Count), fmt.Sprintf("<= %d (1 per kill)", k.Count)
			}
			v := float64(k.FailedGETs)
			figs = append(figs, bench.Figure{
				Name: fmt.Sprintf("%s: failed GETs during %s (×%d)", label, k.Label, k.Count), Value: bench.Num(v),
				Goal: goal, Verdict: bench.Verdict(bench.Num(v), func(f float64) bool { return f <= allowed }),
				Note: fmt.Sprintf("%d requests; p99 %s ms vs %s ms at rest", k.Requests, bench.FmtNum(k.P99ms), bench.FmtNum(rest.P99ms)),
			})
		}
		if run.PostPercent > 0 {
			v := float64(run.Posts.Replayed)
			figs = append(figs, bench.Figure{
				Name: label + ": POSTs replayed", Value: bench.Num(v), Goal: "0",
				Verdict: bench.Verdict(bench.Num(v), func(f float64) bool { return f == 0 }),
				Note: fmt.Sprintf("%d POSTs sent, %d failed (%d of those reached an instance once), %d answered but logged nowhere",
					run.Posts.Sent, run.Posts.Failed, run.Posts.FailedButSeen, run.Posts.AnsweredUnseen),
			})
		}

		fmt.Fprintf(&md, "## %s: %d requests in %.0f s\n\n", label, run.Requests, run.Seconds)
		md.WriteString("| event | × | requests | failed GETs | failed POSTs | p99 | max | client resends | out of rotation (median / max) | replacement in service (median / max) | failures by class |\n")
		md.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
		rows := append(append([]kindStats{}, run.Kinds...), run.Total)
		for _, k := range rows {
			count := fmt.Sprint(k.Count)
			if k.Kind == "rest" || k.Kind == "total" {
				count = ""
			}
			if k.Skipped != "" {
				fmt.Fprintf(&md, "| %s | %s | left out: %s | | | | | | | | |\n", k.Label, count, k.Skipped)
				continue
			}
			fmt.Fprintf(&md, "| %s | %s | %d | %d | %d | %s ms | %s ms | %d | %s | %s | %s |\n",
				k.Label, count, k.Requests, k.FailedGETs, k.FailedPOSTs, bench.FmtNum(k.P99ms), bench.FmtNum(k.MaxMs), k.ClientRetries,
				pairMS(k.RemovedMedianMS, k.RemovedMaxMS), pairMS(k.ReplacementMedianMS, k.ReplacementMaxMS), classes(k.Classes))
		}
		if run.PostPercent > 0 {
			p := run.Posts
			fmt.Fprintf(&md, "\nPOST audit (instance logs): %d sent, %d answered 2xx, %d failed; **%d replayed** (reached an instance twice or more); %d failed after reaching an instance once; %d answered but logged nowhere.\n",
				p.Sent, p.Answered, p.Failed, p.Replayed, p.FailedButSeen, p.AnsweredUnseen)
		}
		if len(run.Failures) > 0 {
			md.WriteString("\nFailures (first 20; all in the JSON up to 200):\n\n| at | took | method | class | during |\n|---:|---:|---|---|---|\n")
			for _, f := range run.Failures[:min(20, len(run.Failures))] {
				fmt.Fprintf(&md, "| %.2f s | %.0f ms | %s | %s | %s |\n", f.AtS, f.Ms, f.Method, f.Class, strings.Join(f.Events, ", "))
			}
		}
		md.WriteString("\nEvents:\n\n")
		for _, ev := range run.Events {
			d := time.Duration((ev.Window.To - ev.Window.From) * float64(time.Second)).Round(100 * time.Millisecond)
			line := fmt.Sprintf("- %.1f s %s %d (%v)", ev.Window.From, ev.Kind, ev.N, d)
			if ev.Instance != "" {
				line += fmt.Sprintf(": %s out of rotation after %s ms, replaced after %s ms", ev.Instance, bench.FmtNum(ev.RemovedMS), bench.FmtNum(ev.ReplacementMS))
			}
			if ev.Detail != "" {
				line += ": " + ev.Detail
			}
			if ev.Skipped != "" {
				line += ": left out, " + ev.Skipped
			}
			md.WriteString(line + "\n")
		}
		md.WriteString("\n")
	}
	md.WriteString("A request counts for every event type its lifetime overlapped, so rows do not add up to the total. " +
		"\"at rest\" is the quiet window before the first event. \"client resends\" are requests Go's client sent again on a new connection " +
		"because their kept-alive connection closed before any answer (allowed for idempotent requests by RFC 9112 §9.3.1; never done for POST); " +
		"they are not failures, but a stricter client (wrk) would count them as errors.\n")
	return figs, md.String()
}

func pairMS(a, b *float64) string {
	if a == nil {
		return "-"
	}
	return fmt.Sprintf("%s / %s ms", bench.FmtNum(a), bench.FmtNum(b))
}

func classes(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
