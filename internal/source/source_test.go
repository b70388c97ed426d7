package source

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/metrics"
	"github.com/shoal-lb/shoal/internal/testprom"
)

func cmdSource(name string, argv ...string) config.Source {
	return config.Source{Name: name, Command: argv, Interval: time.Second, Timeout: 2 * time.Second, OnMissing: config.SourceHold}
}

func TestCommandSource(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		out  string
		want Reading
	}{
		{"42\n", Reading{Value: 42, Single: true}},
		{`{"value": 2.5}`, Reading{Value: 2.5, Single: true}},
		{`{"instances": {"web-001": 3, "web-002": 5}}`, Reading{Instances: map[string]float64{"web-001": 3, "web-002": 5}}},
	} {
		r, err := Read(ctx, cmdSource("c", "printf", "%s", tc.out))
		if err != nil || fmt.Sprint(r) != fmt.Sprint(tc.want) {
			t.Errorf("%q: Read = %v, %v; want %v", tc.out, r, err, tc.want)
		}
	}
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"printf", "lots"}, `source c: command printf: printed "lots"; want a number, {"value": N} or {"instances": {"NAME": N, ...}}`},
		{[]string{"printf", "NaN"}, "is not a finite number"},
		{[]string{"sh", "-c", "echo queue unreachable >&2; exit 3"}, "source c: command sh: exit status 3; stderr: queue unreachable"},
		{[]string{"sleep", "5"}, "no answer within 2s"},
		{[]string{"/nonexistent/queue-depth"}, "no such file or directory"},
	} {
		_, err := Read(ctx, cmdSource("c", tc.argv...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.argv, err, tc.want)
		}
	}
}

func TestHTTPSource(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"queues": {"jobs": {"depth": 17}}, "per": {"web-001": 1, "web-002": 3}, "name": "x"}`)
	}))
	defer srv.Close()
	src := func(path string) config.Source {
		return config.Source{Name: "h", HTTP: &config.HTTPSource{URL: srv.URL + "/stats?key=secret", JSONPath: path}, Timeout: 2 * time.Second}
	}
	ctx := context.Background()
	if r, err := Read(ctx, src(".queues.jobs.depth")); err != nil || r.Value != 17 {
		t.Errorf("depth: %v, %v", r, err)
	}
	if r, err := Read(ctx, src(".per")); err != nil || r.Instances["web-002"] != 3 {
		t.Errorf("per: %v, %v", r, err)
	}
	_, err := Read(ctx, src(".name"))
	if err == nil || !strings.Contains(err.Error(), "gave x; want a number") {
		t.Errorf(".name: err = %v", err)
	}
	if err != nil && strings.Contains(err.Error(), "secret") {
		t.Errorf("the error shows the URL's query: %v", err)
	}
}

// TestHangingSourceDelaysNothing: a source whose command hangs past its
// timeout at every read delays neither another source's reads nor the
// collector's own samples, which run beside it.
func TestHangingSourceDelaysNothing(t *testing.T) {
	hang := cmdSource("stuck", "sleep", "60")
	hang.Interval, hang.Timeout = time.Second, time.Second
	fast := cmdSource("fast", "echo", "1")
	fast.Interval, fast.Timeout = 200*time.Millisecond, 200*time.Millisecond
	set := NewSet(config.Metrics{Sources: []config.Source{hang, fast}, Retention: config.Retention{Ring: time.Hour}}, nil, nil)

	var mu sync.Mutex
	var samples []time.Time
	col, err := metrics.Open(metrics.Options{
		Metrics: config.Metrics{Interval: 100 * time.Millisecond, Retention: config.Retention{Ring: time.Minute}},
		Source:  noTargets{}, DB: filepath.Join(t.TempDir(), "m.db"),
		AfterSample: func(now time.Time) {
			mu.Lock()
			samples = append(samples, time.Now())
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer col.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); col.Run(ctx) }()
	go func() { defer wg.Done(); set.Run(ctx) }()
	const run = 4 * time.Second
	start := time.Now()
	time.Sleep(run)
	cancel()
	wg.Wait()
	if took := time.Since(start); took > run+2*time.Second {
		t.Errorf("stopping took %s: a hung read held the Set", took-run)
	}

	mu.Lock()
	defer mu.Unlock()
	var worst time.Duration
	for i := 1; i < len(samples); i++ {
		worst = max(worst, samples[i].Sub(samples[i-1]))
	}
	t.Logf("collector: %d samples in %s, longest gap %s", len(samples), run, worst)
	if len(samples) < int(run/(100*time.Millisecond))/2 || worst > 700*time.Millisecond {
		t.Errorf("collector: %d samples, longest gap %s, while a source hung: delayed", len(samples), worst)
	}
	pts := set.points("fast", "", start, time.Now())
	if len(pts) < int(run/fast.Interval)/2 {
		t.Errorf("fast source: %d reads in %s at %s: delayed by the hanging one", len(pts), run, fast.Interval)
	}
	st := set.Statuses()[0]
	if st.Errors < 2 || !strings.Contains(st.LastError, "no answer within 1s") {
		t.Errorf("stuck source: %d errors, last %q; want the timeout counted", st.Errors, st.LastError)
	}
}

type noTargets struct{}

func (noTargets) Names() []string           { return []string{"web"} }
func (noTargets) Targets() []metrics.Target { return nil }

// TestPrometheusSource reads a real Prometheus scraping a real exporter:
// one sample, one per instance, and each bad answer a clear error.
func TestPrometheusSource(t *testing.T) {
	exp := testprom.NewExporter(t)
	exp.Set("jobs_queued", 12)
	exp.Set(`load{who="web-001"}`, 2)
	exp.Set(`load{who="web-002"}`, 4)
	prom := testprom.Start(t, []string{exp.Addr}, time.Second)
	src := func(q string) config.Source {
		return config.Source{Name: "p", Prometheus: &config.PromSource{URL: prom.URL, Query: q}, Interval: time.Second, Timeout: 5 * time.Second}
	}
	ctx := context.Background()
	// Wait for the first scrape.
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := Read(ctx, src("jobs_queued"))
		if err == nil && r.Single && r.Value == 12 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no scrape within 30s: %v %v", r, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	r, err := Read(ctx, src(`label_replace(load, "instance", "$1", "who", "(.*)")`))
	if err != nil || r.Instances["web-001"] != 2 || r.Instances["web-002"] != 4 {
		t.Errorf("per instance: %v, %v", r, err)
	}
	set := NewSet(config.Metrics{Retention: config.Retention{Ring: time.Hour}}, func() []Instance {
		return []Instance{{Group: "web", Name: "web-001", Addr: "127.0.0.1:10001", InService: true},
			{Group: "web", Name: "web-002", InService: true}, {Group: "api", Name: "api-001", InService: true}}
	}, nil)
	if got, per, err := set.split("p", r); got[seriesKey("p", "web")] != 3 || len(got) != 1 || !per || err != nil {
		t.Errorf("split = %v, %v, %v; want web's average 3 and nothing for api", got, per, err)
	}
	// One sample keeps its target's instance label, which is no instance
	// of shoal's: it is the value for every group.
	r, err = Read(ctx, src("jobs_queued"))
	if got, per, err := set.split("p", r); got[seriesKey("p", "")] != 12 || per || err != nil {
		t.Errorf("split(jobs_queued) = %v, %v, %v; want 12 for all", got, per, err)
	}
	r, err = Read(ctx, src(`label_replace(load, "instance", "x-$1", "who", "(.*)")`))
	if _, _, err := set.split("p", r); err == nil || !strings.Contains(err.Error(), "none of them an instance of shoal") {
		t.Errorf("split(unmatched instances) err = %v", err)
	}

	for _, tc := range []struct{ query, want string }{
		{"load", `gave 2 series, several for instance ` + exp.Addr + `; aggregate it to one (sum(...)) or by (instance)`},
		{"jobs_queued[1m]", "gave a matrix; want an instant vector"},
		{"nothing_here", "gave no sample"},
		{"sum(jobs_queued", "prometheus refused the query"},
	} {
		_, err := Read(ctx, src(tc.query))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.query, err, tc.want)
		}
	}

	// Validation asks the server's parser.
	if reached, err := CheckQuery(ctx, src("sum(jobs_queued")); !reached || !errors.As(err, new(*RefusedError)) {
		t.Errorf("CheckQuery(syntax error) = %v, %v", reached, err)
	}
	if reached, err := CheckQuery(ctx, src("sum(jobs_queued)")); !reached || err != nil {
		t.Errorf("CheckQuery(good) = %v, %v", reached, err)
	}
	down := src("sum(jobs_queued")
	down.Prometheus.URL = "http://127.0.0.1:1"
	if reached, err := CheckQuery(ctx, down); reached || err == nil {
		t.Errorf("CheckQuery(unreachable) = %v, %v; want not reached", reached, err)
	}

	// The past, as a policy test replays it.
	time.Sleep(3 * time.Second)
	rs, err := QueryRange(ctx, src("jobs_queued"), time.Now().Add(-time.Minute), time.Now(), time.Second)
	if err != nil || len(rs) < 3 || rs[len(rs)-1].Value != 12 {
		t.Errorf("QueryRange = %d steps, %v", len(rs), err)
	}
}

func TestBearerFromFile(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("Authorization")
		http.Error(w, "no", http.StatusUnauthorized)
	}))
	defer srv.Close()
	src := config.Source{Name: "p", Timeout: time.Second,
		Prometheus: &config.PromSource{URL: srv.URL, Query: "up", Auth: &config.PromAuth{BearerFile: tok}}}
	_, err := Read(context.Background(), src)
	if got != "Bearer s3cret" {
		t.Errorf("Authorization = %q", got)
	}
	if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "401") {
		t.Errorf("err = %v; want the 401 without the token", err)
	}
	// From the environment, and basic auth's password likewise.
	t.Setenv("SHOAL_TEST_PROM_TOKEN", "fr0m-env")
	src.Prometheus.Auth = &config.PromAuth{BearerEnv: "SHOAL_TEST_PROM_TOKEN"}
	if _, err := Read(context.Background(), src); got != "Bearer fr0m-env" || strings.Contains(err.Error(), "fr0m-env") {
		t.Errorf("Authorization = %q, err %v", got, err)
	}
	src.Prometheus.Auth = &config.PromAuth{Basic: &config.PromBasic{Username: "shoal", PasswordEnv: "SHOAL_TEST_PROM_UNSET"}}
	if _, err := Read(context.Background(), src); err == nil || !strings.Contains(err.Error(), "environment variable SHOAL_TEST_PROM_UNSET is empty or unset") {
		t.Errorf("unset password_env: err = %v", err)
	}
}

// TestFormulaHistory: a formula over a source and the group's own metric
// is computed where both are fresh, and a stale source makes it missing.
func TestFormulaHistory(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	q := cmdSource("queue_depth", "true")
	q.Interval = 10 * time.Second
	set := NewSet(config.Metrics{Sources: []config.Source{q}, Retention: config.Retention{Ring: time.Hour}}, nil, nil)
	set.mu.Lock()
	for i := 60; i >= 20; i -= 10 {
		set.add(seriesKey("queue_depth", ""), metrics.Point{T: now.Add(-time.Duration(i) * time.Second), V: float64(100 - i)}, now)
	}
	set.mu.Unlock()
	base := fakeBase{"size": func(t time.Time) float64 { return 4 }}
	h := set.ForGroup("web", base)
	pts := h.Points("queue_depth / max(size, 1)", now.Add(-time.Minute), now)
	if len(pts) == 0 {
		t.Fatal("no points")
	}
	// At now-20s the queue was 80, the size 4; the last formula point is
	// the last size sample within the queue's max_age (30 s) of its read.
	for _, p := range pts {
		if p.T.Equal(now.Add(-20*time.Second)) && p.V != 20 {
			t.Errorf("at -20s: %v, want 20", p.V)
		}
		if now.Sub(p.T) < 0 || p.T.After(now.Add(-20*time.Second).Add(30*time.Second)) {
			t.Errorf("point at %s: past the queue's max_age", p.T)
		}
	}
	if _, _, missing := h.Missing("queue_depth / max(size, 1)", now); missing {
		t.Errorf("missing at now, 20s after a read with max_age 30s")
	}
	src, why, missing := h.Missing("queue_depth / max(size, 1)", now.Add(15*time.Second))
	if !missing || src.Name != "queue_depth" || !strings.Contains(why, "no value newer than max_age 30s") {
		t.Errorf("35s after the last read: %v %q %v", src.Name, why, missing)
	}
	if ins, per := h.Inputs("queue_depth / max(size, 1)"); strings.Join(ins, ",") != "queue_depth,size" || per {
		t.Errorf("Inputs = %v, %v", ins, per)
	}
}

// fakeBase is a group's own history, one sample a second.
type fakeBase map[string]func(time.Time) float64

func (b fakeBase) Points(path string, from, to time.Time) []metrics.Point {
	f, ok := b[path]
	if !ok {
		return nil
	}
	var out []metrics.Point
	for t := from.Truncate(time.Second); !t.After(to); t = t.Add(time.Second) {
		if !t.Before(from) {
			out = append(out, metrics.Point{T: t, V: f(t)})
		}
	}
	return out
}

// TestPerInstanceMatching: a command printing per-instance JSON, read by a
// Set, is matched to shoal's instances by name, by address and by bare
// host; each group's value is the average over its in-service instances,
// and a key naming none of them is ignored.
func TestPerInstanceMatching(t *testing.T) {
	src := config.Source{Name: "load", Interval: time.Second, Timeout: 5 * time.Second,
		Command: []string{"printf", `{"instances": {"web-001": 2, "127.0.0.1:10002": 4, "web-003": 100, "192.0.2.7": 10, "db-1": 99}}`}}
	set := NewSet(config.Metrics{Sources: []config.Source{src}, Retention: config.Retention{Ring: time.Hour}}, func() []Instance {
		return []Instance{
			{Group: "web", Name: "web-001", Addr: "127.0.0.1:10001", InService: true},
			{Group: "web", Name: "web-002", Addr: "127.0.0.1:10002", InService: true},
			{Group: "web", Name: "web-003", Addr: "127.0.0.1:10003"}, // starting: not counted
			{Group: "api", Name: "api-001", Addr: "192.0.2.7:8080", InService: true},
		}
	}, nil)
	now := time.Now()
	set.readOnce(context.Background(), src, now)
	st := set.Statuses()[0]
	if st.LastError != "" || !st.PerInstance {
		t.Fatalf("status %+v; want a per-instance reading", st)
	}
	for group, want := range map[string]float64{"web": 3, "api": 10} {
		if pts := set.points("load", group, now, now); len(pts) != 1 || pts[0].V != want {
			t.Errorf("%s: %v, want %v", group, pts, want)
		}
	}
}

// TestPrometheusPerInstance: a real Prometheus scraping two exporters that
// stand for shoal's instances (as it would scrape the instances' own
// /metrics): the query keeps the instance label, the scrape target's
// host:port, which matches each instance by its address.
func TestPrometheusPerInstance(t *testing.T) {
	a, b := testprom.NewExporter(t), testprom.NewExporter(t)
	a.Set("inflight", 2)
	b.Set("inflight", 6)
	prom := testprom.Start(t, []string{a.Addr, b.Addr}, time.Second)
	src := config.Source{Name: "inflight", Prometheus: &config.PromSource{URL: prom.URL, Query: "inflight"}, Interval: time.Second, Timeout: 5 * time.Second}
	set := NewSet(config.Metrics{Sources: []config.Source{src}, Retention: config.Retention{Ring: time.Hour}}, func() []Instance {
		return []Instance{{Group: "web", Name: "web-001", Addr: a.Addr, InService: true}, {Group: "web", Name: "web-002", Addr: b.Addr, InService: true}}
	}, nil)
	deadline := time.Now().Add(30 * time.Second)
	for {
		now := time.Now()
		set.readOnce(context.Background(), src, now)
		pts := set.points("inflight", "web", now, now)
		if len(pts) == 1 && pts[0].V == 4 && set.Statuses()[0].PerInstance {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("web's inflight %v (status %+v); want the average 4 of its instances' 2 and 6, matched by address", pts, set.Statuses()[0])
		}
		time.Sleep(200 * time.Millisecond)
	}
}
