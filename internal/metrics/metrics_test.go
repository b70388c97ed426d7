package metrics

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy"
)

func TestPercentile(t *testing.T) {
	tests := []struct {
		vals []float64
		p    float64
		want float64
	}{
		{[]float64{7}, 0.99, 7},
		{[]float64{1, 2}, 0.75, 2}, // round(1.5) = 2
		{[]float64{1, 2}, 0.5, 1},
		{[]float64{1, 2, 3, 4}, 0.75, 3},
		{[]float64{1, 2, 3, 4}, 0.90, 4},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.90, 9},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.95, 10}, // round(9.5) = 10
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.01, 1},  // rank 0 clamps to the first
	}
	for _, tt := range tests {
		if got := percentile(tt.vals, tt.p); got != tt.want {
			t.Errorf("percentile(%v, %v) = %v, want %v", tt.vals, tt.p, got, tt.want)
		}
		// Every value weighing 1: the same rank.
		ws := make([]weighted, len(tt.vals))
		for i, v := range tt.vals {
			ws[i] = weighted{v, 1}
		}
		if got := weightedPercentile(ws, tt.p); got != tt.want {
			t.Errorf("weightedPercentile(%v weighing 1, %v) = %v, want %v", tt.vals, tt.p, got, tt.want)
		}
	}
	if got := percentile(nil, 0.5); !math.IsNaN(got) {
		t.Errorf("percentile of nothing = %v, want NaN", got)
	}
	s, ok := summarize([]float64{40, 10, 30, 20})
	if want := (summary{avg: 25, min: 10, max: 40, p75: 30, p90: 40, p95: 40, p99: 40}); !ok || s != want {
		t.Errorf("summarize = %+v, %v; want %+v", s, ok, want)
	}
	if _, ok := summarize(nil); ok {
		t.Error("summarize of nothing is ok")
	}
}

func TestReadStat(t *testing.T) {
	// This very process, read the way the scanner does (the parsing is
	// proc.ParseStat's, tested there).
	s := newProcScanner("/proc")
	st, ok := s.readStat(fmt.Sprint(os.Getpid()))
	if !ok || st.Pgid <= 0 || st.RSSPages <= 0 {
		t.Errorf("own stat = %+v, %v", st, ok)
	}
}

func TestReadCgroup(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("cpu.stat", "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n")
	write("memory.current", "1048576\n")
	u, err := readCgroup(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := (usage{cpu: 2500 * time.Millisecond, rss: 1 << 20}); u != want {
		t.Errorf("readCgroup = %+v, want %+v", u, want)
	}
	write("cpu.stat", "user_usec 1\n")
	if _, err := readCgroup(dir); err == nil || !strings.Contains(err.Error(), "no usage_usec") {
		t.Errorf("cpu.stat without usage_usec: %v", err)
	}
	if _, err := readCgroup(filepath.Join(dir, "nope")); err == nil {
		t.Error("missing cgroup read fine")
	}
}

// TestKeyStats: a backend's own line is keyed with server "", and frontends,
// which share names with backends, are left out.
func TestKeyStats(t *testing.T) {
	got := keyStats([]haproxy.ServerStat{
		{Type: haproxy.TypeFrontend, Backend: "web", Name: "FRONTEND", Sessions: 9},
		{Type: haproxy.TypeServer, Backend: "web", Name: "web-001", Sessions: 4},
		{Type: haproxy.TypeBackend, Backend: "web", Name: "BACKEND", Sessions: 5},
	})
	want := map[statKey]int{{"web", ""}: 5, {"web", "web-001"}: 4}
	if len(got) != len(want) {
		t.Fatalf("keyStats = %+v, want sessions %v", got, want)
	}
	for k, n := range want {
		if got[k].Sessions != n {
			t.Errorf("keyStats[%v].Sessions = %d, want %d", k, got[k].Sessions, n)
		}
	}
	if delta(10, 15) != 5 || delta(10, 3) != 3 {
		t.Error("delta does not treat a decrease as a counter restart")
	}
}

func TestRing(t *testing.T) {
	r := newRing(4)
	t0 := time.Unix(1000, 0)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	if _, ok := r.oldest(); ok {
		t.Error("empty ring has an oldest tick")
	}
	for i := range 6 {
		vals := map[string]float64{"a": float64(i)}
		if i%2 == 0 {
			vals["b"] = float64(10 * i)
		}
		if i == 1 {
			vals["c"] = 1
		}
		r.append(at(i), vals)
	}
	// Ticks 2..5 remain.
	if o, _ := r.oldest(); !o.Equal(at(2)) {
		t.Errorf("oldest = %v, want %v", o, at(2))
	}
	vals := func(pts []point) []float64 {
		var v []float64
		for _, p := range pts {
			v = append(v, p.Avg)
		}
		return v
	}
	if got := vals(r.read("a", at(0), at(10))); !slices.Equal(got, []float64{2, 3, 4, 5}) {
		t.Errorf("a = %v", got)
	}
	if got := vals(r.read("b", at(0), at(10))); !slices.Equal(got, []float64{20, 40}) {
		t.Errorf("b = %v (NaN for ticks without a value)", got)
	}
	if got := vals(r.read("a", at(3), at(4))); !slices.Equal(got, []float64{3, 4}) {
		t.Errorf("a in [3,4] = %v", got)
	}
	if _, ok := r.series["c"]; ok {
		t.Error("series c, silent for a whole ring, was kept")
	}
	if v, ok := r.latest("a"); !ok || v != 5 {
		t.Errorf("latest a = %v, %v", v, ok)
	}
	if _, ok := r.latest("b"); ok {
		t.Error("latest b is set though the last tick had none")
	}
}

func TestRollup(t *testing.T) {
	r := &rollup{lv: &level10s, accs: make(map[string]*bucketAcc)}
	t0 := time.Unix(1000, 0) // a 10 s boundary
	var rows []row
	for i := range 25 {
		rows = append(rows, r.add(t0.Add(time.Duration(i)*time.Second), map[string]float64{
			"web/cpu.avg":         float64(i),
			"web/web-001/cpu":     1, // instance series skip the 10 s level
			"web/latency_ms.p99":  math.NaN(),
			"web/requests_per_se": float64(i % 2),
		})...)
	}
	got := make(map[string]string)
	for _, rw := range rows {
		got[fmt.Sprintf("%s@%d", rw.path, rw.t.Unix())] = fmt.Sprintf("n=%d avg=%g max=%g", rw.acc.n, rw.acc.sum/float64(rw.acc.n), rw.acc.max)
	}
	want := map[string]string{
		"web/cpu.avg@1000":         "n=10 avg=4.5 max=9",
		"web/cpu.avg@1010":         "n=10 avg=14.5 max=19",
		"web/requests_per_se@1000": "n=10 avg=0.5 max=1",
		"web/requests_per_se@1010": "n=10 avg=0.5 max=1",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("finished buckets:\n got %v\nwant %v", got, want)
	}
	if rest := r.drain(); len(rest) != 2 || rest[0].acc.n != 5 {
		t.Errorf("partial bucket = %+v", rest)
	}
}

func TestQuery(t *testing.T) {
	for _, tt := range []struct{ src, want string }{
		{".avg |", "invalid query at column"},
		{"{", "invalid query at column"},
		{"nosuchfn(1)", "invalid query: function not defined: nosuchfn/1"},
		{"$undefined", "invalid query: variable not defined: $undefined"},
	} {
		_, err := ParseQuery(tt.src)
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseQuery(%q) = %v, want one line starting %q", tt.src, err, tt.want)
		}
	}
	q, err := ParseQuery(".cpu.p90, (.instances | length)")
	if err != nil {
		t.Fatal(err)
	}
	p90 := 42.5
	doc := &Document{Group: "web", Instances: []InstanceDoc{{Name: "web-001"}}, CPU: CPUSummary{P90: &p90}}
	got, err := q.Run(context.Background(), doc)
	if err != nil || fmt.Sprint(got) != "[42.5 1]" {
		t.Errorf("Run = %v, %v", got, err)
	}
	q, _ = ParseQuery(".group | tonumber")
	if _, err := q.Run(context.Background(), doc); err == nil || strings.Contains(err.Error(), "\n") {
		t.Errorf("runtime error = %v, want one line", err)
	}
}

// TestCPUUsageSeed feeds the seed's example (two 1-core servers, two
// 5-minute samples each) and expects the seed's output byte for byte: the
// JSON sacloud-cpu-usage printed and its log lines. (The seed's transcription
// drops one comma in the JSON; the golden file has it.)
func TestCPUUsageSeed(t *testing.T) {
	jst := time.FixedZone("JST", 9*3600)
	t1 := time.Date(2021, 9, 24, 17, 0, 0, 0, jst)
	t2 := t1.Add(5 * time.Minute)
	servers := []ServerCPU{
		{Name: "hscale-group-001", Cores: 1, Samples: []CPUSample{{t1, 0.036666666667}, {t2, 0.033333333333}}},
		{Name: "hscale-group-002", Cores: 1, Samples: []CPUSample{{t1, 0.033333333333}, {t2, 0.033333333333}}},
		{Name: "hscale-group-003", Cores: 1}, // no samples: left out
	}
	var log bytes.Buffer
	u := NewCPUUsage(servers, func(format string, args ...any) { fmt.Fprintf(&log, format+"\n", args...) })
	got, err := json.Marshal(u)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/sacloud-cpu-usage.json")
	if err != nil {
		t.Fatal(err)
	}
	if string(got)+"\n" != string(want) {
		t.Errorf("JSON:\n got %s\nwant %s", got, want)
	}
	wantLog, err := os.ReadFile("testdata/sacloud-cpu-usage.log")
	if err != nil {
		t.Fatal(err)
	}
	if log.String() != string(wantLog) {
		t.Errorf("log:\n got %s\nwant %s", log.String(), wantLog)
	}
	// The seed's cron script reads it with --query '.avg|round'.
	q, err := ParseQuery(".avg|round")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := q.Run(context.Background(), u); err != nil || fmt.Sprint(v) != "[3]" {
		t.Errorf(".avg|round = %v, %v", v, err)
	}
	// No servers: zeros and an empty list, as the tool printed.
	got, _ = json.Marshal(NewCPUUsage(nil, nil))
	if want := `{"75pt":0,"90pt":0,"95pt":0,"99pt":0,"avg":0,"max":0,"min":0,"servers":[]}`; string(got) != want {
		t.Errorf("empty = %s, want %s", got, want)
	}
}

// source is a fixed set of groups, whose instances targets lists.
type source struct {
	groups  []string
	targets func() []Target
}

func (s *source) Names() []string   { return s.groups }
func (s *source) Targets() []Target { return s.targets() }

// newTestCollector opens a collector over groups with a fixed target list.
func newTestCollector(t *testing.T, dbPath string, groups []string, targets func() []Target) *Collector {
	t.Helper()
	m := config.DefaultMetrics
	m.Warmup = 5 * time.Second
	c, err := Open(Options{Metrics: m, Source: &source{groups, targets}, DB: dbPath})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDocumentOfAddedGroup: a group the source names since the last sample
// (a reload has just added it) has an empty document until the next one,
// and a group it no longer names is unknown.
func TestDocumentOfAddedGroup(t *testing.T) {
	src := &source{groups: []string{"web"}, targets: func() []Target { return nil }}
	c, err := Open(Options{Metrics: config.DefaultMetrics, Source: src, DB: filepath.Join(t.TempDir(), "metrics.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	c.Sample(ctx, time.Now())
	src.groups = []string{"api"}
	doc, err := c.Document(ctx, "api", time.Minute, "")
	if err != nil || doc.Group != "api" || len(doc.Instances) != 0 {
		t.Fatalf("document of an added group before its first sample: %+v, %v; want an empty one", doc, err)
	}
	if _, err := c.Document(ctx, "web", time.Minute, ""); !errors.Is(err, ErrUnknownGroup) {
		t.Fatalf("document of a removed group: %v, want ErrUnknownGroup", err)
	}
}

// TestDocument builds a group's document from recorded ticks: aggregates
// over ready instances only (the warming and draining ones are listed but not
// counted), latency percentiles from observed samples, prefix filtering.
func TestDocument(t *testing.T) {
	c := newTestCollector(t, filepath.Join(t.TempDir(), "metrics.db"), []string{"web", "api"}, func() []Target { return nil })
	defer c.Close()
	ctx := context.Background()
	t0 := time.Now().Add(-time.Minute).Truncate(time.Second)
	insts := []instanceView{
		{Target{Group: "web", Name: "web-001", Cores: 1, State: "in-service", InService: true, ReadySince: t0.Add(-time.Hour)}, true},
		{Target{Group: "web", Name: "web-002", Cores: 2, State: "in-service", InService: true, ReadySince: t0.Add(-time.Hour)}, true},
		{Target{Group: "web", Name: "web-003", Cores: 1, State: "in-service", InService: true, ReadySince: t0.Add(-time.Hour)}, true},
		{Target{Group: "web", Name: "web-004", Cores: 1, State: "starting"}, false},
		{Target{Group: "web", Name: "web-005", Cores: 1, State: "draining", ReadySince: t0.Add(-time.Hour)}, false},
	}
	cpus := map[string]float64{"web-001": 10, "web-002": 20, "web-003": 60, "web-004": 99, "web-005": 95}
	for i := range 30 {
		now := t0.Add(time.Duration(i) * time.Second)
		vals := map[string]float64{
			"web/requests_per_second":              100,
			"web/requests_per_second_per_instance": 100.0 / 3,
			"web/errors_per_second":                float64(i % 2),
			"web/queue":                            0,
			"web/sessions":                         4,
		}
		for name, v := range cpus {
			vals["web/"+name+"/cpu"] = v
			if i == 29 {
				vals["web/"+name+"/cpu"] = v * 2 // a last-second peak
			}
			vals["web/"+name+"/rss_bytes"] = float64(1<<20 + i)
		}
		c.record(ctx, now, vals, map[string]*groupView{"web": {at: now, instances: insts}, "api": {at: now}}, nil)
	}
	for i := range 100 {
		c.ObserveLatency("web", time.Duration(i+1)*time.Millisecond, time.Duration(i)*time.Millisecond, 10)
	}
	c.ObserveLatency("nope", time.Second, time.Second, 1) // unknown groups are ignored
	c.ObserveLatency("web", -1, -1, 10)                   // so is a request without %Ta

	doc, err := c.Document(ctx, "web", 30*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(doc, "", "  ")
	t.Logf("%s", b)
	if doc.Size != 5 || doc.Ready != 3 || len(doc.Instances) != 5 {
		t.Errorf("size %d ready %d instances %d; want 5, 3, 5", doc.Size, doc.Ready, len(doc.Instances))
	}
	// Each ready instance's average: 10, 20, 60 plus the peak's 1/30.
	avg := func(v float64) float64 { return (29*v + 2*v) / 30 }
	checkF := func(what string, got *float64, want float64) {
		t.Helper()
		if got == nil || math.Abs(*got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", what, deref(got), want)
		}
	}
	checkF("cpu.min", doc.CPU.Min, avg(10))
	checkF("cpu.max", doc.CPU.Max, avg(60))
	checkF("cpu.avg", doc.CPU.Avg, (avg(10)+avg(20)+avg(60))/3)
	checkF("cpu.p75", doc.CPU.P75, avg(20)) // rank round(3·0.75) = 2 of 3
	checkF("cpu.p90", doc.CPU.P90, avg(60))
	checkF("instances[0].cpu.max", doc.Instances[0].CPU.Max, 20)
	checkF("instances[3].cpu.avg", doc.Instances[3].CPU.Avg, avg(99))
	checkF("instances[0].rss_bytes", doc.Instances[0].RSSBytes, 1<<20+29)
	checkF("requests_per_second", doc.RequestsPerSecond, 100)
	checkF("errors_per_second", doc.ErrorsPerSecond, 0.5)
	checkF("latency_ms.p50", doc.Latency.P50, 50)
	checkF("latency_ms.p99", doc.Latency.P99, 99)
	checkF("latency_ms.tr_p90", doc.Latency.TrP90, 89)
	if doc.Latency.SampleRate != 10 || doc.Latency.Samples != 100 {
		t.Errorf("latency sample_rate %d samples %d, want 10, 100", doc.Latency.SampleRate, doc.Latency.Samples)
	}
	if doc.Instances[3].Ready || doc.Instances[4].Ready || !doc.Instances[0].Ready || doc.Instances[1].Cores != 2 {
		t.Errorf("instances: %+v", doc.Instances)
	}

	doc, err = c.Document(ctx, "web", 30*time.Second, "web-00")
	if err != nil || doc.Size != 5 {
		t.Errorf("prefix web-00: %v, %v", doc, err)
	}
	doc, err = c.Document(ctx, "web", 30*time.Second, "web-002")
	if err != nil || doc.Size != 1 || doc.Ready != 1 {
		t.Fatalf("prefix web-002: %+v, %v", doc, err)
	}
	checkF("cpu.avg of web-002 alone", doc.CPU.Avg, avg(20))

	// A group with nothing measured: nulls, not zeros.
	doc, err = c.Document(ctx, "api", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(doc)
	for _, want := range []string{`"cpu":{"avg":null`, `"requests_per_second":null`, `"instances":[]`, `"latency_ms":{"p50":null`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("empty group document lacks %s: %s", want, b)
		}
	}
	if _, err := c.Document(ctx, "nope", time.Minute, ""); err == nil {
		t.Error("document of an unknown group")
	}
	if _, err := c.Document(ctx, "web", 0, ""); err == nil {
		t.Error("document over an empty window")
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// latest returns the newest value of key if it was set in the last tick.
func (r *ring) latest(key string) (float64, bool) {
	s := r.series[key]
	if s == nil || r.ticks == 0 || s.last != r.ticks-1 {
		return 0, false
	}
	return float64(s.vals[s.last%uint64(r.n)]), true
}

func TestWriteTable(t *testing.T) {
	avg, rss := 12.345, float64(3<<20)
	d := &Document{Group: "web", Window: "5m0s", Size: 2, Ready: 1, CPU: CPUSummary{Avg: &avg},
		Instances: []InstanceDoc{{Name: "web-001", State: "in-service", Ready: true, Cores: 1, RSSBytes: &rss}, {Name: "web-002", State: "starting", Cores: 0.5}}}
	d.Instances[0].CPU.Avg = &avg
	var b bytes.Buffer
	if err := d.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"group web over 5m0s: size 2, ready 1", "avg 12.3", "min -", "web-001   in-service  true   1      12.3", "3.0", "web-002   starting    false  0.5    -"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// TestLatencyWeightedBySampleRate: through a ramp the access log's rate
// rises, and each line stands for as many requests as its rate. 60 fast
// requests (10 ms) logged one in one, 100 slow ones (500 ms) logged one in 25
// (4 lines) and one line of a request with no response after 1 s, also one
// in 25: 185 requests by %Ta, p50 at rank 93 is a slow one, p90 (rank 167)
// and p99 (183) are past the 160 of 500 ms or less. %Tr leaves out the
// request with no response, weight and all: 160 requests, all three
// percentiles slow. Counting lines (65, 4 slow) said p50 = p90 = 10 ms.
func TestLatencyWeightedBySampleRate(t *testing.T) {
	var l latencySamples
	t0 := time.Now()
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	for i := range 60 {
		l.add(t0.Add(ms(i)), ms(10), ms(8), 1)
	}
	for i := range 4 {
		l.add(t0.Add(ms(100+i)), ms(500), ms(490), 25)
	}
	l.add(t0.Add(ms(200)), ms(1000), -1, 25) // no response: in %Ta only
	s, ok := l.since(t0)
	if !ok {
		t.Fatal("no samples")
	}
	want := latencyStats{ta50: 500, ta90: 1000, ta99: 1000, tr50: 490, tr90: 490, tr99: 490, samples: 65, rate: 25}
	if s != want {
		t.Errorf("since = %+v\nwant    %+v", s, want)
	}
	// Before the slow lines: only the fast ones, weighing 1.
	l = latencySamples{}
	for i := range 60 {
		l.add(t0.Add(ms(i)), ms(10+i%3), ms(8), 1)
	}
	if s, _ := l.since(t0); s.ta50 != 11 || s.ta99 != 12 {
		t.Errorf("unit weights: %+v", s)
	}
}
