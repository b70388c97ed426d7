package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/loadgen"
)

// TestExecCloudOutageDuringScaleIn: the cloud's API is down (its stop and
// list exit 75, "try again later") when a scale-in retires a server. The
// server still runs, so it goes back into rotation and stays there: no
// retry drains it again, or asks to delete it, while the API does not
// answer; it keeps answering through HAProxy; status and jobs say why; the
// job fails at delete_timeout with the cloud's answer. Once the API is
// back, the server is deleted and leaves HAProxy: no failed GET, no leaked
// server.
func TestExecCloudOutageDuringScaleIn(t *testing.T) {
	parallel(t) // mostly waits on polls, boots and timeouts: see the package doc
	o := startOutageScaleIn(t)
	c, e, id, retiring := o.c, o.e, o.job, o.retiring

	// The retiring server is back in rotation, and the job says why.
	jobsOut, _, _ := e.cli("jobs", "--group", "web")
	if want := "job " + id + " waiting: " + retiring + ": waiting for the cloud API: "; !strings.Contains(jobsOut, want) || !strings.Contains(jobsOut, "503 Service Unavailable") {
		t.Errorf("shoal jobs during the outage:\n%s\nwant %q with the cloud's stderr", jobsOut, want)
	}
	t.Logf("shoal jobs during the outage:\n%s", jobsOut)

	// In rotation through the retries (at 1 s, 3 s, 7 s after the
	// refusal): never draining, never asked to delete again while the API
	// does not answer.
	stops := c.calls()["stop"]
	e.eventually(retiring+" back in rotation", 5*time.Second, func() error {
		if st := e.serverStat("web", retiring); !st.Status.IsUp() || st.Status.GoingDown() {
			return fmt.Errorf("%s", st.Status)
		}
		return nil
	})
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if st := e.serverStat("web", retiring); !st.Status.IsUp() || st.Status.GoingDown() {
			t.Fatalf("%s %s during the outage: a retry took it out of rotation", retiring, st.Status)
		}
	}
	if n := c.calls()["stop"]; n != stops {
		t.Errorf("%d stop calls during the outage after the first refusal, want none: the API does not answer", n-stops)
	}

	// The job fails at delete_timeout with the cloud's answer.
	reason := o.awaitJobFailed()
	if want := retiring + ": not deleted within delete_timeout 4s: waiting for the cloud API:"; !strings.Contains(reason, want) {
		t.Errorf("job reason %q, want %q", reason, want)
	}
	status, _, _ := e.cli("status")
	if want := "retiring " + retiring + ", still in service: waiting for the cloud API"; !strings.Contains(status, want) {
		t.Errorf("shoal status during the outage:\n%s\nwant %q", status, want)
	}
	// The job failed, not the instance: no "failed" line for it.
	if strings.Contains(status, "failed "+retiring) {
		t.Errorf("shoal status lists %s as failed while it serves:\n%s", retiring, status)
	}
	t.Logf("shoal status during the outage:\n%s", status)

	// Still in the cloud and still answering through HAProxy: its request
	// count grows while the API is down.
	if n := len(c.servers()); n != 3 {
		t.Fatalf("%d servers in the cloud during the outage, want all 3", n)
	}
	before := e.serverStat("web", retiring)
	time.Sleep(1500 * time.Millisecond)
	var after haproxy.ServerStat
	e.eventually(retiring+" in rotation, serving", 5*time.Second, func() error {
		after = e.serverStat("web", retiring)
		if !after.Status.IsUp() || after.Status.GoingDown() || after.Total <= before.Total {
			return fmt.Errorf("%s, %d → %d requests", after.Status, before.Total, after.Total)
		}
		return nil
	})
	t.Logf("%s served %d requests while its cloud refused to delete it", retiring, after.Total-before.Total)

	// The outage ends: deleted, out of rotation, nothing leaked.
	if err := os.WriteFile(filepath.Join(c.dir, "api-up"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e.eventually(retiring+" deleted", 60*time.Second, func() error {
		if n := len(e.status().Groups[0].Instances); n != 2 {
			return fmt.Errorf("%d instances", n)
		}
		return c.matches(e, "web")
	})
	e.checkInSync("web")
	if _, ok := e.haproxyServers("web")[retiring]; ok {
		t.Fatalf("%s still in HAProxy after its deletion", retiring)
	}
	res := o.stop()
	if res.Failures > 0 || res.Requests == 0 {
		t.Fatalf("%d of %d GETs failed across the outage: %v", res.Failures, res.Requests, res.FailureSamples)
	}
	t.Logf("%d GETs, none failed; cloud calls %v", res.Requests, c.calls())
	e.stop()
	if left := c.servers(); len(left) > 0 {
		t.Fatalf("servers left in the cloud after shoal stopped: %v", left)
	}
}

// TestExecCloudOutageScaleUpKeepsServer: scaled 3 → 2 while the cloud's
// API refuses deletions, then 2 → 3 before the API is back: the group
// takes the retiring server back, which still serves, instead of creating
// a new one and paying for both. No start is called, the same 3 servers
// stay, the scale-up's job is done, and once the API is back nothing is
// deleted; no GET fails throughout.
func TestExecCloudOutageScaleUpKeepsServer(t *testing.T) {
	parallel(t) // mostly waits on polls, boots and timeouts: see the package doc
	o := startOutageScaleIn(t)
	c, e, retiring := o.c, o.e, o.retiring
	ids := func() []string {
		var out []string
		for _, s := range c.servers() {
			out = append(out, s.ID)
		}
		slices.Sort(out)
		return out
	}
	before := ids() // all 3: the retiring one is not deleted
	starts := c.calls()["start"]
	// One job at a time: the scale-in's runs until delete_timeout fails it.
	o.awaitJobFailed()
	if st := e.status().Groups[0]; len(st.LastFailures) != 0 {
		t.Errorf("status lists recent failures %+v while %s serves, waiting for the cloud API", st.LastFailures, retiring)
	}

	// Scaled back up while the API is still down: the job is done with
	// the waiting server, and no server is created.
	scaleSync(t, e, "--size", "3")
	if n := c.calls()["start"]; n != starts {
		t.Fatalf("%d start calls after the scale-up, want %d: the waiting server kept, none created", n, starts)
	}
	if got := ids(); !slices.Equal(got, before) {
		t.Fatalf("servers in the cloud %v, want the same 3 as before %v", got, before)
	}
	st := e.status().Groups[0]
	for _, in := range st.Instances {
		if in.Waiting != "" || !in.Serving() {
			t.Errorf("%s: %s %s, waiting %q; want all 3 serving, none waiting", in.Name, in.State, in.Health, in.Waiting)
		}
	}
	if st.InService != 3 || len(st.Instances) != 3 {
		t.Fatalf("status: %d of %d instances in service, want 3 of 3", st.InService, len(st.Instances))
	}
	status, _, _ := e.cli("status")
	if strings.Contains(status, "retiring "+retiring) || strings.Contains(status, "failed ") {
		t.Errorf("shoal status after the scale-up still shows %s retiring, or a failure:\n%s", retiring, status)
	}
	t.Logf("shoal status after taking %s back:\n%s", retiring, status)

	// Past delete_timeout and with the API back, nothing is deleted.
	if err := os.WriteFile(filepath.Join(c.dir, "api-up"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	stops := c.calls()["stop"]
	time.Sleep(5 * time.Second)
	if n := c.calls()["stop"]; n != stops {
		t.Fatalf("%d stop calls after the API came back, want %d: nothing is retiring", n, stops)
	}
	if got := ids(); !slices.Equal(got, before) {
		t.Fatalf("servers in the cloud %v after the API came back, want %v", got, before)
	}
	if err := c.matches(e, "web"); err != nil {
		t.Fatal(err)
	}
	e.checkInSync("web")
	res := o.stop()
	if res.Failures > 0 || res.Requests == 0 {
		t.Fatalf("%d of %d GETs failed: %v", res.Failures, res.Requests, res.FailureSamples)
	}
	t.Logf("%d GETs, none failed; cloud calls %v", res.Requests, c.calls())
}

// outage is a cloud group scaled 3 → 2 under load while its cloud's API
// is down (its stop and list exit 75 until DIR/api-up appears).
type outage struct {
	c *execCloud
	e *shoalEnv
	// stop ends the load and returns its result; job is the scale-in's
	// job, retiring the instance it retires, waiting for the cloud API.
	stop     func() loadgen.Result
	job      string
	retiring string
}

// startOutageScaleIn starts shoal with 3 instances on an exec cloud
// (delete_timeout 4s), sends load, takes the cloud's API down and scales
// in to 2, and returns once the retiring instance waits for the API.
func startOutageScaleIn(t *testing.T) *outage {
	t.Helper()
	o := &outage{c: newExecCloud(t)}
	g := web
	g.Extra, g.Cloud = "    provider: cli\n", true
	o.e = newEnv(t, o.c.provider()+"    delete_timeout: 4s\n", g)
	o.e.start()
	o.e.waitInService("web", 2)
	scaleSync(t, o.e, "--size", "3")
	o.stop = load(t, o.e)

	for _, cmd := range []string{"stop", "list"} {
		if err := os.WriteFile(filepath.Join(o.c.dir, "fail-"+cmd), []byte("down"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, stderr, code := o.e.cli("scale", "web", "--size", "2")
	m := regexp.MustCompile(`job (\d+) accepted`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("shoal scale web --size 2 (exit %d):\n%s%s", code, out, stderr)
	}
	o.job = m[1]
	o.e.eventually("a retiring instance waiting for the cloud API", 15*time.Second, func() error {
		for _, in := range o.e.status().Groups[0].Instances {
			if in.Waiting != "" {
				o.retiring = in.Name
				return nil
			}
		}
		return fmt.Errorf("none waiting")
	})
	return o
}

// awaitJobFailed waits for the scale-in's job to fail (at delete_timeout)
// and returns its reason.
func (o *outage) awaitJobFailed() string {
	var reason string
	o.e.eventually("the scale-in job failing at delete_timeout", 30*time.Second, func() error {
		j, err := o.e.client().Job(context.Background(), o.job, 0)
		if err != nil {
			return err
		}
		if j.State != "failed" {
			return fmt.Errorf("job %s %s", o.job, j.State)
		}
		reason = j.Reason
		return nil
	})
	return reason
}

// serverStat reads one server of backend from HAProxy's admin socket.
func (e *shoalEnv) serverStat(backend, name string) haproxy.ServerStat {
	e.t.Helper()
	c := haproxy.Client{Socket: filepath.Join(e.stateDir(), "haproxy", "admin.sock")}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stats, err := c.Stats(ctx, backend)
	if err != nil {
		e.t.Fatalf("read HAProxy stats: %v", err)
	}
	for _, s := range stats {
		if s.Name == name {
			return s
		}
	}
	e.t.Fatalf("HAProxy has no server %s/%s", backend, name)
	return haproxy.ServerStat{}
}
