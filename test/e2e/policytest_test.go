package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "modernc.org/sqlite" // reads and seeds metrics.db

	"github.com/shoal-lb/shoal/internal/api"
)

// heavyCandidate is a policy whose replay over a day is long but allowed:
// 86,400 evaluations at 1 s, each scanning a 25-minute stabilization window
// of the seeded history (the group has 2 instances at 10 % CPU, so the
// target wants to scale in at every step), at most 130,896,000 samples in
// all (1,515 per evaluation at 1 s).
var heavyCandidate = []byte("interval: 1s\ntarget: {metric: cpu.avg, value: 50, scale_in_stabilization: 25m}\n")

// seededEnv starts a core for web whose metrics.db holds two days of history
// (10 s buckets for the last day, 1 min ones before) for the policy tests to
// replay. The core runs once first so that it creates the database.
func seededEnv(t *testing.T) *shoalEnv {
	t.Helper()
	// A scale-in every 10 minutes at most keeps a day's answer small.
	g := groupSpec{Name: "web", Min: 1, Max: 2, CooldownDn: "10m"}
	e := newEnv(t, "metrics: {warmup: 1s}\n", g)
	e.start()
	e.waitInService("web", 1)
	e.stop()

	db, err := sql.Open("sqlite", "file:"+filepath.Join(e.stateDir(), "metrics.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	now := time.Now().Add(-time.Minute).Truncate(time.Minute)
	for metric, v := range map[string]float64{"cpu.avg": 10, "size": 2, "ready": 2} {
		var id int64
		if err := tx.QueryRow(`INSERT INTO series (path) VALUES (?) ON CONFLICT (path) DO UPDATE SET path = excluded.path RETURNING id`, "web/"+metric).Scan(&id); err != nil {
			t.Fatal(err)
		}
		for _, lv := range []struct {
			table      string
			step       time.Duration
			from, till time.Time
		}{{"rollup_1m", time.Minute, now.Add(-48 * time.Hour), now.Add(-24 * time.Hour)}, {"rollup_10s", 10 * time.Second, now.Add(-24 * time.Hour), now}} {
			for at := lv.from; at.Before(lv.till); at = at.Add(lv.step) {
				if _, err := tx.Exec(`INSERT OR IGNORE INTO `+lv.table+` (series, t, n, v_avg, v_max) VALUES (?, ?, ?, ?, ?)`, id, at.Unix(), int(lv.step/time.Second), v, v); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.waitInService("web", 1)
	return e
}

// TestPolicyTestBoundedAndCancellable: a policy test that asks for more
// evaluations than allowed is refused at once with a JSON error naming the
// limit and what was asked; a long but allowed one stops as soon as its
// client goes away, and the core answers the next request at once.
func TestPolicyTestBoundedAndCancellable(t *testing.T) {
	parallel(t)
	e := seededEnv(t)
	c := e.client()

	// A day at 100 ms is 864,000 evaluations, and a day of a 12-hour
	// stabilization window 654,480,000 samples: refused before any work.
	for _, tc := range []struct {
		candidate string
		want      []string
	}{
		{"interval: 100ms\nrules:\n  - {metric: cpu.avg, above: 90, for: 1s, action: up}\n",
			[]string{"24h0m0s", "100ms", "864000 evaluations", "at most 86400", "at most 2h24m0s"}},
		{"interval: 1s\ntarget: {metric: cpu.avg, value: 50, scale_in_stabilization: 12h}\n",
			[]string{"86400 evaluations", "7575 samples", "12h0m0s", "654480000 in all", "at most 200000000", "at most 7h20m2s"}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		began := time.Now()
		_, err := c.PolicyTest(ctx, "web", 24*time.Hour, []byte(tc.candidate))
		cancel()
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
			t.Fatalf("a policy test over its bounds: %v, want HTTP 400 at once", err)
		}
		for _, want := range tc.want {
			if !strings.Contains(ae.ErrorResponse.Error, want) {
				t.Fatalf("the refusal %q does not say %q", ae.ErrorResponse.Error, want)
			}
		}
		if d := time.Since(began); d > 2*time.Second {
			t.Fatalf("the refusal took %s, want it at once", d)
		}
	}
	// The window bound still holds for the CLI too.
	if _, stderr, code := e.cli("policy", "test", "web", "--time", "25h"); code != 2 || !strings.Contains(stderr, "at most 24h0m0s") {
		t.Fatalf("shoal policy test --time 25h: exit %d, %s", code, stderr)
	}

	// A day of heavyCandidate is allowed and takes seconds; the client
	// gives up after 300 ms. The core says where the replay stopped: before
	// its end.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.PolicyTest(ctx, "web", 24*time.Hour, heavyCandidate)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a day-long policy test answered within 300ms (%v); it should still be running", err)
	}
	gone := time.Now()
	stopped := regexp.MustCompile(`msg="policy test stopped: the client went away" .*group=web window=24h0m0s after=(\S+) err="policy: replay stopped at (\S+) of \[\S+, (\S+)\]`)
	var m []string
	e.eventually("the core logs that the policy test stopped", 10*time.Second, func() error {
		if m = stopped.FindStringSubmatch(e.log.String()); m == nil {
			return errors.New("no such log line yet")
		}
		return nil
	})
	ran, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the replay stopped at %s of a day ending %s, %s after it began (its client left at 300ms; seen %s later)", m[2], m[3], ran, time.Since(gone).Round(time.Millisecond))
	if m[2] >= m[3] {
		t.Fatalf("the replay ran to its end (%s of a day ending %s): it did not stop with its client", m[2], m[3])
	}
	if ran > 5*time.Second {
		t.Fatalf("the replay ran %s, want it stopped soon after its client's 300ms timeout", ran)
	}

	// The core is free: a short test and a status answer at once.
	began := time.Now()
	if _, err := c.PolicyTest(context.Background(), "web", time.Minute, heavyCandidate); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("a 1-minute policy test and a status took %s after the long one was abandoned", d)
	}
}

// TestPolicyTestKeepsCollectorWriting: while day-long policy tests run back
// to back (two clients), the collector's 10 s buckets still reach
// metrics.db as soon as they end. The write latency (from a bucket's end
// until a reader sees its row) is measured for one bucket without a replay,
// for comparison in the log, then for two with them (each watch bounded:
// 11 s and 25 s hold that many).
func TestPolicyTestKeepsCollectorWriting(t *testing.T) {
	parallel(t)
	e := seededEnv(t)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(e.stateDir(), "metrics.db")+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// latencies watches the newest 10 s bucket of web/size for d, or until
	// it has seen n buckets written.
	latencies := func(d time.Duration, n int) []time.Duration {
		var out []time.Duration
		var last int64
		for end := time.Now().Add(d); time.Now().Before(end) && len(out) < n; time.Sleep(50 * time.Millisecond) {
			var newest sql.NullInt64
			if err := db.QueryRow(`SELECT max(r.t) FROM rollup_10s r JOIN series s ON s.id = r.series WHERE s.path = 'web/size'`).Scan(&newest); err != nil {
				t.Fatalf("read metrics.db: %v", err)
			}
			if newest.Int64 > last {
				if last > 0 {
					out = append(out, time.Since(time.Unix(newest.Int64, 0).Add(10*time.Second)))
				}
				last = newest.Int64
			}
		}
		return out
	}
	idle := latencies(11*time.Second, 1)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var replays, failures atomic.Int64
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Bounded by the watch below: each replay is one request.
			for ctx.Err() == nil {
				if _, err := e.client().PolicyTest(ctx, "web", 24*time.Hour, heavyCandidate); err == nil {
					replays.Add(1)
				} else if ctx.Err() == nil {
					failures.Add(1)
					t.Errorf("policy test: %v", err)
					return
				}
			}
		}()
	}
	busy := latencies(25*time.Second, 2)
	cancel()
	wg.Wait()

	summary := func(ls []time.Duration) string {
		if len(ls) == 0 {
			return "no bucket written"
		}
		s := slices.Clone(ls)
		slices.Sort(s)
		return fmt.Sprintf("%d buckets, median %s, max %s", len(s), s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
	}
	t.Logf("collector write latency without a replay: %s; during day-long policy tests (%d finished): %s", summary(idle), replays.Load(), summary(busy))
	if len(busy) < 1 {
		t.Fatalf("no 10 s bucket was written during 25s of policy tests: %s", summary(busy))
	}
	// A bucket is written at the first sample after it ends (1 s), within
	// the writer's own time; 5 s allows for a loaded machine.
	if m := slices.Max(busy); m > 5*time.Second {
		t.Fatalf("a 10 s bucket reached metrics.db %s after its end during policy tests (without them: %s)", m, summary(idle))
	}
}
