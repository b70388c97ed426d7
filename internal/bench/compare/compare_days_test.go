package compare

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/sim"

	"github.com/shoal-lb/shoal/internal/bench"
)

func TestParseDays(t *testing.T) {
	days, err := parseDays("1998-06-30..1998-07-02")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"1998-06-30T08:00:00Z", "1998-07-01T08:00:00Z", "1998-07-02T08:00:00Z"}
	if len(days) != len(want) {
		t.Fatalf("days %v, want %v", days, want)
	}
	for i, d := range days {
		if d.Format(time.RFC3339) != want[i] {
			t.Errorf("day %d = %s, want %s", i, d.Format(time.RFC3339), want[i])
		}
	}
	for _, bad := range []string{"1998-06-30", "1998-07-02..1998-06-30", "x..1998-06-30", "1998-06-30..y"} {
		if _, err := parseDays(bad); err == nil {
			t.Errorf("parseDays(%q): no error", bad)
		}
	}
}

// day builds a day from its points: static, then comparedPolicies in order.
func day(name string, static int, pts ...sim.Point) dayRow {
	names := []string{"static", "seed-000", "seed-004", "hpa-style", "recommended", twinKey, predictiveKey}
	for i := range pts {
		pts[i].Name = names[i]
	}
	d := dayRow{Day: name, StaticInstances: static, Scalable: static > 1, Policies: pts,
		Reactive: []sim.Point{{Name: "reactive 60 %", InstanceSeconds: 40, ViolationSeconds: 50}}}
	d.judge()
	return d
}

func pt(inst, viol float64) sim.Point {
	return sim.Point{InstanceSeconds: inst, ViolationSeconds: viol}
}

func TestDaysAggregate(t *testing.T) {
	run := daysRun{Name: "local", Days: []dayRow{
		// recommended cheap and best; predictive beats reactive 60 % (50).
		day("d1", 4, pt(100, 0), pt(60, 10), pt(50, 20), pt(40, 60), pt(50, 5), pt(35, 80), pt(45, 40)),
		// recommended too expensive; predictive worse than reactive 60 %.
		day("d2", 4, pt(100, 0), pt(60, 10), pt(50, 20), pt(40, 30), pt(70, 0), pt(35, 80), pt(45, 60)),
		// one instance serves the peak: left out of the goal days.
		day("d3", 1, pt(100, 0), pt(100, 0), pt(100, 0), pt(100, 0), pt(100, 0), pt(100, 0), pt(100, 0)),
	}}
	if !run.Days[0].RecommendedHolds || !run.Days[0].PredictiveHolds {
		t.Errorf("d1: goals %v %v, want both to hold", run.Days[0].RecommendedHolds, run.Days[0].PredictiveHolds)
	}
	if run.Days[1].RecommendedHolds || run.Days[1].PredictiveHolds {
		t.Errorf("d2: goals %v %v, want neither to hold", run.Days[1].RecommendedHolds, run.Days[1].PredictiveHolds)
	}
	run.aggregate("")
	if len(run.Parts) != 1 {
		t.Fatalf("parts %d, want all days only", len(run.Parts))
	}
	all := run.Parts[0]
	rec := all.agg("recommended")
	// The median and the worst day are over d1 and d2 (5 and 0): d3 has
	// nothing to save.
	if rec.InstanceSeconds != 220 || rec.ViolationSeconds != 5 || rec.MedianViolations == nil || *rec.MedianViolations != 2.5 || rec.WorstDay != "d1" || rec.WorstViolations != 5 {
		t.Errorf("recommended aggregate = %+v", rec)
	}
	if got := rec.VsStatic; got != 220.0/300 {
		t.Errorf("recommended vs static = %v, want %v", got, 220.0/300)
	}
	// d1 and d2 go to recommended (fewest violations); d3, where every
	// policy runs the one instance, is nobody's win.
	won := 0
	for _, a := range all.Aggregate {
		won += a.DaysWon
	}
	if rec.DaysWon != 2 || won != 2 {
		t.Errorf("days won: recommended %d, all policies %d; want 2, 2", rec.DaysWon, won)
	}
	// Over the range predictive uses 190 instance-s; within that,
	// hpa-style (180, 90 violation-s) beats reactive 60 % (120, 150).
	if b := all.BestReactiveTotal; b == nil || b.Name != "hpa-style" || b.ViolationSeconds != 90 {
		t.Errorf("best reactive total = %+v, want hpa-style with 90 violation-s", b)
	}
	var goalDays *bench.Figure
	for _, f := range daysFigures(run) {
		if f.Name == "local: days recommended holds every goal, all days" {
			goalDays = &f
		}
	}
	if goalDays == nil || *goalDays.Value != 1 || *goalDays.BaselineValue != 2 || goalDays.Verdict != "FAIL" {
		t.Errorf("goal days figure = %+v, want 1 of 2 (d3 left out), FAIL", goalDays)
	}
}

func TestDaysSplit(t *testing.T) {
	run := daysRun{Name: "cloud", Days: []dayRow{
		// Tuned: both goals hold.
		day("1998-07-04", 4, pt(100, 0), pt(60, 10), pt(50, 20), pt(40, 60), pt(50, 5), pt(35, 80), pt(45, 40)),
		day("1998-07-05", 1, pt(100, 0), pt(200, 0), pt(100, 0), pt(100, 0), pt(100, 0), pt(100, 0), pt(100, 0)),
		// Untested: recommended too expensive, predictive loses.
		day("1998-07-06", 4, pt(100, 0), pt(60, 10), pt(50, 20), pt(40, 30), pt(70, 0), pt(35, 80), pt(45, 60)),
		day("1998-07-07", 1, pt(100, 0), pt(200, 0), pt(100, 0), pt(100, 0), pt(100, 0), pt(100, 0), pt(100, 0)),
		day("1998-07-08", 1, pt(100, 0), pt(200, 0), pt(100, 0), pt(100, 0), pt(100, 0), pt(100, 0), pt(100, 0)),
	}}
	run.aggregate("1998-07-05")
	if len(run.Parts) != 3 {
		t.Fatalf("parts %d, want all, tuned and untested", len(run.Parts))
	}
	all, tuned, untested := run.Parts[0], run.Parts[1], run.Parts[2]
	if tuned.Name != "tuned days (to 1998-07-05)" || untested.Name != "untested days (after 1998-07-05)" {
		t.Errorf("part names %q, %q", tuned.Name, untested.Name)
	}
	for _, c := range []struct {
		part               daysPart
		days               int
		scalable           string
		recHolds, predHold int
		recInst, recViol   float64
	}{
		{all, 5, "1998-07-04 1998-07-06", 1, 1, 420, 5},
		{tuned, 2, "1998-07-04", 1, 1, 150, 5},
		{untested, 3, "1998-07-06", 0, 0, 270, 0},
	} {
		p := c.part
		if p.Days != c.days || strings.Join(p.Scalable, " ") != c.scalable || p.RecommendedHolds != c.recHolds || p.PredictiveHolds != c.predHold {
			t.Errorf("%s: %d days, scalable %v, goal days %d/%d; want %d, %s, %d/%d", p.Name, p.Days, p.Scalable,
				p.RecommendedHolds, p.PredictiveHolds, c.days, c.scalable, c.recHolds, c.predHold)
		}
		if rec := p.agg("recommended"); rec.InstanceSeconds != c.recInst || rec.ViolationSeconds != c.recViol {
			t.Errorf("%s: recommended %+v, want %.0f instance-s, %.0f violation-s", p.Name, rec, c.recInst, c.recViol)
		}
	}
	// Untested: predictive (245 instance-s, 60 violation-s) against the
	// best reactive setting within it over these days only, hpa-style (240,
	// 30), not over all days.
	if b := untested.BestReactiveTotal; b == nil || b.Name != "hpa-style" || b.ViolationSeconds != 30 || b.InstanceSeconds != 240 {
		t.Errorf("untested best reactive = %+v, want hpa-style with 240 instance-s, 30 violation-s", b)
	}
	// The one-instance days are nobody's win: seed-000 is twice static there
	// and every other policy the same, but no day is counted for anyone.
	if got := untested.agg("recommended").DaysWon; got != 1 {
		t.Errorf("untested: recommended won %d days, want 1 (07-06)", got)
	}
	for _, a := range untested.Aggregate {
		if a.Policy != "recommended" && a.DaysWon != 0 {
			t.Errorf("untested: %s won %d days, want 0", a.Policy, a.DaysWon)
		}
	}
	figs := map[string]bench.Figure{}
	for _, f := range daysFigures(run) {
		figs[f.Name] = f
	}
	if f := figs["cloud: days predictive beats the best reactive setting within its instance-seconds, untested days (after 1998-07-05)"]; f.Value == nil || *f.Value != 0 || *f.BaselineValue != 1 || f.Verdict != "FAIL" {
		t.Errorf("untested predictive goal days = %+v, want 0 of 1, FAIL", f)
	}
	if f := figs["cloud: recommended instance-seconds, tuned days (to 1998-07-05)"]; f.Ratio == nil || *f.Ratio != 0.75 || f.Verdict != "FAIL" {
		t.Errorf("tuned recommended instance-seconds = %+v, want 0.75 of static, FAIL", f)
	}
	// Over the days that need more than one instance, recommended is at 0.5.
	if f := figs["cloud: recommended instance-seconds vs static, tuned days (to 1998-07-05), only the days that need more than one instance"]; f.Value == nil || *f.Value != 0.5 || f.Verdict != "PASS" {
		t.Errorf("tuned recommended instance-seconds, days needing more than one = %+v, want 0.5, PASS", f)
	}

	// A part with no day to judge has no goal-day verdict.
	run = daysRun{Name: "local", Days: run.Days[:2]}
	run.Days = append(run.Days, day("1998-07-07", 1, pt(100, 0), pt(200, 0), pt(100, 0), pt(100, 0), pt(100, 0), pt(100, 0), pt(100, 0)))
	run.aggregate("1998-07-05")
	for _, f := range partFigures(run.Name, run.Parts[2]) {
		if strings.HasPrefix(f.Name, "local: days ") && (f.Value != nil || f.Verdict != "") {
			t.Errorf("%s = %+v, want no value and no verdict", f.Name, f)
		}
	}
	if a := run.Parts[2].agg("recommended"); a.MedianViolations != nil || a.WorstDay != "" {
		t.Errorf("untested recommended = %+v, want no median and no worst day", a)
	}
	if _, err := json.Marshal(run.Parts); err != nil {
		t.Errorf("parts do not marshal: %v", err)
	}
	var md strings.Builder
	writeDaysMarkdown(&md, run)
	for _, want := range []string{"### tuned days (to 1998-07-05)", "### untested days (after 1998-07-05)",
		"untested days (after 1998-07-05): 1 days", "needs more than one instance: 0 (none)", "one instance serves the peak: nothing to save | left out"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
}

// TestLoadDayRows: -rows takes each day's rows at each delay from an earlier
// report, in the order asked, and says which day or delay it lacks.
func TestLoadDayRows(t *testing.T) {
	d := func(name string) dayRow {
		return day(name, 2, pt(100, 0), pt(100, 0), pt(50, 9), pt(50, 9), pt(60, 0), pt(50, 9), pt(50, 9))
	}
	rep := bench.Report{Name: "compare", Date: time.Date(2026, 11, 25, 13, 54, 0, 0, time.UTC), Machine: bench.Machine{Commit: "88b14c0"},
		Details: map[string]any{"runs": []daysRun{
			{Name: "local", StartDelay: "4.2s", Days: []dayRow{d("1998-07-07"), d("1998-07-08")}},
			{Name: "cloud", StartDelay: "3m30s", Days: []dayRow{d("1998-07-07"), d("1998-07-08")}},
		}}}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "compare.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	delays := []namedDelay{{"local", 4200 * time.Millisecond}, {"cloud", 210 * time.Second}}
	days, _ := parseDays("1998-07-08..1998-07-08")
	rows, about, err := loadDayRows(path, days, delays)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows["local"]) != 1 || rows["local"][0].Day != "1998-07-08" || len(rows["cloud"]) != 1 || rows["cloud"][0].Policies[4].InstanceSeconds != 60 {
		t.Errorf("rows %+v", rows)
	}
	if !strings.Contains(about, "commit 88b14c0") {
		t.Errorf("about %q does not name the commit", about)
	}
	days, _ = parseDays("1998-07-08..1998-07-09")
	if _, _, err := loadDayRows(path, days, delays); err == nil || !strings.Contains(err.Error(), "no row for 1998-07-09") {
		t.Errorf("a missing day: %v", err)
	}
	days, _ = parseDays("1998-07-08..1998-07-08")
	if _, _, err := loadDayRows(path, days, []namedDelay{{"cloud", time.Minute}}); err == nil || !strings.Contains(err.Error(), "no cloud run at start delay 1m0s") {
		t.Errorf("a missing delay: %v", err)
	}
}
