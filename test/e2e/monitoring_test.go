package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/jobrun"
)

// monitoringTool finds one of the Debian prometheus / prometheus-alertmanager
// binaries. Without it the test is skipped, except in CI (.ci/run installs
// them), where a skip would hide a failure.
func monitoringTool(t *testing.T, name, pkg string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed (Debian package %s); CI must have it", name, pkg)
		}
		t.Skipf("%s is not installed (apt-get install %s)", name, pkg)
	}
	return bin
}

func runTool(t *testing.T, dir string, stdin string, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// TestMonitoringExamples loads examples/prometheus with the real tools: the
// Prometheus config (with its rules), the Alertmanager config, every PromQL
// expression of the Grafana dashboard, and the shoal config.
func TestMonitoringExamples(t *testing.T) {
	parallel(t)
	promtool := monitoringTool(t, "promtool", "prometheus")
	amtool := monitoringTool(t, "amtool", "prometheus-alertmanager")
	src := filepath.Join("..", "..", "examples", "prometheus")
	dir := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		// The token the configs read where shoal.yaml expects it, and an
		// application that exists (validate looks the program up).
		b = bytes.ReplaceAll(b, []byte("/etc/prometheus/shoal.token"), []byte(filepath.Join(dir, "shoal.token")))
		b = bytes.ReplaceAll(b, []byte("/usr/local/bin/app"), []byte(filepath.Join(binDir, "demo-backend")))
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "shoal.token"), []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	out := runTool(t, dir, "", promtool, "check", "config", "prometheus.yml")
	if !strings.Contains(out, "SUCCESS: 3 rules found") {
		t.Errorf("promtool check config did not load the rules:\n%s", out)
	}
	runTool(t, dir, "", amtool, "check-config", "alertmanager.yml")

	// Every dashboard query must be valid PromQL: promtool checks them as
	// recording rules once Grafana's variables are filled in.
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	vars := strings.NewReplacer("$__rate_interval", "1m", "$group", "web")
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	n := 0
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", p.Title)
		}
		for _, tg := range p.Targets {
			n++
			fmt.Fprintf(&rules, "      - record: dashboard:query%d\n        expr: %q\n", n, vars.Replace(tg.Expr))
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "dashboard-rules.yml"), []byte(rules.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	out = runTool(t, dir, "", promtool, "check", "rules", "dashboard-rules.yml")
	if !strings.Contains(out, fmt.Sprintf("SUCCESS: %d rules found", n)) {
		t.Errorf("promtool check rules on the dashboard's %d queries:\n%s", n, out)
	}

	cmd := exec.Command(filepath.Join(binDir, "shoal"), "validate", "-c", filepath.Join(dir, "shoal.yaml"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("shoal validate examples/prometheus/shoal.yaml: %v\n%s", err, out)
	}
}

// alertmanager is a real Alertmanager on 127.0.0.1, without clustering.
type alertmanager struct {
	url string
	cmd *exec.Cmd
	log *syncBuffer
}

func startAlertmanager(t *testing.T, bin, config string) *alertmanager {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "alertmanager.yml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	am := &alertmanager{url: "http://" + addr, log: &syncBuffer{}}
	am.cmd = exec.Command(bin, "--config.file="+cfgPath, "--storage.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--cluster.listen-address=", "--log.level=debug")
	am.cmd.Dir = dir
	am.cmd.Stdout, am.cmd.Stderr = am.log, am.log
	am.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := am.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = am.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-am.cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		if t.Failed() {
			t.Logf("alertmanager log:\n%s", am.log)
		}
	})
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("alertmanager exited:\n%s", am.log)
		default:
		}
		if resp, err := client.Get(am.url + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return am
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("alertmanager not ready after 20s:\n%s", am.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// post sends alerts to Alertmanager's API, as Prometheus or amtool would.
func (am *alertmanager) post(t *testing.T, labels map[string]string, endsAt time.Time) {
	t.Helper()
	body, _ := json.Marshal([]map[string]any{{
		"labels":      labels,
		"annotations": map[string]string{"summary": "web instances are busy"},
		"startsAt":    time.Now().Add(-time.Minute).UTC().Format(time.RFC3339),
		"endsAt":      endsAt.UTC().Format(time.RFC3339),
	}})
	resp, err := http.Post(am.url+"/api/v2/alerts", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST /api/v2/alerts: %d %s", resp.StatusCode, b)
	}
}

// httpGet fetches url with an optional bearer token.
func httpGet(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metricValue reads one sample's value from an exposition; "" if absent.
func metricValue(text, series string) string {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		return ""
	}
	return m[1]
}

// checkMetricsReference fails when a shoal_* family a real core serves is
// not in docs/metrics.md (generated from the collectors core lists) with
// the type it is served as: the list and what serve registers drifted.
func checkMetricsReference(t *testing.T, exposition string) {
	t.Helper()
	ref, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	families := regexp.MustCompile(`(?m)^# TYPE (shoal_\S+) (\S+)$`).FindAllStringSubmatch(exposition, -1)
	if len(families) == 0 {
		t.Fatalf("no shoal_* families in the exposition:\n%s", exposition)
	}
	for _, f := range families {
		if row := "| `" + f[1] + "` | " + f[2] + " |"; !strings.Contains(string(ref), row) {
			t.Errorf("docs/metrics.md has no row %q for a family /metrics serves (run make docs, or list its collector in core.MetricCollectors)", row)
		}
	}
}

func alertJobs(t *testing.T, e *shoalEnv) []jobrun.Job {
	t.Helper()
	list, err := e.client().Jobs(context.Background(), "web", 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []jobrun.Job
	for _, j := range list {
		if j.Source == "alertmanager:WebCPUHigh" {
			out = append(out, j)
		}
	}
	return out
}

// TestAlertmanagerScalesGroup drives shoal with a real Alertmanager: an alert
// posted to Alertmanager's API reaches shoal's webhook (with the token from
// http_config.authorization) and scales the group; Alertmanager's resends
// within the cooldown are ignored with the reason; the resolve changes
// nothing. Then it reads the exposition, checked by promtool, and the
// Prometheus service discovery of the instances.
func TestAlertmanagerScalesGroup(t *testing.T) {
	parallel(t) // waits on Alertmanager's intervals, no load
	amBin := monitoringTool(t, "prometheus-alertmanager", "prometheus-alertmanager")
	promtool := monitoringTool(t, "promtool", "prometheus")
	const token = "s3cret"
	adminAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	g := web
	g.CooldownUp = "1h" // every resend after the first step falls in it
	e := newEnv(t, fmt.Sprintf("admin:\n  listen: %s\n  token: %s\nmetrics:\n  listen: %s\n", adminAddr, token, metricsAddr), g)
	e.start()
	e.waitInService("web", 2)

	tokenFile := filepath.Join(t.TempDir(), "shoal.token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	am := startAlertmanager(t, amBin, fmt.Sprintf(`route:
  receiver: shoal
  group_by: [shoal_group]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 2s
receivers:
  - name: shoal
    webhook_configs:
      - url: http://%s/v1/webhooks/alertmanager
        send_resolved: true
        http_config:
          authorization:
            credentials_file: %s
`, adminAddr, tokenFile))

	alert := map[string]string{"alertname": "WebCPUHigh", "severity": "page", "shoal_group": "web", "shoal_action": "up"}
	posted := time.Now()
	am.post(t, alert, time.Now().Add(10*time.Minute))

	// The notification becomes a job: 2 → 3 (medium).
	var first jobrun.Job
	e.eventually("Alertmanager's notification made a job", 30*time.Second, func() error {
		for _, j := range alertJobs(t, e) {
			if j.State != jobrun.Ignored {
				first = j
				return nil
			}
		}
		return fmt.Errorf("jobs from alertmanager:WebCPUHigh: %+v", alertJobs(t, e))
	})
	if first.Kind != jobrun.Up || first.From != 2 || first.Target != 3 {
		t.Fatalf("job %+v, want up 2 → 3", first)
	}
	t.Logf("alert posted to Alertmanager → job %s seen (100ms polls): %s (the alert started a minute ago, so Alertmanager does not wait group_wait)", first.ID, time.Since(posted).Round(time.Millisecond))
	j, err := e.client().Job(context.Background(), first.ID, time.Minute)
	if err != nil || j.State != jobrun.Done {
		t.Fatalf("job %+v %v, want done", j, err)
	}
	e.waitInService("web", 3)

	// Alertmanager resends the firing alert every repeat_interval: within
	// the cooldown each resend is an ignored job saying so.
	e.eventually("a resend is ignored for the cooldown", 30*time.Second, func() error {
		for _, j := range alertJobs(t, e) {
			if j.State == jobrun.Ignored && strings.Contains(j.Reason, "scale-up cooldown runs until") {
				return nil
			}
		}
		return fmt.Errorf("jobs: %+v", alertJobs(t, e))
	})

	// The resolve reaches shoal and changes nothing.
	scrapeURL := "http://" + metricsAddr + "/metrics"
	resolvedSeries := `shoal_webhook_alerts_total{result="resolved",webhook="alertmanager"}`
	am.post(t, alert, time.Now().Add(-time.Second))
	e.eventually("shoal received the resolved notification", 30*time.Second, func() error {
		if code, text := httpGet(t, scrapeURL, ""); code != 200 || metricValue(text, resolvedSeries) == "" {
			return fmt.Errorf("%d, %s = %q", code, resolvedSeries, metricValue(text, resolvedSeries))
		}
		return nil
	})
	time.Sleep(2 * time.Second) // room for a wrong step to show
	for _, j := range alertJobs(t, e) {
		if j.ID != first.ID && j.State != jobrun.Ignored {
			t.Fatalf("a second job was not ignored: %+v", j)
		}
	}
	s, err := e.client().Group(context.Background(), "web")
	if err != nil || s.Desired != 3 || s.InService != 3 {
		t.Fatalf("after the resolve: %+v %v, want 3 desired and in service", s, err)
	}

	// The exposition on both listeners: the TCP admin API needs the token,
	// metrics.listen does not. promtool accepts it.
	if code, _ := httpGet(t, "http://"+adminAddr+"/metrics", ""); code != http.StatusUnauthorized {
		t.Fatalf("GET /metrics on the admin listener without a token: %d, want 401", code)
	}
	scrapeStart := time.Now()
	code, text := httpGet(t, "http://"+adminAddr+"/metrics", token)
	t.Logf("GET /metrics (token, 3 instances): %d bytes in %s", len(text), time.Since(scrapeStart).Round(time.Microsecond))
	if code != 200 {
		t.Fatalf("GET /metrics with the token: %d %s", code, text)
	}
	for series, want := range map[string]string{
		`shoal_group_desired_size{group="web"}`:                                           "3",
		`shoal_group_size{group="web"}`:                                                   "3",
		`shoal_group_max_size{group="web"}`:                                               "5",
		`shoal_group_instances{group="web",state="in-service"}`:                           "3",
		`shoal_jobs_total{group="web",source="alertmanager:WebCPUHigh",state="done"}`:     "1",
		`shoal_jobs_total{group="web",source="alertmanager:WebCPUHigh",state="accepted"}`: "1",
		`shoal_scale_latency_seconds_count{group="web"}`:                                  "1",
		`shoal_haproxy_restarts_total`:                                                    "0",
	} {
		if got := metricValue(text, series); got != want {
			t.Errorf("%s = %q, want %q", series, got, want)
		}
	}
	// The access log's reader is up by default (HAProxy sends to it while
	// something reads latency): its counts are exposed.
	for _, kind := range []string{"request", "notice", "malformed"} {
		if v := metricValue(text, `shoal_access_log_lines_total{kind="`+kind+`"}`); v == "" {
			t.Errorf("no shoal_access_log_lines_total for kind %s", kind)
		}
	}
	if v := metricValue(text, `shoal_jobs_total{group="web",source="alertmanager:WebCPUHigh",state="ignored"}`); v == "" || v == "0" {
		t.Errorf("no ignored resends counted:\n%s", text)
	}
	// Per-instance usage comes from the metrics collector: every instance in
	// service has its CPU time and a resident size above zero.
	for _, in := range s.Instances {
		labels := fmt.Sprintf(`{group="web",instance=%q}`, in.Name)
		if v := metricValue(text, "shoal_instance_cpu_seconds_total"+labels); v == "" {
			t.Errorf("no shoal_instance_cpu_seconds_total for %s", in.Name)
		}
		if v := metricValue(text, "shoal_instance_resident_memory_bytes"+labels); v == "" || v == "0" {
			t.Errorf("shoal_instance_resident_memory_bytes for %s = %q, want > 0", in.Name, v)
		}
	}
	runTool(t, "", text, promtool, "check", "metrics")
	checkMetricsReference(t, text)
	// The unauthenticated listener serves /metrics and nothing else.
	for _, path := range []string{"/v1/status", "/v1/sd/prometheus", "/v1/webhooks/alertmanager", "/v1/jobs"} {
		if code, body := httpGet(t, "http://"+metricsAddr+path, ""); code != http.StatusNotFound {
			t.Errorf("GET %s on metrics.listen: %d %s, want 404", path, code, body)
		}
	}

	// Prometheus' http_sd_configs finds the three instances in service.
	code, body := httpGet(t, "http://"+adminAddr+"/v1/sd/prometheus", token)
	var targets []api.SDTarget
	if err := json.Unmarshal([]byte(body), &targets); code != 200 || err != nil {
		t.Fatalf("GET /v1/sd/prometheus: %d %v %s", code, err, body)
	}
	var got, want []string
	for _, tg := range targets {
		if len(tg.Targets) != 1 || tg.Labels["group"] != "web" {
			t.Fatalf("target %+v, want one address labelled group=web", tg)
		}
		got = append(got, tg.Labels["instance"]+"="+tg.Targets[0])
	}
	for _, in := range s.Instances {
		want = append(want, in.Name+"="+in.Addr)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("sd targets %v, want the instances %v", got, want)
	}
	e.stop()
}

// startDaemon runs a monitoring daemon in its own process group until the
// test ends, and waits until readyURL answers 200.
func startDaemon(t *testing.T, dir, readyURL string, bin string, args ...string) *syncBuffer {
	t.Helper()
	log := &syncBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		if t.Failed() {
			t.Logf("%s log:\n%s", filepath.Base(bin), log)
		}
	})
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("%s exited:\n%s", filepath.Base(bin), log)
		default:
		}
		if resp, err := client.Get(readyURL); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return log
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after 30s:\n%s", filepath.Base(bin), log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestPrometheusScrapesShoal runs a real Prometheus on the example
// prometheus.yml (only addresses and intervals changed): it scrapes shoal with
// the token and HAProxy's exporter, and discovers the instances through
// /v1/sd/prometheus.
func TestPrometheusScrapesShoal(t *testing.T) {
	parallel(t) // waits on Prometheus's scrapes, no load
	promBin := monitoringTool(t, "prometheus", "prometheus")
	const token = "s3cret"
	adminAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	haproxyProm := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	e := newEnv(t, fmt.Sprintf("admin:\n  listen: %s\n  token: %s\n", adminAddr, token), web)
	cfg, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	withExporter := strings.Replace(string(cfg), "haproxy:\n", "haproxy:\n  prometheus: "+haproxyProm+"\n", 1)
	if err := os.WriteFile(e.cfgPath, []byte(withExporter), 0o600); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.waitInService("web", 2)

	dir := t.TempDir()
	src := filepath.Join("..", "..", "examples", "prometheus")
	example, err := os.ReadFile(filepath.Join(src, "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	promCfg := strings.NewReplacer(
		"127.0.0.1:8081", adminAddr,
		"127.0.0.1:8405", haproxyProm,
		"scrape_interval: 15s", "scrape_interval: 1s",
		"refresh_interval: 15s", "refresh_interval: 1s",
	).Replace(string(example))
	rules, err := os.ReadFile(filepath.Join(src, "shoal-rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"prometheus.yml": promCfg, "shoal-rules.yml": string(rules), "shoal.token": token + "\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	promURL := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	startDaemon(t, dir, promURL+"/-/ready", promBin, "--config.file=prometheus.yml", "--storage.tsdb.path=data",
		"--web.listen-address="+strings.TrimPrefix(promURL, "http://"))

	type target struct {
		Labels map[string]string `json:"labels"`
		Health string            `json:"health"`
		Error  string            `json:"lastError"`
	}
	var instances []string
	e.eventually("Prometheus scrapes shoal and HAProxy and discovers both instances", 60*time.Second, func() error {
		code, body := httpGet(t, promURL+"/api/v1/targets?state=active", "")
		var resp struct {
			Data struct {
				ActiveTargets []target `json:"activeTargets"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(body), &resp); code != 200 || err != nil {
			return fmt.Errorf("targets: %d %v", code, err)
		}
		health := map[string]string{}
		instances = nil
		for _, tg := range resp.Data.ActiveTargets {
			switch tg.Labels["job"] {
			case "shoal-instances":
				if tg.Labels["group"] == "web" {
					instances = append(instances, tg.Labels["instance"])
				}
			default:
				health[tg.Labels["job"]] = tg.Health + " " + tg.Error
			}
		}
		slices.Sort(instances)
		if strings.TrimSpace(health["shoal"]) != "up" || strings.TrimSpace(health["haproxy"]) != "up" || len(instances) != 2 {
			return fmt.Errorf("health %v, instances %v", health, instances)
		}
		return nil
	})
	if strings.Join(instances, ",") != "web-001,web-002" {
		t.Fatalf("discovered instances %v, want web-001 and web-002", instances)
	}

	// What shoal exposed is queryable.
	e.eventually("Prometheus has shoal's group size", 30*time.Second, func() error {
		code, body := httpGet(t, promURL+`/api/v1/query?query=shoal_group_size%7Bgroup%3D%22web%22%7D`, "")
		if code != 200 || !strings.Contains(body, `"value":[`) || !strings.Contains(body, `,"2"]`) {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	e.stop()
}

// TestHAProxyRestartCounted kills HAProxy: shoal restarts it and
// shoal_haproxy_restarts_total counts it.
func TestHAProxyRestartCounted(t *testing.T) {
	parallel(t) // waits for HAProxy's restart, no load
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	e := newEnv(t, fmt.Sprintf("metrics:\n  listen: %s\n", metricsAddr), web)
	e.start()
	e.waitInService("web", 2)
	scrapeURL := "http://" + metricsAddr + "/metrics"
	if _, text := httpGet(t, scrapeURL, ""); metricValue(text, "shoal_haproxy_restarts_total") != "0" {
		t.Fatalf("restarts before any crash: %q, want 0", metricValue(text, "shoal_haproxy_restarts_total"))
	}
	pid := e.haproxyPID()
	if pid <= 0 {
		t.Fatal("no HAProxy master recorded")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.eventually("the restart is counted", 30*time.Second, func() error {
		if _, text := httpGet(t, scrapeURL, ""); metricValue(text, "shoal_haproxy_restarts_total") != "1" {
			return fmt.Errorf("shoal_haproxy_restarts_total = %q", metricValue(text, "shoal_haproxy_restarts_total"))
		}
		return nil
	})
	if e.haproxyPID() == pid {
		t.Fatalf("HAProxy master still recorded as the killed pid %d", pid)
	}
	e.waitInService("web", 2)
	e.stop()
}
