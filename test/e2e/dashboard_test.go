package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/dashboard/tour"
)

// TestDashboard drives the dashboard in headless Chromium against a real
// core with a real group under traffic: the login page, the login, the
// group's chart, overview and instance table filling from the live stream,
// and "Scale up" until its job and the new instance show. Unauthenticated
// requests get the login page or 401. Screenshots go to the test's temp dir.
func TestDashboard(t *testing.T) {
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

	// Traffic for the live figures: 20 requests a second at most, until
	// the test ends (3 minutes at most).
	ctx, stop := context.WithTimeout(context.Background(), 3*time.Minute)
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		c := &http.Client{Timeout: 5 * time.Second}
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if resp, err := c.Get("http://" + e.listen + "/"); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}()

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
