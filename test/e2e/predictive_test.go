package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
)

// seedRequestHistory writes the per-minute requests_per_second roll-ups of
// group web for the minutes of [from, to), as a shoal that had been running
// for days would have kept them.
func seedRequestHistory(t *testing.T, stateDir string, from, to time.Time, rate func(time.Time) float64) {
	t.Helper()
	recordSeries(t, stateDir, time.Minute, from, to, map[string]seriesFunc{
		"requests_per_second": func(m time.Time) (float64, bool) { return rate(m), true },
	})
}

// predictiveGroup tracks 50 % CPU p90 (which an idle group never reaches),
// with a forecast floor planned at 100 req/s per instance at 100 % CPU.
func predictiveGroup(mode string) groupSpec {
	return groupSpec{Name: "web", Min: 1, Max: 3, Drain: "2s", Extra: `    autoscale:
      target: {metric: cpu.p90, value: 50, scale_in_stabilization: 0s}
      predictive: {lookback: 2d, horizon: 10m, mode: ` + mode + `, capacity: 100}
`}
}

// dailyPeak is two days of history: the trickle's 20 req/s, and 150 req/s
// from 3 to 40 minutes after now's minute on each previous day. The forecast
// for the next 10 minutes sees that peak, and the floor is ⌈150 ÷ (100 × 50 %
// × 1.1)⌉ = 3 instances (the group's maximum, so a trend a little off
// changes nothing).
func dailyPeak(t *testing.T, e *shoalEnv) time.Time {
	now := time.Now().Truncate(time.Minute)
	seedRequestHistory(t, e.stateDir(), now.Add(-48*time.Hour-15*time.Minute), now, func(m time.Time) float64 {
		ahead := m.Sub(now) % (24 * time.Hour)
		if ahead < 0 {
			ahead += 24 * time.Hour
		}
		if ahead >= 3*time.Minute && ahead < 40*time.Minute {
			return 150
		}
		return 20
	})
	return now
}

// TestPredictiveScalesAheadOfTheForecastPeak: a live shoal whose history
// shows a daily peak a few minutes from now scales its idle group out to the
// forecast's floor before any load arrives, through a job of its own, and
// holds it there although the target would scale in; requests keep being
// served throughout.
func TestPredictiveScalesAheadOfTheForecastPeak(t *testing.T) {
	parallel(t) // waits for the forecast's scale-out, no load
	e := newEnv(t, "metrics: {warmup: 2s}\n", predictiveGroup("forecast_and_scale"))
	dailyPeak(t, e)
	e.start()
	e.waitInService("web", 1)
	tr := startTrickle(t, e)

	up := e.waitEvent("the forecast raises the floor", 60*time.Second, 0, accepted("predictive", "size"))
	if up.Recommendation != 3 || up.Current != 1 {
		t.Fatalf("predictive event %d → %d, want 1 → 3: %+v", up.Current, up.Recommendation, up)
	}
	if !strings.Contains(up.Reason, "floor 3 = ⌈forecast peak") || !strings.Contains(up.Reason, "d-1: 150.0") {
		t.Fatalf("the event does not explain the forecast: %s", up.Reason)
	}
	if cpu, ok := up.Values["cpu.p90"]; ok && cpu >= 50 {
		t.Fatalf("cpu.p90 was %v: the load, not the forecast, may have scaled out", cpu)
	}
	j, err := e.client().Job(context.Background(), up.JobID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if j.Source != "policy:predictive" {
		t.Fatalf("job %s source %q, want policy:predictive", j.ID, j.Source)
	}
	e.waitInService("web", 3)

	// Idle, the target alone would go back to 1; the floor holds 3.
	time.Sleep(5 * time.Second)
	for _, g := range e.status().Groups {
		if g.Name == "web" && (g.Desired != 3 || g.InService != 3) {
			t.Fatalf("after 5 idle seconds: desired %d, in service %d; want the floor's 3", g.Desired, g.InService)
		}
	}
	for _, ev := range e.events(api.EventsQuery{Group: "web", After: up.ID}) {
		if ev.Request != nil && ev.Outcome == "accepted" && ev.Recommendation < 3 {
			t.Fatalf("scaled in below the forecast floor: %+v", ev)
		}
	}
	tr.end()
	if n := tr.failed.Load(); n != 0 {
		t.Fatalf("%d of %d requests failed while pre-scaling: %v", n, n+tr.ok.Load(), tr.samples)
	}
	e.checkInSync("web")
}

// TestPredictiveForecastOnlyRecords: in forecast_only mode the same history
// gives a recorded decision saying what the forecast would have done, and
// the group stays as it is. Without history, the forecast says once that it
// is off and why.
func TestPredictiveForecastOnlyRecords(t *testing.T) {
	parallel(t) // waits for the recorded forecast, no load
	t.Run("forecast_only", func(t *testing.T) {
		e := newEnv(t, "metrics: {warmup: 2s}\n", predictiveGroup("forecast_only"))
		dailyPeak(t, e)
		e.start()
		e.waitInService("web", 1)
		ev := e.waitEvent("a forecast-only decision", 60*time.Second, 0, func(ev api.Event) bool {
			return ev.Rule == "predictive" && ev.Outcome == "forecast only"
		})
		if ev.Code != "forecast" || ev.Recommendation != 3 || ev.Request != nil ||
			!strings.Contains(ev.Reason, "mode forecast_only: would raise the floor from 1 to 3") {
			t.Fatalf("forecast-only decision: %+v", ev)
		}
		time.Sleep(3 * time.Second)
		for _, g := range e.status().Groups {
			if g.Name == "web" && g.Desired != 1 {
				t.Fatalf("forecast_only changed the group: desired %d, want 1", g.Desired)
			}
		}
	})
	t.Run("no history", func(t *testing.T) {
		e := newEnv(t, "metrics: {warmup: 2s}\n", predictiveGroup("forecast_and_scale"))
		e.start()
		e.waitInService("web", 1)
		ev := e.waitEvent("predictive says it is off", 60*time.Second, 0, func(ev api.Event) bool {
			return ev.Code == "predictive_off"
		})
		if !strings.Contains(ev.Reason, "need 1d10m") || !strings.Contains(ev.Reason, "the reactive policy acts alone") || ev.Request != nil {
			t.Fatalf("off decision: %+v", ev)
		}
		time.Sleep(3 * time.Second)
		n := 0
		for _, ev := range e.events(api.EventsQuery{Group: "web"}) {
			if ev.Code == "predictive_off" {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d predictive_off decisions recorded, want it said once", n)
		}
	})
}
