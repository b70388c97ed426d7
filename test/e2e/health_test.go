package e2e

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/group"
)

// setHealth replaces the health line newEnv wrote for each named group.
func setHealth(t *testing.T, e *shoalEnv, health map[string]string) {
	t.Helper()
	b, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	groups := strings.Split(string(b), "\n  - name: ")
	for i := 1; i < len(groups); i++ {
		name, _, _ := strings.Cut(groups[i], "\n")
		h, ok := health[name]
		if !ok {
			continue
		}
		start := strings.Index(groups[i], "\n    health: ")
		end := strings.Index(groups[i][start+1:], "\n")
		groups[i] = groups[i][:start] + "\n    health: " + h + groups[i][start+1+end:]
	}
	if err := os.WriteFile(e.cfgPath, []byte(strings.Join(groups, "\n  - name: ")), 0o600); err != nil {
		t.Fatal(err)
	}
}

// groupOf returns the named group from a status.
func groupOf(t *testing.T, s api.StatusResponse, name string) group.Status {
	t.Helper()
	i := slices.IndexFunc(s.Groups, func(g group.Status) bool { return g.Name == name })
	if i < 0 {
		t.Fatalf("no group %s in status %+v", name, s)
	}
	return s.Groups[i]
}

// TestHealthBodyCheck: with a body check, instances whose check answers 200
// with the expected body go in service, while a group whose instances answer
// 200 with another body keeps them out of rotation; `shoal status` in every
// format and the admin listener's /status page show HAProxy's real check
// results, and the HTML page is well-formed.
func TestHealthBodyCheck(t *testing.T) {
	parallel(t)
	adminPort := freePort(t)
	e := newEnv(t, fmt.Sprintf("admin:\n  listen: 127.0.0.1:%d\n  token: s3cret\n", adminPort),
		groupSpec{Name: "web", Min: 2, Max: 3},
		groupSpec{Name: "bad", Min: 1, Max: 1, Extra: "    hosts: [bad.example]\n"})
	// demo-backend's /healthz answers 200 "ok".
	setHealth(t, e, map[string]string{
		"web": `{method: GET, path: /healthz, host: check.example, status: [200, 204], body: "ok", interval: 300ms, rise: 2, fall: 2, timeout: 1s, grace: 15s, passive: {error_limit: 5}}`,
		"bad": `{path: /healthz, status: 200-299, body: "I'm <ready> & \"live\"", interval: 300ms, rise: 2, fall: 2, timeout: 1s, grace: 60s}`,
	})
	if out, stderr, code := e.cli("validate"); code != 0 {
		t.Fatalf("validate exited %d: %s%s", code, out, stderr)
	}
	e.start()
	e.waitInService("web", 2)

	var bad group.InstanceStatus
	e.eventually("the bad instance fails its body check", 30*time.Second, func() error {
		g := groupOf(t, e.status(), "bad")
		if len(g.Instances) != 1 {
			return fmt.Errorf("%d instances", len(g.Instances))
		}
		bad = g.Instances[0]
		if bad.Check != "L7RSP" || bad.CheckReason != "HTTP content check did not match" {
			return fmt.Errorf("%+v", bad)
		}
		return nil
	})
	if bad.State != group.Starting || !strings.HasPrefix(string(bad.Health), "DOWN") || bad.CheckDesc != "Layer7 invalid response" || bad.LastChange == nil {
		t.Errorf("bad instance: %+v", bad)
	}

	// Out of rotation: its host gets HAProxy's 503, the default group serves.
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet, "http://"+e.listen+"/", nil)
	req.Host = "bad.example"
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("request to the group failing its check: %d, want 503", resp.StatusCode)
	}
	stop := load(t, e)
	time.Sleep(time.Second)
	if res := stop(); res.Requests == 0 || res.Failures != 0 {
		t.Errorf("load through web: %d requests, %d failures", res.Requests, res.Failures)
	}

	// HAProxy shows a check's code and reason between checks, not while
	// one runs (a loaded run read L7OK with code 0): read until it does.
	var web group.Status
	e.eventually("status shows the web instances' checks", 5*time.Second, func() error {
		web = groupOf(t, e.status(), "web")
		for _, in := range web.Instances {
			if in.Check != "L7OK" || in.CheckCode != 200 || in.CheckDesc != "Layer7 check passed" || in.LastChange == nil {
				return fmt.Errorf("web instance: %+v", in)
			}
		}
		return nil
	})

	// -o csv: one row per instance with the real check columns. HAProxy
	// shows a failing check's reason only between checks (a loaded run read
	// "L7RSP" without it): read until it is there, as the table below.
	e.eventually("status -o csv shows every check", 5*time.Second, func() error {
		out, stderr, code := e.cli("status", "-o", "csv")
		if code != 0 {
			return fmt.Errorf("status -o csv exited %d: %s", code, stderr)
		}
		recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
		if err != nil {
			return fmt.Errorf("status -o csv: %v\n%s", err, out)
		}
		if len(recs) != 4 || !slices.Equal(recs[0], api.StatusCSVHeader) {
			return fmt.Errorf("status -o csv:\n%s", out)
		}
		checks := map[string]string{}
		for _, r := range recs[1:] {
			checks[r[1]] = r[5] + " " + r[6] + " " + r[9]
		}
		if checks[bad.Name] != "L7RSP  HTTP content check did not match" || checks[web.Instances[0].Name] != "L7OK 200 " {
			return fmt.Errorf("status -o csv checks: %q", checks)
		}
		return nil
	})

	// -o json is the API's status.
	out, _, code := e.cli("status", "-o", "json")
	var st api.StatusResponse
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || groupOf(t, st, "bad").Instances[0].Check != "L7RSP" {
		t.Errorf("status -o json (exit %d):\n%s", code, out)
	}

	// The table has the check columns. One read in a loaded CI run showed
	// only HAProxy's description (Layer7 invalid response), without the
	// content check's reason, between two checks 300 ms apart: read until
	// a check's reason is there, as the csv read above does.
	e.eventually("the status table shows the bad instance's check", 5*time.Second, func() error {
		out, _, code := e.cli("status")
		if code != 0 || !strings.Contains(out, "CHECK") || !strings.Contains(out, "L7RSP") || !strings.Contains(out, "HTTP content check did not match") {
			return fmt.Errorf("status table (exit %d):\n%s", code, out)
		}
		return nil
	})

	// -o html is a well-formed page naming every instance and its check.
	out, _, code = e.cli("status", "-o", "html")
	if code != 0 {
		t.Fatalf("status -o html exited %d", code)
	}
	checkStatusHTML(t, out, web.Instances[0].Name, bad.Name)

	// The same page on the admin listener, with its token.
	base := fmt.Sprintf("http://127.0.0.1:%d/status", adminPort)
	get := func(url, token string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
	}
	if code, _, _ := get(base, ""); code != http.StatusUnauthorized {
		t.Errorf("GET /status without the token: %d, want 401", code)
	}
	code, ct, body := get(base, "s3cret")
	if code != http.StatusOK || ct != "text/html; charset=utf-8" {
		t.Fatalf("GET /status: %d %s\n%s", code, ct, body)
	}
	checkStatusHTML(t, body, web.Instances[0].Name, bad.Name)
	if code, ct, body = get(base+"?format=csv", "s3cret"); code != http.StatusOK || ct != "text/csv; charset=utf-8" || !strings.Contains(body, ",L7RSP,") {
		t.Errorf("GET /status?format=csv: %d %s\n%s", code, ct, body)
	}
	if code, _, body = get(base+"?format=json", "s3cret"); code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil || groupOf(t, st, "web").Instances[0].Check != "L7OK" {
		t.Errorf("GET /status?format=json: %d\n%s", code, body)
	}
	var apiErr api.ErrorResponse
	if code, _, body = get(base+"?format=xml", "s3cret"); code != http.StatusBadRequest || json.Unmarshal([]byte(body), &apiErr) != nil || !slices.Equal(apiErr.Valid, api.StatusFormats) {
		t.Errorf("GET /status?format=xml: %d %s", code, body)
	}

	if _, stderr, code := e.cli("status", "-o", "yaml"); code != 2 || !strings.Contains(stderr, "html, csv, json") {
		t.Errorf("status -o yaml: exit %d, %s", code, stderr)
	}
}

// checkStatusHTML parses page and checks that each instance has a table row
// with its check status.
func checkStatusHTML(t *testing.T, page string, names ...string) {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatalf("parse status page: %v", err)
	}
	rows := map[string][]string{}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "script" {
			t.Errorf("status page has a script element")
		}
		if n.Type == html.ElementNode && n.Data == "tr" {
			var cells []string
			for c := n.FirstChild; c != nil; c = c.NextSibling {
				if c.Type == html.ElementNode && c.Data == "td" {
					var b bytes.Buffer
					for tc := c.FirstChild; tc != nil; tc = tc.NextSibling {
						if tc.Type == html.TextNode {
							b.WriteString(tc.Data)
						}
					}
					cells = append(cells, b.String())
				}
			}
			if len(cells) > 0 {
				rows[cells[0]] = cells
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	for _, name := range names {
		r := rows[name]
		if len(r) < 9 || (r[4] != "L7OK" && r[4] != "L7RSP") {
			t.Errorf("status page row for %s: %q\n%s", name, r, page)
		}
	}
}

// TestHealthTCPCheck: a tcp check with send/expect puts instances in service
// and carries the layer 7 result of the exchange.
func TestHealthTCPCheck(t *testing.T) {
	parallel(t)
	e := newEnv(t, "", groupSpec{Name: "web", Min: 2, Max: 2})
	setHealth(t, e, map[string]string{
		"web": `{type: tcp, send: "GET /healthz HTTP/1.0\r\n\r\n", expect: " 200 OK", interval: 300ms, rise: 2, fall: 2, timeout: 1s, grace: 15s}`,
	})
	e.start()
	e.waitInService("web", 2)
	stop := load(t, e)
	time.Sleep(time.Second)
	if res := stop(); res.Requests == 0 || res.Failures != 0 {
		t.Errorf("load: %d requests, %d failures", res.Requests, res.Failures)
	}
	for _, in := range groupOf(t, e.status(), "web").Instances {
		if in.Check != "L7OK" || in.CheckDesc != "Layer7 check passed" {
			t.Errorf("instance %+v, want a passed layer 7 TCP check", in)
		}
	}
}

// TestInstancesCommand: `shoal instances` prints addresses for deploy tools
// and rejects bad input with exit status 2.
func TestInstancesCommand(t *testing.T) {
	parallel(t)
	e := newEnv(t, "", groupSpec{Name: "web", Min: 2, Max: 3})
	e.start()
	e.waitInService("web", 2)

	var want []string
	for _, in := range groupOf(t, e.status(), "web").Instances {
		want = append(want, in.Addr)
	}
	for _, args := range [][]string{{"instances", "web"}, {"instances", "web", "--state", "in-service"}, {"instances", "web", "-o", "plain"}} {
		out, stderr, code := e.cli(args...)
		if got := strings.Fields(out); code != 0 || !slices.Equal(got, want) || !strings.HasSuffix(out, "\n") {
			t.Errorf("shoal %v: exit %d, %q (%s); want %q one per line", args, code, out, stderr, want)
		}
	}
	if out, _, code := e.cli("instances", "web", "--state", "draining"); code != 0 || out != "" {
		t.Errorf("--state draining: exit %d, %q; want nothing", code, out)
	}
	out, _, code := e.cli("instances", "web", "-o", "json")
	var list []group.InstanceStatus
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list) != 2 || list[0].Addr != want[0] || list[0].State != group.InService {
		t.Errorf("-o json: exit %d, %v\n%s", code, err, out)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"instances", "nope"}, `unknown group "nope"; valid: web`},
		{[]string{"instances", "web", "--state", "up"}, `--state must be one of starting, in-service, unhealthy, drained, standby, draining, stopping, failed, got "up"`},
		{[]string{"instances", "web", "-o", "yaml"}, `-o must be plain or json, got "yaml"`},
		{[]string{"instances"}, "accepts 1 arg(s)"},
	} {
		_, stderr, code := e.cli(tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("shoal %v: exit %d, %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}

	// The addresses answer: they are the instances, for a deploy tool to reach.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, addr := range want {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", addr, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s/healthz: %d", addr, resp.StatusCode)
		}
	}
}

// TestHealthCheckFailureReason: an instance that never passes its check within
// grace fails with HAProxy's reason, not only its check status.
func TestHealthCheckFailureReason(t *testing.T) {
	parallel(t) // waits out a health check's timeout, no load
	e := newEnv(t, "", groupSpec{Name: "web", Min: 1, Max: 1})
	setHealth(t, e, map[string]string{
		"web": `{path: /healthz, status: [204], interval: 200ms, rise: 2, fall: 1, timeout: 1s, grace: 2s}`,
	})
	e.start()
	e.eventually("a failure with the check's reason", 30*time.Second, func() error {
		g := groupOf(t, e.status(), "web")
		for _, f := range g.LastFailures {
			if strings.Contains(f.Reason, "did not pass within 2s (last check: L7STS 200 OK)") {
				return nil
			}
		}
		return fmt.Errorf("failures %+v", g.LastFailures)
	})
}
