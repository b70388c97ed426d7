package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"

	"github.com/shoal-lb/shoal/internal/bench"
)

func TestParseEvents(t *testing.T) {
	got, err := parseEvents(defaultEvents)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"scale": 1, "deploy": 1, "reload": 10, "restart": 5, "kill": 10, "stop": 2}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("parseEvents(default)[%s] = %d, want %d", k, got[k], n)
		}
	}
	for _, bad := range []string{"", "explode", "kill:0", "kill:x", "kill:101", "kill,kill:2"} {
		if _, err := parseEvents(bad); err == nil {
			t.Errorf("parseEvents(%q) accepted", bad)
		}
	}
	if _, err := parsePosts("0,10"); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"", "-1", "101", "10,x"} {
		if _, err := parsePosts(bad); err == nil {
			t.Errorf("parsePosts(%q) accepted", bad)
		}
	}
}

// TestAnalyze checks attribution to events, the at-rest window, failure
// classes and the POST audit on a hand-made run.
func TestAnalyze(t *testing.T) {
	const s = int64(1e9)
	run := &chaosRun{
		PostPercent: 10,
		Rest:        chaosWindow{From: 1, To: 10},
		Events: []*chaosEvent{
			{Kind: "kill", N: 1, Window: chaosWindow{From: 20, To: 25}, RemovedMS: bench.Num(80), ReplacementMS: bench.Num(2000)},
			{Kind: "kill", N: 2, Window: chaosWindow{From: 30, To: 35}, RemovedMS: bench.Num(120), ReplacementMS: bench.Num(3000)},
			{Kind: "deploy", N: 1, Skipped: "no deploy"},
		},
	}
	recs := []reqRec{
		{start: 2 * s, end: 2*s + 1e6},                                         // at rest, 1 ms
		{start: 0, end: 1e6},                                                   // warm-up: neither rest nor event
		{start: 19 * s, end: 21 * s, fail: "connection reset"},                 // overlaps kill 1
		{start: 31 * s, end: 31*s + 5e6, attempts: 2},                          // kill 2, resent by the client
		{start: 32 * s, end: 32 * s, post: true, id: "r1-1"},                   // answered, seen once
		{start: 33 * s, end: 33 * s, post: true, id: "r1-2"},                   // answered, seen twice: replayed
		{start: 34 * s, end: 34 * s, post: true, id: "r1-3", fail: "HTTP 502"}, // failed, seen once
		{start: 40 * s, end: 40 * s, post: true, id: "r1-4"},                   // answered, never seen
	}
	seen := map[string]int{"r1-1": 1, "r1-2": 2, "r1-3": 1}
	analyze(run, recs, seen)

	if run.Requests != 8 || run.Total.Requests != 8 {
		t.Errorf("requests %d, total %d, want 8", run.Requests, run.Total.Requests)
	}
	if len(run.Kinds) != 3 || run.Kinds[0].Kind != "rest" || run.Kinds[1].Kind != "kill" || run.Kinds[2].Kind != "deploy" {
		t.Fatalf("kinds %+v, want rest, kill, deploy", run.Kinds)
	}
	rest, kill, deploy := run.Kinds[0], run.Kinds[1], run.Kinds[2]
	if rest.Requests != 1 || *rest.P99ms != 1 {
		t.Errorf("at rest: %d requests, p99 %v, want 1 and 1 ms", rest.Requests, *rest.P99ms)
	}
	if kill.Count != 2 || kill.Requests != 5 || kill.FailedGETs != 1 || kill.FailedPOSTs != 1 || kill.ClientRetries != 1 {
		t.Errorf("kill: %+v, want 2 events, 5 requests, 1 failed GET, 1 failed POST, 1 resend", kill)
	}
	if kill.Classes["connection reset"] != 1 || kill.Classes["HTTP 502"] != 1 {
		t.Errorf("kill classes %v", kill.Classes)
	}
	if *kill.RemovedMedianMS != 100 || *kill.RemovedMaxMS != 120 || *kill.ReplacementMaxMS != 3000 {
		t.Errorf("kill removal %v/%v, replacement max %v", *kill.RemovedMedianMS, *kill.RemovedMaxMS, *kill.ReplacementMaxMS)
	}
	if deploy.Skipped == "" || deploy.Requests != 0 {
		t.Errorf("a skipped event counted requests: %+v", deploy)
	}
	want := postAudit{Sent: 4, Answered: 3, Failed: 1, Replayed: 1, FailedButSeen: 1, AnsweredUnseen: 1}
	if run.Posts != want {
		t.Errorf("POST audit %+v, want %+v", run.Posts, want)
	}
	if len(run.Failures) != 2 || run.Failures[0].Class != "connection reset" || strings.Join(run.Failures[0].Events, ",") != "kill-1" {
		t.Errorf("failures %+v", run.Failures)
	}
	figs, md := chaosFigures(&chaosDetails{Runs: []*chaosRun{run}})
	if len(figs) != 2 || figs[0].Verdict != "PASS" || figs[1].Verdict != "FAIL" {
		t.Errorf("figures %+v, want the kills within 1 per kill (PASS) and 1 POST replayed (FAIL)", figs)
	}
	if !strings.Contains(md, "left out: no deploy") || !strings.Contains(md, "**1 replayed**") {
		t.Errorf("markdown misses the skipped deploy or the replay:\n%s", md)
	}
}

func TestCountSeen(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"web-001.log":   "level=INFO msg=serving\nseen r2-1\nseen r2-2\nseen r1-9\n",
		"web-001.log.1": "seen r2-1\n",
		"web-002.log":   "seen r2-3\n",
		"access.log":    "seen r2-3\n", // not an instance log
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	seen, err := countSeen(dir, "r2-")
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 3 || seen["r2-1"] != 2 || seen["r2-2"] != 1 || seen["r2-3"] != 1 {
		t.Errorf("countSeen = %v, want r2-1:2 r2-2:1 r2-3:1", seen)
	}
}

// TestChaosConfig checks that the config the chaos run renders is one shoal
// accepts, with and without the deploy variable, and that its reload toggle
// changes HAProxy's server timeout.
func TestChaosConfig(t *testing.T) {
	dir := t.TempDir()
	for _, deploy := range []bool{false, true} {
		for _, timeout := range []string{"30s", "31s"} {
			text := chaosConfig(18090, filepath.Join(dir, "state"), "/usr/local/bin/demo-backend", timeout, deploy)
			cfg, err := config.Parse(filepath.Join(dir, "shoal.yaml"), []byte(text))
			if err != nil {
				t.Errorf("deploy %v, timeout %s: %v\n%s", deploy, timeout, err, text)
				continue
			}
			g := cfg.Groups[0]
			if g.Name != chaosGroup || g.MinSize != 2 || g.MaxSize != 6 || g.ReplaceAfter != 3*time.Second {
				t.Errorf("group %s %d..%d replace_after %v, want web 2..6 3s", g.Name, g.MinSize, g.MaxSize, g.ReplaceAfter)
			}
			if want, _ := time.ParseDuration(timeout); cfg.HAProxy.Timeouts.Server != want {
				t.Errorf("timeouts.server %v, want %s", cfg.HAProxy.Timeouts.Server, timeout)
			}
			if _, ok := g.Template.Vars["release"]; ok != deploy {
				t.Errorf("deploy %v: template vars %v", deploy, g.Template.Vars)
			}
		}
	}
}
