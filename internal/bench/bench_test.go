package bench

import (
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const wrkOutput = `Running 6s test @ http://127.0.0.1:8080/
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.02ms  500.00us   8.25ms   90.00%
    Req/Sec    24.54k     1.00k   27.00k    70.00%
  Latency Distribution
     50%  789.00us
     75%    1.10ms
     90%    1.50ms
     99%    1.02s
  147000 requests in 6.00s, 1.30GB read
  Socket errors: connect 0, read 2, write 0, timeout 3
  Non-2xx or 3xx responses: 7
Requests/sec:  24539.12
Transfer/sec:    220.00MB
`

func TestParseWrk(t *testing.T) {
	s, err := parseWrk(wrkOutput)
	if err != nil {
		t.Fatal(err)
	}
	if s.RPS != 24539.12 || s.P50ms != 0.789 || s.P99ms != 1020 || s.Errors != 12 {
		t.Errorf("parseWrk = %+v, want 24539.12 req/s, p50 0.789 ms, p99 1020 ms, 12 errors", s)
	}
	if _, err := parseWrk("unable to connect to 127.0.0.1:1 Connection refused"); err == nil {
		t.Error("parseWrk accepted output without Requests/sec")
	}
	for in, want := range map[string]float64{"1.5m": 90000, "8.25ms": 8.25, "12us": 0.012} {
		if got := wrkMs(in); math.Abs(got-want) > 1e-9 {
			t.Errorf("wrkMs(%q) = %v, want %v", in, got, want)
		}
	}
	if !math.IsNaN(wrkMs("fast")) {
		t.Error("wrkMs accepted a value without a unit")
	}
}

func TestMedian(t *testing.T) {
	if m := Median([]float64{1.077, 0.979, 1.030}); m != 1.030 {
		t.Errorf("median of 3 = %v", m)
	}
	if m := Median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median of 4 = %v", m)
	}
	if !math.IsNaN(Median(nil)) {
		t.Error("median of nothing is not NaN")
	}
}

func TestReportWrite(t *testing.T) {
	dir := t.TempDir()
	v, b := 26255.0, 24539.0
	r := &Report{
		Name: "throughput", Smoke: true, Date: time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC),
		Machine:  Machine{NProc: 2, LoadBefore: "1 1 1"},
		Settings: []Setting{{"load", "wrk"}},
		Figures: []Figure{
			{Name: "(c) shoal req/s", Unit: "req/s", Value: &v, Baseline: "(b) haproxy", BaselineValue: &b,
				Ratio: Num(v / b), Goal: ">= 0.97", Verdict: Verdict(Num(v/b), func(x float64) bool { return x >= 0.97 }), Note: "paired"},
			{Name: "idle CPU", Unit: "%", Value: Num(math.NaN()), Note: "not measured: shoal did not start"},
		},
		Markdown: "| extra |",
	}
	md, js, err := r.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(md) != "20261123-090000-throughput-smoke.md" || filepath.Base(js) != "20261123-090000-throughput-smoke.json" {
		t.Errorf("wrote %s and %s", md, js)
	}
	text, _ := os.ReadFile(md)
	for _, want := range []string{"SMOKE RUN", "| (c) shoal req/s | 26255 req/s | (b) haproxy: 24539 req/s | 1.070 | >= 0.97 | **PASS** |", "| idle CPU | - |", "not measured", "| extra |"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("markdown lacks %q:\n%s", want, text)
		}
	}
	var back map[string]any
	data, _ := os.ReadFile(js)
	if err := json.Unmarshal(data, &back); err != nil || back["smoke"] != true {
		t.Errorf("JSON report %s: %v", data, err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestReportWriteKeepsLatest: a measurement removes the older reports of
// its benchmark and their plots, not those of another benchmark whose name
// it begins, nor smoke runs; a smoke run removes nothing.
func TestReportWriteKeepsLatest(t *testing.T) {
	dir := t.TempDir()
	older := []string{"20261101-000000-compare.md", "20261101-000000-compare.json", "20261101-000000-compare-local.svg"}
	kept := []string{"20261101-000000-compare-x.md", "20261101-000000-compare-smoke.md", "20261101-000000-scale.md", "notes.md"}
	for _, f := range append(append([]string{}, older...), kept...) {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	smoke := &Report{Name: "compare", Smoke: true, Date: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	if _, _, err := smoke.Write(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range older {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("a smoke run removed %s", f)
		}
	}
	r := &Report{Name: "compare", Date: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)}
	md, js, err := r.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range older {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("%s is still there after a newer run", f)
		}
	}
	for _, f := range append(kept, filepath.Base(md), filepath.Base(js), "20261201-000000-compare-smoke.md") {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s was removed: %v", f, err)
		}
	}
}

// TestEnvStopsProcessTree starts a shell that leaves a child in another
// process group (as shoal does with HAProxy and instances) and checks that
// Close stops both.
func TestEnvStopsProcessTree(t *testing.T) {
	env, err := NewEnv(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	p, err := env.Start("tree", "sh", "-c", "setsid sleep 60 & echo $! ; wait")
	if err != nil {
		t.Fatal(err)
	}
	p.Descendants = true
	var kids []int
	for deadline := time.Now().Add(5 * time.Second); len(kids) == 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		kids = Descendants(p.Pid())
	}
	if len(kids) == 0 {
		t.Fatal("the shell's child did not appear")
	}
	if err := env.Close(false); err != nil {
		t.Fatal(err)
	}
	if p.Alive() {
		t.Error("the process is still running")
	}
	for _, k := range kids {
		if f, err := StatFields(k); err == nil && f[0] != "Z" {
			t.Errorf("descendant %d still running (state %s)", k, f[0])
		}
	}
	if _, err := os.Stat(env.Work); !os.IsNotExist(err) {
		t.Errorf("scratch directory %s not removed: %v", env.Work, err)
	}
}
