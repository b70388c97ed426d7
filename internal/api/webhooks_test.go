package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/jobrun"
	"github.com/shoal-lb/shoal/internal/store"
)

var (
	webCfg = config.Group{Name: "web", MinSize: 2, MaxSize: 6,
		Plans:    []config.Plan{{Name: "smallest", Size: 2}, {Name: "medium", Size: 3}, {Name: "largest", Size: 5}},
		Cooldown: config.Cooldown{Up: time.Hour, Down: time.Hour}}
	apiCfg = config.Group{Name: "api", MinSize: 1, MaxSize: 3, Cooldown: config.Cooldown{Up: time.Hour, Down: time.Hour}}
)

// groupMap is a set of groups no reload changes: the API's view of core's
// registry.
type groupMap map[string]*group.Group

func (m groupMap) Group(name string) (*group.Group, bool) { g, ok := m[name]; return g, ok }
func (m groupMap) Names() []string                        { return slices.Sorted(maps.Keys(m)) }

func (m groupMap) All() []*group.Group {
	var out []*group.Group
	for _, name := range m.Names() {
		out = append(out, m[name])
	}
	return out
}

type webhookEnv struct {
	jm     *jobrun.Manager
	groups groupMap
	h      http.Handler
}

// newWebhookEnv runs a real job manager and store over groups that are not
// reconciled: jobs are accepted and recorded but never converge, which is all
// these tests look at. The manager is closed at cleanup.
func newWebhookEnv(t *testing.T, token string) *webhookEnv {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(filepath.Join(t.TempDir(), "shoal.db"))
	if err != nil {
		t.Fatal(err)
	}
	e := &webhookEnv{groups: groupMap{}}
	for _, c := range []config.Group{webCfg, apiCfg} {
		g, err := group.New(context.Background(), c, nil, nil, st, log)
		if err != nil {
			t.Fatal(err)
		}
		e.groups[c.Name] = g
	}
	e.jm, err = jobrun.NewManager(context.Background(), e.groups, st, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.jm.Close()
		st.Close()
	})
	e.h = NewHandler(e.jm, e.groups, log, token)
	return e
}

func (e *webhookEnv) do(t *testing.T, method, path, body string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	return w
}

func (e *webhookEnv) jobs(t *testing.T) []jobrun.Job {
	t.Helper()
	list, err := e.jm.List(context.Background(), "", 100)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// amAlert is one alert of a payload: status, labels and annotations as
// "k=v" pairs separated by commas.
type amAlert struct{ status, labels, annotations string }

func pairs(s string) map[string]string {
	m := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// payload builds a webhook body the way Alertmanager 0.25 (version "4") or
// Grafana (version "1") sends it, with the fields shoal does not read.
func payload(version string, alerts ...amAlert) string {
	var list []map[string]any
	for i, a := range alerts {
		list = append(list, map[string]any{
			"status": a.status, "labels": pairs(a.labels), "annotations": pairs(a.annotations),
			"startsAt": "2026-11-23T09:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
			"generatorURL": "http://prometheus/graph", "fingerprint": fmt.Sprintf("%016x", i),
		})
	}
	b, _ := json.Marshal(map[string]any{
		"version": version, "groupKey": `{}:{alertname="HighCPU"}`, "truncatedAlerts": 0, "status": "firing",
		"receiver": "shoal", "groupLabels": map[string]string{}, "commonLabels": map[string]string{},
		"commonAnnotations": map[string]string{}, "externalURL": "http://alertmanager:9093", "alerts": list,
	})
	return string(b)
}

func decodeWebhook(t *testing.T, w *httptest.ResponseRecorder) WebhookResponse {
	t.Helper()
	if w.Code != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", w.Code, w.Body)
	}
	var resp WebhookResponse
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
		t.Fatalf("decode %s: %v", w.Body, err)
	}
	return resp
}

const amPath = "/v1/webhooks/alertmanager"

func TestAlertmanagerWebhookMakesJob(t *testing.T) {
	e := newWebhookEnv(t, "")
	resp := decodeWebhook(t, e.do(t, "POST", amPath, payload("4",
		amAlert{"firing", "alertname=HighCPU,shoal_group=web,shoal_action=up", ""},
		amAlert{"resolved", "alertname=LowCPU,shoal_group=web,shoal_action=down", ""},
		amAlert{"firing", "alertname=DiskFull,severity=page", ""},
		// Annotations route as well as labels.
		amAlert{"firing", "alertname=ApiBusy", "shoal_group=api,shoal_action=size:3"},
	)))
	if len(resp.Jobs) != 2 {
		t.Fatalf("jobs %+v, want one for api and one for web", resp.Jobs)
	}
	api, web := resp.Jobs[0], resp.Jobs[1]
	if web.Group != "web" || web.State != jobrun.Accepted || web.Target != 3 || web.Source != "alertmanager:HighCPU" {
		t.Errorf("web job %+v, want accepted 2 → 3 from alertmanager:HighCPU", web)
	}
	if api.Group != "api" || api.State != jobrun.Accepted || api.Target != 3 || api.Kind != jobrun.Size || api.Source != "alertmanager:ApiBusy" {
		t.Errorf("api job %+v, want size 3 from alertmanager:ApiBusy", api)
	}
	want := []struct{ result, reason, job string }{
		{"accepted", "", web.ID},
		{"ignored", "resolved alerts do not scale", ""},
		{"ignored", "not addressed to shoal", ""},
		{"accepted", "", api.ID},
	}
	for i, w := range want {
		a := resp.Alerts[i]
		if a.Index != i || a.Result != w.result || !strings.Contains(a.Reason, w.reason) || a.JobID != w.job {
			t.Errorf("alert %d: %+v, want %+v", i, a, w)
		}
	}
	if n := len(e.jobs(t)); n != 2 {
		t.Errorf("%d jobs recorded, want 2", n)
	}
}

// Alerts for one group make one job; the largest scale-out wins whatever
// the order, and the others say they were superseded.
func TestWebhookOneJobPerGroup(t *testing.T) {
	alerts := []amAlert{
		{"firing", "alertname=A,shoal_group=web,shoal_action=down", ""},
		{"firing", "alertname=B,shoal_group=web,shoal_action=plan:largest", ""},
		{"firing", "alertname=C,shoal_group=web,shoal_action=up", ""},
		{"firing", "alertname=D,shoal_group=web,shoal_action=plan:largest", ""},
	}
	for _, order := range [][]int{{0, 1, 2, 3}, {3, 2, 1, 0}} {
		e := newWebhookEnv(t, "")
		var list []amAlert
		for _, i := range order {
			list = append(list, alerts[i])
		}
		resp := decodeWebhook(t, e.do(t, "POST", amPath, payload("4", list...)))
		if len(resp.Jobs) != 1 || resp.Jobs[0].Target != 5 || resp.Jobs[0].Plan != "largest" {
			t.Fatalf("order %v: jobs %+v, want one job to plan largest (5)", order, resp.Jobs)
		}
		// Ties go to the earliest alert with the winning action.
		if want := "alertmanager:" + map[bool]string{true: "B", false: "D"}[order[0] == 0]; resp.Jobs[0].Source != want {
			t.Errorf("order %v: source %q, want %q", order, resp.Jobs[0].Source, want)
		}
		for _, a := range resp.Alerts {
			if a.JobID != resp.Jobs[0].ID {
				t.Errorf("alert %+v lacks the group's job id", a)
			}
			switch a.Action {
			case "plan:largest":
				if a.Result != "accepted" {
					t.Errorf("winning alert %+v, want accepted", a)
				}
			default:
				if a.Result != "ignored" || !strings.Contains(a.Reason, "superseded by alert") || !strings.Contains(a.Reason, "largest scale-out wins") {
					t.Errorf("losing alert %+v, want ignored as superseded", a)
				}
			}
		}
		if n := len(e.jobs(t)); n != 1 {
			t.Errorf("%d jobs recorded, want 1", n)
		}
	}
}

// Alertmanager resends firing alerts every repeat_interval: within the
// cooldown a resend is an ignored job with the reason, not a new step.
func TestWebhookResendWithinCooldownIgnored(t *testing.T) {
	e := newWebhookEnv(t, "")
	// What the job that scaled the group last did when it finished.
	if err := e.groups["web"].StartCooldowns(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	resp := decodeWebhook(t, e.do(t, "POST", amPath, payload("4", amAlert{"firing", "alertname=HighCPU,shoal_group=web,shoal_action=up", ""})))
	j := resp.Jobs[0]
	if j.State != jobrun.Ignored || !strings.Contains(j.Reason, "scale-up cooldown runs until") || j.ID == "" {
		t.Fatalf("job %+v, want ignored for the scale-up cooldown", j)
	}
	if a := resp.Alerts[0]; a.Result != "ignored" || a.Reason != j.Reason || a.JobID != j.ID {
		t.Fatalf("alert %+v, want ignored with the job's reason", a)
	}
	if d := e.groups["web"].Desired(); d != 2 {
		t.Fatalf("desired %d after an ignored resend, want 2", d)
	}
}

func TestGrafanaWebhook(t *testing.T) {
	e := newWebhookEnv(t, "")
	// What Grafana 10's webhook contact point sends for a unified alerting rule.
	body := `{
  "receiver": "shoal", "status": "firing", "orgId": 1,
  "alerts": [{
    "status": "firing",
    "labels": {"alertname": "High latency", "grafana_folder": "web"},
    "annotations": {"shoal_group": "web", "shoal_action": "plan:medium", "summary": "p99 above 500ms"},
    "startsAt": "2026-11-23T09:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
    "generatorURL": "http://grafana/alerting/grafana/abc/view", "fingerprint": "57c6d9296de2ad39",
    "silenceURL": "http://grafana/alerting/silence/new", "dashboardURL": "", "panelURL": "",
    "values": {"B": 0.73, "C": 1}, "valueString": "[ var='B' labels={} value=0.73 ]"
  }],
  "groupLabels": {"alertname": "High latency"}, "commonLabels": {"alertname": "High latency"},
  "commonAnnotations": {}, "externalURL": "http://grafana/", "version": "1",
  "groupKey": "{}:{alertname=\"High latency\"}", "truncatedAlerts": 0,
  "title": "[FIRING:1] High latency (web)", "state": "alerting", "message": "**Firing**"
}`
	resp := decodeWebhook(t, e.do(t, "POST", "/v1/webhooks/grafana", body))
	if len(resp.Jobs) != 1 || resp.Jobs[0].Source != "grafana:High latency" || resp.Jobs[0].Target != 3 {
		t.Fatalf("jobs %+v, want plan medium from grafana:High latency", resp.Jobs)
	}
	// Each webhook reads its own payload version.
	w := e.do(t, "POST", "/v1/webhooks/grafana", payload("4", amAlert{"firing", "shoal_group=web,shoal_action=up", ""}))
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `shoal reads version \"1\"`) {
		t.Fatalf("grafana with version 4: %d %s", w.Code, w.Body)
	}
}

func TestWebhookErrors(t *testing.T) {
	up := amAlert{"firing", "alertname=HighCPU,shoal_group=web,shoal_action=up", ""}
	for _, tc := range []struct {
		name, method, body string
		code               int
		msg                string
	}{
		{"malformed JSON", "POST", `{"version": "4", "alerts": [}`, 400, "invalid JSON payload: invalid character '}'"},
		{"wrong type", "POST", `{"version": "4", "alerts": {}}`, 400, "invalid JSON payload: json: cannot unmarshal object"},
		{"trailing data", "POST", payload("4", up) + `{"alerts": []}`, 400, "unexpected data after the JSON object"},
		{"empty body", "POST", "", 400, "empty body"},
		{"no alerts", "POST", `{"version": "4"}`, 400, `no \"alerts\" list`},
		{"wrong version", "POST", payload("3", up), 400, `unsupported Alertmanager payload version \"3\"`},
		{"bad status", "POST", payload("4", amAlert{"pending", "shoal_group=web,shoal_action=up", ""}), 400, `status must be firing or resolved, got \"pending\"`},
		{"unknown group", "POST", payload("4", amAlert{"firing", "alertname=X,shoal_group=db,shoal_action=up", ""}), 404, `alert 0 (X): unknown group \"db\"`},
		{"unknown action", "POST", payload("4", amAlert{"firing", "shoal_group=web,shoal_action=sideways", ""}), 422, `unknown shoal_action \"sideways\": must be up, down, plan:NAME or size:N`},
		{"no action", "POST", payload("4", amAlert{"firing", "shoal_group=web", ""}), 422, "but no shoal_action"},
		{"no group", "POST", payload("4", amAlert{"firing", "shoal_action=up", ""}), 422, "but no shoal_group"},
		{"unknown plan", "POST", payload("4", amAlert{"firing", "shoal_group=web,shoal_action=plan:huge", ""}), 422, `unknown plan \"huge\" for group web (plans: smallest, medium, largest)`},
		{"size out of range", "POST", payload("4", amAlert{"firing", "shoal_group=web,shoal_action=size:9", ""}), 422, "size 9 is outside group web's range [2, 6]"},
		{"size not a number", "POST", payload("4", amAlert{"firing", "shoal_group=web,shoal_action=size:many", ""}), 422, "size must be a whole number"},
		// One bad alert refuses the payload: the good one made no job either.
		{"nothing half-applied", "POST", payload("4", up, amAlert{"firing", "shoal_group=db,shoal_action=up", ""}), 404, `alert 1: unknown group \"db\"`},
		{"too large", "POST", payload("4", amAlert{"firing", "alertname=" + strings.Repeat("x", 1<<20), ""}), 413, "payload larger than 1048576 bytes"},
		{"wrong method", "GET", "", 405, "the Alertmanager webhook takes POST"},
		{"token in URL", "POST", payload("4", up), 400, "a token in the URL is not accepted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newWebhookEnv(t, "")
			path := amPath
			if tc.name == "token in URL" {
				path += "?token=s3cret"
			}
			w := e.do(t, tc.method, path, tc.body)
			if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.msg) {
				t.Fatalf("%d %s, want %d with %q", w.Code, w.Body, tc.code, tc.msg)
			}
			var er ErrorResponse
			if err := json.Unmarshal(w.Body.Bytes(), &er); err != nil || er.Error == "" {
				t.Fatalf("body %s is not a JSON error: %v", w.Body, err)
			}
			if tc.code == 405 && w.Header().Get("Allow") != "POST" {
				t.Errorf("Allow %q, want POST", w.Header().Get("Allow"))
			}
			if tc.code == 404 && strings.Join(er.Valid, ",") != "api,web" {
				t.Errorf("valid %v, want the groups", er.Valid)
			}
			if list := e.jobs(t); len(list) != 0 {
				t.Fatalf("a refused payload recorded jobs: %+v", list)
			}
			if d := e.groups["web"].Desired(); d != 2 {
				t.Fatalf("desired %d after a refused payload, want 2", d)
			}
		})
	}
}

// On the TCP listener the bearer token is required; a token in the URL is not one.
func TestWebhookNeedsToken(t *testing.T) {
	e := newWebhookEnv(t, "s3cret")
	body := payload("4", amAlert{"firing", "alertname=HighCPU,shoal_group=web,shoal_action=up", ""})
	for _, tc := range []struct {
		path   string
		header []string
		code   int
	}{
		{amPath, nil, 401},
		{amPath + "?token=s3cret", nil, 401},
		{amPath, []string{"Authorization", "Bearer wrong"}, 401},
		{amPath + "?token=s3cret", []string{"Authorization", "Bearer s3cret"}, 400},
		{amPath, []string{"Authorization", "Bearer s3cret"}, 200},
	} {
		if w := e.do(t, "POST", tc.path, body, tc.header...); w.Code != tc.code {
			t.Errorf("%s %v: %d %s, want %d", tc.path, tc.header, w.Code, w.Body, tc.code)
		}
	}
	if n := len(e.jobs(t)); n != 1 {
		t.Fatalf("%d jobs, want only the authenticated request's", n)
	}
}

func TestJobSource(t *testing.T) {
	for in, want := range map[string]string{
		"HighCPU":                      "alertmanager:HighCPU",
		"":                             "alertmanager",
		"line\nbreak":                  "alertmanager:line?break",
		strings.Repeat("é", 100):       "alertmanager:" + strings.Repeat("é", 57),
		"x" + strings.Repeat("a", 200): "alertmanager:x" + strings.Repeat("a", 114),
	} {
		if got := jobSource("alertmanager", in); got != want || len(got) > jobrun.MaxSource {
			t.Errorf("jobSource(%q) = %q, want %q", in, got, want)
		}
	}
}

// A body without Content-Length is cut at 1 MiB while it is read.
func TestWebhookStreamedBodyTooLarge(t *testing.T) {
	e := newWebhookEnv(t, "")
	body := `{"version": "4", "alerts": [{"status": "firing", "labels": {"alertname": "` + strings.Repeat("x", 2<<20) + `"}}]}`
	r := httptest.NewRequest("POST", amPath, io.MultiReader(strings.NewReader(body)))
	r.ContentLength = -1
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	if w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), "payload larger than 1048576 bytes") {
		t.Fatalf("%d %s, want 413", w.Code, w.Body)
	}
}

func TestWebhookListsProblemsBounded(t *testing.T) {
	e := newWebhookEnv(t, "")
	var alerts []amAlert
	for range 25 {
		alerts = append(alerts, amAlert{"firing", "shoal_group=web,shoal_action=sideways", ""})
	}
	w := e.do(t, "POST", amPath, payload("4", alerts...))
	if w.Code != http.StatusUnprocessableEntity || strings.Count(w.Body.String(), "sideways") != maxListedErrors || !strings.Contains(w.Body.String(), "; and 15 more") {
		t.Fatalf("%d %s, want 10 problems and a count of the rest", w.Code, w.Body)
	}
}
