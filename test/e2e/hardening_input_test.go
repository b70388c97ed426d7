package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/shoal-lb/shoal/internal/compat/sacloud/autoscalerpb"
)

// TestValidateRefusesWhatServeRefuses: every config `shoal serve` refuses is
// refused by `shoal validate` too, with the same FILE:LINE:COL: field: message
// and exit status 2, and serve starts nothing.
func TestValidateRefusesWhatServeRefuses(t *testing.T) {
	parallel(t)
	dir := t.TempDir()
	backend := filepath.Join(binDir, "demo-backend")
	long := "/tmp/" + strings.Repeat("d", 80)
	for _, tc := range []struct {
		name, top, group, want string
	}{
		{"space in a path prefix", "", `    path_prefixes: ["/a b"]`, `:8:21: groups[0].path_prefixes[0]: must be printable ASCII`},
		{"? in a path prefix", "", `    path_prefixes: ["/a?b"]`, `:8:21: groups[0].path_prefixes[0]: must not contain '?'`},
		{"# in the health path", "", `    health: {path: "/healthz#x"}`, `:8:20: groups[0].health.path: must not contain '#'`},
		{"charset in a compression type", `compression: {types: ["text/html;charset=utf-8"]}`, "", `:3:23: compression.types[0]: give the media type without parameters`},
		{"verbatim line opening a section", `haproxy: {global: ["listen x"]}`, "", `:3:20: haproxy.global[0]: must not start a new haproxy.cfg section`},
		{"space in state_dir", `state_dir: "my state"`, "", `:3:12: state_dir: must not contain spaces`},
		{"socket path over HAProxy's limit", `state_dir: ` + long, "", `:3:12: state_dir: ` + long + `/haproxy/master.sock is 105 bytes, over HAProxy's limit of 97`},
		{"program not found", "", `    template: {command: [./no-such-program]}`, `:8:26: groups[0].template.command[0]: program "./no-such-program" not found`},
		{"HAProxy refuses a verbatim line", `haproxy: {global: ["nbthread many"]}`, "", `:3:20: haproxy.global[0]: HAProxy (`},
		{"health interval over HAProxy's timer", "", `    health: {interval: 600h}`, `:8:24: groups[0].health.interval: must be from 1ms to 2147483647ms (596h31m23.647s, HAProxy's timer range)`},
		{"grace shorter than the checks", "", `    health: {interval: 10s, grace: 5s}`, `:8:36: groups[0].health.grace: 5s is shorter than downinter + (rise - 1) × fastinter + timeout = 10s + 1 × 500ms + 1s = 11.5s`},
		{"template amplification", "", `    template: {command: [app, '{{printf "%0700000000d" 0}}']}`, `:8:31: groups[0].template.command[1]: expands to more than 65536 bytes`},
		// Every listener against the frontend's address (LISTEN, line 1):
		// serve would fail to bind the second.
		{"metrics.listen on the frontend's address", `metrics: {listen: LISTEN}`, "", `:3:19: metrics.listen: LISTEN is already bound by listen (line 1)`},
		{"haproxy.prometheus on the frontend's address", `haproxy: {prometheus: LISTEN}`, "", `:3:23: haproxy.prometheus: LISTEN is already bound by listen (line 1)`},
		{"admin.listen on the frontend's address", `admin: {listen: LISTEN, token: e2e-token}`, "", `:3:17: admin.listen: LISTEN is already bound by listen (line 1)`},
		{"admin.listen on every address", `admin: {listen: ":PORT", token: e2e-token, insecure_remote: true}`, "", `:3:17: admin.listen: :PORT is already bound by listen (line 1)`},
		{"gslb.listen on the frontend's address", `gslb: {listen: [LISTEN], zone: example.org, records: [{name: www, sites: [{address: 192.0.2.1}]}]}`, "", `:3:17: gslb.listen[0]: LISTEN is already bound by listen (line 1)`},
		{"sacloud-compat listen on the frontend's address", `compat: {sacloud_autoscaler: {listen: "tcp:LISTEN"}}`, "", `:3:39: compat.sacloud_autoscaler.listen: LISTEN is already bound by listen (line 1)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".yaml")
			group := tc.group
			if !strings.Contains(group, "template:") {
				group += fmt.Sprintf("\n    template: {command: [%q]}", backend)
			}
			port := strconv.Itoa(freePort(t))
			listen := "127.0.0.1:" + port
			fill := strings.NewReplacer("LISTEN", listen, "PORT", port)
			tc.top, tc.want = fill.Replace(tc.top), fill.Replace(tc.want)
			text := fmt.Sprintf("listen: %s\nstate_dir: state\n%s\ngroups:\n  - name: web\n    min_size: 1\n    max_size: 1\n%s\n", listen, tc.top, group)
			if strings.HasPrefix(tc.top, "state_dir") {
				text = strings.Replace(text, "state_dir: state\n", "\n", 1) // keep the line numbers
			}
			if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			run := func(cmd string) (string, int) {
				c := exec.Command(filepath.Join(binDir, "shoal"), cmd, "-c", path)
				c.Dir = dir
				out, err := c.CombinedOutput()
				code := 0
				if ee, ok := err.(*exec.ExitError); ok {
					code = ee.ExitCode()
				} else if err != nil {
					t.Fatal(err)
				}
				return string(out), code
			}
			vout, vcode := run("validate")
			if vcode != 2 || !strings.Contains(vout, path+tc.want) {
				t.Fatalf("validate: exit %d\n%s\nwant exit 2 and %s%s\nconfig:\n%s", vcode, vout, path, tc.want, text)
			}
			sout, scode := run("serve")
			if scode != 2 || sout != vout {
				t.Fatalf("serve: exit %d\n%s\nwant exit 2 and what validate said:\n%s", scode, sout, vout)
			}
			if _, err := os.Stat(filepath.Join(dir, "state", "haproxy", "haproxy.pid")); err == nil {
				t.Fatal("serve started HAProxy with a refused config")
			}
		})
	}
}

// TestWildcardAndIDNHostsRoute: *.example.com and an internationalized name
// pass validate and route through real HAProxy: the wildcard as a suffix match
// on the host without its port, the IDN name in punycode.
func TestWildcardAndIDNHostsRoute(t *testing.T) {
	parallel(t)
	e := newEnv(t, "",
		groupSpec{Name: "web", Min: 1, Max: 1, Extra: "    hosts: [\"*.example.com\", \"bücher.example\"]\n"},
		groupSpec{Name: "other", Min: 1, Max: 1})
	if out, stderr, code := e.cli("validate"); code != 0 || !strings.Contains(out, "haproxy -c passed") {
		t.Fatalf("validate: exit %d %s %s", code, out, stderr)
	}
	e.start()
	e.waitInService("web", 1)
	e.waitInService("other", 1)
	_, port, _ := strings.Cut(e.listen, ":")
	for host, want := range map[string]string{
		"a.example.com":              "web-001",
		"a.b.example.com:" + port:    "web-001",
		"A.EXAMPLE.COM":              "web-001",
		"xn--bcher-kva.example":      "web-001",
		"xn--bcher-kva.example:8080": "web-001",
		"example.com":                "other-001",
		"a.example.com.evil.org":     "other-001",
		"notexample.com":             "other-001",
	} {
		req, _ := http.NewRequest("GET", "http://"+e.listen+"/", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("X-Instance"); got != want {
			t.Errorf("Host %s: served by %q (status %d), want %s", host, got, resp.StatusCode, want)
		}
	}
}

// TestAPIInputLimits: the JSON API refuses trailing data and oversized
// bodies, resolves job ids like 001 to the job (long-poll included), and
// refuses an empty or bad wait, all without changing anything.
func TestAPIInputLimits(t *testing.T) {
	parallel(t)
	port := freePort(t)
	e := newEnv(t, fmt.Sprintf("admin:\n  listen: 127.0.0.1:%d\n  token: s3cret\n", port), groupSpec{Name: "web", Min: 1, Max: 3})
	e.start()
	e.waitInService("web", 1)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	do := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer s3cret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatalf("%s %s: body is not JSON: %v", method, path, err)
		}
		return resp.StatusCode, v
	}
	for _, tc := range []struct {
		method, path, body string
		want               int
		msg                string
	}{
		{"POST", "/v1/groups/web/scale", `{"direction":"up"} garbage`, 400, "unexpected data after the JSON object"},
		{"POST", "/v1/groups/web/scale", `{"direction":"up"}{"direction":"up"}`, 400, "unexpected data after the JSON object"},
		{"POST", "/v1/groups/web/scale", `{"direction":"up","source":"` + strings.Repeat("x", 70<<10) + `"}`, 413, "larger than 65536 bytes"},
		{"GET", "/v1/jobs/1?wait=", "", 400, "wait must be"},
		{"GET", "/v1/jobs/1?wait=soon", "", 400, "wait must be"},
		{"GET", "/v1/jobs/1?wait=-1s", "", 400, "wait must be"},
		{"GET", "/v1/groups/web/series?points=0", "", 400, "points: must be from 1 to 2000"},
		{"GET", "/v1/groups/web/series?points=2001", "", 400, "points: must be from 1 to 2000"},
		{"GET", "/v1/groups/web/series?window=32d", "", 400, "window: must be"},
		{"GET", "/v1/groups/web/series?" + strings.Repeat("metric=size&", 11), "", 400, "metric: at most 10"},
		{"GET", "/v1/groups/nope/series", "", 404, "unknown group"},
	} {
		code, body := do(tc.method, tc.path, tc.body)
		if msg, _ := body["error"].(string); code != tc.want || !strings.Contains(msg, tc.msg) {
			t.Fatalf("%s %s: %d %v, want %d with %q", tc.method, tc.path[:min(len(tc.path), 60)], code, body, tc.want, tc.msg)
		}
	}
	if s := e.status().Groups[0]; s.Desired != 1 {
		t.Fatalf("refused requests changed the group: desired %d", s.Desired)
	}

	code, job := do("POST", "/v1/groups/web/scale", `{"direction":"up"}`+"\n")
	if code != 202 {
		t.Fatalf("scale up: %d %v", code, job)
	}
	id := job["id"].(string)
	// 00ID is the same job, and waiting on it waits for the job to end.
	start := time.Now()
	code, got := do("GET", "/v1/jobs/00"+id+"?wait=60s", "")
	if code != 200 || got["id"] != id || got["state"] != "done" {
		t.Fatalf("GET /v1/jobs/00%s?wait=60s after %s: %d %v, want job %s done", id, time.Since(start), code, got, id)
	}
}

// TestSacloudCompatFieldLimits: oversized fields are refused with
// InvalidArgument naming the limit before anything logs them, and messages
// over the receive limit are refused by gRPC itself.
func TestSacloudCompatFieldLimits(t *testing.T) {
	parallel(t) // input checks, no load
	e := newEnv(t, compatTop, groupSpec{Name: "web", Min: 1, Max: 2})
	e.start()
	c := dialCompat(t, e)
	big := strings.Repeat("x", 32<<10)
	for _, tc := range []struct {
		req  *pb.ScalingRequest
		want string
	}{
		{&pb.ScalingRequest{Source: big}, "source must be at most 128 bytes, got 32768"},
		{&pb.ScalingRequest{ResourceName: big}, "resource_name must be at most 64 bytes, got 32768"},
		{&pb.ScalingRequest{DesiredStateName: big}, "desired_state_name must be at most 64 bytes, got 32768"},
		{&pb.ScalingRequest{Source: "cron\x1b[2J"}, "source must be printable"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := c.Up(ctx, tc.req)
		cancel()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("Up: %v, want InvalidArgument with %q", err, tc.want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	_, err := c.Up(ctx, &pb.ScalingRequest{Source: strings.Repeat("x", 200<<10)})
	cancel()
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Up with a 200 KiB message: %v, want ResourceExhausted", err)
	}
	if strings.Contains(e.log.String(), strings.Repeat("x", 200)) {
		t.Fatal("an oversized field reached the log")
	}
	if s := e.status().Groups[0]; s.Desired != 1 {
		t.Fatalf("refused requests changed the group: desired %d", s.Desired)
	}
}

// TestSystemdUnit: the shipped unit signals only shoal's main process (which
// leaves HAProxy and the instances serving on SIGTERM, for the next start to
// adopt), restarts it on failure, owns the state directory, reloads with
// shoal reload and runs hardened as its own user; systemd-analyze accepts it.
func TestSystemdUnit(t *testing.T) {
	parallel(t)
	const unit = "../../examples/systemd/shoal.service"
	f, err := os.Open(unit)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || l[0] == '#':
		case l[0] == '[':
			section = l
		default:
			k, v, ok := strings.Cut(l, "=")
			if !ok {
				t.Fatalf("%s: not KEY=VALUE: %q", unit, l)
			}
			got[section+k] = v
		}
	}
	for k, want := range map[string]string{
		"[Service]KillMode":           "process",
		"[Service]Restart":            "on-failure",
		"[Service]StateDirectory":     "shoal",
		"[Service]ExecReload":         "/usr/bin/shoal reload -c /etc/shoal/shoal.yaml",
		"[Service]ExecStart":          "/usr/bin/shoal serve -c /etc/shoal/shoal.yaml",
		"[Service]ExecStartPre":       "/usr/bin/shoal validate -c /etc/shoal/shoal.yaml",
		"[Service]User":               "shoal",
		"[Service]NoNewPrivileges":    "yes",
		"[Service]ProtectSystem":      "strict",
		"[Install]WantedBy":           "multi-user.target",
		"[Service]StateDirectoryMode": "0700",
	} {
		if got[k] != want {
			t.Errorf("%s: %s = %q, want %q", unit, k, got[k], want)
		}
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze not installed: checked the settings only")
		return
	}
	// verify needs the programs to exist: point them at the test's binary.
	dir := t.TempDir()
	text, _ := os.ReadFile(unit)
	local := strings.NewReplacer("/usr/bin/shoal", filepath.Join(binDir, "shoal"), "/etc/shoal/shoal.yaml", filepath.Join(dir, "shoal.yaml")).Replace(string(text))
	path := filepath.Join(dir, "shoal.service")
	if err := os.WriteFile(path, []byte(local), 0o644); err != nil {
		t.Fatal(err)
	}
	// The man page comes with the package, not installed here.
	out, err := exec.Command(analyze, "verify", "--man=no", path).CombinedOutput()
	// verify exits 0 on directives it ignores; any line about the file is a problem.
	if err != nil || strings.Contains(string(out), path) {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// bidiControls are the Unicode bidirectional controls that can make source
// read differently from how it compiles (CVE-2021-42574, "Trojan Source").
var bidiControls = []rune{
	'\u202A', '\u202B', '\u202C', '\u202D', '\u202E',
	'\u2066', '\u2067', '\u2068', '\u2069',
	'\u200E', '\u200F', '\u061C',
}

// TestNoBidiControls: no tracked .go or .yaml file holds a bidi control.
func TestNoBidiControls(t *testing.T) {
	parallel(t)
	out, err := exec.Command("git", "-C", "../..", "ls-files", "-z", "--", "*.go", "*.yaml", "*.yml").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	files := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	if len(files) < 10 {
		t.Fatalf("git ls-files found only %d files", len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join("../..", f))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if j := strings.IndexFunc(line, isBidi); j >= 0 {
				r := []rune(line[j:])[0]
				t.Errorf("%s:%d: bidirectional control character U+%04X", f, i+1, r)
			}
		}
	}
}

func isBidi(r rune) bool { return slices.Contains(bidiControls, r) }
