package api

import (
	"bytes"
	"context"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/decision"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/jobrun"
	"github.com/shoal-lb/shoal/internal/metrics"
	"github.com/shoal-lb/shoal/internal/policy"
	"github.com/shoal-lb/shoal/internal/store"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.json")

// golden compares got with testdata/name, byte for byte: these answers are
// a public contract (docs/api.md), so a change of shape must be deliberate.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s changed:\ngot:\n%s\nwant:\n%s", name, got, want)
	}
}

var goldenAt = time.Date(2026, 11, 23, 9, 0, 0, 500_000_000, time.UTC)

// TestEventsAndJobsJSONGolden: GET /v1/events and GET /v1/jobs answer with
// the rows every writer records (the policy's decisions, the waker's, a
// deploy's and a scale-in's events; jobs in each state) in the documented
// shape, and a policy test's decisions have the same shape.
func TestEventsAndJobsJSONGolden(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(filepath.Join(t.TempDir(), "shoal.db"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := group.New(ctx, webCfg, nil, nil, st, log)
	if err != nil {
		t.Fatal(err)
	}
	groups := groupMap{g.Name(): g}
	jm, err := jobrun.NewManager(ctx, groups, st, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		jm.Close()
		st.Close()
	})
	h := NewHandler(jm, groups, log, "", WithAutoscaling(Autoscaling{Store: st}))

	for _, d := range goldenDecisions() {
		if err := st.InsertDecision(ctx, &d); err != nil {
			t.Fatal(err)
		}
	}
	for _, j := range goldenJobs() {
		if err := st.InsertJob(ctx, &j); err != nil {
			t.Fatal(err)
		}
	}
	get := func(path string) []byte {
		t.Helper()
		w := httptestDo(h, http.MethodGet, path)
		if w.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
		}
		return w.Body.Bytes()
	}
	golden(t, "events.golden.json", get("/v1/events?group=web"))
	golden(t, "jobs.golden.json", get("/v1/jobs?group=web"))
	golden(t, "job.golden.json", get("/v1/jobs/2"))
	if w := httptestDo(h, http.MethodGet, "/v1/events?group=web&ungrouped=maybe"); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "ungrouped: must be true or false") {
		t.Errorf("ungrouped=maybe: %d %s, want 400 naming the parameter", w.Code, w.Body)
	}

	// A policy test answers with Replay's decisions, which are not stored:
	// id 0, the request's source from the rule, empty lists as [] and {}.
	w := httptest.NewRecorder()
	writeJSON(w, http.StatusOK, policyTestResponse(goldenReplay()))
	golden(t, "policytest.golden.json", w.Body.Bytes())
}

func httptestDo(h http.Handler, method, path string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
	return w
}

// The rows below are what each writer records: the policy's Runner (a
// scale-up accepted, a hold-back), the waker, the job manager's deploy and
// scale-in events.
func goldenDecisions() []decision.Record {
	at := goldenAt
	return []decision.Record{
		{Group: "web", Time: at, Rule: "cpu_high", Sources: []string{"cpu_high", "target"},
			Values:  map[string]float64{"web.cpu": 91.5, "web.requests_per_second": 1200},
			Current: 2, Recommendation: 3, Request: &decision.Request{Kind: jobrun.Size, Size: 3},
			Outcome: decision.Accepted, Code: policy.CodeScale, Reason: "cpu 91.5 > 80 for 1m", JobID: "7"},
		{Group: "web", Time: at.Add(time.Second), Rule: "target", Sources: []string{"target"},
			Values: map[string]float64{"web.cpu": 40}, Current: 3, Recommendation: 3,
			Outcome: decision.Nothing, Code: policy.CodeTolerance, Reason: "inside the band"},
		{Group: "web", Time: at.Add(2 * time.Second), Rule: "wake", Sources: []string{"wake"},
			Values: map[string]float64{}, Current: 0, Recommendation: 1, Request: &decision.Request{Kind: jobrun.Wake},
			Outcome: decision.Ignored, Code: "wake", Reason: "requests arrived; job ignored: busy", JobID: "8"},
		{Group: "web", Time: at.Add(3 * time.Second), Rule: string(decision.Deploy), Sources: []string{"cli"},
			Current: 3, Recommendation: 3, Request: &decision.Request{Kind: jobrun.Deploy},
			Outcome: decision.Deploy, Code: decision.Code(jobrun.Running), Reason: "deploy of version abc (job 9) running", JobID: "9"},
		{Group: "web", Time: at.Add(4 * time.Second), Rule: string(decision.ScaleIn), Sources: []string{"policy:target"},
			Current: 3, Recommendation: 2, Request: &decision.Request{Kind: jobrun.Down, Plan: "smallest"},
			Outcome: decision.ScaleIn, Code: "oldest", Reason: "job 10 retires web-001: oldest", JobID: "10"},
	}
}

func goldenJobs() []jobrun.Job {
	at := goldenAt
	started, finished, deployed := at.Add(time.Second), at.Add(5*time.Second), at.Add(time.Minute)
	return []jobrun.Job{
		{Group: "web", Source: "cli", Kind: jobrun.Up, From: 2, Target: 3, State: jobrun.Done,
			CreatedAt: at, StartedAt: &started, FinishedAt: &finished},
		{Group: "web", Source: "policy:cpu_high", Kind: jobrun.Plan, Plan: "largest", From: 3, Target: 3,
			State: jobrun.Ignored, Reason: "scale-up cooldown runs", CreatedAt: at, FinishedAt: &at},
		{Group: "web", Source: "cli", Kind: jobrun.Deploy, From: 3, Target: 3, State: jobrun.Done,
			Noop: true, Version: "abc", CreatedAt: at, StartedAt: &at, FinishedAt: &deployed},
	}
}

// goldenReplay is what Replay returns: a requested job and a hold-back
// with no sources or values.
func goldenReplay() []decision.Record {
	return []decision.Record{
		{Time: goldenAt, Group: "web", Rule: "cpu_high", Sources: []string{"cpu_high"},
			Values: map[string]float64{"web.cpu": 91.5}, Current: 2, Recommendation: 3,
			Request: &decision.Request{Kind: jobrun.Size, Size: 3, Source: decision.SourcePrefix + "cpu_high"},
			Outcome: decision.Requested, Code: policy.CodeScale, Reason: "cpu 91.5 > 80 for 1m"},
		{Time: goldenAt.Add(time.Second), Group: "web", Rule: "target", Current: 3, Recommendation: 3,
			Outcome: decision.Nothing, Code: policy.CodeMissing, Reason: "web.cpu is missing"},
	}
}

// TestCPUUsageJSONGolden: GET /v1/cpu-usage lists each instance as
// metrics.ServerCPU in the documented shape ({"name", "cores", "samples":
// [{"Time", "CPUTime"}]}), which `shoal cpu-usage` decodes.
func TestCPUUsageJSONGolden(t *testing.T) {
	w := httptest.NewRecorder()
	writeJSON(w, http.StatusOK, CPUUsageResponse{Servers: []metrics.ServerCPU{
		{Name: "web-001", Cores: 2, Samples: []metrics.CPUSample{{Time: goldenAt, CPUTime: 0.5}, {Time: goldenAt.Add(time.Minute), CPUTime: 1.25}}},
		{Name: "web-002", Cores: 1, Samples: []metrics.CPUSample{}},
	}})
	golden(t, "cpuusage.golden.json", w.Body.Bytes())
}
