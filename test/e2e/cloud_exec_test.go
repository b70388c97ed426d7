package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// execCloud is the exec provider's test cloud: testdata/fakecloud.sh of
// package provider/cloud/exec, whose servers are demo-backend processes
// on loopback addresses (127.0.1xx.y) and the provider's port.
type execCloud struct {
	t      *testing.T
	dir    string
	script string
	port   int
}

func newExecCloud(t *testing.T) *execCloud {
	t.Helper()
	for _, tool := range []string{"jq", "flock", "setsid"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the exec provider's test cloud needs %s (make test-deps installs it): %v", tool, err)
		}
	}
	script, err := filepath.Abs("../../internal/provider/cloud/exec/testdata/fakecloud.sh")
	if err != nil {
		t.Fatal(err)
	}
	c := &execCloud{t: t, dir: t.TempDir(), script: script, port: freePort(t)}
	if err := os.WriteFile(filepath.Join(c.dir, "backend"), []byte(filepath.Join(binDir, "demo-backend")), 0o644); err != nil {
		t.Fatal(err)
	}
	// Servers outlive shoal (they are the cloud's): this test's go with it.
	t.Cleanup(func() {
		for _, s := range c.servers() {
			// 0: powered off (and kill(0) is this process group). A server
			// whose process died may have its pid reused (pids wrap here):
			// only a demo-backend on its address goes.
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", s.PID))
			host := s.Address
			if h, _, err := net.SplitHostPort(s.Address); err == nil {
				host = h
			}
			if s.PID > 0 && host != "" && strings.Contains(string(cmd), "demo-backend") && strings.Contains(string(cmd), host+":") {
				_ = syscall.Kill(s.PID, syscall.SIGKILL)
			}
		}
	})
	return c
}

// provider is the providers entry driving this cloud.
func (c *execCloud) provider() string {
	argv := func(args ...string) string {
		q := []string{strconv.Quote("sh"), strconv.Quote(c.script), strconv.Quote(c.dir)}
		for _, a := range args {
			q = append(q, strconv.Quote(a))
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	return fmt.Sprintf(`providers:
  - name: cli
    type: exec
    port: %d
    interval: 300ms
    boot_timeout: 30s
    timeout: 10s
    start: %s
    stop: %s
    list: %s
`, c.port, argv("start", "{{.Name}}", "{{.Port}}"), argv("stop", "{{.ID}}"), argv("list", "{{.Owner}}"))
}

type cloudServer struct {
	ID      string            `json:"id"`
	Address string            `json:"address"`
	PID     int               `json:"pid"`
	Tags    map[string]string `json:"tags"`
}

// servers reads the cloud's servers from its files: what a listing shows.
func (c *execCloud) servers() []cloudServer {
	files, _ := filepath.Glob(filepath.Join(c.dir, "servers", "*.json"))
	var out []cloudServer
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var s cloudServer
		if err := json.Unmarshal(b, &s); err != nil {
			c.t.Fatalf("%s: %v", f, err)
		}
		out = append(out, s)
	}
	return out
}

// calls counts the commands the cloud ran, by name.
func (c *execCloud) calls() map[string]int {
	b, _ := os.ReadFile(filepath.Join(c.dir, "calls"))
	out := map[string]int{}
	for l := range strings.Lines(string(b)) {
		out[strings.Fields(l)[0]]++
	}
	return out
}

// matches fails unless the cloud's servers are exactly the group's
// instances: one server per instance name (no duplicate), none that no
// instance is (no orphan), each at the address shoal balances to.
func (c *execCloud) matches(e *shoalEnv, group string) error {
	want := map[string]string{}
	for _, g := range e.status().Groups {
		if g.Name == group {
			for _, in := range g.Instances {
				want[in.Name] = in.Addr
			}
		}
	}
	got := map[string]string{}
	for _, s := range c.servers() {
		name := s.Tags["shoal-instance"]
		if _, dup := got[name]; dup {
			return fmt.Errorf("two servers for %s", name)
		}
		got[name] = net.JoinHostPort(s.Address, strconv.Itoa(c.port))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("cloud servers %v, shoal's instances %v", got, want)
	}
	return nil
}

// TestExecCloudScaleAndRestart drives a cloud through the exec provider
// with the real shoal: scale 2 → 5 → 2 under keep-alive load with no
// failed request, servers booting for a while ("provisioning") as a
// cloud's do; then kill -9 shoal in the middle of a scale-out and restart
// it: the servers it created but never recorded are deleted, the
// recorded ones adopted, and the listing shows no duplicate and no orphan.
// SIGINT then deletes every server.
func TestExecCloudScaleAndRestart(t *testing.T) {
	parallel(t) // mostly waits on polls, boots and timeouts: see the package doc
	c := newExecCloud(t)
	if err := os.WriteFile(filepath.Join(c.dir, "boot"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	g := web
	// 2 → 5 → 2, then 5 again (3 more: 8 ran in the hour), 2, then 3 is
	// one too many.
	g.Extra, g.Cloud = "    provider: cli\n    max_hourly_instances: 8\n", true
	e := newEnv(t, c.provider(), g)
	e.start()
	e.waitInService("web", 2)
	e.eventually("the cloud's servers are the instances", 10*time.Second, func() error { return c.matches(e, "web") })
	for _, in := range e.status().Groups[0].Instances {
		if !strings.HasPrefix(in.Addr, "127.0.1") {
			t.Fatalf("instance %s at %s, want a server's loopback address", in.Name, in.Addr)
		}
	}

	stop := load(t, e)
	for _, size := range []string{"5", "2"} {
		begin := time.Now()
		scaleSync(t, e, "--size", size)
		t.Logf("scaled to %s in %s", size, time.Since(begin).Round(time.Millisecond))
		e.checkInSync("web")
		if err := c.matches(e, "web"); err != nil {
			t.Fatalf("after scaling to %s: %v", size, err)
		}
	}
	res := stop()
	if res.Failures > 0 || res.Requests == 0 {
		t.Fatalf("%d of %d GETs failed while scaling: %v", res.Failures, res.Requests, res.FailureSamples)
	}

	// Mid-scale-out: servers created (booting) that shoal has not recorded.
	if err := os.WriteFile(filepath.Join(c.dir, "boot"), []byte("3"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, stderr, code := e.cli("scale", "web", "--size", "5"); code != 0 {
		t.Fatalf("scale: %s%s", out, stderr)
	}
	e.eventually("servers being created", 10*time.Second, func() error {
		if n := len(c.servers()); n < 5 {
			return fmt.Errorf("%d servers", n)
		}
		return nil
	})
	// The scale job's progress is the servers booting, and for how long.
	out, stderr, code := e.cli("jobs", "--group", "web")
	if code != 0 || !strings.Contains(out, "booting: web-00") || !strings.Contains(out, " for ") {
		t.Errorf("shoal jobs while servers boot (exit %d):\n%s%s", code, out, stderr)
	}
	t.Logf("shoal jobs while servers boot:\n%s", out)
	before := map[string]bool{}
	for _, s := range c.servers() {
		before[s.ID] = true
	}
	e.kill9()
	e.start()
	e.waitInService("web", 5)
	e.eventually("no duplicate, no orphan", 15*time.Second, func() error { return c.matches(e, "web") })
	e.checkInSync("web")
	kept := 0
	for _, s := range c.servers() {
		if before[s.ID] {
			kept++
		}
	}
	// The 2 recorded servers are adopted; the 3 still booting at the kill
	// were never recorded: deleted as strays, and replaced.
	strays := strings.Count(e.log.String(), "stray instance stopped")
	t.Logf("after the kill -9: %d servers adopted, %d strays deleted; %+v", kept, strays, c.calls())
	if kept != 2 || strays != 3 {
		t.Errorf("%d servers of before the kill -9 kept and %d strays deleted, want 2 and 3", kept, strays)
	}

	// The budget: 5 running and 3 ended in the last hour; down to 2 makes
	// it 2 and 6; one more would be 9.
	scaleSync(t, e, "--size", "2")
	out, stderr, _ = e.cli("scale", "web", "--size", "3")
	if want := "max_hourly_instances 8: 8 instances ran in the last hour (2 running, 6 ended since); 1 more would make 9"; !strings.Contains(out+stderr, want) {
		t.Errorf("scale-out past the budget:\n%s%s\nwant it refused: %s", out, stderr, want)
	}
	if status, _, _ := e.cli("status"); !strings.Contains(status, "instance-hours today") {
		t.Errorf("shoal status shows no instance-hours:\n%s", status)
	}

	e.stop()
	if left := c.servers(); len(left) > 0 {
		t.Fatalf("servers left in the cloud after shoal stopped: %v", left)
	}
}

// TestExecCloudNoTemplateNoPort: a group on an exec provider has no
// template (its servers run their image), and the provider no port: its
// start and list print each server's host:port, which the docs accept.
// shoal validate accepts the config, shoal serve runs it: the servers
// serve through shoal at the port they said, and are deleted at the end.
func TestExecCloudNoTemplateNoPort(t *testing.T) {
	parallel(t) // mostly waits on polls and boots: see the package doc
	c := newExecCloud(t)
	if err := os.WriteFile(filepath.Join(c.dir, "own-port"), []byte(strconv.Itoa(c.port)), 0o644); err != nil {
		t.Fatal(err)
	}
	// The provider of c.provider() without port, and a start without {{.Port}}.
	prov := strings.Replace(c.provider(), fmt.Sprintf("    port: %d\n", c.port), "", 1)
	prov = strings.Replace(prov, `"start", "{{.Name}}", "{{.Port}}"]`, `"start", "{{.Name}}"]`, 1)
	if strings.Contains(prov, "port:") || strings.Contains(prov, "{{.Port}}") {
		t.Fatalf("the provider still has a port:\n%s", prov)
	}
	g := web
	g.Extra, g.Cloud = "    provider: cli\n", true
	e := newEnv(t, prov, g)
	if out, stderr, code := e.cli("validate"); code != 0 {
		t.Fatalf("shoal validate refuses a cloud group without template on an exec provider without port (exit %d):\n%s%s", code, out, stderr)
	}
	e.start()
	e.waitInService("web", 2)
	e.checkInSync("web")
	want := ":" + strconv.Itoa(c.port)
	for _, in := range e.status().Groups[0].Instances {
		if !strings.HasPrefix(in.Addr, "127.0.1") || !strings.HasSuffix(in.Addr, want) {
			t.Errorf("instance %s at %s, want a server's loopback address and the port it said (%s)", in.Name, in.Addr, want)
		}
	}
	names := map[string]bool{}
	for i := range 20 {
		resp, err := http.Get("http://" + e.listen + "/")
		if err != nil {
			t.Fatalf("GET %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %d: %s %s", i, resp.Status, body)
		}
		names[resp.Header.Get("X-Instance")] = true
	}
	t.Logf("served by %v", names)
	e.stop()
	if left := c.servers(); len(left) > 0 {
		t.Fatalf("servers left in the cloud after shoal stopped: %v", left)
	}
}

// TestExecCloudStartGarbageQuotesStderr: a start that exits 0 but prints
// garbage fails the instance with the command's stderr in the reason, in
// `shoal status`'s failures, `shoal events` and `shoal jobs` alike.
func TestExecCloudStartGarbageQuotesStderr(t *testing.T) {
	parallel(t) // mostly waits on polls: see the package doc
	c := newExecCloud(t)
	g := web
	g.Extra, g.Cloud = "    provider: cli\n", true
	e := newEnv(t, c.provider(), g)
	e.start()
	e.waitInService("web", 2)
	if err := os.WriteFile(filepath.Join(c.dir, "fail-start"), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, stderr, code := e.cli("scale", "web", "--size", "3"); code != 0 {
		t.Fatalf("scale: %s%s", out, stderr)
	}
	const said = "stderr: fakecloud: the API's gateway answered 502"
	for _, args := range [][]string{{"status", "-o", "json"}, {"events", "web", "--since", "5m", "-o", "json"}, {"jobs", "--group", "web", "-o", "json"}} {
		e.eventually("shoal "+strings.Join(args, " ")+" quoting start's stderr", 30*time.Second, func() error {
			out, stderr, code := e.cli(args...)
			if code != 0 {
				return fmt.Errorf("exit %d: %s%s", code, out, stderr)
			}
			if !strings.Contains(out, said) {
				return fmt.Errorf("no %q in:\n%s", said, out)
			}
			return nil
		})
	}
	if left := c.servers(); len(left) != 2 {
		t.Errorf("%d servers, want the 2 in service (the failed starts made none)", len(left))
	}
}

// TestExecCloudDeployVersion: of a template, a cloud group has only its
// version; a new one, reloaded and deployed, replaces every server.
func TestExecCloudDeployVersion(t *testing.T) {
	parallel(t) // mostly waits on polls and boots: see the package doc
	c := newExecCloud(t)
	g := web
	g.Extra, g.Cloud = "    provider: cli\n    template: {version: v1}\n", true
	e := newEnv(t, c.provider(), g)
	e.start()
	e.waitInService("web", 2)
	before := map[string]bool{}
	for _, s := range c.servers() {
		before[s.ID] = true
	}
	if v := groupOf(t, e.status(), "web").Version; v != "v1" {
		t.Fatalf("serving version %q, want v1", v)
	}
	g.Extra = strings.Replace(g.Extra, "v1", "v2", 1)
	e.writeConfig(c.provider(), g)
	e.reload()
	if out, stderr, code := e.cli("deploy", "web", "--sync"); code != 0 {
		t.Fatalf("deploy exited %d:\n%s%s", code, out, stderr)
	}
	e.waitInService("web", 2)
	st := groupOf(t, e.status(), "web")
	if st.Version != "v2" || versions(st)["v2"] != 2 {
		t.Fatalf("after the deploy: serving %q, instances %v; want v2 on both", st.Version, versions(st))
	}
	e.eventually("the cloud's servers are the instances", 10*time.Second, func() error { return c.matches(e, "web") })
	for _, s := range c.servers() {
		if before[s.ID] {
			t.Errorf("server %s of v1 still runs after the deploy of v2", s.ID)
		}
	}
}
