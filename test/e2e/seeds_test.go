package e2e

import (
	"bufio"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/jobrun"
	_ "modernc.org/sqlite"
)

// seriesFunc is a metric's value at t; ok false leaves t out.
type seriesFunc func(t time.Time) (v float64, ok bool)

// recordSeries writes roll-ups of group web's metrics, one per step (10 s
// or 1 min, the two levels shoal keeps) for the buckets of [from, to), into
// the state directory's metrics.db before shoal starts: what a running
// shoal records (internal/metrics/db.go), read back like any history.
// shoal creates its tables the same way, IF NOT EXISTS.
func recordSeries(t *testing.T, stateDir string, step time.Duration, from, to time.Time, series map[string]seriesFunc) {
	t.Helper()
	table := map[time.Duration]string{10 * time.Second: "rollup_10s", time.Minute: "rollup_1m"}[step]
	if table == "" {
		t.Fatalf("recordSeries: no roll-up level of %s", step)
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", filepath.Join(stateDir, "metrics.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, stmt := range []string{
		`CREATE TABLE IF NOT EXISTS series (id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE) STRICT`,
		`CREATE TABLE IF NOT EXISTS ` + table + ` (series INTEGER NOT NULL, t INTEGER NOT NULL, n INTEGER NOT NULL,
			v_avg REAL NOT NULL, v_max REAL NOT NULL, PRIMARY KEY (series, t)) STRICT, WITHOUT ROWID`,
	} {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for path, f := range series {
		var id int64
		if err := tx.QueryRow(`INSERT INTO series (path) VALUES (?) RETURNING id`, "web/"+path).Scan(&id); err != nil {
			t.Fatal(err)
		}
		for b := from.Truncate(step); b.Before(to); b = b.Add(step) {
			if v, ok := f(b); ok {
				if _, err := tx.Exec(`INSERT INTO `+table+` (series, t, n, v_avg, v_max) VALUES (?, ?, ?, ?, ?)`, id, b.Unix(), int(step/time.Second), v, v); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// seedExample is a seed policy as examples/ writes it: the group's bounds,
// plans and cooldown, and its autoscale section as a candidate policy file.
type seedExample struct {
	spec       groupSpec
	policyFile string
}

func loadSeedExample(t *testing.T, name string) seedExample {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			MinSize   int            `yaml:"min_size"`
			MaxSize   int            `yaml:"max_size"`
			Plans     map[string]int `yaml:"plans"`
			Cooldown  string         `yaml:"cooldown"`
			Autoscale yaml.Node      `yaml:"autoscale"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil || len(doc.Groups) != 1 {
		t.Fatalf("%s: %v (%d groups)", name, err, len(doc.Groups))
	}
	g := doc.Groups[0]
	cd := g.Cooldown
	if !strings.HasSuffix(cd, "s") {
		cd += "s" // an integer: seconds
	}
	spec := groupSpec{Name: "web", Min: g.MinSize, Max: g.MaxSize, CooldownUp: cd, CooldownDn: cd}
	if len(g.Plans) > 0 {
		// The ladder's order is its sizes'.
		names := slices.SortedFunc(maps.Keys(g.Plans), func(a, b string) int { return g.Plans[a] - g.Plans[b] })
		var ps []string
		for _, n := range names {
			ps = append(ps, fmt.Sprintf("%s: %d", n, g.Plans[n]))
		}
		spec.Plans = "{" + strings.Join(ps, ", ") + "}"
	}
	pol, err := yaml.Marshal(map[string]*yaml.Node{"autoscale": &g.Autoscale})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(file, pol, 0o600); err != nil {
		t.Fatal(err)
	}
	return seedExample{spec: spec, policyFile: file}
}

// replayed runs `shoal policy test web --policy FILE --time 2h -o json`
// and returns the decisions that requested a job, and every decision.
func replayed(t *testing.T, e *shoalEnv, file string) (requests, all []api.Event) {
	t.Helper()
	out, stderr, code := e.cli("policy", "test", "web", "--policy", file, "--time", "2h", "-o", "json")
	if code != 0 {
		t.Fatalf("shoal policy test: exit %d: %s", code, stderr)
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev api.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("policy test output line %q: %v", sc.Text(), err)
		}
		all = append(all, ev)
		if ev.Request != nil {
			requests = append(requests, ev)
		}
	}
	return requests, all
}

// alternate is a per-10s series swinging between lo and hi.
func alternate(lo, hi float64) func(time.Time) float64 {
	return func(t time.Time) float64 {
		if t.Unix()/10%2 == 0 {
			return lo
		}
		return hi
	}
}

// phases builds a series from consecutive phases starting at from: each
// lasts its duration, the last one ends the series.
func phases(from time.Time, ps ...phase) seriesFunc {
	return func(t time.Time) (float64, bool) {
		start := from
		for _, p := range ps {
			if !t.Before(start) && t.Before(start.Add(p.d)) {
				return p.f(t), true
			}
			start = start.Add(p.d)
		}
		return 0, false
	}
}

type phase struct {
	d time.Duration
	f func(time.Time) float64
}

func steady(v float64) func(time.Time) float64 { return func(time.Time) float64 { return v } }

// wantRequest is a request of rule, of kind, at a time in [lo, hi) after
// the replay's start or, with after set, exactly after the previous one.
type wantRequest struct {
	rule   string
	kind   jobrun.Kind
	lo, hi time.Duration
	after  time.Duration
}

// checkRequests asserts that the requests of got before end are want's.
func checkRequests(t *testing.T, name string, f, end time.Time, got []api.Event, want []wantRequest) {
	t.Helper()
	var lines []string
	var in []api.Event
	for _, ev := range got {
		if ev.Time.Before(end) {
			in = append(in, ev)
			lines = append(lines, fmt.Sprintf("%s %s %s: %s", ev.Time.Sub(f), ev.Rule, ev.Request.Kind, ev.Reason))
		}
	}
	t.Logf("%s: requests replayed:\n%s", name, strings.Join(lines, "\n"))
	bad := len(in) != len(want)
	for i := 0; !bad && i < len(want); i++ {
		w, ev := want[i], in[i]
		at := ev.Time.Sub(f)
		ok := ev.Rule == w.rule && ev.Request.Kind == w.kind
		if w.after > 0 {
			ok = ok && ev.Time.Sub(in[i-1].Time) == w.after
		} else {
			ok = ok && at >= w.lo && at < w.hi
		}
		bad = !ok
	}
	if bad {
		var ws []string
		for _, w := range want {
			if w.after > 0 {
				ws = append(ws, fmt.Sprintf("%s %s %s after the previous", w.rule, w.kind, w.after))
			} else {
				ws = append(ws, fmt.Sprintf("%s %s in [%s, %s)", w.rule, w.kind, w.lo, w.hi))
			}
		}
		t.Errorf("%s: requests replayed:\n%s\nwant:\n%s", name, strings.Join(lines, "\n"), strings.Join(ws, "\n"))
	}
}

// rawFloat is a number printed with more digits than a person reads.
var rawFloat = regexp.MustCompile(`\d\.\d{4,}`)

// TestSeedPoliciesReplay replays the seed policies exactly as
// examples/seed-000.yaml and examples/seed-004.yaml write them with the real
// `shoal policy test` against a recorded CPU series, and checks that they
// request what the seeds' own logic would, when it would.
//
// F is two hours ago, where the replay starts; the policy test evaluates at
// F + δ + k × interval, δ under a minute (shoal's start), so each first
// decision of a kind is expected in a window and the next ones exactly a
// cooldown later. The replay never scales: the group stays at the recorded
// size, 3.
func TestSeedPoliciesReplay(t *testing.T) {
	parallel(t) // replays a recorded series, no wall-clock bound, no load
	t.Run("seed-004", func(t *testing.T) {
		ex := loadSeedExample(t, "seed-004.yaml")
		e := newEnv(t, "", ex.spec)
		now := time.Now().Truncate(10 * time.Second)
		f, end := now.Add(-2*time.Hour), now.Add(-10*time.Minute)
		// CPU swinging 15–45 (30 on average) for 50 minutes, 90 for 10,
		// then swinging 5–40 (22.5 on average): half the samples are
		// above 35 throughout, as on a real, noisy load.
		cpu := phases(f.Add(-30*time.Minute), phase{50 * time.Minute, alternate(15, 45)}, phase{10 * time.Minute, steady(90)},
			phase{80 * time.Minute, alternate(5, 40)})
		three := phases(f.Add(-30*time.Minute), phase{140 * time.Minute, steady(3)})
		recordSeries(t, e.stateDir(), 10*time.Second, f.Add(-30*time.Minute), end, map[string]seriesFunc{"cpu.avg": cpu, "size": three, "ready": three})
		e.start()
		reqs, all := replayed(t, e, ex.policyFile)
		checkRequests(t, "seed 004", f, end, reqs, []wantRequest{
			// CDPLowCPUAlarm: the 25-minute average is 30 < 35 from the start.
			{rule: "cdp-down", kind: "size", lo: 0, hi: time.Minute},
			// CDPHighCPUAlarm: the 1-minute average passes 75 once the
			// minute is mostly the 90 % load that began at F+20m.
			{rule: "cdp-out", kind: "size", lo: 20*time.Minute + 30*time.Second, hi: 22 * time.Minute},
			{rule: "cdp-out", kind: "size", after: 5 * time.Minute}, // CDPOut's cooldown 300
			// The 25-minute average falls below 35 once about 4.5 minutes
			// of the 90 % load are left in it (F+50m20s to F+50m30s).
			{rule: "cdp-down", kind: "size", lo: 50 * time.Minute, hi: 51*time.Minute + 30*time.Second},
			{rule: "cdp-down", kind: "size", after: 25 * time.Minute}, // CDPDown's cooldown 1500
			{rule: "cdp-down", kind: "size", after: 25 * time.Minute},
		})
		for _, ev := range all {
			if rawFloat.MatchString(ev.Reason) {
				t.Errorf("reason prints a raw float: %q", ev.Reason)
			}
		}
		// The reason a person reads: the statistic, rounded.
		out, _, _ := e.cli("policy", "test", "web", "--policy", ex.policyFile, "--time", "2h")
		if !regexp.MustCompile(`cdp-down: cpu\.avg average over 25m is \d+(\.\d)?, below 35; remove: 1`).MatchString(out) {
			t.Errorf("policy test table has no rounded cdp-down reason:\n%s", out)
		}
		// The previous example's `for: 25m` (every sample below 35) never
		// scales in on this load.
		old := filepath.Join(t.TempDir(), "for.yaml")
		if err := os.WriteFile(old, []byte("interval: 1m\nrules:\n  - {name: cdp-down, metric: cpu.avg, below: 35, for: 25m, action: {remove: 1}}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if reqs, _ := replayed(t, e, old); len(reqs) > 0 && reqs[0].Time.Before(end) {
			t.Errorf("for: 25m scaled in at %s on a load swinging across 35", reqs[0].Time.Sub(f))
		}
	})

	t.Run("seed-000", func(t *testing.T) {
		ex := loadSeedExample(t, "seed-000.yaml")
		e := newEnv(t, "", ex.spec)
		now := time.Now().Truncate(10 * time.Second)
		f, end := now.Add(-2*time.Hour), now.Add(-10*time.Minute)
		// Idle at 1 % (the script's -gt 1 keeps it), 5–25 % (15 on
		// average), 80 %, then idle at 0.5 %.
		cpu := phases(f.Add(-10*time.Minute), phase{30 * time.Minute, steady(1)}, phase{24 * time.Minute, alternate(5, 25)},
			phase{29 * time.Minute, steady(80)}, phase{37 * time.Minute, steady(0.5)})
		three := phases(f.Add(-10*time.Minute), phase{120 * time.Minute, steady(3)})
		recordSeries(t, e.stateDir(), 10*time.Second, f.Add(-10*time.Minute), end, map[string]seriesFunc{"cpu.avg": cpu, "size": three, "ready": three})
		e.start()
		reqs, _ := replayed(t, e, ex.policyFile)
		checkRequests(t, "seed 000", f, end, reqs, []wantRequest{
			// No down while idle at 1 % (rounded, not > 1); the 5-minute
			// average enters 1–20 10 s after the 15 % load begins at F+20m,
			// and the cron (every 2 minutes) sees it at its next run.
			{rule: "scale-down", kind: "down", lo: 20 * time.Minute, hi: 22*time.Minute + 20*time.Second},
			// The 540 s cooldown: the first run at least 9 minutes later.
			{rule: "scale-down", kind: "down", after: 10 * time.Minute},
			{rule: "scale-down", kind: "down", after: 10 * time.Minute},
			// 80 % from F+44m: above 50 from F+46m44s, but the cooldown
			// holds it to the run 10 minutes after the last down.
			{rule: "scale-up", kind: "up", after: 10 * time.Minute},
			{rule: "scale-up", kind: "up", after: 10 * time.Minute},
			{rule: "scale-up", kind: "up", after: 10 * time.Minute},
			// Idle at 0.5 % from F+73m: the average crosses 1–20 within the
			// cooldown, then stays at or under 1: no down.
		})
	})
}
