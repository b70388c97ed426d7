package main

import (
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/sim"
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
	run.aggregate()
	rec := run.agg("recommended")
	if rec.InstanceSeconds != 220 || rec.ViolationSeconds != 5 || rec.MedianViolations != 0 || rec.WorstDay != "d1" || rec.WorstViolations != 5 {
		t.Errorf("recommended aggregate = %+v", rec)
	}
	if got := rec.VsStatic; got != 220.0/300 {
		t.Errorf("recommended vs static = %v, want %v", got, 220.0/300)
	}
	// d1 and d2 go to recommended (fewest violations); d3 has none for
	// every policy, and seed-000 comes first among the cheapest.
	if rec.DaysWon != 2 || run.agg("seed-000").DaysWon != 1 {
		t.Errorf("days won: recommended %d, seed-000 %d; want 2, 1", rec.DaysWon, run.agg("seed-000").DaysWon)
	}
	// Over the range predictive uses 190 instance-s; within that,
	// hpa-style (180, 90 violation-s) beats reactive 60 % (120, 150).
	if b := run.BestReactiveTotal; b == nil || b.Name != "hpa-style" || b.ViolationSeconds != 90 {
		t.Errorf("best reactive total = %+v, want hpa-style with 90 violation-s", b)
	}
	var goalDays *Figure
	for _, f := range daysFigures(run) {
		if f.Name == "local: days recommended holds every goal" {
			goalDays = &f
		}
	}
	if goalDays == nil || *goalDays.Value != 1 || *goalDays.BaselineValue != 2 || goalDays.Verdict != "FAIL" {
		t.Errorf("goal days figure = %+v, want 1 of 2 (d3 left out), FAIL", goalDays)
	}
}
