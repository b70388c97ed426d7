package bench

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// View is what shoal showed of a group at one moment: its status, its
// metrics over a short window, and the policy's newest decision.
type View struct {
	At        time.Time `json:"time"`
	Desired   int       `json:"desired"`
	InService int       `json:"in_service"`
	Ready     int       `json:"ready"` // in the aggregates: in service and past warmup
	CPUAvg    *float64  `json:"cpu_avg"`
	CPUP90    *float64  `json:"cpu_p90"`
	RPS       *float64  `json:"requests_per_second"`
	P99ms     *float64  `json:"latency_p99_ms"`
	Err       string    `json:"error,omitempty"`
}

// Monitor polls a group of a running shoal and keeps the policy's decisions
// seen so far.
type Monitor struct {
	API    *API
	Group  string
	Window time.Duration // of the metrics shown
	// Events are every decision seen, oldest first; Scaled those that
	// filed a job.
	Events []Event
	Scaled []Event
	last   int64
}

// Poll reads the group's status, metrics and new decisions. A failed read is
// in View.Err: a monitor keeps going through a slow second.
func (m *Monitor) Poll(ctx context.Context) View {
	v := View{At: time.Now()}
	var errs []string
	if st, err := m.API.Group(ctx, m.Group); err != nil {
		errs = append(errs, err.Error())
	} else {
		v.Desired, v.InService = st.Desired, st.InService
	}
	if d, err := m.API.Metrics(ctx, m.Group, m.Window, ""); err != nil {
		errs = append(errs, err.Error())
	} else {
		v.Ready, v.CPUAvg, v.CPUP90, v.RPS, v.P99ms = d.Ready, d.CPU.Avg, d.CPU.P90, d.RequestsPerSecond, d.Latency.P99
	}
	if err := m.PollEvents(ctx); err != nil {
		errs = append(errs, err.Error())
	}
	v.Err = strings.Join(errs, "; ")
	return v
}

func (m *Monitor) PollEvents(ctx context.Context) error {
	for range 10 { // at most 1,000 a poll; the rest next time
		evs, err := m.API.EventsAfter(ctx, m.Group, m.last, 100)
		if err != nil {
			return err
		}
		// Oldest first whatever order the API lists them in.
		slices.SortFunc(evs, func(a, b Event) int { return cmp.Compare(a.ID, b.ID) })
		for _, e := range evs {
			if e.ID <= m.last {
				continue
			}
			m.last = e.ID
			m.Events = append(m.Events, e)
			if e.JobID != "" {
				m.Scaled = append(m.Scaled, e)
			}
		}
		if len(evs) < 100 {
			return nil
		}
	}
	return nil
}

// Last returns the newest decision seen, if any.
func (m *Monitor) Last() (Event, bool) {
	if len(m.Events) == 0 {
		return Event{}, false
	}
	return m.Events[len(m.Events)-1], true
}

// Describe renders a decision in one line: what decided, on which values,
// and what came of it.
func Describe(e Event) string {
	var vals []string
	for _, k := range slices.Sorted(maps.Keys(e.Values)) {
		// ready and size come with every decision; Current says as much.
		if k != "ready" && k != "size" || len(e.Values) == 1 {
			vals = append(vals, fmt.Sprintf("%s=%.1f", k, e.Values[k]))
		}
	}
	out := string(e.Outcome)
	switch {
	case e.JobID != "":
		out = "job " + e.JobID
	case e.Code != "":
		out += " (" + string(e.Code) + ")"
	}
	return fmt.Sprintf("%s %s %d→%d %s: %s", e.Time.Local().Format("15:04:05"), e.Rule, e.Current, e.Recommendation, strings.Join(vals, " "), out)
}

// WaitView polls mon every 500 ms until ok holds.
func WaitView(ctx context.Context, mon *Monitor, timeout time.Duration, ok func(View) bool) error {
	deadline := time.Now().Add(timeout)
	for {
		v := mon.Poll(ctx)
		if ok(v) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %d in service, %d desired, %d ready, cpu.avg %s %s", timeout, v.InService, v.Desired, v.Ready, F1(v.CPUAvg), v.Err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
