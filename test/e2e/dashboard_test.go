package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/dashboard"
	"github.com/shoal-lb/shoal/internal/dashboard/tour"
)

// TestDashboard drives the dashboard in headless Chromium against a real
// core with a real group under traffic: the login page, the login, the
// group's chart, overview and instance table filling from the live stream,
// and "Scale up" until its job and the new instance show; HAProxy's
// restart, an event of no group, shows in the group's timeline. Unauthenticated
// requests get the login page or 401. Screenshots go to the test's temp dir.
func TestDashboard(t *testing.T) {
	parallel(t)
	if _, err := tour.Browser(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip("dashboard browser test skipped:", err)
	}
	const token = "dash-s3cret"
	port := freePort(t)
	e := newEnv(t, fmt.Sprintf("admin:\n  listen: 127.0.0.1:%d\n  token: %s\nmetrics: {warmup: 1s}\n", port, token),
		groupSpec{Name: "web", Min: 1, Max: 3, Extra: `    autoscale:
      target: {metric: cpu.avg, value: 50, scale_in_stabilization: 10m}
`})
	e.start()
	e.waitInService("web", 1)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)

	for _, c := range []struct {
		path, want string
		code       int
	}{
		{"/ui/", `action="/ui/login"`, http.StatusUnauthorized},
		{"/v1/status", "bearer token", http.StatusUnauthorized},
		{"/ui/stream?group=web", "not logged in", http.StatusUnauthorized},
	} {
		resp, err := http.Get(base + c.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || !strings.Contains(string(body), c.want) {
			t.Errorf("GET %s without a session: %d %q, want %d with %q", c.path, resp.StatusCode, body, c.code, c.want)
		}
	}

	// An event of no group, which the group's timeline shows too: HAProxy
	// dies and is restarted.
	pid := e.haproxyPID()
	if pid <= 0 {
		t.Fatal("no HAProxy master recorded")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.eventually("HAProxy restarted", 30*time.Second, func() error {
		if now := e.haproxyPID(); now == pid || now <= 0 {
			return fmt.Errorf("HAProxy master pid %d", now)
		}
		return nil
	})
	e.waitInService("web", 1)

	// Traffic for the live figures, until the test ends.
	startTrickle(t, e)
	ctx, stop := context.WithTimeout(context.Background(), 3*time.Minute)
	defer stop()

	dir := t.TempDir()
	res, err := tour.Run(ctx, tour.Options{URL: base, Token: token, Group: "web", Timeout: 30 * time.Second,
		Shot: func(name string, png []byte) error { return os.WriteFile(filepath.Join(dir, name+".png"), png, 0o600) }})
	t.Logf("tour: %+v", res)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", dir)
	if !res.LoginForm || res.ChartPoints == 0 || res.Instances != 1 {
		t.Errorf("before scaling: login form %v, chart points %d, instance rows %d; want the form, points, 1 row", res.LoginForm, res.ChartPoints, res.Instances)
	}
	if res.Overview["desired"] != "1" || res.Overview["req/s"] == "–" || res.Overview["CPU p90"] == "–" {
		t.Errorf("overview row %v: want desired 1 and live CPU p90 and req/s", res.Overview)
	}
	if !slices.ContainsFunc(res.Ungrouped, func(r string) bool { return strings.Contains(r, "haproxy (all groups)") }) {
		t.Errorf("the timeline's events of no group %q: want HAProxy's restart", res.Ungrouped)
	}
	if res.MessagesPerSecond < 0.6 || res.MessagesPerSecond > 1.4 {
		t.Errorf("the page rendered %.2f stream messages a second, want about 1", res.MessagesPerSecond)
	}
	if res.Job == "" || res.JobState == "ignored" || !res.JobListed || res.InstancesAfter != 2 {
		t.Errorf("scale up: job %q state %q (%q), listed %v, instance rows %d; want a job, listed, 2 rows", res.Job, res.JobState, res.Answer, res.JobListed, res.InstancesAfter)
	}
	// The page's job is the core's.
	s := e.status()
	if s.Groups[0].Desired != 2 {
		t.Errorf("core's desired size after the dashboard's scale up: %d, want 2", s.Groups[0].Desired)
	}
	out, _, code := e.cli("jobs", "-o", "json")
	if code != 0 || !strings.Contains(out, `"source": "dashboard"`) {
		t.Errorf("shoal jobs does not list the dashboard's job (exit %d):\n%s", code, out)
	}
	streamOutlivesReadTimeout(t, base, token)
	for _, name := range []string{"1-login", "2-group", "3-scaled-up"} {
		if fi, err := os.Stat(filepath.Join(dir, name+".png")); err != nil || fi.Size() < 1000 {
			t.Errorf("screenshot %s: %v", name, errors.Join(err, fmt.Errorf("size %d", sizeOf(fi))))
		}
	}
}

func sizeOf(fi os.FileInfo) int64 {
	if fi == nil {
		return 0
	}
	return fi.Size()
}

// dashboardLogin logs in to the dashboard with token as the page's form
// does, and returns a client that does not follow redirects and the session.
func dashboardLogin(t *testing.T, base, token string) (*http.Client, *http.Cookie) {
	t.Helper()
	c := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest("POST", base+"/ui/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cookies := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || len(cookies) == 0 {
		t.Fatalf("dashboard login: %d with %d cookies, want 303 and the session", resp.StatusCode, len(cookies))
	}
	return c, cookies[0]
}

// streamOutlivesReadTimeout logs in as the page does and reads the stream
// for longer than the admin listener's 10 s read timeout: one connection
// must carry a message a second throughout.
func streamOutlivesReadTimeout(t *testing.T, base, token string) {
	t.Helper()
	c, session := dashboardLogin(t, base, token)
	req, _ := http.NewRequest("GET", base+"/ui/stream?group=web", nil)
	req.AddCookie(session)
	began := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("stream: %d %s, want 200 text/event-stream", resp.StatusCode, ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for time.Since(began) < 13*time.Second && sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		var m dashboard.Message
		if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &m); err != nil {
			t.Fatalf("stream message %d: %v", n+1, err)
		}
		if len(m.Status.Groups) != 1 || len(m.Errors) > 0 {
			t.Fatalf("stream message %d: groups %d, errors %v", n+1, len(m.Status.Groups), m.Errors)
		}
		n++
	}
	if el := time.Since(began); el < 13*time.Second || n < 12 {
		t.Errorf("stream: %d messages in %s on one connection (%v), want one a second for 13 s", n, el.Round(time.Millisecond), sc.Err())
	}
}
