package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAccessLog: shoal serve writes HAProxy's sampled request log to a
// rotated STATE_DIR/logs/access.log.
func TestAccessLog(t *testing.T) {
	parallel(t)
	e := newEnv(t, "access_log: {sample: 2, max_size: 4KiB, max_files: 2}\n", groupSpec{Name: "web", Min: 1, Max: 1})
	e.start()
	e.waitInService("web", 1)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	const requests = 160
	for i := range requests {
		resp, err := client.Get(fmt.Sprintf("http://%s/?e2e=%03d", e.listen, i))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	e.stop()
	logs := filepath.Join(e.stateDir(), "logs")
	var lines []string
	for _, name := range []string{"access.log.1", "access.log"} {
		b, err := os.ReadFile(filepath.Join(logs, name))
		if err != nil {
			t.Fatalf("%v (a 4 KiB access.log must have rotated once)", err)
		}
		for l := range strings.Lines(string(b)) {
			if strings.Contains(l, " GET /?e2e=") {
				lines = append(lines, l)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(logs, "access.log.2")); !os.IsNotExist(err) {
		t.Errorf("access.log.2 exists with max_files 2: %v", err)
	}
	// sample 1:2 logs every second request; a fixed rate is not in the line.
	if len(lines) != requests/2 {
		t.Errorf("%d of %d requests logged, want %d:\n%s", len(lines), requests, requests/2, strings.Join(lines, ""))
	}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) != 15 || f[2] != "web" || f[3] != "web-001" || f[4] != "200" || f[12] != "-" {
			t.Errorf("access log line %q", l)
		}
	}
}

// TestAccessLogWhenNeeded: by default HAProxy logs no request while nothing
// reads latency (its rules cost every request); a reload that adds a reader
// (outliers.latency) turns logging on without a restart, and one that
// removes it turns it off again. shoal says which and why.
func TestAccessLogWhenNeeded(t *testing.T) {
	parallel(t)
	g := groupSpec{Name: "web", Min: 1, Max: 2}
	e := newEnv(t, "", g)
	e.start()
	e.waitInService("web", 1)
	hapCfg := filepath.Join(e.stateDir(), "haproxy", "haproxy.cfg")
	logFile := filepath.Join(e.stateDir(), "logs", "access.log")
	send := func(mark string) {
		t.Helper()
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		for i := range 20 {
			resp, err := client.Get(fmt.Sprintf("http://%s/?%s=%d", e.listen, mark, i))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("GET /?%s=%d: %d", mark, i, resp.StatusCode)
			}
		}
	}
	logged := func(mark string) int {
		b, _ := os.ReadFile(logFile) // none yet is no line
		return strings.Count(string(b), " GET /?"+mark+"=")
	}
	logging := func(want bool) {
		t.Helper()
		b, err := os.ReadFile(hapCfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(b), "log-format"); got != want {
			t.Fatalf("haproxy.cfg has a log-format: %t, want %t:\n%s", got, want, b)
		}
	}

	logging(false)
	send("off")
	if !strings.Contains(e.log.String(), "access log off: nothing reads latency") {
		t.Errorf("shoal did not say why the access log is off:\n%s", e.log.String())
	}

	g.Extra = "    outliers: {latency: {p99_above: 10s}, max_ejected: 50%}\n"
	e.writeConfig("", g)
	pid := e.worker()
	e.reload()
	logging(true)
	if e.worker() == pid {
		t.Error("HAProxy's worker is the same: the log lines were not loaded")
	}
	if !strings.Contains(e.log.String(), "by=groups[0].outliers.latency") {
		t.Errorf("shoal did not say what turned the access log on:\n%s", e.log.String())
	}
	send("on")
	e.eventually("the requests after the reload are logged", 15*time.Second, func() error {
		if n := logged("on"); n != 20 {
			return fmt.Errorf("%d of 20 logged (below 100 requests/s auto logs every one)", n)
		}
		return nil
	})

	g.Extra = ""
	e.writeConfig("", g)
	e.reload()
	logging(false)
	send("again")
	e.stop()
	if n := logged("off") + logged("again"); n != 0 {
		t.Errorf("%d requests logged while nothing read latency", n)
	}
}
