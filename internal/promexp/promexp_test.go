package promexp

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/jobrun"
	"github.com/shoal-lb/shoal/internal/metrics"
	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/store"
)

// promtool finds promtool; without it the test is skipped, except in CI
// (.ci/run installs it), where skipping would hide a broken exposition.
func promtool(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool is not installed (Debian package prometheus); CI must have it")
		}
		t.Skip("promtool is not installed (apt-get install prometheus)")
	}
	return bin
}

type usage []metrics.InstanceUsage

func (u usage) Usage() []metrics.InstanceUsage { return u }

// one is a single group no reload changes: jobs' and the exposition's view
// of core's registry.
type one struct{ g *group.Group }

func (o one) Group(name string) (*group.Group, bool) {
	if name != o.g.Name() {
		return nil, false
	}
	return o.g, true
}
func (o one) Names() []string     { return []string{o.g.Name()} }
func (o one) All() []*group.Group { return []*group.Group{o.g} }

// newMetrics builds the exposition over a real job manager and store. The
// groups' HAProxy is not running, which a scrape must survive.
func newMetrics(t *testing.T) (*Metrics, *jobrun.Manager, *group.Group) {
	t.Helper()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(filepath.Join(dir, "shoal.db"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{StateDir: dir, Groups: []config.Group{{Name: "web", MinSize: 2, MaxSize: 5,
		Plans: []config.Plan{{Name: "small", Size: 2}, {Name: "big", Size: 4}}}}}
	lb := haproxy.NewManager(cfg, log)
	g, err := group.New(context.Background(), cfg.Groups[0], nil, lb, st, log)
	if err != nil {
		t.Fatal(err)
	}
	jm, err := jobrun.NewManager(context.Background(), one{g}, st, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		jm.Close()
		st.Close()
	})
	m := New(one{g}, lb.Restarts)
	jm.Observe(m.ObserveJob)
	return m, jm, g
}

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != 200 {
		t.Fatalf("GET /metrics: %d %s", w.Code, w.Body)
	}
	return w.Body.String()
}

func TestExposition(t *testing.T) {
	m, jm, g := newMetrics(t)
	ctx := context.Background()
	if _, err := jm.Submit(ctx, jobrun.Request{Group: "web", Kind: jobrun.Up, Source: "alertmanager:HighCPU"}); err != nil {
		t.Fatal(err)
	}
	// The job records running, then sets the desired size; it never
	// converges (nothing reconciles the group).
	for deadline := time.Now().Add(10 * time.Second); g.Desired() != 4; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the accepted job did not start")
		}
	}
	// Another job runs for the group: this one is ignored.
	if _, err := jm.Submit(ctx, jobrun.Request{Group: "web", Kind: jobrun.Down, Source: "api"}); err != nil {
		t.Fatal(err)
	}
	created := time.Now().Add(-7 * time.Second)
	finished := created.Add(7 * time.Second)
	m.ObserveJob(jobrun.Job{Group: "web", Source: "api", State: jobrun.Done, From: 2, Target: 4, CreatedAt: created, FinishedAt: &finished})
	m.ObserveDecision("web", "scale_up")
	m.ObserveEvaluation("web", 3*time.Millisecond)
	m.ObserveWebhookAlert("alertmanager", "job")
	m.SetInstanceSource(usage{
		{Group: "web", Instance: "web-001", CPUSeconds: 1.5, RSSBytes: 12 << 20},
		{Group: "web", Instance: "web-001", CPUSeconds: 9, RSSBytes: 9}, // a repeat must not fail the scrape
	})

	text := scrape(t, m)
	for _, want := range []string{
		`shoal_group_desired_size{group="web"} 4`,
		`shoal_group_size{group="web"} 0`,
		`shoal_group_min_size{group="web"} 2`,
		`shoal_group_max_size{group="web"} 5`,
		`shoal_group_instances{group="web",state="in-service"} 0`,
		`shoal_group_instances{group="web",state="starting"} 0`,
		`shoal_group_cooldown_until_timestamp_seconds{direction="up",group="web"} 0`,
		`shoal_jobs_total{group="web",source="alertmanager:HighCPU",state="accepted"} 1`,
		`shoal_jobs_total{group="web",source="alertmanager:HighCPU",state="running"} 1`,
		`shoal_jobs_total{group="web",source="api",state="ignored"} 1`,
		`shoal_scale_latency_seconds_bucket{group="web",le="5"} 0`,
		`shoal_scale_latency_seconds_bucket{group="web",le="10"} 1`,
		`shoal_scale_latency_seconds_count{group="web"} 1`,
		`shoal_policy_decisions_total{group="web",outcome="scale_up"} 1`,
		`shoal_policy_evaluation_duration_seconds_count{group="web"} 1`,
		`shoal_webhook_alerts_total{result="job",webhook="alertmanager"} 1`,
		`shoal_haproxy_restarts_total 0`,
		`shoal_instance_cpu_seconds_total{group="web",instance="web-001"} 1.5`,
		`shoal_instance_resident_memory_bytes{group="web",instance="web-001"} 1.2582912e+07`,
		`go_goroutines `,
		`process_resident_memory_bytes `,
	} {
		if !strings.Contains(text, want+"\n") && !strings.Contains(text, want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("exposition:\n%s", text)
	}

	cmd := exec.Command(promtool(t), "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out.String())
	}
}

// Job sources are client text: beyond maxSources distinct values they are
// counted as "other" instead of growing the series without bound.
func TestSourcesBounded(t *testing.T) {
	m, _, _ := newMetrics(t)
	for i := range maxSources + 10 {
		m.ObserveJob(jobrun.Job{Group: "web", Source: strings.Repeat("s", i+1), State: jobrun.Ignored})
	}
	text := scrape(t, m)
	if n := strings.Count(text, "shoal_jobs_total{"); n != maxSources+1 {
		t.Fatalf("%d job series, want %d", n, maxSources+1)
	}
	if !strings.Contains(text, `shoal_jobs_total{group="web",source="other",state="ignored"} 10`) {
		t.Fatalf("no other series with the 10 extra sources:\n%s", text)
	}
}

type noGroups struct{}

func (noGroups) All() []*group.Group { return nil }

func TestHostCordoned(t *testing.T) {
	m := New(noGroups{}, func() int64 { return 0 })
	m.SetHostSource(func() []provider.HostStatus {
		return []provider.HostStatus{{Provider: "lab", Name: "h1", Cordoned: true}, {Provider: "lab", Name: "h2"}}
	})
	want := `# HELP shoal_host_cordoned 1 for a provider's host an operator cordoned (no new instances are placed there), else 0; sum() counts the cordoned hosts.
# TYPE shoal_host_cordoned gauge
shoal_host_cordoned{host="h1",provider="lab"} 1
shoal_host_cordoned{host="h2",provider="lab"} 0
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "shoal_host_cordoned"); err != nil {
		t.Error(err)
	}
}
