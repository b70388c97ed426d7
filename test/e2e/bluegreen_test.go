package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/dashboard"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/jobrun"
)

// blueGreenGroup is web at size instances of the demo backend (release is
// a template variable, so that each deploy is a new version), deployed
// blue/green with these settings (a YAML flow mapping).
func blueGreenGroup(size int, bg string) groupSpec {
	return groupSpec{
		Name: "web", Min: size, Max: size + 2,
		Command: fmt.Sprintf(`[%q, "--listen", "127.0.0.1:{{.Port}}", "--name", "{{.Name}}"]`, filepath.Join(binDir, "demo-backend")),
		Env:     `{RELEASE: "{{.Vars.release}}"}`,
		Extra: "      vars: {release: \"1\"}\n" +
			"    deploy: {strategy: blue_green, blue_green: " + bg + "}\n",
	}
}

// TestBlueGreenSwitchRollbackAndKill deploys blue/green under keep-alive
// load, with an analysis at 10 % before each switch:
//  1. green (a whole second set) starts out of rotation, is analysed, and
//     takes every request at once; blue stays UP at weight 0, gets no
//     request, and a scale request meanwhile is ignored (the deploy's job
//     holds the group, as during a canary); the dashboard shows it with a
//     Rollback button;
//  2. `shoal deploy rollback` switches back at once and green is drained
//     and stopped;
//  3. a kill -9 of shoal after a switch rolls back when shoal starts again
//     (blue, still the stored serving version, gets its weight back, then
//     green goes);
//  4. with the CPU saturated, a switch again; after keep_old blue is
//     drained and stopped and the new version serves.
//
// No request fails in any of them.
func TestBlueGreenSwitchRollbackAndKill(t *testing.T) {
	parallel(t)
	const token = "bluegreen-s3cret"
	port := freePort(t)
	e := newEnv(t, fmt.Sprintf("admin:\n  listen: 127.0.0.1:%d\n  token: %s\n", port, token),
		blueGreenGroup(2, "{keep_old: 12s, weight: 10%, analysis: {max_error_rate: {above: 1%, vs_stable: 2x}, min_requests: 50, interval: 1s}}"))
	e.start()
	e.waitInService("web", 2)
	before := groupOf(t, e.status(), "web")
	if out := deployStatus(t, e); !strings.Contains(out, "strategy blue_green") || !strings.Contains(out, "no blue/green deploy has run") {
		t.Fatalf("status before any deploy:\n%s", out)
	}
	if _, stderr, code := e.cli("deploy", "rollback", "web"); code != 3 || !strings.Contains(stderr, "no blue/green deploy is running") {
		t.Fatalf("rollback without a deploy exited %d: %s", code, stderr)
	}

	// sets splits the group's instances by version: the serving one's
	// (blue) and the others (green).
	sets := func() (blue, green []string) {
		g := groupOf(t, e.status(), "web")
		for _, in := range g.Instances {
			if in.Version == before.Version {
				blue = append(blue, in.Name)
			} else {
				green = append(green, in.Name)
			}
		}
		return blue, green
	}
	// weightsAre checks that every server of names is UP at weight w.
	weightsAre := func(names []string, w int) error {
		for _, n := range names {
			st := e.serverStat("web", n)
			if !st.Status.IsUp() || st.Weight != w {
				return fmt.Errorf("%s: %s at weight %d, want UP at %d", n, st.Status, st.Weight, w)
			}
		}
		return nil
	}
	deploy := func(release string) string {
		t.Helper()
		out, stderr, code := e.cli("deploy", "web", "--set", "release="+release)
		if code != 0 {
			t.Fatalf("deploy exited %d:\n%s%s", code, out, stderr)
		}
		return strings.Fields(out)[1]
	}
	waitSwitched := func(timeout time.Duration) (blue, green []string) {
		t.Helper()
		st := waitDeployStatus(t, e, "switched", timeout, "phase: switched, keeping blue until", "green ", "2/2 instance(s) in service at weight 100", "in service at weight 0")
		t.Logf("switched:\n%s", st)
		blue, green = sets()
		if len(blue) != 2 || len(green) != 2 {
			t.Fatalf("after the switch: blue %v, green %v; want 2 of each", blue, green)
		}
		if err := weightsAre(green, 100); err != nil {
			t.Fatal(err)
		}
		if err := weightsAre(blue, 0); err != nil {
			t.Fatal(err)
		}
		return blue, green
	}
	onlyBlue := func(when string) {
		t.Helper()
		e.eventually("only blue, at weight 100, "+when, time.Minute, func() error {
			blue, green := sets()
			if len(green) != 0 || len(blue) != 2 {
				return fmt.Errorf("blue %v, green %v", blue, green)
			}
			return weightsAre(blue, 100)
		})
	}
	reqs := func(names []string) int64 {
		var n int64
		for _, name := range names {
			n += e.serverStat("web", name).Requests
		}
		return n
	}

	stopLoad := load(t, e)
	// 1. The switch.
	id := deploy("2")
	blue, green := waitSwitched(time.Minute)
	b0, g0 := reqs(blue), reqs(green)
	time.Sleep(time.Second)
	if b1, g1 := reqs(blue), reqs(green); b1 != b0 || g1 <= g0 {
		t.Fatalf("after the switch, over 1 s: blue answered %d requests, green %d; want 0 and some", b1-b0, g1-g0)
	}
	if _, _, code := e.cli("scale", "web", "--size", "3"); code != 3 {
		t.Errorf("a scale request during the deploy exited %d, want 3 (ignored: the deploy's job holds the group)", code)
	}
	if _, stderr, code := e.cli("deploy", "pause", "web"); code != 2 || !strings.Contains(stderr, "not a command of this deploy") {
		t.Errorf("pause of a blue/green deploy exited %d: %s", code, stderr)
	}
	dashboardShowsBlueGreen(t, fmt.Sprintf("http://127.0.0.1:%d", port), token)

	// 2. The rollback: blue takes every request at once.
	if out, stderr, code := e.cli("deploy", "rollback", "web"); code != 0 {
		t.Fatalf("rollback exited %d:\n%s%s", code, out, stderr)
	}
	if err := weightsAre(blue, 100); err != nil {
		t.Fatalf("right after the rollback: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	j, err := e.client().Job(ctx, id, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != jobrun.Failed || !strings.Contains(j.Reason, "rolled back: rolled back by an operator while switched") {
		t.Fatalf("job after the rollback: %+v", j)
	}
	onlyBlue("after the rollback")
	st := deployStatus(t, e)
	if !strings.Contains(st, "phase: rolled back") || !strings.Contains(st, "version "+before.Version) {
		t.Errorf("status after the rollback:\n%s", st)
	}
	ev := e.waitEvent("rolled back", 10*time.Second, 0, eventOf("blue_green.rolled_back", ""))
	t.Logf("%s", ev.Reason)

	// 3. kill -9 after a switch: rolled back at the next start.
	deploy("3")
	waitSwitched(time.Minute)
	e.kill9()
	e.start()
	onlyBlue("after kill -9 and a new start")
	ev = e.waitEvent("rolled back after the restart", 10*time.Second, 0, func(ev api.Event) bool {
		return eventOf("blue_green.rolled_back", "")(ev) && strings.Contains(ev.Reason, "interrupted by a restart of shoal")
	})
	t.Logf("%s", ev.Reason)
	time.Sleep(500 * time.Millisecond)
	res := stopLoad()
	t.Logf("switch, rollback, kill -9: %d requests, %d failures %v, spread %v", res.Requests, res.Failures, res.FailureKinds, res.ByInstance)
	if res.Failures != 0 {
		t.Fatalf("%d of %d requests failed: %v", res.Failures, res.Requests, res.FailureSamples)
	}

	// 4. The switch with the CPU saturated (at most 15 s of it), then
	// keep_old's end.
	busy(t)
	// The wait in line may outlast ctx: a deadline of its own from here.
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stopLoad = load(t, e)
	stopHogs := cpuHogs(t, runtime.NumCPU()+1, 15*time.Second)
	began := time.Now()
	id = deploy("4")
	_, green = waitSwitched(14 * time.Second)
	t.Logf("saturated: deploy to switch in %s", time.Since(began).Round(10*time.Millisecond))
	time.Sleep(time.Second)
	stopHogs()
	j, err = e.client().Job(ctx, id, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != jobrun.Done {
		t.Fatalf("deploy job after keep_old: %+v", j)
	}
	time.Sleep(500 * time.Millisecond)
	res = stopLoad()
	t.Logf("saturated switch and keep_old: %d requests, %d failures %v, spread %v", res.Requests, res.Failures, res.FailureKinds, res.ByInstance)
	if res.Failures != 0 {
		t.Fatalf("%d of %d requests failed: %v", res.Failures, res.Requests, res.FailureSamples)
	}
	after := groupOf(t, e.status(), "web")
	if after.Version == before.Version || versions(after)[after.Version] != 2 || len(after.Instances) != 2 || after.Deploying != "" {
		t.Fatalf("after keep_old: version %q (was %q), instances %v", after.Version, before.Version, versions(after))
	}
	if err := weightsAre(green, 100); err != nil {
		t.Fatal(err)
	}
	if st := deployStatus(t, e); !strings.Contains(st, "phase: done") || !strings.Contains(st, "why: keep_old passed") {
		t.Errorf("status when done:\n%s", st)
	}
	evs := e.events(api.EventsQuery{Group: "web"})
	for _, typ := range []string{"blue_green.started", "blue_green.analysing", "blue_green.switched", "blue_green.done"} {
		if len(filterEvents(evs, eventOf(typ, ""))) == 0 {
			t.Errorf("no %s event", typ)
		}
	}
	for _, sw := range filterEvents(evs, eventOf("blue_green.switched", "")) {
		if !strings.Contains(sw.Reason, "analysis passed") || !strings.Contains(sw.Reason, "analysis: green ") {
			t.Errorf("switch event without the analysis' figures: %q", sw.Reason)
		}
	}
	e.checkInSync("web")
}

// dashboardShowsBlueGreen checks the dashboard's side of a switched
// blue/green deploy: the group page has its Rollback button, the stream
// carries its phase, sets and weights, and the page's deploy acts reach it
// (pause, which a blue/green deploy has no use for, is refused with 400).
func dashboardShowsBlueGreen(t *testing.T, base, token string) {
	t.Helper()
	c, session := dashboardLogin(t, base, token)
	get := func(path string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		req.AddCookie(session)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := get("/ui/")
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), `<div id="bluegreen"`) || !strings.Contains(string(page), `data-act="rollback"`) {
		t.Errorf("the dashboard's page has no blue/green panel with a Rollback button")
	}
	resp = get("/ui/stream?group=web")
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var bg *group.BlueGreenStatus
	for bg == nil && sc.Scan() {
		line, found := strings.CutPrefix(sc.Text(), "data: ")
		if !found {
			continue
		}
		var m dashboard.Message
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("stream message: %v", err)
		}
		if m.Deploy != nil {
			bg = m.Deploy.BlueGreen
			if bg == nil {
				t.Fatalf("the stream's deploy has no blue/green status: %+v", m.Deploy)
			}
		}
	}
	resp.Body.Close()
	if bg == nil || bg.Phase != "switched" || !bg.Running || bg.GreenInstances != 2 || bg.BlueInstances != 2 || bg.GreenWeight != 100 || bg.BlueWeight != 0 || bg.KeepUntil == nil {
		t.Fatalf("the stream's blue/green status: %+v", bg)
	}
	req, _ := http.NewRequest("POST", base+"/v1/groups/web/deploy/pause", nil)
	req.AddCookie(session)
	req.Header.Set("Origin", base)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("the dashboard's pause of a blue/green deploy: %s, want 400", resp.Status)
	}
}
